"""Tracing: run a Python function on symbolic tensors to build a graph."""
import collections
import inspect
import json
import math
import os
import sys
import threading

import numpy as np

from . import _core, _pytree
from ._core import CompileError
from ._dtypes import dtype_name, is_float, numpy_dtype

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_active = []  # stack of tracers; ops on Tensors use their own tracer


def _user_frame():
    """The innermost stack frame outside this package (the user's code)."""
    frame = sys._getframe(1)
    while frame is not None and os.path.dirname(
        os.path.abspath(frame.f_code.co_filename)
    ).startswith(_PACKAGE_DIR):
        frame = frame.f_back
    return frame


# Depth of open `tilefuse.autocast(False)` regions (per thread: traces are
# per thread).
_AUTOCAST = threading.local()


def _autocast_enabled():
    return getattr(_AUTOCAST, "off", 0) == 0


class autocast:
    """`with tilefuse.autocast(False):` keeps the ops traced inside in f32
    when the graph is compiled with a low precision (`precision="bf16"`),
    as `torch.autocast(enabled=False)`. `autocast(True)` inside such a
    region turns the policy back on for its own ops."""

    def __init__(self, enabled=True):
        self.enabled = bool(enabled)

    def __enter__(self):
        self._saved = getattr(_AUTOCAST, "off", 0)
        _AUTOCAST.off = 0 if self.enabled else self._saved + 1
        return self

    def __exit__(self, *exc):
        _AUTOCAST.off = self._saved
        return False


# The user's line that made each traced value, per open trace ({id(tracer):
# {value id: "file:line"}}), so errors found after tracing (a loss that is
# not 0-d) can name the line that computed the value.
_ORIGINS = {}
_LAST_LINE = threading.local()


def _user_location(tracer):
    """Tags the next ops with the user's file and line (and whether
    autocast applies to them)."""
    tracer.set_autocast(_autocast_enabled())
    frame = _user_frame()
    if frame is None:
        tracer.clear_location()
        _LAST_LINE.text = None
    else:
        tracer.set_location(frame.f_code.co_filename, frame.f_lineno)
        _LAST_LINE.text = f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _where():
    """' (at file:line)' of the user's frame, for errors raised in Python."""
    frame = _user_frame()
    return "" if frame is None else f" (at {frame.f_code.co_filename}:{frame.f_lineno})"


def _return_type(name):
    """A `(values, indices)` namedtuple like `torch.return_types.<name>`."""
    def __array__(self, dtype=None, copy=None):
        raise CompileError(_pair_misuse(name))

    base = collections.namedtuple(name, ["values", "indices"])
    return type(name, (base,), {"__slots__": (), "__array__": __array__,
                                "__module__": "tilefuse.return_types"})


def _pair_misuse(name):
    return (f"x.{name}(dim) returns a (values, indices) pair, as in PyTorch, not a tensor; "
            f"use x.{name}(dim).values (or [0]) for the values, or x.a{name}(dim)"
            f"{_where()}")


_RETURN_TYPES = {"max": _return_type("max"), "min": _return_type("min")}


class Tensor:
    """A symbolic tensor inside `tilefuse.trace`. Supports the usual
    operators and PyTorch-style methods; every call appends graph ops."""

    __slots__ = ("_tracer", "_id")
    __array_priority__ = 1000  # numpy array (op) Tensor -> Tensor's reflected op

    def __init__(self, tracer, value_id):
        self._tracer = tracer
        self._id = value_id
        origins = _ORIGINS.get(id(tracer))
        if origins is not None and value_id not in origins:
            origins[value_id] = getattr(_LAST_LINE, "text", None)

    # -- metadata ---------------------------------------------------------
    @property
    def shape(self):
        return tuple(self._tracer.shape(self._id))

    @property
    def dtype(self):
        return self._tracer.dtype(self._id)

    @property
    def ndim(self):
        return len(self.shape)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def __len__(self):
        if not self.shape:
            raise CompileError("len() of a 0-d tensor")
        return self.shape[0]

    def dim(self):
        """The number of dimensions (ndim), as PyTorch's Tensor.dim()."""
        return self.ndim

    def item(self):
        raise CompileError(_no_value("x.item()", self))

    def __float__(self):
        raise CompileError(_no_value("float(x)", self))

    def __int__(self):
        raise CompileError(_no_value("int(x)", self))

    def __repr__(self):
        return f"Tensor({self.dtype}{list(self.shape)})"

    def __bool__(self):
        raise CompileError(
            "a traced tensor has no truth value: the graph is built once for every input, "
            "so Python control flow cannot depend on tensor values; use tilefuse.where"
        )

    # -- helpers ----------------------------------------------------------
    def _wrap(self, value_id):
        return Tensor(self._tracer, value_id)

    def _call(self, method, *args):
        _user_location(self._tracer)
        return self._wrap(getattr(self._tracer, method)(*args))

    def _lift(self, other):
        return _lift(self._tracer, other, like=self)

    def _binary(self, op, other, reverse=False):
        other = self._lift(other)
        a, b = (other, self) if reverse else (self, other)
        if a.dtype == "i1" and b.dtype == "i1" and op in _BOOL_BINARY:
            return _BOOL_BINARY[op](a, b)
        return self._call("binary", op, a._id, b._id)

    def _logical(self, op, other, reverse=False):
        """`&`, `|`, `^`: logical on boolean tensors (as PyTorch's bitwise
        ops on bool); integer tensors would need bitwise ops, which the
        graph does not have."""
        other = self._lift(other)
        a, b = (other, self) if reverse else (self, other)
        if a.dtype != "i1" or b.dtype != "i1":
            symbol = {"and": "&", "or": "|", "xor": "^"}[op]
            raise CompileError(
                f"{symbol} (bitwise_{op}) of {_type_text(a)} and {_type_text(b)}: only boolean "
                f"tensors are supported (logical {op}); the graph has no bitwise integer or "
                f"float ops. For masks, compare first, e.g. (x > 0) {symbol} (y < 1); for "
                f"0/1 integer flags use (a != 0) {symbol} (b != 0){_where()}")
        return _LOGICAL[op](a, b)

    # -- operators --------------------------------------------------------
    def __add__(self, o): return self._binary("add", o)
    def __radd__(self, o): return self._binary("add", o, True)
    def __sub__(self, o): return self._binary("sub", o)
    def __rsub__(self, o): return self._binary("sub", o, True)
    def __mul__(self, o): return self._binary("mul", o)
    def __rmul__(self, o): return self._binary("mul", o, True)
    def __truediv__(self, o): return self._binary("div", o)
    def __rtruediv__(self, o): return self._binary("div", o, True)
    def __floordiv__(self, o): return _composites.floor_divide(self, o)
    def __rfloordiv__(self, o): return _composites.floor_divide(self._lift(o), self)
    def __mod__(self, o): return _composites.remainder(self, o)
    def __rmod__(self, o): return _composites.remainder(self._lift(o), self)
    def __pow__(self, o): return self._binary("pow", o)
    def __rpow__(self, o): return self._binary("pow", o, True)
    def __eq__(self, o): return self._binary("eq", o)
    def __ne__(self, o): return self._binary("ne", o)
    def __lt__(self, o): return self._binary("lt", o)
    def __le__(self, o): return self._binary("le", o)
    def __gt__(self, o): return self._binary("gt", o)
    def __ge__(self, o): return self._binary("ge", o)
    def __and__(self, o): return self._logical("and", o)
    def __rand__(self, o): return self._logical("and", o, True)
    def __or__(self, o): return self._logical("or", o)
    def __ror__(self, o): return self._logical("or", o, True)
    def __xor__(self, o): return self._logical("xor", o)
    def __rxor__(self, o): return self._logical("xor", o, True)

    def __invert__(self):
        """`~x`: logical not of a boolean tensor; bitwise not (-x - 1, two's
        complement) of an integer one, as PyTorch."""
        if self.dtype == "i1":
            return where(self, False, True)
        if is_float(self.dtype):
            raise CompileError(
                f"~ (bitwise_not) of a floating-point {_type_text(self)} is not defined (as in "
                f"PyTorch); for a mask use ~(x > 0) or (x <= 0){_where()}")
        return -self - 1

    def __neg__(self):
        if self.dtype == "i1":
            raise CompileError(
                f"- (negation) of a boolean {_type_text(self)} is not supported, as in "
                f"PyTorch; to invert a mask use ~mask or mask.logical_not(){_where()}")
        return self._call("unary", "neg", self._id)

    def __abs__(self): return self._call("unary", "abs", self._id)
    __hash__ = object.__hash__

    def __matmul__(self, o):
        o = self._lift(o)
        return self._call("matmul", self._id, o._id)

    def __rmatmul__(self, o):
        o = self._lift(o)
        return self._call("matmul", o._id, self._id)

    # -- elementwise methods ---------------------------------------------
    def exp(self): return self._call("unary", "exp", self._id)
    def log(self): return self._call("unary", "log", self._id)
    def tanh(self): return self._call("unary", "tanh", self._id)
    def sqrt(self): return self._call("unary", "sqrt", self._id)
    def rsqrt(self): return self._call("unary", "rsqrt", self._id)
    def abs(self): return self._call("unary", "abs", self._id)
    def neg(self): return self._call("unary", "neg", self._id)
    def sigmoid(self): return self._call("unary", "sigmoid", self._id)
    def erf(self): return self._call("unary", "erf", self._id)
    def relu(self): return self._call("unary", "relu", self._id)
    def pow(self, exponent): return self ** exponent
    def maximum(self, o): return self._binary("maximum", o)
    def minimum(self, o): return self._binary("minimum", o)
    def log1p(self): return _composites.log1p(self)
    def expm1(self): return _composites.expm1(self)
    def floor(self): return _composites.floor(self)
    def ceil(self): return _composites.ceil(self)
    def trunc(self): return _composites.trunc(self)
    def fmod(self, o): return _composites.fmod(self, o)
    def remainder(self, o): return _composites.remainder(self, o)

    def logical_not(self):
        return where(_truth(self), False, True)

    def logical_and(self, o):
        return _truth(self)._logical("and", _truth(self._lift(o)))

    def logical_or(self, o):
        return _truth(self)._logical("or", _truth(self._lift(o)))

    def logical_xor(self, o):
        return _truth(self)._logical("xor", _truth(self._lift(o)))

    def detach(self):
        """The same values with no gradient flowing back (PyTorch's detach)."""
        return _composites.detach(self)

    def clamp(self, min=None, max=None):
        """PyTorch's clamp (NaN stays NaN; the gradient passes at the bounds)."""
        return _composites.clamp(self, min, max)

    clip = clamp

    def logsumexp(self, dim, keepdim=False):
        return _composites.logsumexp(self, dim, keepdim)

    def var(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        return _composites.var(self, dim, unbiased, keepdim, correction)

    def std(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        return _composites.std(self, dim, unbiased, keepdim, correction)

    def cumsum(self, dim):
        return _composites.cumsum(self, dim)

    def split(self, split_size_or_sections, dim=0):
        return _composites.split(self, split_size_or_sections, dim)

    def chunk(self, chunks, dim=0):
        return _composites.chunk(self, chunks, dim)

    def flip(self, dims):
        return _composites.flip(self, dims)

    def to(self, dtype):
        return self._call("cast", self._id, dtype_name(dtype))

    def float(self):
        return self.to("f32")

    def masked_fill(self, mask, value):
        return where(mask, value, self)

    # -- reductions --------------------------------------------------------
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
        pos = where(self == low, self._iota(d), n)
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
        if isinstance(dim, Tensor):
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
            values = where(hit, self, -math.inf).amax(d, keepdim)
        else:
            values = self._call("reduce", what, self._id, [d], keepdim)
        return result(values, indices)

    # -- layout ------------------------------------------------------------
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

    # -- numpy ------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise CompileError(
            f"np.asarray/np.array of a traced tensor: it has no values while tracing (the "
            f"graph is built once for every input); return it from the traced function to "
            f"get its value, or use numpy functions on it (np.exp(t), np.sum(t, 0), ...), "
            f"which build graph ops{_where()}")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _numpy_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        impl = _NUMPY_FUNCTIONS.get(func)
        if impl is None:
            raise CompileError(
                f"numpy function {_np_name(func)} is not supported on traced tensors; use "
                f"the Tensor methods (x.sum, x.amax, x.reshape, x.permute, ...), "
                f"tilefuse.functional or tilefuse.where/cat/stack{_where()}")
        return impl(*args, **kwargs)


def _type_text(t):
    """`tensor<3x4xf32>`, as the tracer's own messages write types."""
    return "tensor<" + "".join(f"{s}x" for s in t.shape) + f"{t.dtype}>"


def _no_value(what, t):
    return (f"{what} of a traced {_type_text(t)}: a traced tensor has no value while tracing "
            f"(the graph is built once, for every input), so it cannot become a Python "
            f"number. Keep the computation in tensors (tilefuse.where instead of an `if` on "
            f"the value; a 0-d tensor broadcasts like a number), or return the tensor from "
            f"the traced function and read its value from the result{_where()}")


def _truth(t):
    """A boolean tensor: `t` itself, or t != 0 (PyTorch's logical_* ops)."""
    return t if t.dtype == "i1" else t != 0


def _bool_sub(a, b):
    raise CompileError(
        f"- (subtraction) of two boolean tensors ({_type_text(a)}, {_type_text(b)}) is not "
        f"supported, as in PyTorch; to invert a mask use ~mask, for 'a and not b' use "
        f"a & ~b, for 'a differs from b' use a ^ b{_where()}")


# Logical ops of boolean tensors, from select (the graph has no bitwise ops).
_LOGICAL = {
    "and": lambda a, b: where(a, b, False),
    "or": lambda a, b: where(a, True, b),
    "xor": lambda a, b: a != b,
}
# PyTorch's arithmetic of two boolean tensors stays boolean: + is or, * is
# and. Orderings (False < True) are written as logic too: compiled code
# would otherwise compare i1 values as signed integers (True as -1).
_BOOL_BINARY = {
    "add": _LOGICAL["or"], "mul": _LOGICAL["and"], "maximum": _LOGICAL["or"],
    "minimum": _LOGICAL["and"], "sub": _bool_sub,
    "lt": lambda a, b: where(a, False, b), "le": lambda a, b: where(a, b, True),
    "gt": lambda a, b: where(b, False, a), "ge": lambda a, b: where(b, a, True),
}


def _lift(tracer, x, like=None):
    """Turns a Python scalar or numpy array into a Tensor of `tracer`."""
    if isinstance(x, Tensor):
        if x._tracer is not tracer:
            raise CompileError("a tensor from another trace was used in this one")
        return x
    for name, kind in _RETURN_TYPES.items():
        if isinstance(x, kind):
            raise CompileError(_pair_misuse(name))
    if isinstance(x, (bool, np.bool_)):
        dtype = "i1" if like is None or like.dtype == "i1" else like.dtype
        return Tensor(tracer, tracer.full(float(bool(x)), dtype, []))
    if isinstance(x, (int, np.integer)):
        dtype = "i64" if like is None or like.dtype == "i1" else like.dtype
        if abs(int(x)) > 2**53 and not is_float(dtype):
            # graph.full holds an f64: exact integers beyond 2^53 need a constant.
            return Tensor(tracer, tracer.constant(np.array(int(x), dtype=numpy_dtype(dtype))))
        return Tensor(tracer, tracer.full(float(x), dtype, []))
    if isinstance(x, (float, np.floating)):
        dtype = like.dtype if like is not None and is_float(like.dtype) else "f32"
        return Tensor(tracer, tracer.full(float(x), dtype, []))
    arr = np.asarray(x)
    if arr.dtype == object:
        raise CompileError(f"cannot use a {type(x).__name__} as a tensor")
    return Tensor(tracer, tracer.constant(arr))


def _refuse_mask_index(t, mask):
    shape = list(mask.shape) if isinstance(mask, Tensor) else list(np.shape(mask))
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
        if isinstance(k, Tensor) and k.dtype == "i1" or (
                isinstance(k, (np.ndarray, list)) and np.asarray(k).dtype == np.bool_):
            _refuse_mask_index(t, k)
    if isinstance(t, Tensor) and isinstance(key, Tensor):
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


def where(cond, a, b):
    """`a` where `cond` else `b`, with broadcasting."""
    base = next((x for x in (cond, a, b) if isinstance(x, Tensor)), None)
    if base is None:
        raise CompileError("where: at least one argument must be a traced tensor")
    tr = base._tracer
    like = next((x for x in (a, b) if isinstance(x, Tensor)), None)
    c, x, y = _lift(tr, cond), _lift(tr, a, like), _lift(tr, b, like)
    _user_location(tr)
    return Tensor(tr, tr.where(c._id, x._id, y._id))


def checkpoint(fn, *args, **kwargs):
    """`fn(*args, **kwargs)`, with its activations recomputed in the backward
    pass instead of kept from the forward pass (torch.utils.checkpoint):
    differentiation reruns the ops `fn` traced where the backward pass
    reaches them, so only the region's inputs live across the step. Use it
    around a transformer block to trade a second forward of the block for
    its activations' memory. Outside a trace (no traced tensor among the
    arguments) it just calls `fn`."""
    leaves, _ = _pytree.flatten([list(args), dict(kwargs)])
    base = next((x for x in leaves if isinstance(x, Tensor)), None)
    if base is None:
        return fn(*args, **kwargs)
    tr = base._tracer
    tr.begin_checkpoint()
    try:
        return fn(*args, **kwargs)
    finally:
        tr.end_checkpoint()


def cat(tensors, dim=0):
    tensors = list(tensors)
    base = next((x for x in tensors if isinstance(x, Tensor)), None)
    if base is None:
        raise CompileError("cat: expects a non-empty list with at least one traced tensor")
    tr = base._tracer
    ids = [_lift(tr, x)._id for x in tensors]
    _user_location(tr)
    return Tensor(tr, tr.concat(ids, dim))


def stack(tensors, dim=0):
    tensors = list(tensors)
    base = next((x for x in tensors if isinstance(x, Tensor)), None)
    if base is None:
        raise CompileError("stack: expects a non-empty list with at least one traced tensor")
    return cat([_lift(base._tracer, t).unsqueeze(dim) for t in tensors], dim)


# ---------------------------------------------------------------------------
# numpy functions on traced tensors (__array_ufunc__, __array_function__)
# ---------------------------------------------------------------------------
def _np_name(func):
    module = getattr(func, "__module__", None) or "numpy"
    name = getattr(func, "__name__", repr(func))
    module = "np" + module[len("numpy"):] if module.startswith("numpy") else module
    return f"{module}.{name}"


_UFUNC_BINARY = {
    np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "div",
    np.power: "pow", np.maximum: "maximum", np.minimum: "minimum", np.equal: "eq",
    np.not_equal: "ne", np.less: "lt", np.less_equal: "le", np.greater: "gt",
    np.greater_equal: "ge",
}
_UFUNC_UNARY = {np.negative: "neg", np.absolute: "abs", np.exp: "exp", np.log: "log",
                np.tanh: "tanh", np.sqrt: "sqrt"}
# ufuncs with a Tensor method of the same meaning.
_UFUNC_METHOD = {np.log1p: "log1p", np.expm1: "expm1", np.floor: "floor", np.ceil: "ceil",
                 np.trunc: "trunc"}
_UFUNC_BINARY_METHOD = {np.floor_divide: "__floordiv__", np.remainder: "__mod__",
                        np.fmod: "fmod"}
_UFUNC_REDUCE_HINT = {np.add: "x.sum(dim)", np.maximum: "x.amax(dim)",
                      np.minimum: "x.amin(dim)"}


def _numpy_ufunc(ufunc, method, inputs, kwargs):
    name = f"np.{ufunc.__name__}"
    if method != "__call__":
        hint = _UFUNC_REDUCE_HINT.get(ufunc) if method == "reduce" else None
        raise CompileError(
            f"{name}.{method} is not supported on traced tensors; "
            + (f"use {hint}" if hint else f"call {name}(...) elementwise, or the Tensor "
               f"methods (x.sum, x.amax, ...)") + _where())
    if kwargs.get("out") is not None:
        raise CompileError(
            f"{name}(..., out=...) is not supported: a traced tensor cannot be written in "
            f"place; use the returned tensor{_where()}")
    extra = sorted(k for k in kwargs if k != "out")
    if extra:
        raise CompileError(
            f"{name}(..., {extra[0]}=...) is not supported on traced tensors; call "
            f"{name} with tensors only (cast with x.to(dtype)){_where()}")
    if ufunc in _UFUNC_BINARY_METHOD:
        a, b = inputs
        if not isinstance(a, Tensor):
            a = b._lift(a)
        return getattr(a, _UFUNC_BINARY_METHOD[ufunc])(b)
    if ufunc in _UFUNC_BINARY or ufunc is np.matmul:
        a, b = inputs
        if ufunc is np.matmul:
            return a @ b if isinstance(a, Tensor) else b.__rmatmul__(a)
        op = _UFUNC_BINARY[ufunc]
        return a._binary(op, b) if isinstance(a, Tensor) else b._binary(op, a, reverse=True)
    x = inputs[0] if len(inputs) == 1 else None
    if x is not None and ufunc in _UFUNC_UNARY:
        return x._call("unary", _UFUNC_UNARY[ufunc], x._id)
    if x is not None and ufunc in _UFUNC_METHOD:
        return getattr(x, _UFUNC_METHOD[ufunc])()
    if x is not None and ufunc is np.positive:
        return x
    if x is not None and ufunc is np.square:
        return x * x
    if x is not None and ufunc is np.reciprocal and is_float(x.dtype):
        return 1.0 / x
    supported = sorted(f.__name__ for f in list(_UFUNC_BINARY) + list(_UFUNC_UNARY) +
                       list(_UFUNC_METHOD) + list(_UFUNC_BINARY_METHOD)) + [
        "matmul", "positive", "reciprocal (floats)", "square"]
    raise CompileError(
        f"numpy function {name} is not supported on traced tensors; use the Tensor "
        f"methods and tilefuse.functional (x.exp(), x.sigmoid(), F.relu(x), ...). numpy "
        f"ufuncs that work: {', '.join(supported)}{_where()}")


_NUMPY_FUNCTIONS = {}
_NOVALUE = object()  # numpy passes only the arguments given: this default means "not given"


def _implements(*funcs):
    def register(impl):
        for f in funcs:
            _NUMPY_FUNCTIONS[f] = impl
        return impl
    return register


def _np_refuse(fname, **given):
    for key, value in given.items():
        if value is not _NOVALUE and value is not None:
            why = ("a traced tensor cannot be written in place; use the returned tensor"
                   if key == "out" else "leave it out")
            raise CompileError(f"np.{fname}(..., {key}=...) is not supported on traced "
                               f"tensors; {why}{_where()}")


def _np_tensor(x, fname):
    if not isinstance(x, Tensor):
        raise CompileError(f"np.{fname}: expects a traced tensor as its array argument, got "
                           f"{type(x).__name__}{_where()}")
    return x


def _np_axes(a, axis, fname):
    if axis is None:
        return None
    axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    return [a._dim(int(d), f"np.{fname}") for d in axes]


def _np_keep(keepdims):
    return False if keepdims is _NOVALUE else bool(keepdims)


@_implements(np.sum)
def _np_sum(a, axis=None, dtype=None, out=None, keepdims=_NOVALUE, initial=_NOVALUE,
            where=_NOVALUE):
    _np_refuse("sum", out=out, initial=initial, where=where)
    a = _np_tensor(a, "sum")
    if dtype is not None:
        a = a.to(dtype)
    return a.sum(_np_axes(a, axis, "sum"), _np_keep(keepdims))


@_implements(np.mean)
def _np_mean(a, axis=None, dtype=None, out=None, keepdims=_NOVALUE, *, where=_NOVALUE):
    _np_refuse("mean", out=out, where=where)
    a = _np_tensor(a, "mean")
    if dtype is not None:
        a = a.to(dtype)
    return a.mean(_np_axes(a, axis, "mean"), _np_keep(keepdims))


def _np_extreme(what):
    def impl(a, axis=None, out=None, keepdims=_NOVALUE, initial=_NOVALUE, where=_NOVALUE):
        _np_refuse(what, out=out, initial=initial, where=where)
        a = _np_tensor(a, what)
        axes = _np_axes(a, axis, what)
        if axes == []:  # numpy: reducing over no axis is the identity
            return a
        return getattr(a, "amax" if what == "max" else "amin")(
            () if axes is None else axes, _np_keep(keepdims))
    return impl


_implements(np.max, np.amax)(_np_extreme("max"))
_implements(np.min, np.amin)(_np_extreme("min"))


def _np_arg(what):
    def impl(a, axis=None, out=None, *, keepdims=_NOVALUE):
        _np_refuse(what, out=out)
        a = _np_tensor(a, what)
        dim = None if axis is None else a._dim(int(axis), f"np.{what}")
        return getattr(a, what)(dim, _np_keep(keepdims))
    return impl


_implements(np.argmax)(_np_arg("argmax"))
_implements(np.argmin)(_np_arg("argmin"))


@_implements(np.reshape)
def _np_reshape(a, shape=_NOVALUE, order="C", *, newshape=_NOVALUE, copy=None):
    shape = newshape if shape is _NOVALUE else shape
    if shape is _NOVALUE:
        raise CompileError(f"np.reshape: missing the new shape{_where()}")
    if order != "C":
        raise CompileError(f"np.reshape(..., order={order!r}) is not supported on traced "
                           f"tensors; only row-major ('C') order{_where()}")
    a = _np_tensor(a, "reshape")
    return a.reshape([shape] if isinstance(shape, (int, np.integer)) else list(shape))


@_implements(np.ravel)
def _np_ravel(a, order="C"):
    return _np_reshape(a, -1, order)


@_implements(np.transpose)
def _np_transpose(a, axes=None):
    a = _np_tensor(a, "transpose")
    if axes is None:
        return a.permute(list(reversed(range(a.ndim))))
    return a.permute([int(d) for d in axes])


@_implements(np.swapaxes)
def _np_swapaxes(a, axis1, axis2):
    return _np_tensor(a, "swapaxes").transpose(int(axis1), int(axis2))


@_implements(np.moveaxis)
def _np_moveaxis(a, source, destination):
    a = _np_tensor(a, "moveaxis")
    src = _np_axes(a, source, "moveaxis")
    dst = _np_axes(a, destination, "moveaxis")
    if len(src) != len(dst):
        raise CompileError(f"np.moveaxis: source and destination must have the same number "
                           f"of axes, got {source!r} and {destination!r}{_where()}")
    order = [d for d in range(a.ndim) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return a.permute(order)


@_implements(np.squeeze)
def _np_squeeze(a, axis=None):
    a = _np_tensor(a, "squeeze")
    axes = _np_axes(a, axis, "squeeze")
    if axes is None:
        return a.reshape([s for s in a.shape if s != 1])
    for d in axes:
        if a.shape[d] != 1:
            raise CompileError(f"np.squeeze: cannot select an axis to squeeze out which has "
                               f"size not equal to one (axis {d} of shape {list(a.shape)})"
                               f"{_where()}")
    return a.reshape([s for d, s in enumerate(a.shape) if d not in axes])


@_implements(np.expand_dims)
def _np_expand_dims(a, axis):
    a = _np_tensor(a, "expand_dims")
    axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    rank = a.ndim + len(axes)
    norm = []
    for d in axes:
        if not -rank <= int(d) < rank:
            raise CompileError(f"np.expand_dims: axis {d} is out of range for the result's "
                               f"rank {rank}{_where()}")
        norm.append(int(d) % rank)
    if len(set(norm)) != len(norm):
        raise CompileError(f"np.expand_dims: repeated axis in {axis!r}{_where()}")
    it = iter(a.shape)
    return a.reshape([1 if d in norm else next(it) for d in range(rank)])


@_implements(np.broadcast_to)
def _np_broadcast_to(array, shape, subok=False):
    a = _np_tensor(array, "broadcast_to")
    shape = [shape] if isinstance(shape, (int, np.integer)) else [int(s) for s in shape]
    return a._call("broadcast_to", a._id, shape)


@_implements(np.clip)
def _np_clip(a, a_min=_NOVALUE, a_max=_NOVALUE, out=None, *, min=_NOVALUE, max=_NOVALUE,
             **kwargs):
    _np_refuse("clip", out=out, **{k: v for k, v in kwargs.items()})
    lo = min if a_min is _NOVALUE else a_min
    hi = max if a_max is _NOVALUE else a_max
    lo = None if lo is _NOVALUE else lo
    hi = None if hi is _NOVALUE else hi
    if isinstance(a, Tensor):
        out = a
    else:  # a bound is the traced tensor
        out = _lift(next(x for x in (lo, hi) if isinstance(x, Tensor))._tracer, a)
    if lo is not None:  # numpy: minimum(maximum(a, a_min), a_max)
        out = out.maximum(lo)
    if hi is not None:
        out = out.minimum(hi)
    return out


@_implements(np.var, np.std)
def _np_var_std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NOVALUE, *,
                where=_NOVALUE, mean=_NOVALUE, correction=_NOVALUE):
    raise CompileError(f"np.var/np.std on a traced tensor: numpy defaults to ddof=0 and "
                       f"PyTorch to correction=1; say which with x.var(dim, correction=...) "
                       f"or x.std(dim, correction=...){_where()}")


@_implements(np.cumsum)
def _np_cumsum(a, axis=None, dtype=None, out=None):
    _np_refuse("cumsum", out=out, dtype=dtype)
    a = _np_tensor(a, "cumsum")
    return a.reshape(-1).cumsum(0) if axis is None else a.cumsum(int(axis))


@_implements(np.flip)
def _np_flip(m, axis=None):
    m = _np_tensor(m, "flip")
    return m.flip(list(range(m.ndim)) if axis is None else axis)


@_implements(np.where)
def _np_where(condition, x=_NOVALUE, y=_NOVALUE):
    if x is _NOVALUE and y is _NOVALUE:
        raise CompileError(
            "np.where(condition) with one argument returns the indices of the nonzero "
            "elements, whose number depends on the values; a traced graph has static "
            f"shapes. Use np.where(condition, x, y) or tilefuse.where{_where()}")
    if x is _NOVALUE or y is _NOVALUE:
        raise CompileError(f"np.where: either both or neither of x and y should be given"
                           f"{_where()}")
    if not isinstance(condition, Tensor) and np.asarray(condition).dtype != np.bool_:
        condition = np.asarray(condition).astype(bool)
    if isinstance(condition, Tensor) and condition.dtype != "i1":
        condition = condition != 0
    return where(condition, x, y)


def _np_sequence(arrays, fname):
    arrays = list(arrays)
    base = next((x for x in arrays if isinstance(x, Tensor)), None)
    if base is None:
        raise CompileError(f"np.{fname}: expects a sequence holding traced tensors{_where()}")
    return [_lift(base._tracer, x) for x in arrays]


@_implements(np.concatenate)
def _np_concatenate(arrays, axis=0, out=None, *, dtype=None, casting=None):
    _np_refuse("concatenate", out=out, dtype=dtype, casting=casting)
    arrays = _np_sequence(arrays, "concatenate")
    if axis is None:
        return cat([t.reshape(-1) for t in arrays], 0)
    return cat(arrays, int(axis))


@_implements(np.stack)
def _np_stack(arrays, axis=0, out=None, *, dtype=None, casting=None):
    _np_refuse("stack", out=out, dtype=dtype, casting=casting)
    return stack(_np_sequence(arrays, "stack"), int(axis))


@_implements(np.dot)
def _np_dot(a, b, out=None):
    _np_refuse("dot", out=out)
    base = a if isinstance(a, Tensor) else b
    a, b = _lift(base._tracer, a, base), _lift(base._tracer, b, base)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.ndim > 2 or b.ndim > 2:
        raise CompileError(
            f"np.dot of a {a.ndim}-d and a {b.ndim}-d array sums over the last axis of a and "
            f"the second-to-last of b for every pair of their other indices, which is not "
            f"matmul's batching; use np.matmul / @ (batched) or np.einsum to say which dims "
            f"pair up{_where()}")
    return a @ b


@_implements(np.shape)
def _np_shape(a):
    return _np_tensor(a, "shape").shape


@_implements(np.ndim)
def _np_ndim(a):
    return _np_tensor(a, "ndim").ndim


@_implements(np.size)
def _np_size(a, axis=None):
    a = _np_tensor(a, "size")
    return a.numel() if axis is None else a.shape[a._dim(int(axis), "np.size")]


def _np_filled(fname, fill):
    def impl(a, *args, dtype=None, order="K", subok=True, shape=None, device=None):
        value = fill if fill is not None else (args[0] if args else _NOVALUE)
        if value is _NOVALUE:
            raise CompileError(f"np.{fname}: missing fill_value{_where()}")
        if isinstance(value, Tensor):
            raise CompileError(f"np.{fname}: the fill value must be a number, not a traced "
                               f"tensor; use x.expand(shape){_where()}")
        rest = args[1:] if fill is None else args
        if rest:
            dtype = rest[0]
        a = _np_tensor(a, fname)
        dt = a.dtype if dtype is None else dtype_name(dtype)
        dims = a.shape if shape is None else ([shape] if isinstance(shape, (int, np.integer))
                                               else list(shape))
        _user_location(a._tracer)
        return a._wrap(a._tracer.full(float(value), dt, [int(s) for s in dims]))
    return impl


_implements(np.zeros_like)(_np_filled("zeros_like", 0.0))
_implements(np.ones_like)(_np_filled("ones_like", 1.0))
_implements(np.full_like)(_np_filled("full_like", None))


@_implements(np.einsum)
def _np_einsum(*operands, out=None, optimize=False, **kwargs):
    """Contractions written as transposes, reshapes and (batched) matmuls,
    one pair of operands at a time; `optimize` only picks an order in numpy,
    so it is accepted and ignored."""
    _np_refuse("einsum", out=out, **kwargs)
    if not operands or not isinstance(operands[0], str):
        raise CompileError("np.einsum on traced tensors takes a subscripts string first "
                           f"(the sublist form is not supported){_where()}")
    spec, arrays = operands[0].replace(" ", ""), list(operands[1:])
    if "." in spec:
        raise CompileError(f"np.einsum: '...' (ellipsis) is not supported on traced tensors; "
                           f"write every dim's letter out, e.g. 'bij,bjk->bik'{_where()}")
    lhs, arrow, rhs = spec.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(arrays):
        raise CompileError(f"np.einsum: {spec!r} names {len(inputs)} operands, got "
                           f"{len(arrays)}{_where()}")
    base = next((x for x in arrays if isinstance(x, Tensor)), None)
    tensors = [_lift(base._tracer, x) for x in arrays]
    counts = collections.Counter("".join(inputs))
    output = rhs if arrow else "".join(sorted(c for c, n in counts.items() if n == 1))
    sizes = {}
    for labels, t in zip(inputs, tensors):
        if not all(c.isalpha() for c in labels) or len(labels) != t.ndim:
            raise CompileError(f"np.einsum: subscripts {labels!r} do not fit an operand of "
                               f"shape {list(t.shape)}{_where()}")
        if len(set(labels)) != len(labels):
            raise CompileError(
                f"np.einsum: a letter repeated within one operand ({labels!r}: a diagonal or "
                f"trace) is not supported on traced tensors{_where()}")
        for c, n in zip(labels, t.shape):
            if sizes.get(c, 1) != 1 and n not in (1, sizes[c]):
                raise CompileError(f"np.einsum: dim {c!r} has sizes {sizes[c]} and {n} in "
                                   f"{spec!r}{_where()}")
            sizes[c] = n if sizes.get(c, 1) == 1 else sizes[c]
    if len(set(output)) != len(output) or any(c not in counts for c in output):
        raise CompileError(f"np.einsum: output subscripts {output!r} must be distinct letters "
                           f"of the inputs{_where()}")
    ops = []
    for labels, t in zip(inputs, tensors):
        want = [sizes[c] for c in labels]
        ops.append((t if list(t.shape) == want else t.expand(want), labels))

    def drop(t, labels, keep):
        """Sums out the dims whose letters are not in `keep`."""
        gone = [i for i, c in enumerate(labels) if c not in keep]
        if not gone:
            return t, labels
        return t.sum(gone), "".join(c for c in labels if c in keep)

    def size(labels):
        return int(np.prod([sizes[c] for c in labels], dtype=np.int64))

    t, labels = ops[0]
    for k in range(1, len(ops)):
        u, ulabels = ops[k]
        later = set(output).union(*[set(l) for _, l in ops[k + 1 :]])
        t, labels = drop(t, labels, later | set(ulabels))
        u, ulabels = drop(u, ulabels, later | set(labels))
        batch = [c for c in labels if c in ulabels and c in later]
        inner = [c for c in labels if c in ulabels and c not in later]
        free_a = [c for c in labels if c not in ulabels]
        free_b = [c for c in ulabels if c not in labels]
        a = t.permute([labels.index(c) for c in batch + free_a + inner])
        b = u.permute([ulabels.index(c) for c in batch + inner + free_b])
        lead = [size(batch)] if batch else []
        prod = (a.reshape(lead + [size(free_a), size(inner)])
                @ b.reshape(lead + [size(inner), size(free_b)]))
        labels = "".join(batch + free_a + free_b)
        t = prod.reshape([sizes[c] for c in labels])
    t, labels = drop(t, labels, set(output))
    if labels != output:
        t = t.permute([labels.index(c) for c in output])
    return t


class FusionReport(list):
    """The kernels of a fused Graph: a list of dicts (Graph.report's keys)
    that prints as a table."""

    def table(self):
        from .runtime import _short_ops
        header = ["#", "kernel", "kind", "domain", "reduced", "fused ops", "in/out"]
        rows = [[str(i), str(r.get("name", "?")), str(r.get("kind", "?")),
                 "x".join(str(d) for d in r.get("domain", ())) or "-",
                 ",".join(str(d) for d in r.get("reduced", ())) or "-",
                 _short_ops(r.get("ops", [])), f"{r.get('inputs', '?')}/{r.get('outputs', '?')}"]
                for i, r in enumerate(self)]
        widths = [max(len(c[j]) for c in [header] + rows) for j in range(len(header))]

        def fmt(cells):
            return "  ".join(c.rjust(w) if j == 0 else c.ljust(w)
                             for j, (c, w) in enumerate(zip(cells, widths))).rstrip()
        n = len(self)
        return "\n".join([f"{n} kernel{'' if n == 1 else 's'}", fmt(header),
                          fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])

    def __str__(self):
        return self.table()

    __repr__ = __str__

    def _repr_pretty_(self, printer, cycle):  # IPython
        printer.text(self.table())


def _dims_text(shape):
    return "".join(f"{d}x" for d in shape)


def _short_errors(build, *args):
    """`build(*args)`, its CompileError without the IR listings that MLIR
    attaches to diagnostics (the message keeps the op, its source line and
    the reason); TILEFUSE_ERROR_IR=1 keeps them."""
    try:
        return build(*args)
    except CompileError as e:
        text = str(e)
        if os.environ.get("TILEFUSE_ERROR_IR") == "1":
            raise
        short = _without_ir(text)
        if short == text:
            raise
        raise CompileError(short + "\n(set TILEFUSE_ERROR_IR=1 for the IR)") from None


def _without_ir(text):
    """Drops the 'note: see current operation: <op>' notes MLIR attaches to
    diagnostics (the op printed in full: for a function, its whole body)."""
    out, depth, pending = [], 0, False
    for line in text.split("\n"):
        if pending or depth > 0:
            depth += line.count("{") - line.count("}")
            pending = pending and not line.strip()
            continue
        if "note: see current operation:" in line:
            rest = line.split("note: see current operation:", 1)[1]
            depth = rest.count("{") - rest.count("}")
            pending = not rest.strip()
            continue
        out.append(line)
    return "\n".join(out).rstrip()


class Graph:
    """A graph-dialect program: from `trace` or `parse`."""

    def __init__(self, core_graph, in_spec=None, out_spec=None, interface=None):
        self._graph = core_graph
        self._in_spec = in_spec
        self._out_spec = out_spec
        # What an exported artifact records of the Python interface (JSON):
        # argument structure and names, so a loaded function takes the same
        # dicts the traced one did.
        self._interface = interface
        self._origin = None  # trace() sets it: names the user's lines in errors

    def mlir(self):
        """The textual graph-dialect IR."""
        return self._graph.mlir()

    def summary(self):
        """Signature and op counts, one line per op kind."""
        return self._graph.summary()

    @property
    def inputs(self):
        return self._graph.inputs

    @property
    def outputs(self):
        return self._graph.outputs

    def interpret(self, *args):
        """Runs the reference interpreter on numpy arrays (same structure as
        the traced arguments); returns numpy arrays."""
        leaves, _ = _pytree.flatten(list(args))
        results = self._graph.interpret(leaves)
        if self._out_spec is None:
            return results[0] if len(results) == 1 else tuple(results)
        return _pytree.unflatten(self._out_spec, results)

    def value_and_grad(self, wrt=(0,)):
        """A Graph returning this graph's results followed by the gradient of
        its first result (a 0-d float loss) with respect to each flat argument
        index in `wrt`."""
        if isinstance(wrt, int):
            wrt = (wrt,)
        wrt = [int(i) for i in wrt]
        self._check_loss("value_and_grad")
        inputs, names = self.inputs, self._argument_names()
        for i in wrt:
            if not 0 <= i < len(inputs):
                raise CompileError(
                    f"value_and_grad: argument index {i} is out of range: {self._name()} has "
                    f"{len(inputs)} (flat) arguments; wrt takes indices 0..{len(inputs) - 1}"
                    f"{_where()}")
            dtype, shape = inputs[i]
            if not is_float(dtype):
                raise CompileError(
                    f"value_and_grad: argument {i}{names[i]} of {self._name()} is a "
                    f"tensor<{_dims_text(shape)}{dtype}>; only floating-point arguments have "
                    f"gradients: leave it out of wrt (or pass it as float){_where()}")
        return Graph(_short_errors(self._graph.value_and_grad, wrt))

    def _name(self):
        return f"@{self._graph.entry}" if self._origin is None else self._origin.name

    def _argument_names(self):
        """' (<pytree path>)' of each flat argument, or '' when unknown."""
        n = len(self.inputs)
        if self._in_spec is None:
            return [""] * n
        names = _pytree.leaf_names(self._in_spec)
        return [f" ({k})" if k else "" for k in names] if len(names) == n else [""] * n

    def _check_loss(self, what, who=None):
        """CompileError unless the first result is a 0-d floating-point loss
        (what differentiation needs), naming the line that computed it."""
        outputs = self.outputs
        if outputs and is_float(outputs[0][0]) and len(outputs[0][1]) == 0:
            return
        line = "" if self._origin is None else self._origin.result(0)
        if not outputs:
            got = "returns nothing"
        else:
            dtype, shape = outputs[0]
            got = f"returns a tensor<{_dims_text(shape)}{dtype}> as its first result{line}"
        fix = ("reduce it to one number before returning it, e.g. loss.mean() or loss.sum() "
               "(losses: reduction='mean')" if outputs and is_float(outputs[0][0]) else
               "return a floating-point 0-d loss first (e.g. x.float().mean())")
        raise CompileError(f"{what}: {who or self._name()} {got}; differentiation needs a "
                           f"0-d floating-point loss: {fix}{_where()}")

    def fuse(self, target="cpu"):
        """This graph lowered to primitive ops and grouped into kernels
        (graph.fusion regions) for `target`: "cpu" or "cuda[:sm_XX]". It
        computes the same values; `report()` lists its kernels."""
        return Graph(self._graph.fuse(target), self._in_spec, self._out_spec)

    def compile(self, device="auto"):
        """This graph compiled into fused kernels for `device` ("auto",
        "cpu"); returns a callable CompiledFunction."""
        from .compiler import CompiledFunction, resolve_device
        dev = resolve_device(device)
        return CompiledFunction(self, self._graph.compile(dev), self._in_spec,
                                self._out_spec, dev)

    def autocast(self, precision="bf16", keep_fp32=()):
        """This graph under the mixed-precision policy `precision` ("fp32",
        "bf16" or "fp16"): matmul and linear in the low precision (f32
        accumulation), softmax, layer_norm, exp/log, sums and the losses in
        f32, every other op in its widest operand's type; `keep_fp32` op
        kinds ("gelu", "matmul", ...) and ops traced under
        `tilefuse.autocast(False)` in f32. Arguments and results keep their
        types; the casts are visible in `.mlir()`. Apply it to the
        forward/loss graph, before value_and_grad."""
        graph = Graph(_short_errors(self._graph.autocast, str(precision),
                                    [str(k) for k in keep_fp32]),
                      self._in_spec, self._out_spec, self._interface)
        graph._origin = self._origin
        return graph

    def numerics_report(self, *args, device="auto"):
        """Every kernel of this graph, compiled for `device`, against the
        same kernel computed in f32 on `args` (flat leaves or the traced
        structure): a `tilefuse.numerics.NumericsReport`, one row per kernel
        output with its error, the bound the precision policy promises and
        the kernels over it (see tilefuse.numerics)."""
        from .compiler import resolve_device
        from .numerics import numerics_report
        from . import _pytree
        leaves, _ = _pytree.flatten(list(args))
        return numerics_report(self._graph, [np.asarray(x) for x in leaves],
                               resolve_device(device))

    def memory_plan(self, target="cpu"):
        """The memory plan this graph compiles into for `target` ("cpu" or
        "cuda:sm_XX"), without compiling its kernels: a
        `tilefuse.memory_plan.MemoryPlan` (the same as
        `graph.compile().memory_plan()` on that target)."""
        from .memory_plan import MemoryPlan
        return MemoryPlan(self._graph.memory_plan(target))

    def export(self, path, target="cpu"):
        """Writes an ahead-of-time artifact of this graph for `target`
        ("cpu": a kernel library for this machine's CPU; "cuda:sm_XX":
        cubins); `tilefuse.load(path)` or `tilefuse-run path` runs it."""
        data = self._graph.compile_artifact(target, json.dumps(self._artifact_interface()))
        # A temporary file beside, then a rename: a failed compile or write
        # never leaves a partial file where a good artifact was.
        path = os.fspath(path)
        tmp = f"{path}.tmp.{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    def _artifact_interface(self):
        if self._interface is not None:
            return self._interface
        if self._in_spec is None:
            return {"kind": "function"}
        names = _pytree.leaf_names(self._in_spec)
        return {"kind": "function", "in_spec": _pytree.spec_to_json(self._in_spec),
                "out_spec": None if self._out_spec is None
                else _pytree.spec_to_json(self._out_spec),
                "argument_names": names}

    def report(self):
        """One dict per kernel, in execution order: name, kind (pointwise,
        reduction, matmul or library), domain, reduced dims, the source ops
        it computes, and its input/output counts. Call on a fused graph.
        The list prints as a table (`print(g.fuse().report())`)."""
        return FusionReport(self._graph.report())

    def __repr__(self):
        return self.summary()


def trace(fn, *args):
    """Calls `fn` on symbolic tensors shaped like `args` (numpy arrays, or
    dicts/lists/tuples of them) and returns the resulting Graph."""
    leaves, in_spec = _pytree.flatten(list(args))
    name = getattr(fn, "__name__", "main")
    if not name.isidentifier():
        name = "main"
    tracer = _core.Tracer(name)
    origins = _ORIGINS[id(tracer)] = {}
    _LAST_LINE.text = None
    try:
        return _trace(fn, args, leaves, in_spec, name, tracer, origins)
    finally:
        del _ORIGINS[id(tracer)]


def _trace(fn, args, leaves, in_spec, name, tracer, origins):
    symbolic = []
    for i, leaf in enumerate(leaves):
        arr = np.asarray(leaf)
        if arr.dtype == object:
            raise CompileError(f"argument {i} of {name} is a {type(leaf).__name__}, not an array")
        symbolic.append(Tensor(tracer, tracer.argument(dtype_name(arr.dtype), list(arr.shape))))
    sym_args = _pytree.unflatten(in_spec, symbolic)
    try:
        inspect.signature(fn).bind(*sym_args)
    except TypeError as e:
        raise CompileError(f"cannot trace {name} with {len(args)} arguments: {e}") from None
    except ValueError:
        pass  # builtins without a signature: let the call decide
    _active.append(tracer)
    try:
        out = fn(*sym_args)
    finally:
        _active.pop()
    out_leaves, out_spec = _pytree.flatten(_plain_pairs(out))
    ids = []
    for leaf in out_leaves:
        if not isinstance(leaf, Tensor):
            raise CompileError(
                f"{name} returned a {type(leaf).__name__}; a traced function must return tensors"
            )
        ids.append(leaf._id)
    graph = Graph(tracer.finish(ids), in_spec, out_spec)
    label = getattr(fn, "__name__", "")
    label = label if label.isidentifier() else "the traced function"
    graph._origin = _Origin(label, _definition(fn), [origins.get(i) for i in ids])
    return graph


class _Origin:
    """Where a traced graph came from, for errors found after tracing: the
    function's name and definition line, and the line that computed each
    result."""

    def __init__(self, name, definition, result_lines):
        self.name = name
        self.definition = definition
        self.result_lines = result_lines

    def result(self, i):
        """' (computed at file:line)' for result `i`, or the definition."""
        line = self.result_lines[i] if i < len(self.result_lines) else None
        if line:
            return f" (computed at {line})"
        return f" (defined at {self.definition})" if self.definition else ""


def _definition(fn):
    code = getattr(fn, "__code__", None)
    return None if code is None else f"{code.co_filename}:{code.co_firstlineno}"


def _plain_pairs(tree):
    """`(values, indices)` results of max/min(dim) as plain tuples, so the
    traced structure comes back as a tuple of arrays."""
    if isinstance(tree, tuple(_RETURN_TYPES.values())):
        return tuple(tree)
    if isinstance(tree, dict):
        return {k: _plain_pairs(v) for k, v in tree.items()}
    if type(tree) in (list, tuple):
        return type(tree)(_plain_pairs(v) for v in tree)
    return tree


def parse(mlir_text, entry=None):
    """Parses graph-dialect text into a Graph (its arguments and results flat)."""
    return Graph(_core.parse(mlir_text, entry or ""))



# PyTorch functions written from primitives (they use Tensor, where and cat).
from . import _composites  # noqa: E402
