"""Indexing: advanced indexing and index_put, gather and scatter (with
their reductions), index_select / add / copy / fill / reduce, take and put,
masked_scatter, and the views that are a fixed selection of the input's
elements (diagonal, unfold, as_strided) with their scatter forms.

Two graph ops do it all: graph.gather (rows of a table by index) and
graph.scatter_add (rows added into a table). A view that is a fixed
selection of elements gathers the flattened input at positions numpy
computes once, by applying the same view to an iota; its scatter form
gathers from the source where it writes (the last write to a position
wins) and keeps the input elsewhere. Where the positions are data, an
accumulating scatter is a scatter_add; one that sets writes, at each row,
the last update PyTorch's CPU kernels write there in their loop order:
finding it compares every index with every later one (K^2 comparisons),
so a setting scatter of more than MAX_WRITES updates sorts its indices
instead (graph.sort, a CPU library step: K log K). A reducing scatter
(amax, amin, prod) whose one-hot comparison of updates with targets exceeds
MAX_ONE_HOT elements runs in PyTorch.
"""
import numpy as np

from .. import functional as F
from .._composites import floor_divide
from .._dtypes import is_float
from .._tracing import Tensor, _lift, cat, where
from . import UnsupportedOp, aten, converts, importer
from .reductions import _prod_dim

MAX_WRITES = 2048
MAX_ONE_HOT = 1 << 22


# -- primitives ----------------------------------------------------------------------

def _const(values, dtype="i64"):
    return importer().constant(np.asarray(values), dtype)


def _rows_gather(table, rows):
    """table[rows[i...], ...]: graph.gather."""
    return table._wrap(table._tracer.gather(table._id, rows._id))


def _rows_scatter_add(base, rows, updates):
    """base with updates[k] added to row rows[k]: graph.scatter_add."""
    updates = updates if updates.dtype == base.dtype else updates.to(base.dtype)
    return base._wrap(base._tracer.scatter_add(base._id, rows._id, updates._id))


def sort_rows(x, descending=False):
    """(values, i64 indices) of x's last-dimension rows sorted stably:
    graph.sort, a CPU library step."""
    values, order = x._tracer.sort(x._id, bool(descending))
    return x._wrap(values), x._wrap(order)


def _flat(x):
    return x.reshape(x.numel())


def _iota(shape):
    return np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)


def _select_positions(x, positions):
    """The elements of x at fixed flat positions (a numpy int array), in
    the positions' shape."""
    positions = np.asarray(positions, np.int64)
    if positions.size == 0:
        return _const(np.zeros(positions.shape), x.dtype)
    return _rows_gather(_flat(x), _const(positions))


def _place(x, positions, src):
    """x with src's elements written at fixed flat positions (numpy, of
    src's shape); where a position is written twice the later write (in
    src's element order) wins."""
    writer = np.full(x.numel(), -1, np.int64)
    np.maximum.at(writer, np.asarray(positions, np.int64).ravel(),
                  np.arange(int(np.prod(src.shape, dtype=np.int64)), dtype=np.int64))
    if (writer < 0).all():
        return x
    src = src if src.dtype == x.dtype else src.to(x.dtype)
    values = _rows_gather(_flat(src), _const(np.maximum(writer, 0)))
    return where(_const(writer >= 0, "i1"), values, _flat(x)).reshape(*x.shape)


def _last_writes(rows, op):
    """[K] bool: whether update k is the last one to its row."""
    k = rows.shape[0]
    if k > MAX_WRITES:
        return _last_writes_by_sort(rows)
    later = _const(np.triu(np.ones((k, k), bool), 1), "i1")
    same = rows.unsqueeze(1) == rows.unsqueeze(0)
    overwritten = where(same, later, False).to("i32").amax((1,))
    return overwritten == 0


def _last_writes_by_sort(rows):
    """_last_writes for many updates, in K log K: the rows sorted stably
    (graph.sort, a CPU library step), each run of equal rows ends at its
    last write, which goes back to its update's place."""
    keys = rows if rows.dtype == "i64" else rows.to("i64")
    ordered, order = sort_rows(keys)
    k = keys.shape[0]
    following = cat([ordered[1:], _const(np.array([-1]))])   # no row is -1
    ends = (ordered != following).to("i32")
    return _rows_scatter_add(_const(np.zeros(k), "i32"), order, ends) > 0


def _write_rows(base, rows, updates, op):
    """base with row rows[k] set to updates[k] ([K, ...] like base's rows),
    the last k writing a row winning."""
    k = rows.shape[0]
    if k == 0:
        return base
    last = _last_writes(rows, op)
    order = _const(np.arange(1, k + 1))
    writer = _rows_scatter_add(_const(np.zeros(base.shape[0])), rows, where(last, order, 0))
    updates = updates if updates.dtype == base.dtype else updates.to(base.dtype)
    values = _rows_gather(updates, where(writer > 0, writer - 1, 0))
    hit = (writer > 0).reshape(base.shape[0], *[1] * (base.ndim - 1))
    return where(hit, values, base)


def _wrapped(index, n):
    """Integer indices with negative ones counted from the end (i64)."""
    i = index if index.dtype == "i64" else index.to("i64")
    return where(i < 0, i + n, i)


def _moved_first(x, dim):
    """x with `dim` moved to the front, and the permutation back."""
    if dim == 0:
        return x, None
    perm = [dim] + [d for d in range(x.ndim) if d != dim]
    return x.permute(*perm), list(np.argsort(perm))


def _back(x, inverse):
    return x if inverse is None else x.permute(*inverse)


def _as_rows(index):
    """A 0-d or 1-d index tensor as [K] int64."""
    i = index.reshape(index.numel())
    return i if i.dtype == "i64" else i.to("i64")


def _segment_extremes(positions, updates, n, reduce, op):
    """[n]: over the updates k with positions[k] == t, their max, min or
    product at each target t (a one-hot comparison, [K, n])."""
    k = positions.shape[0]
    if k * n > MAX_ONE_HOT:
        raise UnsupportedOp(op, f"{reduce} of {k} updates into {n} targets (the one-hot "
                                f"comparison is limited to {MAX_ONE_HOT} elements)")
    hit = positions.unsqueeze(1) == _const(np.arange(n)).unsqueeze(0)  # [K, n]
    column = updates.unsqueeze(1)
    if reduce == "prod":
        return _prod_dim(where(hit, column, 1), 0).reshape(n)
    if is_float(updates.dtype):
        fill = float("-inf") if reduce == "amax" else float("inf")
    else:
        info = np.iinfo(np.int64 if updates.dtype == "i64" else np.int32)
        fill = int(info.min) if reduce == "amax" else int(info.max)
    picked = where(hit, column, _lift(updates._tracer, fill, updates))
    return picked.amax((0,)) if reduce == "amax" else picked.amin((0,))


def _reduce_into(base, positions, updates, reduce, include_self, op):
    """scatter_reduce's and index_reduce's reductions into flat `base`
    ([n]) of `updates` ([K]) at `positions` ([K])."""
    n = base.shape[0]
    ones = _const(np.ones(positions.shape[0]))
    counts = _rows_scatter_add(_const(np.zeros(n)), positions, ones)
    touched = counts > 0
    if reduce == "sum":
        start = base if include_self else where(touched, 0, base)
        return _rows_scatter_add(start, positions, updates)
    if reduce == "mean":
        start = base if include_self else where(touched, 0, base)
        total = _rows_scatter_add(start, positions, updates)
        count = counts + 1 if include_self else counts
        if is_float(base.dtype):
            mean = total / count.to(base.dtype)
        else:
            mean = floor_divide(total, count.to(base.dtype))
        return where(touched, mean, base)
    if reduce in ("amax", "amin", "prod"):
        if base.dtype == "i1":
            raise UnsupportedOp(op, f"{reduce} of bool tensors")
        updates = updates if updates.dtype == base.dtype else updates.to(base.dtype)
        got = _segment_extremes(positions, updates, n, reduce, op)
        if include_self:
            got = (got.maximum(base) if reduce == "amax" else got.minimum(base)
                   if reduce == "amin" else got * base)
        return where(touched, got, base)
    raise UnsupportedOp(op, f"reduce={reduce!r}")


# -- advanced indexing ----------------------------------------------------------------

def _index_layout(x, indices, op):
    """(picked dims, the other dims, the flat row index over the picked
    dims [S], whether S sits where the picked dims were) of x[indices]."""
    indices = list(indices) + [None] * (x.ndim - len(indices))
    picked = [d for d, i in enumerate(indices) if i is not None]
    if any(indices[d].dtype == "i1" for d in picked):
        raise UnsupportedOp(op, "a boolean mask index (the result's shape depends on the data)")
    rest = [d for d in range(x.ndim) if d not in picked]
    adjacent = picked == list(range(picked[0], picked[-1] + 1))
    flat = None
    for d in picked:
        n = x.shape[d]
        i = _wrapped(indices[d], n)
        flat = i if flat is None else flat * n + i
    return picked, rest, flat, adjacent and picked[0] > 0


@converts(aten.index.Tensor)
def _index_tensor(x, indices):
    """x[i0, i1, ...] with integer index tensors (None: a whole dimension),
    PyTorch's advanced indexing: the index tensors broadcast together to
    S; the result has S where the indexed dimensions were when they are
    adjacent, else first, then the dimensions not indexed. A gather of rows
    of x with its indexed dimensions moved first and merged."""
    picked, rest, flat, inside = _index_layout(x, indices, aten.index.Tensor)
    moved = x.permute(*(picked + rest)) if picked + rest != list(range(x.ndim)) else x
    sizes = [x.shape[d] for d in picked]
    rows = moved.reshape(int(np.prod(sizes)), *[x.shape[d] for d in rest])
    wide = rows.to("i32") if rows.dtype == "i1" else rows
    out = F.embedding(flat, wide)
    if rows.dtype == "i1":
        out = out != 0
    if inside:  # S goes where the indexed dimensions were
        s = flat.ndim
        lead = list(range(s, s + picked[0]))
        out = out.permute(*(lead + list(range(s)) + list(range(s + picked[0], out.ndim))))
    return out


@converts(aten.index_put.default, aten.index_put_.default)
def _index_put(x, indices, values, accumulate=False):
    """x[indices] = values (or += with accumulate): the rows of x with its
    indexed dimensions moved first and merged, written (_write_rows) or
    added (scatter_add). A single boolean mask with one value is a select."""
    op = aten.index_put
    values = values if isinstance(values, Tensor) else _lift(x._tracer, values, x)
    present = [(d, i) for d, i in enumerate(indices) if i is not None]
    if any(i.dtype == "i1" for _, i in present):
        if len(present) != 1 or values.numel() != 1:
            raise UnsupportedOp(op, "a boolean mask index with more than one value (which "
                                    "values go where depends on the data)")
        d, mask = present[0]
        shape = [1] * d + list(mask.shape) + [1] * (x.ndim - d - mask.ndim)
        v = values.reshape(()).to(x.dtype)
        m = mask.reshape(*shape)
        return where(m, x + v, x) if accumulate else where(m, v, x)
    picked, rest, flat, inside = _index_layout(x, indices, op)
    s_shape = list(flat.shape)
    rest_shape = [x.shape[d] for d in rest]
    if inside:
        target = [x.shape[d] for d in rest[:picked[0]]] + s_shape + \
            [x.shape[d] for d in rest[picked[0]:]]
    else:
        target = s_shape + rest_shape
    v = values.to(x.dtype) if values.dtype != x.dtype else values
    v = v.expand(*target)
    if inside:  # S first
        s, p = len(s_shape), picked[0]
        v = v.permute(*(list(range(p, p + s)) + list(range(p)) + list(range(p + s, v.ndim))))
    k = int(np.prod(s_shape, dtype=np.int64))
    v = v.reshape(k, *rest_shape)
    rows_index = flat.reshape(k)
    perm = picked + rest
    moved = x.permute(*perm) if perm != list(range(x.ndim)) else x
    r = int(np.prod([x.shape[d] for d in picked], dtype=np.int64))
    table = moved.reshape(r, *rest_shape)
    if accumulate:
        out = _rows_scatter_add(table, rows_index, v)
    else:
        out = _write_rows(table, rows_index, v, op)
    out = out.reshape(*([x.shape[d] for d in picked] + rest_shape))
    return out if perm == list(range(x.ndim)) else out.permute(*np.argsort(perm).tolist())


# -- gather and scatter along a dimension ---------------------------------------------

def _along(shape, dim, index):
    """The flat positions, in a tensor of `shape`, of the elements `index`
    names along `dim` (index's own coordinates in the other dims)."""
    strides = [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]
    coords = np.indices(index.shape, dtype=np.int64)
    offset = sum(coords[d] * strides[d] for d in range(len(shape)) if d != dim)
    pos = index.to("i64") * strides[dim]
    return pos + _const(offset) if not isinstance(offset, int) or offset else pos


@converts(aten.gather)
def _gather(x, dim, index, sparse_grad=False):
    """out[.., i, ..] = x[.., index[.., i, ..], ..] along `dim`. An index of
    x's shape outside dim: a one-hot select and sum over x's extent along
    dim (PyTorch's cross-entropy decomposition gathers one element per
    row); any other: a gather of the flattened x."""
    if x.ndim == 0:
        return x.reshape(*index.shape)
    dim %= x.ndim
    n = x.shape[dim]
    if index.ndim == x.ndim and all(s == t for d, (s, t) in
                                    enumerate(zip(index.shape, x.shape)) if d != dim):
        iota_shape = [1] * (x.ndim + 1)
        iota_shape[dim + 1] = n
        iota = importer().constant(np.arange(n).reshape(iota_shape), index.dtype)
        hit = index.unsqueeze(dim + 1) == iota            # [.., k, n, ..]
        picked = where(hit, x.unsqueeze(dim), 0)
        return picked.sum(dim + 1)
    if index.numel() == 0:
        return _const(np.zeros(index.shape), x.dtype)
    return _rows_gather(_flat(x), _along(x.shape, dim, index))


def _updates(src, index, dtype):
    """scatter's source as [K] of `dtype`: src's leading part of index's
    shape, or a number repeated."""
    k = index.numel()
    if not isinstance(src, Tensor):
        return _const(np.full(k, src), dtype)
    if src.ndim < index.ndim:  # a 0-d source, for the 0-d x of a 0-d index
        src = src.reshape(*([1] * (index.ndim - src.ndim) + list(src.shape)))
    if tuple(src.shape) != tuple(index.shape):
        src = src[tuple(slice(0, s) for s in index.shape)]
    src = src.reshape(k)
    return src if src.dtype == dtype else src.to(dtype)


def _scatter_elements(x, dim, index, src, mode, op, include_self=True):
    if index.numel() == 0:
        return x
    shape = x.shape if x.ndim else (1,)
    xs = x.reshape(*shape)
    idx = index.reshape(*([1] * (len(shape) - index.ndim) + list(index.shape))) \
        if index.ndim < len(shape) else index
    dim = dim % len(shape)
    positions = _along(shape, dim, idx).reshape(idx.numel())
    updates = _updates(src, idx, x.dtype)
    base = _flat(xs)
    if mode == "set":
        out = _write_rows(base, positions, updates, op)
    else:
        out = _reduce_into(base, positions, updates, mode, include_self, op)
    return out.reshape(*x.shape)


@converts(aten.scatter.src, aten.scatter.value)
def _scatter(x, dim, index, src):
    return _scatter_elements(x, dim, index, src, "set", aten.scatter)


_SCATTER_MODES = {"add": "sum", "multiply": "prod"}


@converts(aten.scatter.reduce, aten.scatter.value_reduce)
def _scatter_reduce_mode(x, dim, index, src, reduce):
    return _scatter_elements(x, dim, index, src, _SCATTER_MODES[reduce], aten.scatter)


@converts(aten.scatter_add.default)
def _scatter_add(x, dim, index, src):
    return _scatter_elements(x, dim, index, src, "sum", aten.scatter_add)


@converts(aten.scatter_reduce.two)
def _scatter_reduce(x, dim, index, src, reduce, include_self=True):
    return _scatter_elements(x, dim, index, src, reduce, aten.scatter_reduce, include_self)


# -- index_* along a dimension -----------------------------------------------------------

@converts(aten.index_select.default)
def _index_select(x, dim, index):
    if x.ndim == 0:
        return _rows_gather(x.reshape(1), _as_rows(index)).reshape(*importer().result_shape())
    moved, back = _moved_first(x, dim % x.ndim)
    return _back(_rows_gather(moved, _as_rows(index)), back)


@converts(aten.index_add.default)
def _index_add(x, dim, index, source, alpha=1):
    if x.ndim == 0:
        x1, s1 = x.reshape(1), source.reshape(1)
        return _index_add(x1, 0, index, s1, alpha).reshape(*x.shape)
    dim %= x.ndim
    moved, back = _moved_first(x, dim)
    src, _ = _moved_first(source.reshape(*x.shape[:dim], index.numel(), *x.shape[dim + 1:])
                          if source.ndim != x.ndim else source, dim)
    if alpha != 1:
        src = src * alpha
    return _back(_rows_scatter_add(moved, _as_rows(index), src), back)


@converts(aten.index_copy.default)
def _index_copy(x, dim, index, source):
    if x.ndim == 0:
        return _index_copy(x.reshape(1), 0, index, source.reshape(1)).reshape(*x.shape)
    dim %= x.ndim
    moved, back = _moved_first(x, dim)
    src, _ = _moved_first(source if source.ndim == x.ndim else
                          source.reshape(*x.shape[:dim], index.numel(), *x.shape[dim + 1:]), dim)
    return _back(_write_rows(moved, _as_rows(index), src, aten.index_copy), back)


@converts(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def _index_fill(x, dim, index, value):
    if x.ndim == 0:
        return _index_fill(x.reshape(1), 0, index, value).reshape(*x.shape)
    dim %= x.ndim
    n = x.shape[dim]
    rows = _wrapped(_as_rows(index), n)
    hits = _rows_scatter_add(_const(np.zeros(n)), rows, _const(np.ones(rows.shape[0]))) > 0
    shape = [1] * x.ndim
    shape[dim] = n
    v = value.reshape(()).to(x.dtype) if isinstance(value, Tensor) else value
    return where(hits.reshape(*shape), v, x)


@converts(aten.index_reduce.default)
def _index_reduce(x, dim, index, source, reduce, include_self=True):
    """index_reduce: rows of x (dim first) reduced with the source's rows;
    as scatter_reduce over the flattened rows."""
    op = aten.index_reduce
    if x.ndim == 0:
        return _index_reduce(x.reshape(1), 0, index, source.reshape(1), reduce,
                             include_self).reshape(*x.shape)
    dim %= x.ndim
    moved, back = _moved_first(x, dim)
    src, _ = _moved_first(source, dim)
    width = int(np.prod(moved.shape[1:], dtype=np.int64))
    rows = _as_rows(index)
    positions = (rows.unsqueeze(1) * width + _const(np.arange(width)).unsqueeze(0))
    positions = positions.reshape(rows.shape[0] * width)
    updates = src.reshape(rows.shape[0] * width)
    out = _reduce_into(_flat(moved), positions, updates, reduce, include_self, op)
    return _back(out.reshape(*moved.shape), back)


@converts(aten.take.default)
def _take(x, index):
    n = max(x.numel(), 1)
    return _rows_gather(_flat(x.reshape(n) if x.ndim == 0 else x), _wrapped(index, x.numel()))


@converts(aten.put.default)
def _put(x, index, source, accumulate=False):
    rows = _wrapped(_as_rows(index), x.numel())
    updates = source.reshape(source.numel())
    base = _flat(x.reshape(1) if x.ndim == 0 else x)
    out = _rows_scatter_add(base, rows, updates) if accumulate else \
        _write_rows(base, rows, updates, aten.put)
    return out.reshape(*x.shape)


@converts(aten.masked_scatter.default)
def _masked_scatter(x, mask, source):
    """The elements of x where mask (broadcast) is True replaced by
    source's, in order: the k-th True position takes source's k-th
    element (a running count of the mask)."""
    m = mask.expand(*x.shape) if tuple(mask.shape) != tuple(x.shape) else mask
    fm = _flat(m.reshape(1) if m.ndim == 0 else m)
    k = fm.to("i64").cumsum(0) - 1
    values = _rows_gather(_flat(source.reshape(1) if source.ndim == 0 else source),
                          where(fm, k, 0))
    values = values if values.dtype == x.dtype else values.to(x.dtype)
    return where(fm, values, _flat(x.reshape(1) if x.ndim == 0 else x)).reshape(*x.shape)


@converts(aten.masked_scatter_backward.default)
def _masked_scatter_backward(grad, mask, sizes):
    """The source's gradient: grad at the k-th True position of the mask
    goes to source element k; source elements past the mask's count get 0."""
    n = int(np.prod(sizes, dtype=np.int64))
    m = mask.expand(*grad.shape) if tuple(mask.shape) != tuple(grad.shape) else mask
    fm = _flat(m.reshape(1) if m.ndim == 0 else m)
    k = fm.to("i64").cumsum(0) - 1
    rows = where(fm, k, n)
    base = _const(np.zeros(n + 1), grad.dtype)
    out = _rows_scatter_add(base, rows, _flat(grad.reshape(1) if grad.ndim == 0 else grad))
    return out[0:n].reshape(*sizes)


# -- fixed selections: diagonal, unfold, as_strided ------------------------------------------

@converts(aten.diagonal.default, aten.diagonal_copy.default)
def _diagonal(x, offset=0, dim1=0, dim2=1):
    return _select_positions(x, np.diagonal(_iota(x.shape), offset, dim1, dim2))


@converts(aten.diagonal_scatter.default)
def _diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    return _place(x, np.diagonal(_iota(x.shape), offset, dim1, dim2), src)


def _unfold_positions(shape, dim, size, step):
    if not shape:
        return np.zeros((size,), np.int64)
    dim %= len(shape)
    iota = _iota(shape)
    windows = (shape[dim] - size) // step + 1
    picks = np.arange(windows)[:, None] * step + np.arange(size)[None, :]
    pos = np.take(iota, picks, axis=dim)  # shape[:dim] + [windows, size] + shape[dim+1:]
    return np.moveaxis(pos, dim + 1, -1)


@converts(aten.unfold.default, aten.unfold_copy.default)
def _unfold(x, dimension, size, step):
    return _select_positions(x, _unfold_positions(x.shape, dimension, size, step))


@converts(aten.unfold_backward.default)
def _unfold_backward(grad, input_sizes, dim, size, step):
    """The input's gradient of unfold: each window element's gradient
    added at its position."""
    shape = tuple(input_sizes)
    pos = _unfold_positions(shape, dim, size, step)
    n = int(np.prod(shape, dtype=np.int64))
    base = _const(np.zeros(n), grad.dtype)
    return _rows_scatter_add(base, _const(pos.ravel()), _flat(grad)).reshape(*shape)


def _strided_positions(x, size, stride, storage_offset, op):
    """Flat positions of as_strided's elements in x, which must be
    contiguous from the start of its storage and hold every one."""
    val = importer().arg_val(0)
    if val is None or not val.is_contiguous() or val.storage_offset() != 0:
        raise UnsupportedOp(op, "an input that is not contiguous from the start of its "
                                "storage (as_strided reads the storage)")
    offset = int(storage_offset or 0)
    coords = np.indices(tuple(size), dtype=np.int64)
    pos = offset + sum((coords[d] * int(stride[d]) for d in range(len(size))),
                       np.zeros(tuple(size), np.int64))
    if pos.size and (pos.max() >= x.numel() or pos.min() < 0):
        raise UnsupportedOp(op, "elements beyond the input's own")
    return pos


@converts(aten.as_strided.default, aten.as_strided_copy.default, aten.as_strided_.default)
def _as_strided(x, size, stride, storage_offset=None):
    """as_strided_ (in place: the tensor itself under new strides, what
    PyTorch's adaptive_avg_pool2d decomposition leaves on a fresh result)
    has the same value. Strides that keep every element where it is (they
    differ only in dims of size 1) are the input itself."""
    pos = _strided_positions(x, size, stride, storage_offset, aten.as_strided)
    if tuple(size) == tuple(x.shape) and np.array_equal(pos.ravel(), np.arange(pos.size)):
        return x
    return _select_positions(x, pos)


@converts(aten.as_strided_scatter.default)
def _as_strided_scatter(x, src, size, stride, storage_offset=None):
    return _place(x, _strided_positions(x, size, stride, storage_offset,
                                        aten.as_strided_scatter), src)
