"""The traced tensor's layout: reshape/view, flatten, permute, transpose,
squeeze/unsqueeze, expand, and basic indexing (x[...])."""
import numpy as np

from . import _tracing
from ._core import CompileError
from ._location import _type_text, _user_location, _where


class LayoutMethods:
    """Mixed into tracing.Tensor."""

    __slots__ = ()

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
            shape = shape[0]
        return self._call("reshape", self._id, [int(s) for s in shape])

    view = reshape

    def flatten(self, start_dim=0, end_dim=-1):
        shape = list(self.shape)
        if not shape:
            return self.reshape(1)
        start_dim = self._dim(start_dim, "flatten")
        end = self._dim(end_dim, "flatten")
        merged = int(np.prod(shape[start_dim : end + 1], dtype=np.int64))
        return self.reshape(shape[:start_dim] + [merged] + shape[end + 1 :])

    def permute(self, *dims):
        if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
            dims = dims[0]
        return self._call("transpose", self._id, list(dims))

    def transpose(self, dim0, dim1):
        perm = list(range(self.ndim))
        d0, d1 = self._dim(dim0, "transpose"), self._dim(dim1, "transpose")
        perm[d0], perm[d1] = perm[d1], perm[d0]
        return self.permute(perm)

    def t(self):
        """Transpose of a 2-D tensor; a 0-d or 1-d tensor as it is (PyTorch's
        Tensor.t())."""
        if self.ndim > 2:
            raise CompileError(
                f"t() expects a tensor with <= 2 dimensions, got {_type_text(self)}; use "
                f"x.transpose(dim0, dim1) or x.permute(...) for more dims{_where()}")
        return self if self.ndim < 2 else self.transpose(0, 1)

    def contiguous(self, memory_format=None):
        """The tensor itself: traced tensors have no memory layout (the
        compiler chooses it), so every tensor is contiguous."""
        return self

    @property
    def T(self):
        return self.permute(list(reversed(range(self.ndim))))

    def unsqueeze(self, dim):
        shape = list(self.shape)
        dim = dim if dim >= 0 else dim + len(shape) + 1
        if not 0 <= dim <= len(shape):
            raise CompileError(f"unsqueeze: dim {dim} out of range for shape {self.shape}")
        return self.reshape(shape[:dim] + [1] + shape[dim:])

    def squeeze(self, dim=None):
        shape = list(self.shape)
        if dim is None:
            return self.reshape([s for s in shape if s != 1])
        dim = self._dim(dim, "squeeze")
        if shape and shape[dim] == 1:
            del shape[dim]
        return self.reshape(shape)

    def expand(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
            shape = shape[0]
        own = (1,) * (len(shape) - self.ndim) + self.shape
        target = [o if s == -1 else s for s, o in zip(shape, own)]
        return self._call("broadcast_to", self._id, target)

    def __getitem__(self, key):
        return _index(self, key)


def _refuse_mask_index(t, mask):
    shape = list(mask.shape) if isinstance(mask, _tracing.Tensor) else list(np.shape(mask))
    raise CompileError(
        f"x[mask] with a boolean mask: the number of elements it selects from "
        f"{_type_text(t)} (mask shape {shape}) depends on the mask's values, and a traced "
        f"graph has static shapes, so boolean-mask indexing is not supported. Keep the "
        f"shape and zero the others: tilefuse.where(mask, x, 0) (then e.g. .sum(), or "
        f"divide by mask.sum() for a mean), or x.masked_fill(~mask, 0){_where()}")


def _index(t, key):
    """Basic indexing: ints, slices (positive steps), None, Ellipsis; an
    integer Tensor as the only key gathers rows (embedding lookup)."""
    keys = key if isinstance(key, tuple) else (key,)
    for k in keys:
        if isinstance(k, _tracing.Tensor) and k.dtype == "i1" or (
                isinstance(k, (np.ndarray, list)) and np.asarray(k).dtype == np.bool_):
            _refuse_mask_index(t, k)
    if isinstance(t, _tracing.Tensor) and isinstance(key, _tracing.Tensor):
        _user_location(t._tracer)
        return t._wrap(t._tracer.gather(t._id, key._id))
    if not isinstance(key, tuple):
        key = (key,)
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > t.ndim:
        raise CompileError(f"too many indices ({used}) for a tensor of shape {t.shape}")
    if any(k is Ellipsis for k in key):
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (t.ndim - used) + key[i + 1 :]
    key = key + (slice(None),) * (t.ndim - sum(1 for k in key if k is not None))
    start, limit, stride, out_shape = [], [], [], []
    dim = 0
    for k in key:
        if k is None:
            out_shape.append(1)
            continue
        size = t.shape[dim]
        if isinstance(k, slice):
            s, e, st = k.indices(size)
            if st < 1:
                raise CompileError(f"slice step must be positive, got {k.step}")
            e = max(e, s)
            start.append(s)
            limit.append(e)
            stride.append(st)
            out_shape.append((e - s + st - 1) // st)
        elif isinstance(k, (int, np.integer)):
            i = int(k) + size if k < 0 else int(k)
            if not 0 <= i < size:
                raise CompileError(f"index {k} is out of range for dimension {dim} of size {size}")
            start.append(i)
            limit.append(i + 1)
            stride.append(1)
        else:
            raise CompileError(f"unsupported index {k!r}; use ints, slices, None or ...")
        dim += 1
    out = t
    if (start, limit, stride) != ([0] * t.ndim, list(t.shape), [1] * t.ndim):
        out = t._call("slice", t._id, start, limit, stride)
    if tuple(out_shape) != out.shape:
        out = out.reshape(out_shape)
    return out
