"""Matrix products (and the batched and scaled forms PyTorch keeps whole),
distances."""
import math

import numpy as np

from .. import functional as F
from .._tracing import where
from . import UnsupportedOp, aten, converts, importer
from .indexing import _rows_scatter_add


@converts(aten.mm, aten.bmm, aten.matmul)
def _mm(a, b):
    return a @ b


@converts(aten.addmm)
def _addmm(bias, a, b, beta=1, alpha=1):
    return _add_scaled(bias, a @ b, beta, alpha)


@converts(aten.addmv.default)
def _addmv(bias, mat, vec, beta=1, alpha=1):
    """beta bias + alpha (mat @ vec)."""
    return _add_scaled(bias, (mat @ vec.unsqueeze(-1)).squeeze(-1), beta, alpha)


@converts(aten.addbmm.default)
def _addbmm(bias, batch1, batch2, beta=1, alpha=1):
    """beta bias + alpha (sum over the batch of batch1[b] @ batch2[b])."""
    return _add_scaled(bias, (batch1 @ batch2).sum((0,)), beta, alpha)


def _add_scaled(bias, prod, beta, alpha):
    """beta bias + alpha prod; with beta 0 the bias is not read (ATen
    ignores it then, NaN or inf in it included)."""
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:
        return prod
    return prod + (bias if beta == 1 else bias * beta)


# -- grouped products (mixture-of-experts layers) ------------------------------------------
#
# Rows sorted by group, group g's rows [offs[g-1], offs[g]) (offs[-1] = 0)
# multiplied by group g's matrix; rows past the last offset belong to no
# group and come out 0. graph.grouped_matmul (and its weights' gradient)
# reads the offsets when it runs: one GEMM per group on the CPU.

def _check_grouped(x, other, offs, op, form, other_rank, groups=None):
    """Refuses what graph.grouped_matmul (and its weights' gradient) do not
    take (`form` names the shapes they do): x [S, K], `other` of
    `other_rank` dimensions, [G] i32/i64 offsets (G = `groups` if given)."""
    if x.ndim != 2 or other.ndim != other_rank or offs is None or offs.ndim != 1 \
            or offs.dtype not in ("i32", "i64") or groups not in (None, offs.shape[0]):
        raise UnsupportedOp(op, f"input {list(x.shape)}, other operand {list(other.shape)}, "
                                f"offsets {None if offs is None else list(offs.shape)}: the "
                                f"form {form} with [G] i32/i64 offsets converts")


def _grouped_rows(x, w, offs, op):
    """Rows of x [S, K] times their group's w[g] [K, N]."""
    _check_grouped(x, w, offs, op, "[S, K] x [G, K, N]", 3, w.shape[0] if w.ndim == 3 else None)
    return x._wrap(x._tracer.grouped_matmul(x._id, w._id, offs._id))


def _grouped_weight_grad(x, grad, offs, op):
    """Per group g, x[rows of g]^T @ grad[rows of g]: [G, K, N]."""
    _check_grouped(x, grad, offs, op, "[S, K]^T x [S, N]", 2)
    return x._wrap(x._tracer.grouped_matmul_weight_grad(x._id, grad._id, offs._id))


@converts(aten._grouped_mm.default)
def _grouped_mm(a, b, offs=None, bias=None, out_dtype=None):
    """PyTorch's grouped GEMM: [S, K] x [G, K, N] by offsets over S,
    [G, M, K] x [G, K, N] without offsets (a batched product), or
    [M, S] x [S, N] by offsets over S (the weights' gradient: [G, M, N])."""
    if bias is not None:
        raise UnsupportedOp(aten._grouped_mm, "a bias")
    if offs is None and a.ndim == 3 and b.ndim == 3:
        out = a @ b
    elif a.ndim == 2 and b.ndim == 2 and offs is not None and offs.ndim == 1:
        out = _grouped_weight_grad(a.transpose(0, 1), b, offs, aten._grouped_mm)
    else:
        out = _grouped_rows(a, b, offs, aten._grouped_mm)
    return out if out_dtype is None else out.to(importer().result_dtype())


@converts("transformers.grouped_mm_fallback.default")
def _transformers_grouped_mm(x, w, offs):
    """transformers' grouped GEMM for mixture-of-experts layers."""
    return _grouped_rows(x, w, offs, "transformers.grouped_mm_fallback")


@converts("transformers.grouped_mm_fallback_backward.default")
def _transformers_grouped_mm_backward(x, w, offs, grad):
    """(input gradient, weights' gradient) of transformers' grouped GEMM."""
    op = "transformers.grouped_mm_fallback_backward"
    return (_grouped_rows(grad, w.transpose(1, 2), offs, op),
            _grouped_weight_grad(x, grad, offs, op))


@converts(aten._trilinear.default)
def _trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """The product of the three inputs, each with new dims of size 1 at
    its `expand` positions (broadcast against the others), summed over
    `sumdim` (F.bilinear's kernel)."""
    def grown(x, dims):
        for d in sorted(dims):
            x = x.unsqueeze(d)
        return x
    out = grown(i1, expand1) * grown(i2, expand2) * grown(i3, expand3)
    return out.sum(tuple(sumdim)) if sumdim else out


# -- distances ----------------------------------------------------------------------------
#
# p-norms of differences, forward and backward as PyTorch's CPU kernels
# (DistanceOpsKernel.cpp): p = 0 counts nonzeros (no gradient), 1 sums
# |d|, 2 is the Euclidean norm, inf the largest |d|, any other p > 0
# (sum |d|^p)^(1/p).

def _norm_last(d, p):
    """The p-norm of d over its last dim."""
    a = d.abs()
    if p == 0:
        return (d != 0).to(d.dtype).sum((-1,))
    if p == 1:
        return a.sum((-1,))
    if p == 2:
        return (d * d).sum((-1,)).sqrt()
    if p == math.inf:
        return a.amax((-1,))
    return (a ** float(p)).sum((-1,)) ** (1.0 / float(p))


def _norm_grad(d, n, g, p):
    """d(norm) / d(d) times g, with n the norm (broadcast against d)."""
    sign = (d > 0).to(d.dtype) - (d < 0).to(d.dtype)
    if p == 0:
        return d * 0.0
    if p == 1:
        return sign * g
    if p == 2:
        return where(n == 0, 0.0, g * d / where(n == 0, 1.0, n))
    if p == math.inf:
        return g * sign * (d.abs() == n).to(d.dtype)
    a = d.abs()
    safe_n = where(n == 0, 1.0, n)
    if p < 2:
        out = sign * (a ** float(p - 1)) * g / (safe_n ** float(p - 1))
        if p < 1:  # |d|^(p-1) is infinite at 0
            out = where(d == 0, 0.0, out)
    else:
        out = d * (a ** float(p - 2)) * g / (safe_n ** float(p - 1))
    return where(n == 0, 0.0, out)


def _check_p(op, p):
    if not (p >= 0):
        raise UnsupportedOp(op, f"p={p}")
    return float(p)


@converts(aten.dist.default)
def _dist(x, y, p=2):
    p = _check_p(aten.dist, p)
    d = x - y
    return _norm_last(d.reshape(d.numel()), p)


@converts(aten._cdist_forward.default)
def _cdist_forward(x1, x2, p, compute_mode=None):
    """[.., P, R] distances between the rows of x1 [.., P, M] and x2 [.., R, M]."""
    p = _check_p(aten._cdist_forward, p)
    return _norm_last(x1.unsqueeze(-2) - x2.unsqueeze(-3), p)


@converts(aten._cdist_backward.default)
def _cdist_backward(grad, x1, x2, p, cdist):
    p = _check_p(aten._cdist_backward, p)
    d = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    return _norm_grad(d, cdist.unsqueeze(-1), grad.unsqueeze(-1), p).sum((-2,))


def _pairs(n):
    i, j = np.triu_indices(n, 1)
    return importer().constant(i.astype(np.int64), "i64"), \
        importer().constant(j.astype(np.int64), "i64"), len(i)


@converts(aten._pdist_forward.default)
def _pdist_forward(x, p=2):
    """The distances of the rows i < j of x [N, M], row-major."""
    p = _check_p(aten._pdist_forward, p)
    i, j, k = _pairs(x.shape[0])
    if k == 0:
        return importer().constant(np.zeros((0,)), x.dtype)
    return _norm_last(F.embedding(i, x) - F.embedding(j, x), p)


@converts(aten._pdist_backward.default)
def _pdist_backward(grad, x, p, pdist):
    p = _check_p(aten._pdist_backward, p)
    i, j, k = _pairs(x.shape[0])
    if k == 0:
        return x * 0.0
    d = F.embedding(i, x) - F.embedding(j, x)
    g = _norm_grad(d, pdist.unsqueeze(-1), grad.unsqueeze(-1), p)
    zeros = importer().constant(np.zeros(x.shape), x.dtype)
    return _rows_scatter_add(_rows_scatter_add(zeros, i, g), j, -g)
