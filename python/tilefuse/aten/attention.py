"""Scaled dot-product attention.

PyTorch's CPU SDPA is a forward op returning (output, logsumexp) and a
backward op reading both. Each converts with exactly PyTorch's outputs, so
either may run on either side of a partition boundary. f32 attention
becomes graph.attention / graph.attention_grad (the fused kernels: no L x S
scores in memory); what the fused op cannot take (other dtypes, the math
variant's probabilities output) is written out with matmul and softmax.

With dropout, PyTorch's CPU SDPA is written out before any converter sees
it (matmul, softmax, bernoulli). from_torch, which differentiates the step
itself, captures such calls whole as `tilefuse::attention_with_dropout`
instead (torch_integration.keep_attention_whole) and converts that into the
fused op with dropout: tilefuse's Philox bits, PyTorch's distribution.
"""
from typing import Optional

import numpy as np
import torch

from .. import functional as F
from .._attention import fused_attention, fused_attention_grad
from .._tracing import where
from . import UnsupportedOp, aten, converts, importer


def _kv_heads(x, heads, op):
    """Key/value heads [.., Hk, S, E] repeated to the query's `heads`
    (grouped-query attention: query head h reads key head h // (H / Hk))."""
    hk = x.shape[-3]
    if hk == heads:
        return x
    if heads % hk:
        raise UnsupportedOp(op, f"{heads} query heads over {hk} key/value heads "
                                "(the key/value heads must divide the query heads)")
    lead, (s, e) = x.shape[:-3], x.shape[-2:]
    return x.unsqueeze(-3).expand(*lead, hk, heads // hk, s, e).reshape(*lead, heads, s, e)


def _kv_heads_grad(g, hk, op):
    """The gradient of _kv_heads: each key/value head sums its group's."""
    heads = g.shape[-3]
    if hk == heads:
        return g
    lead, (s, e) = g.shape[:-3], g.shape[-2:]
    return g.reshape(*lead, hk, heads // hk, s, e).sum(-3)


def _attention_scores(q, k, attn_mask, is_causal, scale):
    """q k^T * scale, masked: -inf above the diagonal when causal (the
    diagonal aligned top-left, as PyTorch's tril), -inf where a boolean mask
    is False, a float mask added."""
    scale = (1.0 / float(np.sqrt(q.shape[-1]))) if scale is None else float(scale)
    s = (q @ k.transpose(-2, -1)) * scale
    rows, cols = s.shape[-2], s.shape[-1]
    if is_causal:
        keep = importer().constant(np.tril(np.ones((rows, cols), bool)), "i1")
        s = where(keep, s, float("-inf"))
    if attn_mask is not None:
        s = where(attn_mask, s, float("-inf")) if attn_mask.dtype == "i1" \
            else s + attn_mask.to(s.dtype)
    return s, scale


def _no_dropout(op, dropout_p):
    if dropout_p:
        raise UnsupportedOp(op, f"dropout_p={dropout_p} (attention dropout runs in PyTorch)")


@converts(aten._scaled_dot_product_flash_attention_for_cpu)
def _sdpa_flash_cpu(q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None):
    """(output, logsumexp [B, H, L] of the scaled, masked scores)."""
    op = aten._scaled_dot_product_flash_attention_for_cpu
    _no_dropout(op, dropout_p)
    fused = fused_attention(q, k, v, attn_mask, scale, is_causal)
    if fused is not None:
        return fused
    heads = q.shape[-3]
    s, _ = _attention_scores(q, _kv_heads(k, heads, op), attn_mask, is_causal, scale)
    out = F.softmax(s, -1) @ _kv_heads(v, heads, op)
    return out.to(q.dtype), s.logsumexp(-1).to("f32")


@converts(aten._scaled_dot_product_flash_attention_for_cpu_backward)
def _sdpa_flash_cpu_backward(grad_out, q, k, v, out, lse, dropout_p, is_causal,
                             attn_mask=None, scale=None):
    """(dq, dk, dv) from the probabilities recomputed from the saved
    logsumexp: dv = p^T dO, ds = p * (dO v^T - rowsum(dO * O)),
    dq = ds k * scale, dk = ds^T q * scale."""
    op = aten._scaled_dot_product_flash_attention_for_cpu_backward
    _no_dropout(op, dropout_p)
    fused = fused_attention_grad(grad_out, q, k, v, out, lse, attn_mask, scale, is_causal)
    if fused is not None:
        return fused
    heads, hk = q.shape[-3], k.shape[-3]
    kx, vx = _kv_heads(k, heads, op), _kv_heads(v, heads, op)
    s, scale = _attention_scores(q, kx, attn_mask, is_causal, scale)
    p = (s - lse.to(s.dtype).unsqueeze(-1)).exp()
    dv = p.transpose(-2, -1) @ grad_out
    delta = (grad_out * out).sum(-1, keepdim=True)
    ds = p * (grad_out @ vx.transpose(-2, -1) - delta)
    dq = (ds @ kx) * scale
    dk = (ds.transpose(-2, -1) @ q) * scale
    return dq, _kv_heads_grad(dk, hk, op), _kv_heads_grad(dv, hk, op)


@converts(aten._scaled_dot_product_attention_math)
def _sdpa_math(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, dropout_mask=None,
               scale=None, enable_gqa=False):
    """(output, the attention probabilities)."""
    op = aten._scaled_dot_product_attention_math
    _no_dropout(op, dropout_p if dropout_mask is None else 0.0)
    heads = q.shape[-3]
    s, _ = _attention_scores(q, _kv_heads(k, heads, op), attn_mask, is_causal, scale)
    p = F.softmax(s, -1)
    if dropout_p and dropout_mask is not None:
        p = where(dropout_mask, p * (1.0 / (1.0 - dropout_p)), 0.0)
    return p @ _kv_heads(v, heads, op), p


@torch.library.custom_op("tilefuse::attention_with_dropout", mutates_args=())
def attention_with_dropout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           attn_mask: Optional[torch.Tensor], dropout_p: float, is_causal: bool,
                           scale: Optional[float], enable_gqa: bool) -> torch.Tensor:
    """F.scaled_dot_product_attention with dropout as one op of a captured
    graph (run eagerly, it is PyTorch's)."""
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
        enable_gqa=enable_gqa)


@attention_with_dropout.register_fake
def _attention_with_dropout_shape(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    return q.new_empty(q.shape[:-1] + (v.shape[-1],))


@converts(torch.ops.tilefuse.attention_with_dropout)
def _attention_with_dropout(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """The fused op drawing the dropout mask in its kernels; written out (the
    same distribution, other bits) where it cannot take the operands."""
    op = torch.ops.tilefuse.attention_with_dropout
    seed, stream = importer().random_stream()
    fused = fused_attention(q, k, v, attn_mask, scale, is_causal,
                            dropout=(dropout_p, seed, stream))
    if fused is not None:
        return fused[0]
    heads = q.shape[-3]
    s, _ = _attention_scores(q, _kv_heads(k, heads, op), attn_mask, is_causal, scale)
    p = F.softmax(s, -1)
    keep = importer().uniform(p.shape, "f32") >= dropout_p
    p = where(keep, p * (1.0 / (1.0 - dropout_p)), 0.0)
    return (p @ _kv_heads(v, heads, op)).to(q.dtype)


@converts(aten.scaled_dot_product_attention)
def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
          enable_gqa=False):
    op = aten.scaled_dot_product_attention
    _no_dropout(op, dropout_p)
    fused = fused_attention(q, k, v, attn_mask, scale, is_causal)
    if fused is not None:
        return fused[0]
    heads = q.shape[-3]
    s, _ = _attention_scores(q, _kv_heads(k, heads, op), attn_mask, is_causal, scale)
    return F.softmax(s, -1) @ _kv_heads(v, heads, op)
