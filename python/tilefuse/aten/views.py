"""Views, copies, slicing, concatenation, stacking and padding."""
import sys

import numpy as np

from .._tracing import Tensor, cat, stack
from . import CONVERSIONS, UnsupportedOp, _scalar_like, aten, converts, importer, \
    torch_dtype_name


@converts(aten.view, aten._unsafe_view, aten.reshape)
def _view(x, shape):
    return x.reshape(*shape)


@converts(aten.permute)
def _permute(x, dims):
    return x.permute(*dims)


@converts(aten.transpose.int)
def _transpose(x, d0, d1):
    return x.transpose(d0, d1)


@converts(aten.t)
def _t(x):
    return x if x.ndim < 2 else x.transpose(0, 1)


@converts(aten.expand)
def _expand(x, size, implicit=False):
    lead = len(size) - x.ndim
    full = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(size)]
    return x.expand(*full)


@converts(aten.unsqueeze)
def _unsqueeze(x, dim):
    return x.unsqueeze(dim)


@converts(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _squeeze(x, dim=None):
    if x.ndim == 0:
        return x
    if dim is None:
        return x.squeeze()
    dims = [dim] if isinstance(dim, int) else list(dim)
    dims = sorted({d % max(1, x.ndim) for d in dims if x.shape[d % max(1, x.ndim)] == 1},
                  reverse=True)
    for d in dims:
        x = x.squeeze(d)
    return x


@converts(aten.clone, aten.alias, aten.detach, aten.lift_fresh_copy, aten.contiguous)
def _identity(x, memory_format=None):
    return x


@converts(aten.copy.default)
def _copy(x, src, non_blocking=False):
    """The functional form of x.copy_(src): src in x's dtype, broadcast to
    x's shape."""
    src = src if isinstance(src, Tensor) else _scalar_like(x, src)
    src = src.to(x.dtype)
    return src if tuple(src.shape) == tuple(x.shape) else src.expand(*x.shape)


@converts(aten._to_copy)
def _to_copy(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    return x if dtype is None else x.to(torch_dtype_name(dtype))


@converts(aten.slice.Tensor)
def _slice(x, dim=0, start=None, end=None, step=1):
    n = x.shape[dim]
    start = 0 if start is None else start
    end = n if end is None or end >= sys.maxsize // 2 else end
    key = [slice(None)] * x.ndim
    key[dim] = slice(start, end, step)
    return x[tuple(key)]


@converts(aten.select.int)
def _select(x, dim, index):
    key = [slice(None)] * x.ndim
    key[dim] = index
    return x[tuple(key)]


@converts(aten.split.Tensor, aten.split_with_sizes)
def _split(x, sizes, dim=0):
    return list(x.split(sizes, dim))


@converts(aten.slice_scatter)
def _slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    """x with x[start:end] along dim replaced by src (functionalization's
    form of an in-place update through a slice)."""
    dim %= x.ndim
    n = x.shape[dim]
    start = 0 if start is None else (start + n if start < 0 else start)
    end = n if end is None or end >= sys.maxsize // 2 else (end + n if end < 0 else end)
    start, end = max(0, min(start, n)), max(0, min(end, n))
    src = src.to(x.dtype)
    length = src.shape[dim]
    if length == 0:
        return x
    if step != 1:  # positions start, start + step, ...: src interleaved with x's rest
        src, end = _interleave(x, src, dim, start, step), min(start + length * step, n)
    parts = []
    if start > 0:
        parts.append(_slice(x, dim, 0, start))
    parts.append(src)
    if end < n:
        parts.append(_slice(x, dim, end, n))
    return parts[0] if len(parts) == 1 else cat(parts, dim)


def _interleave(x, src, dim, start, step):
    """x[start : start + len * step] along dim (cut at x's end) with every
    step-th element, from the first, taken from src (len along dim): the
    strided slice_scatter's middle part, by reshapes and concatenations
    only (exact). The whole groups of `step` become [len - 1, step] and
    take src in column 0; the last group is src's last element and what of
    x follows it."""
    n, length = x.shape[dim], src.shape[dim]
    last = start + (length - 1) * step  # the last replaced position, < n
    parts = []
    if length > 1:
        body = _slice(x, dim, start, last)
        shape = list(body.shape)
        grouped = body.reshape(*shape[:dim], length - 1, step, *shape[dim + 1:])
        head = _slice(src, dim, 0, length - 1).unsqueeze(dim + 1)
        parts.append(cat([head, _slice(grouped, dim + 1, 1, step)], dim + 1).reshape(*shape))
    parts.append(_slice(src, dim, length - 1, length))
    if last + 1 < min(last + step, n):
        parts.append(_slice(x, dim, last + 1, min(last + step, n)))
    return parts[0] if len(parts) == 1 else cat(parts, dim)


@converts(aten.select_scatter)
def _select_scatter(x, src, dim, index):
    dim %= x.ndim
    index %= x.shape[dim]
    return _slice_scatter(x, src.unsqueeze(dim), dim, index, index + 1)


@converts(aten.cat)
def _cat(tensors, dim=0):
    # An empty result (parts empty in another dim than `dim`) is zeros of
    # its shape. Otherwise an empty part adds nothing: it is empty along
    # `dim`, or a 1-D empty tensor, which ATen skips whatever the others'
    # rank (a key/value cache starts as torch.tensor([])).
    shape = importer().result_shape()
    if 0 in shape:
        return importer().constant(np.zeros(shape), importer().result_dtype())
    parts = [t for t in tensors if not (isinstance(t, Tensor) and 0 in t.shape)]
    return parts[0] if len(parts) == 1 else cat(parts, dim)


@converts(aten.constant_pad_nd)
def _constant_pad_nd(x, pad, value=0):
    """x padded (or cropped, for negative amounts) with `value`: pad lists
    (before, after) pairs from the last dimension backwards."""
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise UnsupportedOp(aten.constant_pad_nd, f"pad {list(pad)} for a rank-{x.ndim} input")
    for i in range(len(pad) // 2):
        dim = x.ndim - 1 - i
        before, after = int(pad[2 * i]), int(pad[2 * i + 1])
        n = x.shape[dim]
        x = _slice(x, dim, max(0, -before), n - max(0, -after))
        parts = []
        for amount in (before, after):
            if amount > 0:
                shape = list(x.shape)
                shape[dim] = amount
                parts.append(importer().constant(np.full(shape, value), x.dtype))
            else:
                parts.append(None)
        pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
        if len(pieces) > 1:
            x = cat(pieces, dim)
    return x


@converts(aten.replication_pad1d_backward.default, aten.replication_pad2d_backward.default,
          aten.replication_pad3d_backward.default)
def _replication_pad_backward(grad, x, padding):
    """The gradient of replicate padding (whose forward PyTorch writes as
    an index by clamped positions), one padded dim at a time from the last:
    the interior of `grad` back at its place, each edge band summed into
    the first or last element, and the elements a negative amount cropped
    away given 0."""
    for i in range(len(padding) // 2):
        dim = grad.ndim - 1 - i
        before, after = int(padding[2 * i]), int(padding[2 * i + 1])
        n, m = x.shape[dim], grad.shape[dim]
        lo, hi = max(0, -before), min(n, m - before)   # x's elements grad has
        keep = [0, 0] * i
        dx = _constant_pad_nd(_slice(grad, dim, lo + before, hi + before), keep + [lo, n - hi])
        if before > 0:
            band = _slice(grad, dim, 0, before).sum(dim, True)
            dx = dx + _constant_pad_nd(band, keep + [0, n - 1])
        if after > 0 and before + n < m:
            band = _slice(grad, dim, before + n, m).sum(dim, True)
            dx = dx + _constant_pad_nd(band, keep + [n - 1, 0])
        grad = dx
    return grad


@converts(aten.stack)
def _stack(tensors, dim=0):
    return stack(list(tensors), dim)


@converts(aten.flip)
def _flip(x, dims):
    return x.flip(list(dims))


# Functionalization's copying forms of the views: the same values.
for _name in ("view", "_unsafe_view", "permute", "transpose", "t", "expand", "unsqueeze",
              "squeeze", "slice", "select", "split", "split_with_sizes", "alias"):
    _copying = getattr(aten, _name + "_copy", None)
    _viewing = getattr(aten, _name, None)
    if _copying is not None and _viewing is not None:
        for _overload in _copying.overloads():
            _target = (CONVERSIONS.get(getattr(_viewing, _overload, None)) or
                       CONVERSIONS.get(_viewing))
            if _target is not None:
                CONVERSIONS[getattr(_copying, _overload)] = _target


@converts(aten.repeat.default)
def _repeat(x, repeats):
    """x tiled `repeats` times along each dim (leading repeats add dims):
    each dim broadcast along a new one before it and merged with it."""
    repeats = [int(r) for r in repeats]
    x = x.reshape(*([1] * (len(repeats) - x.ndim) + list(x.shape)))
    for d, r in enumerate(repeats):
        if r == 1:
            continue
        shape = list(x.shape)
        x = x.reshape(*shape[:d], 1, *shape[d:]).expand(*shape[:d], r, *shape[d:])
        x = x.reshape(*shape[:d], r * shape[d], *shape[d + 1:])
    return x


@converts(aten.narrow_copy.default)
def _narrow_copy(x, dim, start, length):
    dim %= x.ndim
    start = start + x.shape[dim] if start < 0 else start
    return _slice(x, dim, start, start + length)


@converts(aten.unbind.int, aten.unbind_copy.int)
def _unbind(x, dim=0):
    return [_select(x, dim, i) for i in range(x.shape[dim])]
