"""The traced tensor's reductions: sum, mean, max/min (PyTorch's pairs),
amax/amin, argmax/argmin, and the dim checks they share."""
import math

import numpy as np

from . import _tracing
from ._core import CompileError
from ._dtypes import is_float
from ._location import _RETURN_TYPES, _user_location, _where


class ReductionMethods:
    """Mixed into tracing.Tensor."""

    __slots__ = ()

    def _dim(self, dim, what, rank=None):
        """`dim` normalised to [0, rank); CompileError when out of range."""
        rank = self.ndim if rank is None else rank
        if not -max(rank, 1) <= dim < max(rank, 1):
            raise CompileError(
                f"{what}: dim {dim} is out of range for a tensor of rank {rank} "
                f"(shape {list(self.shape)}){_where()}"
            )
        return dim % max(rank, 1)

    def _dims(self, dim, what=None):
        """The reduced dims; checked here only when `what` names a caller that
        reads shapes itself (the tracer checks the others, with location)."""
        if dim is None:
            return list(range(self.ndim))
        dims = list(dim) if isinstance(dim, (list, tuple)) else [dim]
        return dims if what is None else [self._dim(d, what) for d in dims]

    def sum(self, dim=None, keepdim=False):
        return self._call("reduce", "sum", self._id, self._dims(dim), keepdim)

    def mean(self, dim=None, keepdim=False):
        dims = self._dims(dim, "mean")
        count = int(np.prod([self.shape[d] for d in dims], dtype=np.int64))
        source = self if is_float(self.dtype) else self.to("f32")
        return source.sum(dims, keepdim) / float(count)

    def max(self, dim=None, keepdim=False):
        """As PyTorch: `x.max()` is the 0-d maximum; `x.max(dim)` is the pair
        `(values, indices)` along one int `dim` (first maximum on ties), the
        gradient of `values` going to the selected element only; `x.max(t)`
        with a tensor `t` is `maximum(x, t)`. For values only, over one or
        several dims, use `amax`."""
        return self._extreme("max", dim, keepdim)

    def min(self, dim=None, keepdim=False):
        """As PyTorch: `x.min()`, `x.min(dim)` -> `(values, indices)`,
        `x.min(t)` -> `minimum(x, t)`; see `max`."""
        return self._extreme("min", dim, keepdim)

    def amax(self, dim=(), keepdim=False):
        """Maximum over `dim` (an int or a list of ints; all dims by default).
        Ties share the gradient evenly (as PyTorch's amax)."""
        return self._call("reduce", "max", self._id, self._reduced_dims(dim), keepdim)

    def amin(self, dim=(), keepdim=False):
        """Minimum over `dim` (an int or a list of ints; all dims by default)."""
        return self._call("reduce", "min", self._id, self._reduced_dims(dim), keepdim)

    def argmax(self, dim=None, keepdim=False):
        """As PyTorch: index of the first maximum along `dim` (a NaN counts as
        the maximum); `dim=None` (the default): into the flattened tensor."""
        if not self.shape:
            return self._index_zeros([])
        if dim is None:
            return self._flat_index("argmax", keepdim)
        return self._call("argmax", self._id, dim, keepdim)

    def argmin(self, dim=None, keepdim=False):
        """As PyTorch: index of the first minimum along `dim` (a NaN counts as
        the minimum); `dim=None` (the default): into the flattened tensor."""
        if dim is None:
            return self._flat_index("argmin", keepdim)
        if isinstance(dim, (list, tuple)):
            raise CompileError(f"argmin: dim must be one int, got {dim!r}{_where()}")
        d = self._dim(dim, "argmin")
        if not self.shape:
            return self._index_zeros([])
        if is_float(self.dtype):
            # -x keeps NaN a NaN, which argmax takes as the extreme, and the
            # order of every other value reversed (ties stay ties).
            return (-self).argmax(d, keepdim)
        # Integers: -x overflows at the most negative value; take the first
        # position equal to the minimum instead.
        n = self.shape[d]
        low = self.amin(d, keepdim=True)
        pos = _tracing.where(self == low, self._iota(d), n)
        return pos.amin(d, keepdim)

    def _reduced_dims(self, dim):
        return self._dims(None if dim is None or (isinstance(dim, (list, tuple)) and not dim)
                          else dim)

    def _flat_index(self, what, keepdim):
        flat = self.reshape(-1)
        idx = getattr(flat, what)(0)
        return idx.reshape([1] * self.ndim) if keepdim else idx

    def _index_zeros(self, shape):
        _user_location(self._tracer)
        return self._wrap(self._tracer.full(0.0, "i64", list(shape)))

    def _iota(self, d):
        """0, 1, ..., n-1 (i64) along dim `d` of this tensor, shaped to
        broadcast against it."""
        n = self.shape[d]
        shape = [n] + [1] * (self.ndim - 1 - d)
        _user_location(self._tracer)
        return self._wrap(self._tracer.constant(np.arange(n, dtype=np.int64).reshape(shape)))

    def _extreme(self, what, dim, keepdim):
        if isinstance(dim, _tracing.Tensor):
            return self.maximum(dim) if what == "max" else self.minimum(dim)
        if dim is None:
            if keepdim:
                raise CompileError(
                    f"{what}(keepdim=True) needs a dim: x.{what}() reduces every dim to a 0-d "
                    f"tensor, as in PyTorch; use x.a{what}(keepdim=True) to keep them{_where()}")
            return self._call("reduce", what, self._id, self._dims(None), False)
        if isinstance(dim, (list, tuple)):
            raise CompileError(
                f"{what}(dim) takes one int dim and returns (values, indices), as in PyTorch; "
                f"got dim={dim!r}. For the {what}imum over several dims use "
                f"x.a{what}({list(dim)!r}){_where()}")
        if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
            raise CompileError(
                f"{what}: expected an int dim or a tensor, got {type(dim).__name__}{_where()}")
        d = self._dim(int(dim), what)
        result = _RETURN_TYPES[what]
        if not self.shape:  # 0-d: the value itself at index 0, as PyTorch
            return result(self, self._index_zeros([]))
        arg = self.argmax(d, True) if what == "max" else self.argmin(d, True)
        out_shape = list(self.shape)
        if keepdim:
            out_shape[d] = 1
        else:
            del out_shape[d]
        indices = arg if keepdim else arg.reshape(out_shape)
        if is_float(self.dtype):
            # The selected element only (not reduce_max, which splits the
            # gradient between ties): the gradient reaches x[indices] alone,
            # as in PyTorch. A NaN or +-inf at the index is returned as is.
            hit = self._iota(d) == arg
            # The max of the selected element and -infs: that element exactly
            # (a -0.0 or NaN included), its gradient undivided unless it is
            # itself -inf.
            values = _tracing.where(hit, self, -math.inf).amax(d, keepdim)
        else:
            values = self._call("reduce", what, self._id, [d], keepdim)
        return result(values, indices)
