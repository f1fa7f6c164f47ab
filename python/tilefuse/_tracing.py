"""Tracing: run a Python function on symbolic tensors to build a graph."""
import inspect
import json
import os

import numpy as np

from . import _core, _pytree
from ._core import CompileError
from ._dtypes import dtype_name, is_float, numpy_dtype

# The traced tensor's methods by family: reductions and layout in their
# own modules (mixed into Tensor), numpy's functions in _numpy_dispatch;
# where ops come from and how errors name them in _location.
from ._location import (  # noqa: F401 (autocast, source_location: tilefuse's API)
    _LAST_LINE, _ORIGINS, _RETURN_TYPES, _no_value, _pair_misuse, _type_text,
    _user_location, _where, autocast, source_location)
from ._tensor_layout import LayoutMethods
from ._tensor_reductions import ReductionMethods

_active = []  # stack of tracers; ops on Tensors use their own tracer


class Tensor(ReductionMethods, LayoutMethods):
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

    # -- numpy ------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise CompileError(
            f"np.asarray/np.array of a traced tensor: it has no values while tracing (the "
            f"graph is built once for every input); return it from the traced function to "
            f"get its value, or use numpy functions on it (np.exp(t), np.sum(t, 0), ...), "
            f"which build graph ops{_where()}")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _numpy_dispatch.numpy_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        impl = _numpy_dispatch.NUMPY_FUNCTIONS.get(func)
        if impl is None:
            raise CompileError(
                f"numpy function {_numpy_dispatch.np_name(func)} is not supported on traced tensors; use "
                f"the Tensor methods (x.sum, x.amax, x.reshape, x.permute, ...), "
                f"tilefuse.functional or tilefuse.where/cat/stack{_where()}")
        return impl(*args, **kwargs)


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


class TypedExample:
    """An example argument of a dtype numpy lacks (bf16): its dtype name
    and shape, traced as such."""

    def __init__(self, dtype, shape):
        self.dtype, self.shape = dtype_name(dtype), tuple(shape)


def _trace(fn, args, leaves, in_spec, name, tracer, origins):
    symbolic = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, TypedExample):
            symbolic.append(Tensor(tracer, tracer.argument(leaf.dtype, list(leaf.shape))))
            continue
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


# Last: it imports Tensor and the functions above.
from . import _numpy_dispatch  # noqa: E402
