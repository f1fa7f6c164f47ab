"""ATen FX graphs -> tilefuse graphs: a table of ATen op -> traced ops,
filled by op family.

`run_fx(gm, inputs)` executes a torch.fx GraphModule whose nodes are ATen
ops (from make_fx, torch.export or aot_autograd) on tilefuse's traced
tensors, so the FX graph becomes a tilefuse graph as any Python function
does. The ATen semantics are kept strictly: every node's result is checked
against the dtype and shape PyTorch recorded for it (`node.meta["val"]`),
and cast to PyTorch's dtype where tilefuse's numpy-style promotion chose
another (0-d tensors and Python scalars promote differently in PyTorch).

The table, `CONVERSIONS`, is filled by one module per op family:
pointwise (arithmetic, unary math, comparisons, logic), creation, random,
views (views, copies, slicing, cat/stack/pad, indexing), reductions,
linalg (matrix products), nn (softmax, norms, activations, losses,
embeddings) and attention (SDPA). A conversion takes the op's arguments
(traced tensors where PyTorch has tensors) and returns traced tensors; an
argument form it cannot match exactly raises `UnsupportedOp`, never
another answer.

An op missing from `CONVERSIONS` raises `UnsupportedOp` naming it; the
torch.compile backend then runs that part of the graph in PyTorch.
"""
import operator
import re
import weakref

import numpy as np
import torch
import torch.fx

from .._core import CompileError
from .._dtypes import dtype_name
from .._tracing import Tensor, _lift, source_location
from .._tracing import _active as _active_tracers

aten = torch.ops.aten


class UnsupportedOp(CompileError):
    """An ATen op (or an argument of one) that the importer cannot convert;
    `node` names the FX node where it happened, when known."""

    def __init__(self, op, why="", node=None):
        self.op = str(op)
        self.why = why
        self.node = node
        super().__init__(f"tilefuse cannot convert {self.op}" + (f": {why}" if why else ""))


def torch_dtype_name(dtype):
    """tilefuse's name of a torch dtype ("f32" for torch.float32)."""
    try:
        return dtype_name(str(dtype).replace("torch.", ""))
    except CompileError:
        raise UnsupportedOp(f"dtype {dtype}") from None


CONVERSIONS = {}


def converts(*ops):
    """Registers a conversion for each op: an OpOverload, an overload packet
    (every overload of it), or the name of an overload that exists only
    once a part of PyTorch has defined it ("prims.fma.default", which
    torch.compile's own modules define)."""
    def register(fn):
        for op in ops:
            CONVERSIONS[op] = fn
        return fn
    return register


def _conversion(target):
    fn = CONVERSIONS.get(target)
    if fn is None and hasattr(target, "overloadpacket"):
        fn = CONVERSIONS.get(target.overloadpacket) or CONVERSIONS.get(str(target))
    return fn


def is_supported(node):
    """Whether the importer converts this FX node (placeholders, outputs and
    attributes always; calls when their target is in the table, or when
    their value is a constant of the graph, which PyTorch computes once)."""
    if node.op != "call_function":
        return True
    return (node.target is operator.getitem or _conversion(node.target) is not None
            or is_constant(node))


def is_constant(node):
    """Whether FX node `node`'s value depends on no graph input and draws no
    random numbers (position tables built from arange, say): such a value
    is the same at every call."""
    if not isinstance(node, torch.fx.Node):
        return True
    if node in _CONSTANT:
        return _CONSTANT[node]
    # Iteratively, inputs first (graphs are deep: no recursion).
    pending = [node]
    while pending:
        n = pending[-1]
        if n in _CONSTANT:
            pending.pop()
            continue
        if n.op == "get_attr":
            _CONSTANT[n] = True
        elif n.op != "call_function" or n.target in RANDOM_OPS:
            _CONSTANT[n] = False
        else:
            inputs = []
            torch.fx.node.map_arg((n.args, n.kwargs), inputs.append)
            unknown = [i for i in inputs if i not in _CONSTANT]
            if unknown:
                pending.extend(unknown)
                continue
            _CONSTANT[n] = all(_CONSTANT[i] for i in inputs)
        pending.pop()
    return _CONSTANT[node]


# is_constant's answers, per node (a node of a partition's own graph is
# another node than the one it was copied from).
_CONSTANT = weakref.WeakKeyDictionary()


# ---------------------------------------------------------------------------
# Shared by the conversions
# ---------------------------------------------------------------------------

def importer():
    """The _Importer running the graph being converted (conversions make
    constants and random numbers through it)."""
    return _Importer.current


def _scalar_like(x, v):
    return v if isinstance(v, Tensor) else _lift(x._tracer, v, like=x)


def _dtype_of(kwargs_dtype, default="f32"):
    return torch_dtype_name(kwargs_dtype) if kwargs_dtype is not None else default


# ---------------------------------------------------------------------------
# Running a graph
# ---------------------------------------------------------------------------

class _Importer(torch.fx.Interpreter):
    """Executes an FX graph's nodes on traced tensors, checking each result
    against the dtype and shape PyTorch recorded."""

    current = None
    # Philox streams of the importer's random ops, apart from those that
    # F.dropout numbers from 0 in the same graph.
    FIRST_STREAM = 1 << 20

    def __init__(self, gm, tracer, seed=None):
        super().__init__(gm, garbage_collect_values=False)
        self._tracer = tracer
        self._seed = seed
        self._torch_values = {}
        self._stream = self.FIRST_STREAM
        order = {n: i for i, n in enumerate(gm.graph.nodes)}
        self._order = order
        self.node = None  # the node being converted

    def result_dtype(self, i=0):
        """tilefuse's dtype of output `i` of the node being converted, as
        PyTorch recorded it (conversions compute in PyTorch's result type)."""
        val = self.node.meta.get("val") if self.node is not None else None
        if isinstance(val, (list, tuple)):
            val = val[i]
        if not isinstance(val, torch.Tensor):
            raise UnsupportedOp(getattr(self.node, "target", "?"), "no recorded result dtype")
        return torch_dtype_name(val.dtype)

    def result_shape(self, i=0):
        """The shape of output `i` of the node being converted, as PyTorch
        recorded it."""
        val = self.node.meta.get("val") if self.node is not None else None
        if isinstance(val, (list, tuple)):
            val = val[i]
        if not isinstance(val, torch.Tensor):
            raise UnsupportedOp(getattr(self.node, "target", "?"), "no recorded result shape")
        return tuple(int(s) for s in val.shape)

    def arg_val(self, i):
        """PyTorch's recorded value (a fake tensor: dtype, shape, strides) of
        positional argument `i` of the node being converted, or None."""
        args = self.node.args if self.node is not None else ()
        a = args[i] if i < len(args) else None
        return a.meta.get("val") if isinstance(a, torch.fx.Node) else None

    def random_stream(self):
        """(the graph's seed as a traced tensor, a new Philox stream) for
        one random op."""
        if self._seed is None:
            raise UnsupportedOp("random numbers (rand, bernoulli, dropout)",
                                "the graph has no seed input")
        seed = self._seed if isinstance(self._seed, Tensor) else _lift(self._tracer,
                                                                       np.int64(self._seed))
        self._stream += 1
        return seed, self._stream

    def uniform(self, shape, dtype):
        """U[0, 1) of `shape` from the graph's seed, a new stream per call."""
        seed, stream = self.random_stream()
        t = self._tracer
        return Tensor(t, t.random_uniform(seed._id, dtype_name(dtype), list(shape), stream))

    def constant(self, value, dtype):
        """`value` (numpy) as a constant of the graph, of tilefuse dtype `dtype`."""
        c = _lift(self._tracer, np.asarray(value))
        return c if c.dtype == dtype_name(dtype) else c.to(dtype)

    def torch_value(self, node):
        """The value of constant node `node` (is_constant), computed by
        PyTorch (once per node)."""
        if not isinstance(node, torch.fx.Node):
            return node
        if node not in self._torch_values:
            if node.op == "get_attr":
                value = self.fetch_attr(node.target)
            else:
                args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), self.torch_value)
                with _real_values():
                    value = node.target(*args, **kwargs)
            self._torch_values[node] = value
        return self._torch_values[node]

    def _folded(self, n):
        """Constant node `n`, which the table does not convert, as
        tilefuse constants of the values PyTorch computes for it."""
        def convert(v):
            if isinstance(v, torch.Tensor):
                with _real_values():
                    t = v.detach().cpu()
                    array = (t.float() if t.dtype == torch.bfloat16 else t).numpy()
                return self.constant(array, torch_dtype_name(t.dtype))
            if isinstance(v, (list, tuple)):
                return type(v)(convert(x) for x in v)
            return v
        return convert(self.torch_value(n))

    def run_node(self, n):
        if n.op == "call_function" and n.target in IN_PLACE and n.args:
            mutated = n.args[0]
            later = [u for u in getattr(mutated, "users", ())
                     if u is not n and self._order.get(u, -1) > self._order[n]]
            if later:
                raise UnsupportedOp(n.target, f"{mutated} is read after it is updated in place "
                                              f"(by {later[0].name})", node=n.name)
            if _is_view(mutated):  # the update would reach the viewed tensor too
                raise UnsupportedOp(n.target, f"{mutated} is a view, updated in place",
                                    node=n.name)
        self.node = n
        try:
            if (n.op == "call_function" and n.target is not operator.getitem
                    and _conversion(n.target) is None and is_constant(n)):
                out = self._folded(n)
            else:
                # The ops traced for this node carry the user's line that
                # made it (reports and errors name the model's code, not
                # the FX interpreter's).
                with source_location(*(node_source(n) or (None, 0))):
                    out = super().run_node(n)
        except UnsupportedOp as e:
            if e.node is None:
                e.node = n.name
            raise
        except Exception as e:  # noqa: BLE001 (any failure of a conversion)
            # A conversion in the table that fails on these arguments: the
            # op does not convert here (the caller leaves it to PyTorch).
            raise UnsupportedOp(n.target, f"{n.format_node()}: {type(e).__name__}: {e}",
                                node=n.name) from None
        if n.op == "call_function":
            out = _conform(n, out)
        return out

    def get_attr(self, target, args, kwargs):
        value = super().get_attr(target, args, kwargs)
        if isinstance(value, torch.Tensor):
            with _real_values():
                t = value.detach().cpu()
                array = (t.float() if t.dtype == torch.bfloat16 else t).numpy()
            return self.constant(array, torch_dtype_name(t.dtype))
        return value

    def call_function(self, target, args, kwargs):
        if target is operator.getitem:
            return args[0][args[1]]
        fn = _conversion(target)
        if fn is None:
            raise UnsupportedOp(target)
        return fn(*args, **kwargs)


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def node_source(node):
    """(file, line) of the user's code that made FX node `node` (the
    innermost frame of its recorded stack trace outside torch and
    tilefuse), or None when the graph recorded none."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    for path, line in reversed(frames):
        if "/torch/" not in path and "/tilefuse/" not in path:
            return path, int(line)
    return (frames[-1][0], int(frames[-1][1])) if frames else None


def _real_values():
    """A context computing with real tensors, also where the caller traces
    (aot_autograd compiles under a fake-tensor mode)."""
    import contextlib
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
    stack = contextlib.ExitStack()
    for ctx in (torch.no_grad(), unset_fake_temporarily(), disable_proxy_modes_tracing()):
        stack.enter_context(ctx)
    return stack


_VIEW_OPS = {"view", "_unsafe_view", "reshape", "slice", "select", "transpose", "permute",
             "expand", "alias", "t", "unsqueeze", "squeeze", "split", "split_with_sizes",
             "as_strided", "diagonal", "unfold", "narrow"}


def _is_view(node):
    """Whether FX node `node` is (a getitem of) a view of another tensor."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return _is_view(node.args[0])
    packet = getattr(node.target, "overloadpacket", None)
    return packet is not None and packet.__name__ in _VIEW_OPS


def _conform(node, out):
    """`out` with PyTorch's dtype for `node`; its shape must be PyTorch's."""
    val = node.meta.get("val")
    if isinstance(out, (list, tuple)) and isinstance(val, (list, tuple)):
        return type(out)(_conform_one(node, o, v) for o, v in zip(out, val))
    return _conform_one(node, out, val)


def _conform_one(node, out, val):
    if not isinstance(out, Tensor) or not isinstance(val, torch.Tensor):
        return out
    want = torch_dtype_name(val.dtype)
    if tuple(out.shape) != tuple(val.shape):
        raise CompileError(f"{node.target} ({node.name}) made {out} where PyTorch makes "
                           f"{want}{list(val.shape)}")
    return out if out.dtype == want else out.to(want)


def _active_tracer():
    return _active_tracers[-1] if _active_tracers else None


def run_fx(gm, inputs, seed=None):
    """The outputs of FX graph `gm` run on `inputs` (traced tensors, or
    anything tilefuse lifts), as the graph's output structure. `seed` (a
    traced 0-d int64) feeds its random ops (uses_random)."""
    like = next((x for x in inputs if isinstance(x, Tensor)), None)
    tracer = like._tracer if like is not None else _active_tracer()
    if tracer is None:
        raise CompileError("run_fx runs an FX graph inside tilefuse.trace (on traced "
                           "tensors); call it from the traced function")
    running = _Importer(gm, tracer, seed)
    previous, _Importer.current = _Importer.current, running
    try:
        return running.run(*inputs)
    finally:
        _Importer.current = previous


# ---------------------------------------------------------------------------
# The families, registering their conversions
# ---------------------------------------------------------------------------

from . import attention, conv, creation, indexing, linalg, nn, pointwise, random, reductions, sorting, views  # noqa: E402,F401,I001
from .random import RANDOM_OPS, uses_random  # noqa: E402,F401

# In-place forms, converted functionally: run_node checks that nothing
# reads the mutated tensor afterwards.
IN_PLACE = {aten.div_.Scalar: aten.div.Scalar, aten.div_.Tensor: aten.div.Tensor,
            aten.mul_.Tensor: aten.mul.Tensor, aten.mul_.Scalar: aten.mul.Scalar,
            aten.add_.Tensor: aten.add.Tensor, aten.bernoulli_.float: aten.bernoulli_.float}
for _inplace, _functional in IN_PLACE.items():
    CONVERSIONS.setdefault(_inplace, CONVERSIONS.get(_functional))
