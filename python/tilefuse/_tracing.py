"""Tracing: run a Python function on symbolic tensors to build a graph."""
import inspect
import os
import sys

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


def _user_location(tracer):
    """Tags the next ops with the user's file and line."""
    frame = _user_frame()
    if frame is None:
        tracer.clear_location()
    else:
        tracer.set_location(frame.f_code.co_filename, frame.f_lineno)


def _where():
    """' (at file:line)' of the user's frame, for errors raised in Python."""
    frame = _user_frame()
    return "" if frame is None else f" (at {frame.f_code.co_filename}:{frame.f_lineno})"


class Tensor:
    """A symbolic tensor inside `tilefuse.trace`. Supports the usual
    operators and PyTorch-style methods; every call appends graph ops."""

    __slots__ = ("_tracer", "_id")
    __array_priority__ = 1000  # numpy array (op) Tensor -> Tensor's reflected op

    def __init__(self, tracer, value_id):
        self._tracer = tracer
        self._id = value_id

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
        return self._call("binary", op, a._id, b._id)

    # -- operators --------------------------------------------------------
    def __add__(self, o): return self._binary("add", o)
    def __radd__(self, o): return self._binary("add", o, True)
    def __sub__(self, o): return self._binary("sub", o)
    def __rsub__(self, o): return self._binary("sub", o, True)
    def __mul__(self, o): return self._binary("mul", o)
    def __rmul__(self, o): return self._binary("mul", o, True)
    def __truediv__(self, o): return self._binary("div", o)
    def __rtruediv__(self, o): return self._binary("div", o, True)
    def __pow__(self, o): return self._binary("pow", o)
    def __rpow__(self, o): return self._binary("pow", o, True)
    def __eq__(self, o): return self._binary("eq", o)
    def __ne__(self, o): return self._binary("ne", o)
    def __lt__(self, o): return self._binary("lt", o)
    def __le__(self, o): return self._binary("le", o)
    def __gt__(self, o): return self._binary("gt", o)
    def __ge__(self, o): return self._binary("ge", o)
    def __neg__(self): return self._call("unary", "neg", self._id)
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
    def maximum(self, o): return self._binary("maximum", o)
    def minimum(self, o): return self._binary("minimum", o)

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
        """Maximum over `dim` (values only; use argmax for the indices)."""
        return self._call("reduce", "max", self._id, self._dims(dim), keepdim)

    def min(self, dim=None, keepdim=False):
        return self._call("reduce", "min", self._id, self._dims(dim), keepdim)

    def argmax(self, dim=-1, keepdim=False):
        return self._call("argmax", self._id, dim, keepdim)

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


def _lift(tracer, x, like=None):
    """Turns a Python scalar or numpy array into a Tensor of `tracer`."""
    if isinstance(x, Tensor):
        if x._tracer is not tracer:
            raise CompileError("a tensor from another trace was used in this one")
        return x
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


def _index(t, key):
    """Basic indexing: ints, slices (positive steps), None, Ellipsis; an
    integer Tensor as the only key gathers rows (embedding lookup)."""
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


def cat(tensors, dim=0):
    tensors = list(tensors)
    if not tensors or not isinstance(tensors[0], Tensor):
        raise CompileError("cat: expects a non-empty list of traced tensors")
    tr = tensors[0]._tracer
    ids = [_lift(tr, x)._id for x in tensors]
    _user_location(tr)
    return Tensor(tr, tr.concat(ids, dim))


def stack(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise CompileError("stack: expects a non-empty list of tensors")
    return cat([t.unsqueeze(dim) for t in tensors], dim)


class Graph:
    """A graph-dialect program: from `trace` or `parse`."""

    def __init__(self, core_graph, in_spec=None, out_spec=None):
        self._graph = core_graph
        self._in_spec = in_spec
        self._out_spec = out_spec

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
        return Graph(self._graph.value_and_grad([int(i) for i in wrt]))

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

    def export(self, path, target="cpu"):
        """Writes an ahead-of-time artifact of this graph for `target`
        ("cpu": a kernel library for this machine's CPU; "cuda:sm_XX":
        cubins); `tilefuse.load(path)` or `tilefuse-run path` runs it."""
        with open(path, "wb") as f:
            f.write(self._graph.compile_artifact(target))

    def report(self):
        """One dict per kernel, in execution order: name, kind (pointwise,
        reduction, matmul or library), domain, reduced dims, the source ops
        it computes, and its input/output counts. Call on a fused graph."""
        return self._graph.report()

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
    out_leaves, out_spec = _pytree.flatten(out)
    ids = []
    for leaf in out_leaves:
        if not isinstance(leaf, Tensor):
            raise CompileError(
                f"{name} returned a {type(leaf).__name__}; a traced function must return tensors"
            )
        ids.append(leaf._id)
    return Graph(tracer.finish(ids), in_spec, out_spec)


def parse(mlir_text, entry=None):
    """Parses graph-dialect text into a Graph (its arguments and results flat)."""
    return Graph(_core.parse(mlir_text, entry or ""))

