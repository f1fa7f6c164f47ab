"""Reductions: sums, means, products, extremes, logical reductions, scans,
variances.

PyTorch reduces over `dim` (an int, a list; None or [] for every dim)
with negative dims counted from the end; a 0-d tensor holds one element
and reduces over dim 0 or -1 to itself. Integer and bool inputs of sums and
products accumulate in int64 (PyTorch's result type, which _dims' callers
cast to first).
"""
import math

import numpy as np

from .._dtypes import is_float
from .._tracing import cat, where
from . import aten, converts, importer


def _dims(x, dim):
    """The reduced dims, normalised and sorted ([] for a 0-d tensor)."""
    if x.ndim == 0:
        return []
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.ndim))
    dims = list(dim) if isinstance(dim, (list, tuple)) else [dim]
    return sorted({int(d) % x.ndim for d in dims})


def _in_result_type(x, i=0):
    dtype = importer().result_dtype(i)
    return x if x.dtype == dtype else x.to(dtype)


def _reduce(x, op, dims, keepdim):
    """graph.reduce_<op> over `dims`; over none, `x` itself."""
    if not dims:
        return x
    return x._call("reduce", op, x._id, list(dims), keepdim)


def _wide(x):
    """Bool tensors as i32 (the graph's reductions take no i1)."""
    return x.to("i32") if x.dtype == "i1" else x


@converts(aten.sum.dim_IntList, aten.sum.default)
def _sum(x, dim=None, keepdim=False, dtype=None):
    return _reduce(_in_result_type(x), "sum", _dims(x, dim), keepdim)


@converts(aten.mean.dim, aten.mean.default)
def _mean(x, dim=None, keepdim=False, dtype=None):
    x = _in_result_type(x)
    dims = _dims(x, dim)
    if not dims:
        return x
    count = int(np.prod([x.shape[d] for d in dims], dtype=np.int64))
    return _reduce(x, "sum", dims, keepdim) / float(count)


@converts(aten.amax)
def _amax(x, dim=(), keepdim=False):
    return _reduce(_wide(x), "max", _dims(x, dim), keepdim)


@converts(aten.amin)
def _amin(x, dim=(), keepdim=False):
    return _reduce(_wide(x), "min", _dims(x, dim), keepdim)


@converts(aten.max.default)
def _max_all(x):
    return _reduce(_wide(x), "max", _dims(x, None), False)


@converts(aten.min.default)
def _min_all(x):
    return _reduce(_wide(x), "min", _dims(x, None), False)


def _via_int(x, fn):
    """fn on a bool tensor widened to i32 (the graph's reductions take no
    i1), its float/int results as PyTorch gives them (_conform casts)."""
    return fn(_wide(x))


@converts(aten.max.dim)
def _max_dim(x, dim, keepdim=False):
    return tuple(_via_int(x, lambda v: v.max(dim, keepdim)))


@converts(aten.min.dim)
def _min_dim(x, dim, keepdim=False):
    return tuple(_via_int(x, lambda v: v.min(dim, keepdim)))


@converts(aten.any.dim, aten.any.dims, aten.any.default)
def _any(x, dim=None, keepdim=False):
    """Whether any element (along dim) is nonzero, as bool."""
    return _reduce((x != 0).to("i32"), "max", _dims(x, dim), keepdim) != 0


@converts(aten.all.dim, aten.all.dims, aten.all.default)
def _all(x, dim=None, keepdim=False):
    """Whether every element (along dim) is nonzero, as bool."""
    return _reduce((x != 0).to("i32"), "min", _dims(x, dim), keepdim) != 0


@converts(aten.argmax)
def _argmax(x, dim=None, keepdim=False):
    return x.argmax(dim, keepdim)


@converts(aten.argmin)
def _argmin(x, dim=None, keepdim=False):
    return x.argmin(dim, keepdim)


# -- products ------------------------------------------------------------------------

def _take(x, d, start, stop):
    key = [slice(None)] * x.ndim
    key[d] = slice(start, stop)
    return x[tuple(key)]


def _prod_dim(x, d):
    """The product along dim d (kept, size 1): pairwise halves multiplied
    until one is left (an empty dim: 1)."""
    n = x.shape[d]
    if n == 0:
        shape = list(x.shape)
        shape[d] = 1
        return importer().constant(np.ones(shape), x.dtype)
    while n > 1:
        h = n // 2
        head = _take(x, d, 0, h) * _take(x, d, h, 2 * h)
        x = cat([head, _take(x, d, 2 * h, n)], d) if n % 2 else head
        n = x.shape[d]
    return x


@converts(aten.prod.default, aten.prod.dim_int)
def _prod(x, dim=None, keepdim=False, dtype=None):
    x = _in_result_type(x)
    dims = _dims(x, dim)
    for d in dims:
        x = _prod_dim(x, d)
    if not keepdim and dims:
        x = x.reshape([s for i, s in enumerate(x.shape) if i not in dims])
    return x


# -- scans -----------------------------------------------------------------------------

def _scan(x, d, combine, identity):
    """Inclusive scan along dim d with an associative `combine(earlier,
    later)` of tensors (or tuples of tensors): log2(n) shifted steps;
    positions with nothing `shift` before them keep their value."""
    parts = x if isinstance(x, tuple) else (x,)
    n = parts[0].shape[d]
    shift = 1
    iota_shape = [1] * parts[0].ndim
    iota_shape[d] = n
    position = importer().constant(np.arange(n).reshape(iota_shape), "i64")
    while shift < n:
        earlier = []
        for p, ident in zip(parts, identity):
            pad_shape = list(p.shape)
            pad_shape[d] = shift
            pad = importer().constant(np.full(pad_shape, ident), p.dtype)
            earlier.append(cat([pad, _take(p, d, 0, n - shift)], d))
        combined = combine(tuple(earlier), parts)
        has = position >= shift
        parts = tuple(where(has, c, p) for c, p in zip(combined, parts))
        shift *= 2
    return parts if isinstance(x, tuple) else parts[0]


@converts(aten.cumsum)
def _cumsum(x, dim, dtype=None):
    return _in_result_type(x).cumsum(dim)


@converts(aten.cumprod)
def _cumprod(x, dim, dtype=None):
    x = _in_result_type(x)
    if x.ndim == 0:
        return x
    return _scan((x,), dim % x.ndim, lambda a, b: (a[0] * b[0],), (1,))[0]


def _log_add_exp(a, b):
    """log(e^a + e^b) as PyTorch's logcumsumexp: the larger plus
    log1p(exp(smaller - larger)); where both are the same infinity (or
    the larger is -inf), the larger."""
    big, small = a.maximum(b), a.minimum(b)
    out = big + (small - big).exp().log1p()
    same_inf = (small == big) & (big.abs() == math.inf)
    return where(same_inf | (big == -math.inf), big, out)


@converts(aten.logcumsumexp)
def _logcumsumexp(x, dim):
    x = _in_result_type(x)
    if x.ndim == 0:
        return x
    return _scan((x,), dim % x.ndim, lambda a, b: (_log_add_exp(a[0], b[0]),),
                 (-math.inf,))[0]


def _cumulative_extreme(x, dim, greater):
    """(values, indices) of cummax (greater) or cummin: PyTorch's fold
    takes element i where it is NaN, or where the running value is not NaN
    and x_i >= it (<= for cummin), so the index is the last one reaching
    the extreme, or of the last NaN. That choice between an earlier and a
    later segment is associative, so it scans."""
    if x.ndim == 0:
        return x, importer().constant(np.zeros(()), "i64")
    d = dim % x.ndim
    n = x.shape[d]
    shape = [1] * x.ndim
    shape[d] = n
    index = importer().constant(np.arange(n).reshape(shape), "i64").expand(*x.shape)
    v = _wide(x)

    def combine(earlier, later):
        (av, ai), (bv, bi) = earlier, later
        beats = (bv >= av) if greater else (bv <= av)
        if is_float(v.dtype):
            beats = where(bv != bv, True, where(av != av, False, beats))
        return where(beats, bv, av), where(beats, bi, ai)
    extreme = -math.inf if greater else math.inf
    if not is_float(v.dtype):
        info = np.iinfo(np.int64 if v.dtype == "i64" else np.int32)
        extreme = info.min if greater else info.max
    values, indices = _scan((v, index), d, combine, (extreme, -1))
    return values, indices


@converts(aten.cummax)
def _cummax(x, dim):
    return _cumulative_extreme(x, dim, True)


@converts(aten.cummin)
def _cummin(x, dim):
    return _cumulative_extreme(x, dim, False)


# -- moments ---------------------------------------------------------------------------

def _correction(correction):
    return 1 if correction is None else correction


@converts(aten.var.correction)
def _var(x, dim=None, correction=None, keepdim=False):
    x = _in_result_type(x)
    if x.ndim == 0:  # one element: 0 / (1 - correction), as PyTorch
        return (x - x) / float(max(1 - _correction(correction), 0))
    return x.var(_dims(x, dim), keepdim=keepdim, correction=_correction(correction))


@converts(aten.var_mean.correction)
def _var_mean(x, dim=None, correction=None, keepdim=False):
    return _var(x, dim, correction=correction, keepdim=keepdim), _mean(x, dim, keepdim)

