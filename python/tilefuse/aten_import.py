"""ATen FX graphs -> tilefuse graphs: one table of ATen op -> traced ops.

`run_fx(gm, inputs)` executes a torch.fx GraphModule whose nodes are ATen
ops (from make_fx, torch.export or aot_autograd) on tilefuse's traced
tensors, so the FX graph becomes a tilefuse graph as any Python function
does. The ATen semantics are kept strictly: every node's result is checked
against the dtype and shape PyTorch recorded for it (`node.meta["val"]`),
and cast to PyTorch's dtype where tilefuse's numpy-style promotion chose
another (0-d tensors and Python scalars promote differently in PyTorch).

An op missing from `CONVERSIONS` raises `UnsupportedOp` naming it; the
torch.compile backend then runs that part of the graph in PyTorch.
"""
import operator
import sys
import weakref

import numpy as np
import torch
import torch.fx

from . import _trig
from . import functional as F
from ._core import CompileError
from ._dtypes import dtype_name
from ._composites import floor_divide
from ._dtypes import is_float
from ._tracing import Tensor, _lift, cat, stack, where
from ._tracing import _active as _active_tracers

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
    """Registers a conversion for each op (an OpOverload or an overload
    packet: every overload of it)."""
    def register(fn):
        for op in ops:
            CONVERSIONS[op] = fn
        return fn
    return register


def _conversion(target):
    fn = CONVERSIONS.get(target)
    if fn is None and hasattr(target, "overloadpacket"):
        fn = CONVERSIONS.get(target.overloadpacket)
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
# The table
# ---------------------------------------------------------------------------

def _scalar_like(x, v):
    return v if isinstance(v, Tensor) else _lift(x._tracer, v, like=x)


@converts(aten.add.Tensor, aten.add.Scalar)
def _add(a, b, alpha=1):
    return a + (b if alpha == 1 else b * alpha)


@converts(aten.sub.Tensor, aten.sub.Scalar)
def _sub(a, b, alpha=1):
    return a - (b if alpha == 1 else b * alpha)


@converts(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(a, b, alpha=1):
    return b - (a if alpha == 1 else a * alpha)


@converts(aten.mul.Tensor, aten.mul.Scalar)
def _mul(a, b):
    return a * b


@converts(aten.div.Tensor, aten.div.Scalar)
def _div(a, b):
    return a / b


@converts(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(a, b, rounding_mode=None):
    if rounding_mode == "floor":  # exact for integers, PyTorch's fmod method for floats
        return floor_divide(a, b)
    if rounding_mode == "trunc":
        ints = not is_float(a.dtype) and not (isinstance(b, Tensor) and is_float(b.dtype)) \
            and not isinstance(b, float)
        if ints:
            return a._binary("trunc_div", b)
        return (a / b).trunc()
    return a / b


def _unary(name):
    return lambda x: getattr(x, name)()


for _op, _name in [(aten.neg, "neg"), (aten.exp, "exp"), (aten.log, "log"),
                   (aten.tanh, "tanh"), (aten.sqrt, "sqrt"), (aten.rsqrt, "rsqrt"),
                   (aten.abs, "abs"), (aten.sigmoid, "sigmoid"), (aten.relu, "relu"),
                   (aten.erf, "erf"), (aten.log1p, "log1p"), (aten.expm1, "expm1"),
                   (aten.floor, "floor"), (aten.ceil, "ceil"), (aten.trunc, "trunc")]:
    CONVERSIONS[_op] = _unary(_name)


@converts(aten.sin)
def _sin(x):
    return _trig.sin(x)


@converts(aten.cos)
def _cos(x):
    return _trig.cos(x)


@converts(aten.reciprocal)
def _reciprocal(x):
    return 1.0 / x


@converts(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor)
def _pow(a, b):
    if not isinstance(b, Tensor) and b == 2:
        return a * a
    if not is_float(a.dtype):
        # graph.pow is for floats: small whole exponents multiply exactly.
        if isinstance(b, int) and 0 <= b <= 8:
            out = a * 0 + 1
            for _ in range(b):
                out = out * a
            return out
        raise UnsupportedOp(aten.pow, f"{a.dtype} ** {b!r}")
    return a ** b


@converts(aten.pow.Scalar)
def _pow_scalar(a, b):
    return _scalar_like(b, a) ** b


@converts(aten.maximum)
def _maximum(a, b):
    return a.maximum(b)


@converts(aten.minimum)
def _minimum(a, b):
    return a.minimum(b)


@converts(aten.clamp)
def _clamp(x, min=None, max=None):
    return x.clamp(min, max)


@converts(aten.clamp_min)
def _clamp_min(x, min):
    return x.clamp(min, None)


@converts(aten.clamp_max)
def _clamp_max(x, max):
    return x.clamp(None, max)


for _op, _fn in [(aten.eq, operator.eq), (aten.ne, operator.ne), (aten.lt, operator.lt),
                 (aten.le, operator.le), (aten.gt, operator.gt), (aten.ge, operator.ge)]:
    CONVERSIONS[_op] = (lambda fn: lambda a, b: fn(a, b))(_fn)


@converts(aten.logical_not)
def _logical_not(x):
    return x == 0  # (i1 == false; a number == 0)


@converts(aten.bitwise_not)
def _bitwise_not(x):
    if x.dtype != "i1":
        raise UnsupportedOp(aten.bitwise_not, f"on {x.dtype} (only bool tensors convert)")
    return x == False  # noqa: E712


@converts(aten.logical_and, aten.bitwise_and.Tensor)
def _logical_and(a, b):
    return where(a, b != 0, False)


@converts(aten.logical_or, aten.bitwise_or.Tensor)
def _logical_or(a, b):
    return where(a, True, b != 0)


@converts(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(cond, a, b):
    return where(cond, a, b)


@converts(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(x, mask, value):
    return where(mask, value, x)


# -- creation (static shapes: built as constants or fills) --------------------

def _dtype_of(kwargs_dtype, default="f32"):
    return torch_dtype_name(kwargs_dtype) if kwargs_dtype is not None else default


def _fill_dtype(value):
    """PyTorch's dtype of a fill with no dtype given: bool, int64, else f32."""
    if isinstance(value, bool):
        return "i1"
    return "i64" if isinstance(value, int) else "f32"


@converts(aten.scalar_tensor)
def _scalar_tensor(value, dtype=None, layout=None, device=None, pin_memory=None):
    return _Importer.current.constant(np.array(value), _dtype_of(dtype))


@converts(aten.full)
def _full(size, value, dtype=None, layout=None, device=None, pin_memory=None):
    return _Importer.current.constant(np.full(tuple(size), value),
                                      _dtype_of(dtype, _fill_dtype(value)))


@converts(aten.full_like)
def _full_like(x, value, dtype=None, layout=None, device=None, pin_memory=None,
               memory_format=None):
    return _Importer.current.constant(np.full(x.shape, value), _dtype_of(dtype, x.dtype))


@converts(aten.fill.Scalar)
def _fill(x, value):
    return _Importer.current.constant(np.full(x.shape, value), x.dtype)


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
    return _Importer.current.constant(np.zeros(tuple(size)), _dtype_of(dtype))


@converts(aten.ones)
def _ones(size, dtype=None, layout=None, device=None, pin_memory=None):
    return _Importer.current.constant(np.ones(tuple(size)), _dtype_of(dtype))


@converts(aten.arange.start_step, aten.arange.start, aten.arange.default)
def _arange(*args, dtype=None, layout=None, device=None, pin_memory=None):
    values = np.arange(*args)
    default = "i64" if all(isinstance(a, int) for a in args) else "f32"
    return _Importer.current.constant(values, _dtype_of(dtype, default))


@converts(aten.empty_like, aten.empty_permuted, aten.empty.memory_format)
def _empty(*args, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None,
           **kw):
    """Uninitialised memory: only ever overwritten (bernoulli_), so zeros."""
    if isinstance(args[0], Tensor):
        shape, default = args[0].shape, args[0].dtype
    else:
        shape, default = tuple(args[0]), "f32"
    return _Importer.current.constant(np.zeros(shape), _dtype_of(dtype, default))


# -- random numbers (Philox, from the graph's seed) -------------------------------

@converts(aten.rand)
def _rand(size, dtype=None, layout=None, device=None, pin_memory=None, generator=None):
    return _Importer.current.uniform(tuple(size), _dtype_of(dtype))


@converts(aten.bernoulli.p, aten.bernoulli_.float)
def _bernoulli(x, p=0.5, generator=None):
    return (_Importer.current.uniform(x.shape, "f32") < p).to(x.dtype)


@converts(aten.native_dropout)
def _native_dropout(x, p, train):
    if not train or p == 0:
        return x, _Importer.current.constant(np.ones(x.shape, bool), "i1")
    if p >= 1:  # everything dropped
        return x * 0, _Importer.current.constant(np.zeros(x.shape, bool), "i1")
    keep = _Importer.current.uniform(x.shape, "f32") >= p
    return where(keep, x * (1.0 / (1.0 - p)), 0.0).to(x.dtype), keep


# In-place forms, converted functionally: run_node checks that nothing
# reads the mutated tensor afterwards.
IN_PLACE = {aten.div_.Scalar: aten.div.Scalar, aten.div_.Tensor: aten.div.Tensor,
            aten.mul_.Tensor: aten.mul.Tensor, aten.mul_.Scalar: aten.mul.Scalar,
            aten.add_.Tensor: aten.add.Tensor, aten.bernoulli_.float: aten.bernoulli_.float}
for _inplace, _functional in IN_PLACE.items():
    CONVERSIONS.setdefault(_inplace, CONVERSIONS.get(_functional))

RANDOM_OPS = (aten.rand.default, aten.bernoulli.p, aten.bernoulli_.float,
              aten.native_dropout.default)


def uses_random(gm):
    """Whether graph `gm` draws random numbers (then it needs a seed)."""
    return any(n.op == "call_function" and n.target in RANDOM_OPS for n in gm.graph.nodes)


# -- views and copies ------------------------------------------------------------

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


@converts(torch.ops.prims.fma.default)
def _fma(a, b, c):
    """a * b + c (PyTorch's decompositions use it for lerp and addcmul)."""
    return a * b + c


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
    if step != 1:
        raise UnsupportedOp(aten.slice_scatter, f"step {step}")
    parts = []
    if start > 0:
        parts.append(_slice(x, dim, 0, start))
    parts.append(src.to(x.dtype))
    if end < n:
        parts.append(_slice(x, dim, end, n))
    return parts[0] if len(parts) == 1 else cat(parts, dim)


@converts(aten.select_scatter)
def _select_scatter(x, src, dim, index):
    dim %= x.ndim
    index %= x.shape[dim]
    return _slice_scatter(x, src.unsqueeze(dim), dim, index, index + 1)


@converts(aten.cat)
def _cat(tensors, dim=0):
    # ATen skips empty parts (also 1-D empty ones of any other rank: a
    # key/value cache starts as torch.tensor([])).
    parts = [t for t in tensors if not (isinstance(t, Tensor) and 0 in t.shape)]
    if not parts:
        return tensors[0]
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
                parts.append(_Importer.current.constant(np.full(shape, value), x.dtype))
            else:
                parts.append(None)
        pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
        if len(pieces) > 1:
            x = cat(pieces, dim)
    return x


@converts(aten.stack)
def _stack(tensors, dim=0):
    return stack(list(tensors), dim)


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


# -- linear algebra ---------------------------------------------------------------

@converts(aten.mm, aten.bmm, aten.matmul)
def _mm(a, b):
    return a @ b


@converts(aten.addmm)
def _addmm(bias, a, b, beta=1, alpha=1):
    prod = a @ b
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:  # ATen ignores the bias then (even NaN or inf in it)
        return prod
    return prod + (bias if beta == 1 else bias * beta)


@converts(aten.embedding)
def _embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if scale_grad_by_freq or sparse:
        raise UnsupportedOp(aten.embedding, "scale_grad_by_freq and sparse are not supported")
    out = F.embedding(indices, weight)
    if padding_idx is not None and padding_idx >= 0:
        # nn.Embedding(padding_idx=) reads the padding row but never trains
        # it: lookups of that row carry no gradient back to the table.
        pad = (indices != padding_idx).reshape(*indices.shape, *[1] * (out.ndim - indices.ndim))
        out = where(pad, out, out.detach())
    return out


# -- reductions ---------------------------------------------------------------------

def _dims(x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    return tuple(dim) if isinstance(dim, (list, tuple)) else (dim,)


@converts(aten.sum.dim_IntList, aten.sum.default)
def _sum(x, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        x = x.to(torch_dtype_name(dtype))
    return x.sum(_dims(x, dim), keepdim)


@converts(aten.mean.dim, aten.mean.default)
def _mean(x, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        x = x.to(torch_dtype_name(dtype))
    return x.mean(_dims(x, dim), keepdim)


@converts(aten.amax)
def _amax(x, dim=(), keepdim=False):
    return x.amax(tuple(dim), keepdim)


@converts(aten.amin)
def _amin(x, dim=(), keepdim=False):
    return x.amin(tuple(dim), keepdim)


def _via_int(x, fn):
    """fn on a bool tensor widened to i32 (the graph's reductions take no
    i1), its float/int results as PyTorch gives them (_conform casts)."""
    return fn(x.to("i32") if x.dtype == "i1" else x)


@converts(aten.max.dim)
def _max_dim(x, dim, keepdim=False):
    return tuple(_via_int(x, lambda v: v.max(dim, keepdim)))


@converts(aten.min.dim)
def _min_dim(x, dim, keepdim=False):
    return tuple(_via_int(x, lambda v: v.min(dim, keepdim)))


@converts(aten.any.dim, aten.any.dims, aten.any.default)
def _any(x, dim=None, keepdim=False):
    """Whether any element (along dim) is nonzero, as bool."""
    dims = _dims(x, dim)
    nonzero = (x != 0).to("i32")
    return nonzero.amax(dims if dims is not None else tuple(range(x.ndim)), keepdim) != 0


@converts(aten.all.dim, aten.all.dims, aten.all.default)
def _all(x, dim=None, keepdim=False):
    """Whether every element (along dim) is nonzero, as bool."""
    dims = _dims(x, dim)
    nonzero = (x != 0).to("i32")
    return nonzero.amin(dims if dims is not None else tuple(range(x.ndim)), keepdim) != 0


@converts(aten.cumsum)
def _cumsum(x, dim, dtype=None):
    if dtype is not None:
        x = x.to(torch_dtype_name(dtype))
    return x.cumsum(dim)


@converts(aten.flip)
def _flip(x, dims):
    return x.flip(list(dims))


@converts(aten.argmax)
def _argmax(x, dim=None, keepdim=False):
    return x.argmax(dim, keepdim)


@converts(aten.var.correction)
def _var(x, dim=None, correction=None, keepdim=False):
    return x.var(_dims(x, dim), keepdim=keepdim, correction=1 if correction is None else correction)


# -- neural-network ops ---------------------------------------------------------------

@converts(aten._softmax)
def _softmax(x, dim, half_to_float=False):
    return F.softmax(x, dim)


@converts(aten._log_softmax)
def _log_softmax(x, dim, half_to_float=False):
    return F.log_softmax(x, dim)


@converts(aten.gelu)
def _gelu(x, approximate="none"):
    return F.gelu(x, approximate=approximate)


@converts(aten.silu)
def _silu(x):
    return F.silu(x)


@converts(aten.native_layer_norm)
def _native_layer_norm(x, normalized_shape, weight, bias, eps):
    out = F.layer_norm(x, tuple(normalized_shape), weight, bias, eps)
    dims = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    # mean and rstd are what the backward of PyTorch's kernel saves: kept
    # for graphs that return them (unused ones are dead code).
    mean = x.mean(dims, keepdim=True)
    var = ((x - mean) * (x - mean)).mean(dims, keepdim=True)
    return out, mean, (var + eps).rsqrt()


_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}  # at::Reduction


@converts(aten.nll_loss_forward)
def _nll_loss_forward(x, target, weight, reduction, ignore_index):
    loss = F.nll_loss(x, target, weight, ignore_index=ignore_index,
                      reduction=_REDUCTIONS[reduction])
    if _REDUCTIONS[reduction] == "none":  # ATen's total_weight is then 0
        return loss, _Importer.current.constant(np.zeros(()), x.dtype)
    valid = (target != ignore_index).to(x.dtype)
    if weight is not None:
        valid = valid * F.embedding(where(target != ignore_index, target, 0), weight)
    return loss, valid.sum()


@converts(aten.binary_cross_entropy)
def _binary_cross_entropy(x, target, weight=None, reduction=1):
    return F.binary_cross_entropy(x, target, weight, reduction=_REDUCTIONS[reduction])


@converts(aten.binary_cross_entropy_with_logits)
def _bce_with_logits(x, target, weight=None, pos_weight=None, reduction=1):
    return F.binary_cross_entropy_with_logits(x, target, weight, _REDUCTIONS[reduction],
                                              pos_weight)


@converts(aten.mse_loss)
def _mse_loss(x, target, reduction=1):
    return F.mse_loss(x, target, reduction=_REDUCTIONS[reduction])


@converts(aten.nll_loss_backward)
def _nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    """d loss / d x: -grad (/ total_weight for "mean") at each row's target
    class, weighted, 0 elsewhere and on ignored rows."""
    classes = x.shape[1] if x.ndim >= 2 else x.shape[0]
    class_dim = 1 if x.ndim >= 2 else 0
    iota_shape = [1] * x.ndim
    iota_shape[class_dim] = classes
    iota = _Importer.current.constant(np.arange(classes).reshape(iota_shape), target.dtype)
    keep = target != ignore_index
    t = target.unsqueeze(class_dim) if x.ndim >= 2 else target
    scale = -grad
    if _REDUCTIONS[reduction] == "mean":
        scale = scale / total_weight
    if _REDUCTIONS[reduction] == "none" and x.ndim >= 2:
        scale = scale.unsqueeze(class_dim)
    per_row = where(keep, 1.0, 0.0).to(x.dtype)
    if weight is not None:
        per_row = per_row * F.embedding(where(keep, target, 0), weight)
    if x.ndim >= 2:
        per_row = per_row.unsqueeze(class_dim)
    return where(t == iota, scale * per_row, 0.0).to(x.dtype)


@converts(aten.embedding_dense_backward)
def _embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    """The embedding table's gradient: each row of `grad` added at its index
    (graph.scatter_add), rows of padding_idx left 0."""
    if scale_grad_by_freq:
        raise UnsupportedOp(aten.embedding_dense_backward, "scale_grad_by_freq")
    width = grad.shape[indices.ndim:]
    if padding_idx is not None and padding_idx >= 0:
        grad = where((indices != padding_idx).reshape(*indices.shape, *[1] * len(width)),
                     grad, 0.0)
    base = _Importer.current.constant(np.zeros((num_weights, *width)), grad.dtype)
    return grad._wrap(grad._tracer.scatter_add(base._id, indices._id, grad._id))


@converts(aten.index.Tensor)
def _index_tensor(x, indices):
    """x[i0, i1, ...] with integer index tensors (None: a whole dimension),
    PyTorch's advanced indexing: the index tensors broadcast together to
    S; the result has S where the indexed dimensions were when they are
    adjacent, else first, then the dimensions not indexed. A gather of rows
    of x with its indexed dimensions moved first and merged."""
    indices = list(indices) + [None] * (x.ndim - len(indices))
    picked = [d for d, i in enumerate(indices) if i is not None]
    if any(indices[d].dtype == "i1" for d in picked):
        raise UnsupportedOp(aten.index.Tensor, "a boolean mask index (the result's shape "
                                               "depends on the data)")
    rest = [d for d in range(x.ndim) if d not in picked]
    adjacent = picked == list(range(picked[0], picked[-1] + 1))
    moved = x.permute(*(picked + rest)) if picked + rest != list(range(x.ndim)) else x
    sizes = [x.shape[d] for d in picked]
    flat = None
    for d, n in zip(picked, sizes):
        i = indices[d].to("i64")
        i = where(i < 0, i + n, i)
        flat = i if flat is None else flat * n + i
    rows = moved.reshape(int(np.prod(sizes)), *[x.shape[d] for d in rest])
    wide = rows.to("i32") if rows.dtype == "i1" else rows
    out = F.embedding(flat, wide)
    if rows.dtype == "i1":
        out = out != 0
    if adjacent and picked[0] > 0:  # S goes where the indexed dimensions were
        s = flat.ndim
        lead = list(range(s, s + picked[0]))
        out = out.permute(*(lead + list(range(s)) + list(range(s + picked[0], out.ndim))))
    return out


@converts(aten.gather)
def _gather(x, dim, index, sparse_grad=False):
    """out[.., i, ..] = x[.., index[.., i, ..], ..] along `dim`: a one-hot
    select and sum over x's extent along dim (PyTorch's cross-entropy
    decomposition gathers one element per row)."""
    dim %= x.ndim
    n = x.shape[dim]
    if any(s != t for d, (s, t) in enumerate(zip(index.shape, x.shape)) if d != dim):
        raise UnsupportedOp(aten.gather, f"index {list(index.shape)} differs from the input "
                                         f"{list(x.shape)} outside dim {dim}")
    iota_shape = [1] * (x.ndim + 1)
    iota_shape[dim + 1] = n
    iota = _Importer.current.constant(np.arange(n).reshape(iota_shape), index.dtype)
    hit = index.unsqueeze(dim + 1) == iota            # [.., k, n, ..]
    picked = where(hit, x.unsqueeze(dim), 0)
    return picked.sum(dim + 1)


# -- attention (scaled dot product) ---------------------------------------------------
#
# PyTorch's CPU SDPA is a forward op returning (output, logsumexp) and a
# backward op reading both. Each converts with exactly PyTorch's outputs,
# so either may run on either side of a partition boundary. (The math is
# materialised: the scores of a whole row block are built.)

def _kv_heads(x, heads, op):
    """Key/value heads [.., Hk, S, E] repeated to the query's `heads`
    (grouped-query attention: query head h reads key head h // (H / Hk))."""
    hk = x.shape[-3]
    if hk == heads:
        return x
    if heads % hk:
        raise UnsupportedOp(op, f"{heads} query heads over {hk} key/value heads "
                                "(the key/value heads must divide the query heads)")
    lead, (s, e) = x.shape[:-3], x.shape[-2:]
    return x.unsqueeze(-3).expand(*lead, hk, heads // hk, s, e).reshape(*lead, heads, s, e)


def _kv_heads_grad(g, hk, op):
    """The gradient of _kv_heads: each key/value head sums its group's."""
    heads = g.shape[-3]
    if hk == heads:
        return g
    lead, (s, e) = g.shape[:-3], g.shape[-2:]
    return g.reshape(*lead, hk, heads // hk, s, e).sum(-3)


def _attention_scores(q, k, attn_mask, is_causal, scale):
    """q k^T * scale, masked: -inf above the diagonal when causal (the
    diagonal aligned top-left, as PyTorch's tril), -inf where a boolean mask
    is False, a float mask added."""
    scale = (1.0 / float(np.sqrt(q.shape[-1]))) if scale is None else float(scale)
    s = (q @ k.transpose(-2, -1)) * scale
    rows, cols = s.shape[-2], s.shape[-1]
    if is_causal:
        keep = _Importer.current.constant(np.tril(np.ones((rows, cols), bool)), "i1")
        s = where(keep, s, float("-inf"))
    if attn_mask is not None:
        s = where(attn_mask, s, float("-inf")) if attn_mask.dtype == "i1" \
            else s + attn_mask.to(s.dtype)
    return s, scale


def _no_dropout(op, dropout_p):
    if dropout_p:
        raise UnsupportedOp(op, f"dropout_p={dropout_p} (attention dropout runs in PyTorch)")


@converts(aten._scaled_dot_product_flash_attention_for_cpu)
def _sdpa_flash_cpu(q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None):
    """(output, logsumexp [B, H, L] of the scaled, masked scores)."""
    op = aten._scaled_dot_product_flash_attention_for_cpu
    _no_dropout(op, dropout_p)
    heads = q.shape[-3]
    s, _ = _attention_scores(q, _kv_heads(k, heads, op), attn_mask, is_causal, scale)
    out = F.softmax(s, -1) @ _kv_heads(v, heads, op)
    return out.to(q.dtype), s.logsumexp(-1).to("f32")


@converts(aten._scaled_dot_product_flash_attention_for_cpu_backward)
def _sdpa_flash_cpu_backward(grad_out, q, k, v, out, lse, dropout_p, is_causal,
                             attn_mask=None, scale=None):
    """(dq, dk, dv) from the probabilities recomputed from the saved
    logsumexp: dv = p^T dO, ds = p * (dO v^T - rowsum(dO * O)),
    dq = ds k * scale, dk = ds^T q * scale."""
    op = aten._scaled_dot_product_flash_attention_for_cpu_backward
    _no_dropout(op, dropout_p)
    heads, hk = q.shape[-3], k.shape[-3]
    kx, vx = _kv_heads(k, heads, op), _kv_heads(v, heads, op)
    s, scale = _attention_scores(q, kx, attn_mask, is_causal, scale)
    p = (s - lse.to(s.dtype).unsqueeze(-1)).exp()
    dv = p.transpose(-2, -1) @ grad_out
    delta = (grad_out * out).sum(-1, keepdim=True)
    ds = p * (grad_out @ vx.transpose(-2, -1) - delta)
    dq = (ds @ kx) * scale
    dk = (ds.transpose(-2, -1) @ q) * scale
    return dq, _kv_heads_grad(dk, hk, op), _kv_heads_grad(dv, hk, op)


@converts(aten._scaled_dot_product_attention_math)
def _sdpa_math(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, dropout_mask=None,
               scale=None, enable_gqa=False):
    """(output, the attention probabilities)."""
    op = aten._scaled_dot_product_attention_math
    _no_dropout(op, dropout_p if dropout_mask is None else 0.0)
    heads = q.shape[-3]
    s, _ = _attention_scores(q, _kv_heads(k, heads, op), attn_mask, is_causal, scale)
    p = F.softmax(s, -1)
    if dropout_p and dropout_mask is not None:
        p = where(dropout_mask, p * (1.0 / (1.0 - dropout_p)), 0.0)
    return p @ _kv_heads(v, heads, op), p


@converts(aten.scaled_dot_product_attention)
def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
          enable_gqa=False):
    op = aten.scaled_dot_product_attention
    _no_dropout(op, dropout_p)
    heads = q.shape[-3]
    s, _ = _attention_scores(q, _kv_heads(k, heads, op), attn_mask, is_causal, scale)
    return F.softmax(s, -1) @ _kv_heads(v, heads, op)


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

    def uniform(self, shape, dtype):
        """U[0, 1) of `shape` from the graph's seed, a new stream per call."""
        if self._seed is None:
            raise UnsupportedOp("random numbers (rand, bernoulli, dropout)",
                                "the graph has no seed input")
        seed = self._seed if isinstance(self._seed, Tensor) else _lift(self._tracer,
                                                                       np.int64(self._seed))
        self._stream += 1
        t = self._tracer
        return Tensor(t, t.random_uniform(seed._id, dtype_name(dtype), list(shape),
                                          self._stream))

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
        try:
            if (n.op == "call_function" and n.target is not operator.getitem
                    and _conversion(n.target) is None and is_constant(n)):
                out = self._folded(n)
            else:
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
    importer = _Importer(gm, tracer, seed)
    previous, _Importer.current = _Importer.current, importer
    try:
        return importer.run(*inputs)
    finally:
        _Importer.current = previous
