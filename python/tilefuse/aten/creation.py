"""Tensors made from nothing but sizes and values (static shapes: built as
constants or fills)."""
import numpy as np

from .._tracing import Tensor
from . import _dtype_of, aten, converts, importer


def _fill_dtype(value):
    """PyTorch's dtype of a fill with no dtype given: bool, int64, else f32."""
    if isinstance(value, bool):
        return "i1"
    return "i64" if isinstance(value, int) else "f32"


@converts(aten.scalar_tensor)
def _scalar_tensor(value, dtype=None, layout=None, device=None, pin_memory=None):
    return importer().constant(np.array(value), _dtype_of(dtype))


@converts(aten.full)
def _full(size, value, dtype=None, layout=None, device=None, pin_memory=None):
    return importer().constant(np.full(tuple(size), value),
                                      _dtype_of(dtype, _fill_dtype(value)))


@converts(aten.full_like)
def _full_like(x, value, dtype=None, layout=None, device=None, pin_memory=None,
               memory_format=None):
    return importer().constant(np.full(x.shape, value), _dtype_of(dtype, x.dtype))


@converts(aten.fill.Scalar)
def _fill(x, value):
    return importer().constant(np.full(x.shape, value), x.dtype)


@converts(aten.fill.Tensor)
def _fill_tensor(x, value):
    return (x * 0 + value.to(x.dtype)) if x.ndim else value.to(x.dtype)


@converts(aten.zeros_like)
def _zeros_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _full_like(x, 0, dtype)


@converts(aten.ones_like)
def _ones_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _full_like(x, 1, dtype)


@converts(aten.zeros)
def _zeros(size, dtype=None, layout=None, device=None, pin_memory=None):
    return importer().constant(np.zeros(tuple(size)), _dtype_of(dtype))


@converts(aten.ones)
def _ones(size, dtype=None, layout=None, device=None, pin_memory=None):
    return importer().constant(np.ones(tuple(size)), _dtype_of(dtype))


@converts(aten.arange.start_step, aten.arange.start, aten.arange.default)
def _arange(*args, dtype=None, layout=None, device=None, pin_memory=None):
    values = np.arange(*args)
    default = "i64" if all(isinstance(a, int) for a in args) else "f32"
    return importer().constant(values, _dtype_of(dtype, default))


@converts(aten.empty_like, aten.empty_permuted, aten.empty.memory_format)
def _empty(*args, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None,
           **kw):
    """Uninitialised memory: only ever overwritten (bernoulli_), so zeros."""
    if isinstance(args[0], Tensor):
        shape, default = args[0].shape, args[0].dtype
    else:
        shape, default = tuple(args[0]), "f32"
    return importer().constant(np.zeros(shape), _dtype_of(dtype, default))


@converts(aten.new_empty_strided, aten.new_empty)
def _new_empty(x, size, *args, dtype=None, layout=None, device=None, pin_memory=None):
    """Uninitialised memory (strides are layout, which tilefuse chooses):
    zeros, as _empty."""
    return importer().constant(np.zeros(tuple(size)), _dtype_of(dtype, x.dtype))


@converts(aten.empty_strided)
def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    """Uninitialised memory (strides are layout, which tilefuse chooses):
    zeros, as _empty."""
    return importer().constant(np.zeros(tuple(size)), _dtype_of(dtype))


@converts(aten._efficientzerotensor)
def _zero_tensor(size, dtype=None, layout=None, device=None, pin_memory=None):
    return importer().constant(np.zeros(tuple(size)), _dtype_of(dtype))


@converts(aten.new_zeros)
def _new_zeros(x, size, dtype=None, layout=None, device=None, pin_memory=None):
    return importer().constant(np.zeros(tuple(size)), _dtype_of(dtype, x.dtype))


@converts(aten.new_ones)
def _new_ones(x, size, dtype=None, layout=None, device=None, pin_memory=None):
    return importer().constant(np.ones(tuple(size)), _dtype_of(dtype, x.dtype))


@converts(aten.new_full)
def _new_full(x, size, value, dtype=None, layout=None, device=None, pin_memory=None):
    return importer().constant(np.full(tuple(size), value), _dtype_of(dtype, x.dtype))
