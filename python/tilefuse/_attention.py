"""graph.attention from traced tensors: the fused attention op's operands put
in the form its verifier takes (PyTorch's broadcasting done explicitly),
for F.scaled_dot_product_attention and the PyTorch importer's SDPA ops.

The op computes softmax(scale q k^T + mask, causal) v without building the
L x S scores (FlashAttention-2 on the CPU) and saves each row's
log-sum-exp for its backward, graph.attention_grad. fused_attention returns
None where the op cannot take the operands (not all f32, bf16 or f16, an
empty sequence, heads that neither match nor divide); callers then write
the attention out.
"""
import os

import numpy as np

from ._location import _user_location
from ._tracing import Tensor


def _broadcast(*shapes):
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def _mask_operand(mask, q, k):
    """`mask` as [B'..., H', L, S]: the query's rank, its batch dimensions
    whole or all 1, its heads or 1; i1 kept, a float mask in the query's
    type; None if it cannot broadcast to the scores."""
    rank, (L, S) = q.ndim, (q.shape[-2], k.shape[-2])
    if mask.ndim > rank:
        return None
    if mask.ndim < rank:
        mask = mask.reshape(*((1,) * (rank - mask.ndim) + mask.shape))
    scores = q.shape[:-1] + (S,)
    if _broadcast(mask.shape, scores) != scores:
        return None
    lead, heads = mask.shape[:-3], mask.shape[-3]
    whole = lead == q.shape[:-3]
    ones = all(d == 1 for d in lead)
    target = (lead if whole or ones else q.shape[:-3]) + \
        ((heads if heads in (1, q.shape[-3]) else q.shape[-3]), L, S)
    if tuple(mask.shape) != target:
        mask = mask.expand(*target)
    if mask.dtype != "i1" and mask.dtype != q.dtype:
        mask = mask.to(q.dtype)
    return mask


def prepare(q, k, v, mask=None):
    """(q, k, v, mask, squeeze) in the op's form, or None. `squeeze`: the
    query had no heads dimension, which the caller removes from the result.
    TILEFUSE_FUSED_ATTENTION=0 keeps attention written out (to compare)."""
    if os.environ.get("TILEFUSE_FUSED_ATTENTION") == "0":
        return None
    if any(not isinstance(t, Tensor) for t in (q, k, v)) or \
            not (q.dtype == k.dtype == v.dtype and q.dtype in ("f32", "bf16", "f16")):
        return None
    if min(q.ndim, k.ndim, v.ndim) < 2 or q.shape[-1] != k.shape[-1] or \
            k.shape[-2] != v.shape[-2] or 0 in q.shape[-2:] or 0 in k.shape[-2:] or \
            v.shape[-1] == 0:
        return None
    squeeze = max(q.ndim, k.ndim, v.ndim) == 2
    if squeeze:
        q, k, v = (t.unsqueeze(0) for t in (q, k, v))
    rank = max(q.ndim, k.ndim, v.ndim)
    q, k, v = (t.reshape(*((1,) * (rank - t.ndim) + t.shape)) if t.ndim < rank else t
               for t in (q, k, v))
    lead = _broadcast(q.shape[:-3], k.shape[:-3], v.shape[:-3])
    if lead is None:
        return None
    heads, kv_heads = q.shape[-3], k.shape[-3]
    if v.shape[-3] != kv_heads:
        return None
    if heads == 1 and kv_heads > 1:
        heads = kv_heads
    if heads % kv_heads:
        return None
    q = q.expand(*(lead + (heads,) + q.shape[-2:])) if q.shape[:-2] != lead + (heads,) else q
    k = k.expand(*(lead + k.shape[-3:])) if k.shape[:-3] != lead else k
    v = v.expand(*(lead + v.shape[-3:])) if v.shape[:-3] != lead else v
    if mask is not None:
        mask = _mask_operand(mask, q, k)
        if mask is None:
            return None
    return q, k, v, mask, squeeze


def _scale(q, scale):
    """PyTorch's default: 1 / sqrt(head size)."""
    return 1.0 / float(np.sqrt(q.shape[-1])) if scale is None else float(scale)


def fused_attention(q, k, v, mask=None, scale=None, causal=False, dropout=None):
    """(output, logsumexp) of graph.attention, or None (see prepare).
    `dropout`: (p, seed tensor, Philox stream) to drop probabilities with
    graph.dropout's bits, or None."""
    ready = prepare(q, k, v, mask)
    if ready is None:
        return None
    q, k, v, mask, squeeze = ready
    scale = _scale(q, scale)
    tracer = q._tracer
    _user_location(tracer)  # report() names the user's line
    p, seed, stream = dropout if dropout else (0.0, None, 0)
    out, lse = tracer.attention(q._id, k._id, v._id, -1 if mask is None else mask._id,
                                scale, bool(causal), seed=-1 if seed is None else seed._id,
                                dropout_p=float(p), stream=int(stream))
    out, lse = Tensor(tracer, out), Tensor(tracer, lse)
    if squeeze:
        out, lse = out.squeeze(0), lse.squeeze(0)
    return out, lse


def fused_attention_grad(grad, q, k, v, out, lse, mask=None, scale=None, causal=False):
    """(dq, dk, dv) of graph.attention_grad given the output's cotangent
    `grad`, for operands already in the op's form (PyTorch's SDPA backward
    ops pass them so), or None."""
    ready = prepare(q, k, v, mask)
    if ready is None or ready[-1] or tuple(ready[0].shape) != tuple(q.shape) or \
            tuple(ready[1].shape) != tuple(k.shape) or tuple(ready[2].shape) != tuple(v.shape):
        return None
    mask = ready[3]
    # out and its cotangent of the operands' type, the log-sum-exp f32.
    if out.dtype != q.dtype or grad.dtype != q.dtype or lse.dtype != "f32":
        return None
    scale = _scale(q, scale)
    tracer = q._tracer
    _user_location(tracer)
    ids = tracer.attention_grad(q._id, k._id, v._id, out._id, lse._id, grad._id,
                                -1 if mask is None else mask._id, scale, bool(causal))
    return tuple(Tensor(tracer, i) for i in ids)
