"""Sorting and searching: sort (and argsort), searchsorted and bucketize.

Both compare every element with every other of its row (n^2 comparisons
per row of n), so rows of more than MAX_ROW elements, or more than
MAX_COMPARISONS comparisons in all, run in PyTorch.

sort follows PyTorch's order: NaN above everything (last ascending, first
descending), -0.0 equal to 0.0, equal elements in their original order.
That is what a stable sort gives and what PyTorch's CPU kernel gives for
rows of up to 16 elements (its insertion sort); a longer row sorted with
stable=False may order equal elements otherwise, so its indices convert
only where nothing reads them (the values are the same either way).
topk, kthvalue, median and mode choose among equal elements by their
selection algorithms' internals and run in PyTorch.

searchsorted counts, per value, the sorted row's elements before it: those
not >= it (not > it with right=True), which is the position PyTorch's
binary search finds (NaN included) when the row is sorted.
"""
import operator

import numpy as np

from .._tracing import where
from . import UnsupportedOp, aten, converts, importer
from .indexing import _along, _flat, _rows_gather

MAX_ROW = 4096
MAX_COMPARISONS = 1 << 24
INSERTION_SORT_LIMIT = 16  # PyTorch's CPU sort orders ties stably up to here


def _check_size(op, rows, n, m):
    if n > MAX_ROW or m > MAX_ROW or rows * n * m > MAX_COMPARISONS:
        raise UnsupportedOp(op, f"{rows} rows of {n} x {m} comparisons (at most {MAX_ROW} per "
                                f"row and {MAX_COMPARISONS} in all)")


def _indices_read(node):
    """Whether anything reads output 1 (the indices) of a (values,
    indices) node."""
    for user in node.users:
        if user.target is not operator.getitem or user.args[1] == 1:
            return True
    return False


def _last(x, dim):
    """x with `dim` moved last, and the permutation back (or None)."""
    if dim == x.ndim - 1:
        return x, None
    perm = [d for d in range(x.ndim) if d != dim] + [dim]
    return x.permute(*perm), list(np.argsort(perm))


def _sorted(x, dim, descending, stable, op):
    """(values, indices) of x sorted along dim."""
    if x.ndim == 0:
        return x, importer().constant(np.zeros(()), "i64")
    dim %= x.ndim
    n = x.shape[dim]
    rows = x.numel() // max(n, 1)
    if n > INSERTION_SORT_LIMIT and not stable and _indices_read(importer().node):
        raise UnsupportedOp(op, f"stable=False over {n} elements: PyTorch's order of equal "
                                "elements is its sort's own")
    _check_size(op, rows, n, n)
    if n <= 1:
        return x, importer().constant(np.zeros(x.shape), "i64")
    xl, back = _last(x, dim)
    a = xl.unsqueeze(-1)          # element i  [.., i, 1]
    b = xl.unsqueeze(-2)          # element j  [.., 1, j]
    nan_a, nan_b = a != a, b != b
    if descending:
        before = (b > a) | (nan_b & ~nan_a)
    else:
        before = (b < a) | (nan_a & ~nan_b)
    same = (a == b) | (nan_a & nan_b)
    earlier = importer().constant(np.tril(np.ones((n, n), bool), -1), "i1")  # j < i
    ahead = where(before, True, same & earlier)
    rank = ahead.to("i64").sum((-1,))                       # [.., i]
    positions = importer().constant(np.arange(n), "i64")
    hit = rank.unsqueeze(-2) == positions.unsqueeze(-1)     # [.., r, i]
    order = where(hit, importer().constant(np.arange(n), "i64"), 0).sum((-1,))  # [.., r]
    values = _rows_gather(_flat(xl), _along(xl.shape, xl.ndim - 1, order))
    if back is not None:
        values, order = values.permute(*back), order.permute(*back)
    return values, order


@converts(aten.sort.default)
def _sort(x, dim=-1, descending=False):
    return _sorted(x, dim, descending, False, aten.sort)


@converts(aten.sort.stable)
def _sort_stable(x, stable=None, dim=-1, descending=False):
    return _sorted(x, dim, descending, bool(stable), aten.sort)


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

