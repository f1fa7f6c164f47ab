"""Sorting and searching: sort (and argsort), topk, kthvalue, median and
nanmedian along a dim, histc, searchsorted and bucketize.

Sorting compares every element with every other of its row (n^2
comparisons per row of n, which every target fuses); rows of more than
MAX_ROW elements, or more than MAX_COMPARISONS comparisons in all, are
sorted by graph.sort instead (a CPU library step: CUDA targets refuse it
with the reason).

sort follows PyTorch's order: NaN above everything (last ascending, first
descending), -0.0 equal to 0.0, equal elements in their original order.
That is what a stable sort gives, and one of the orders PyTorch allows
with stable=False, which leaves the order of equal elements unspecified
(its CPU kernel keeps it for rows of up to 16 elements, its insertion
sort, and not always beyond: a program whose result depends on which of
two equal elements comes first may differ there; one that uses the
sorted values, or the permutation and its inverse as mixture-of-experts
routing does, does not).
topk and kthvalue take the same order: among equal elements the earlier
one is picked first (PyTorch's selection leaves that unspecified too).

histc places each element in PyTorch's bin: the integer part of
(x - min) * bins / (max - min) computed in the input's dtype, the range's
top in the last bin.

searchsorted counts, per value, the sorted row's elements before it: those
not >= it (not > it with right=True), which is the position PyTorch's
binary search finds (NaN included) when the row is sorted.
"""
import numpy as np

from .._tracing import where
from . import UnsupportedOp, aten, converts, importer
from .indexing import _along, _flat, _rows_gather, sort_rows

MAX_ROW = 4096
MAX_COMPARISONS = 1 << 24


def _comparisons_fit(rows, n, m):
    return n <= MAX_ROW and m <= MAX_ROW and rows * n * m <= MAX_COMPARISONS


def _check_size(op, rows, n, m):
    if not _comparisons_fit(rows, n, m):
        raise UnsupportedOp(op, f"{rows} rows of {n} x {m} comparisons (at most {MAX_ROW} per "
                                f"row and {MAX_COMPARISONS} in all)")


def _last(x, dim):
    """x with `dim` moved last, and the permutation back (or None)."""
    if dim == x.ndim - 1:
        return x, None
    perm = [d for d in range(x.ndim) if d != dim] + [dim]
    return x.permute(*perm), list(np.argsort(perm))


def _ranks(xl, descending):
    """Each element's position in its (last-dim) row sorted stably: the
    number of elements ordered before it."""
    n = xl.shape[-1]
    a = xl.unsqueeze(-1)          # element i  [.., i, 1]
    b = xl.unsqueeze(-2)          # element j  [.., 1, j]
    nan_a, nan_b = a != a, b != b
    if descending:
        before = (b > a) | (nan_b & ~nan_a)
    else:
        before = (b < a) | (nan_a & ~nan_b)
    same = (a == b) | (nan_a & nan_b)
    earlier = importer().constant(np.tril(np.ones((n, n), bool), -1), "i1")  # j < i
    return where(before, True, same & earlier).to("i64").sum((-1,))     # [.., i]


def _gather_last(xl, index):
    """xl[.., index[.., j]] along the last dim (index: [.., k])."""
    return _rows_gather(_flat(xl), _along(xl.shape, xl.ndim - 1, index))


def _check_library_sortable(xl, op):
    """graph.sort takes no booleans: rows of them only as long as they can
    be compared pair by pair."""
    if xl.dtype == "i1":
        raise UnsupportedOp(op, f"booleans in rows of {xl.shape[-1]} (sorted by comparisons "
                                f"up to {MAX_ROW})")


def _library_sorted(xl, descending, wanted, op):
    """_leading through graph.sort (a CPU library step): for rows too long
    to compare every pair."""
    _check_library_sortable(xl, op)
    values, order = sort_rows(xl, descending)
    lo, hi = int(np.min(wanted)), int(np.max(wanted)) + 1   # a contiguous run of positions
    keep = (slice(None),) * (xl.ndim - 1) + (slice(lo, hi),)
    return values[keep], order[keep]


def _leading(xl, descending, wanted):
    """(values, indices) of the elements at sorted positions `wanted` (a
    numpy array) of each last-dim row of xl in stable sorted order."""
    n = xl.shape[-1]
    rank = _ranks(xl, descending)
    positions = importer().constant(wanted, "i64")
    hit = rank.unsqueeze(-2) == positions.unsqueeze(-1)     # [.., r, i]
    order = where(hit, importer().constant(np.arange(n), "i64"), 0).sum((-1,))  # [.., r]
    return _gather_last(xl, order), order


def _selected(x, dim, descending, wanted, op):
    """(values, indices) of the elements at sorted positions `wanted` (a
    numpy array) along dim of x in stable sorted order, dim kept where it
    was."""
    if x.ndim == 0:
        return x, importer().constant(np.zeros(()), "i64")
    dim %= x.ndim
    n = x.shape[dim]
    if n <= 1 and len(wanted) == n:
        return x, importer().constant(np.zeros(x.shape), "i64")
    xl, back = _last(x, dim)
    if _comparisons_fit(x.numel() // max(n, 1), n, n):
        values, order = _leading(xl, descending, wanted)
    else:
        values, order = _library_sorted(xl, descending, wanted, op)
    if back is not None:
        values, order = values.permute(*back), order.permute(*back)
    return values, order


def _sorted(x, dim, descending, op):
    """(values, indices) of x sorted stably along dim."""
    return _selected(x, dim, descending, np.arange(x.shape[dim % x.ndim] if x.ndim else 1), op)


@converts(aten.sort.default)
def _sort(x, dim=-1, descending=False):
    return _sorted(x, dim, descending, aten.sort)


@converts(aten.sort.stable)
def _sort_stable(x, stable=None, dim=-1, descending=False):
    return _sorted(x, dim, descending, aten.sort)


@converts(aten.topk.default)
def _topk(x, k, dim=-1, largest=True, sorted=True):
    """The k largest (smallest) along dim, in sorted order whatever
    `sorted` says (PyTorch leaves the order unspecified with False)."""
    return _selected(x, dim, largest, np.arange(k), aten.topk)


@converts(aten.kthvalue.default)
def _kthvalue(x, k, dim=-1, keepdim=False):
    """The k-th smallest along dim (NaN above everything) and its index."""
    if x.ndim == 0:
        return x, importer().constant(np.zeros(()), "i64")
    d = dim % x.ndim
    values, order = _selected(x, d, False, np.array([k - 1]), aten.kthvalue)
    return (values, order) if keepdim else (values.squeeze(d), order.squeeze(d))


def _median_dim(x, dim, keepdim, op, ignore_nan):
    """(value, index) of the lower median along dim, as PyTorch's median
    and nanmedian: in the stable ascending order (NaN last) the element at
    position (n - 1) // 2, n the row's length, or, for median, the row's
    first NaN where it has one (position: the count of non-NaN elements);
    for nanmedian n counts the non-NaN elements only, and a row of NaNs
    gives its first element. Ties pick the earliest equal element, one of
    the choices PyTorch allows (its pick among equal elements, the NaNs of
    an all-NaN row included, is its selection algorithm's). The value is a
    gather at the index, so its gradient is PyTorch's (all of it to that
    element)."""
    if x.ndim == 0:
        return x, importer().constant(np.zeros(()), "i64")
    d = dim % x.ndim
    n = x.shape[d]
    xl, back = _last(x, d)
    finite_count = (xl == xl).to("i64").sum((-1,), keepdim=True)    # non-NaN per row
    if ignore_nan:  # max(0, (count - 1) // 2), in floats (exact below 2^24)
        position = ((finite_count.to("f32") - 1.0).clamp(0.0, None) * 0.5).floor().to("i64")
    else:
        position = where(finite_count < n, finite_count, (n - 1) // 2)
    rows = x.numel() // max(n, 1)
    if _comparisons_fit(rows, n, n):
        rank = _ranks(xl, False)                                    # [.., n]
        iota = importer().constant(np.arange(n), "i64")
        order = where(rank == position, iota, 0).sum((-1,), keepdim=True)
    else:
        _check_library_sortable(xl, op)
        _, sorted_order = sort_rows(xl, False)
        order = _gather_last(sorted_order, position)
    value = _gather_last(xl, order)
    if back is not None:
        value, order = value.permute(*back), order.permute(*back)
    if not keepdim:
        value, order = value.squeeze(d), order.squeeze(d)
    return value, order


@converts(aten.median.dim)
def _median(x, dim, keepdim=False):
    return _median_dim(x, dim, keepdim, aten.median, ignore_nan=False)


@converts(aten.nanmedian.dim)
def _nanmedian(x, dim, keepdim=False):
    return _median_dim(x, dim, keepdim, aten.nanmedian, ignore_nan=True)


@converts(aten.histc.default)
def _histc(x, bins=100, min=0, max=0):
    """Counts of x's elements in `bins` equal bins over [min, max], in x's
    dtype; elements outside the range (and NaN) are not counted."""
    if min == max:
        raise UnsupportedOp(aten.histc, "min == max takes the range from the data; pass the "
                                        "range (min < max)")
    if min > max:
        raise UnsupportedOp(aten.histc, f"min {min} > max {max}")
    if x.dtype not in ("f32", "f64"):
        raise UnsupportedOp(aten.histc, f"{x.dtype} input (PyTorch rounds each step of the bin "
                                        "arithmetic to it): f32 and f64 convert")
    if x.numel() * bins > MAX_COMPARISONS:   # each element compared with each bin
        raise UnsupportedOp(aten.histc, f"{x.numel()} elements x {bins} bins (at most "
                                        f"{MAX_COMPARISONS} comparisons)")
    width = np.dtype(np.float32 if x.dtype == "f32" else np.float64).type
    lo, hi = width(min), width(max)
    def const(value):
        return importer().constant(value, x.dtype)
    v = _flat(x).unsqueeze(-1)                                       # [n, 1]
    # PyTorch's bin, in x's dtype and in its order: trunc((x - lo) * bins / (hi - lo)),
    # the range's top in the last bin.
    at = (v - const(lo)) * const(width(bins)) / const(width(hi - lo))
    first = const(np.arange(bins, dtype=lo.dtype))                   # [bins]
    top = np.zeros(bins, bool)
    top[-1] = True
    inside = (v >= const(lo)) & (v <= const(hi))
    hit = inside & (at >= first) & ((at < first + 1) | importer().constant(top, "i1"))
    return hit.to(x.dtype).sum((0,))


def _search(seq, values, right, op, dtype):
    """Per value, the number of the sorted row's elements not >= it (not
    > it when right)."""
    if seq.ndim == 1:
        rows, m = 1, seq.shape[0]
        s = seq.reshape(*([1] * values.ndim), m)
    else:
        rows, m = seq.numel() // max(seq.shape[-1], 1), seq.shape[-1]
        s = seq.unsqueeze(-2)                                # [.., 1, m]
    k = values.numel() // max(rows, 1)
    _check_size(op, rows, k, m)
    v = values.unsqueeze(-1)                                 # [.., k, 1]
    passed = ~(s > v) if right else ~(s >= v)
    return passed.to("i64").sum((-1,)).to(dtype)


def _side(right, side):
    return side == "right" if side is not None else bool(right)


@converts(aten.searchsorted.Tensor)
def _searchsorted(seq, values, out_int32=False, right=False, side=None, sorter=None):
    if sorter is not None:
        seq = _rows_gather(_flat(seq), _along(seq.shape, seq.ndim - 1, sorter))
    dtype = "i32" if out_int32 else "i64"
    if values.ndim == 0:
        return _search(seq, values.reshape(1), _side(right, side), aten.searchsorted,
                       dtype).reshape()
    return _search(seq, values, _side(right, side), aten.searchsorted, dtype)


@converts(aten.bucketize.Tensor)
def _bucketize(values, boundaries, out_int32=False, right=False):
    dtype = "i32" if out_int32 else "i64"
    if values.ndim == 0:
        return _search(boundaries, values.reshape(1), right, aten.bucketize, dtype).reshape()
    return _search(boundaries, values, right, aten.bucketize, dtype)

