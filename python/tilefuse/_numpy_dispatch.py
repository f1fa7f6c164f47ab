"""numpy functions on traced tensors: the ufuncs (__array_ufunc__) and the
array functions (__array_function__) that build graph ops, and the errors
for those that do not."""
import collections

import numpy as np

from ._core import CompileError
from ._dtypes import dtype_name, is_float
from ._location import _user_location, _where
from ._tracing import Tensor, _lift, cat, stack, where


def np_name(func):
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


def numpy_ufunc(ufunc, method, inputs, kwargs):
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


NUMPY_FUNCTIONS = {}
_NOVALUE = object()  # numpy passes only the arguments given: this default means "not given"


def _implements(*funcs):
    def register(impl):
        for f in funcs:
            NUMPY_FUNCTIONS[f] = impl
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
