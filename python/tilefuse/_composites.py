"""PyTorch functions built from graph primitives in Python.

Each function here has PyTorch's semantics (forward values and derivative
conventions), and is written from primitive ops that fuse: no function
here adds a pass over memory that its PyTorch counterpart does not need.
Where a derivative must differ from what autodiff of the formula gives, the
formula says so with detach() (graph.stop_gradient).
"""
import math

import numpy as np

from ._core import CompileError
from ._dtypes import is_float
from ._attention import fused_attention
from ._tracing import Tensor, _lift, cat, where


def _tensor(x, what):
    if not isinstance(x, Tensor):
        raise CompileError(f"{what}: expects a traced tensor, got {type(x).__name__}")
    return x


def _unary(x, op):
    return x._call("unary", op, x._id)


def _float(x):
    """Integer and boolean tensors become float32 (PyTorch's default float)."""
    return x if is_float(x.dtype) else x.to("f32")


def _dims(x, dim, what):
    if dim is None:
        return list(range(x.ndim))
    dims = list(dim) if isinstance(dim, (list, tuple)) else [dim]
    return sorted({x._dim(d, what) for d in dims})


def _reduce(x, op, dims, keepdim):
    return x._call("reduce", op, x._id, dims, keepdim)


def _all(*conds):
    """Elementwise logical and of boolean tensors."""
    out = conds[0]
    for c in conds[1:]:
        out = where(out, c, False)
    return out


def _xor(a, b):
    return a != b


# -- elementwise ---------------------------------------------------------------

def log1p(x):
    return _unary(_float(_tensor(x, "log1p")), "log1p")


def expm1(x):
    return _unary(_float(_tensor(x, "expm1")), "expm1")


def floor(x):
    x = _tensor(x, "floor")
    return _unary(x, "floor") if is_float(x.dtype) else x


def ceil(x):
    x = _tensor(x, "ceil")
    return -floor(-x) if is_float(x.dtype) else x


def trunc(x):
    x = _tensor(x, "trunc")
    return where(x < 0, ceil(x), floor(x)) if is_float(x.dtype) else x


def detach(x):
    """The same values, with no gradient flowing back (PyTorch's detach)."""
    return _unary(_tensor(x, "detach"), "stop_gradient")


def clamp(x, min=None, max=None):
    """PyTorch's clamp: NaN stays NaN; where min > max the result is max; the
    gradient passes where min <= x <= max (bounds included), else goes to
    the bound that was taken."""
    x = _tensor(x, "clamp")
    if min is None and max is None:
        raise CompileError("clamp: at least one of min and max must be given")
    lo = None if min is None else _lift(x._tracer, min, x)
    hi = None if max is None else _lift(x._tracer, max, x)
    inside = _all(*[c for c in ((x >= lo) if lo is not None else None,
                                (x <= hi) if hi is not None else None) if c is not None])
    outside = detach(x)
    if lo is not None:
        outside = where(outside < lo, lo, outside)
    if hi is not None:
        outside = where(outside > hi, hi, outside)
    return where(inside, x, outside)


def softplus(x, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold."""
    x = _float(_tensor(x, "softplus"))
    z = x * float(beta)
    linear = z > float(threshold)
    # exp of the capped input: the branch not taken must not overflow, or its
    # zero cotangent times an infinite derivative would make NaN.
    capped = where(linear, float(threshold), z)
    return where(linear, x, log1p(capped.exp()) / float(beta))


# -- reductions ------------------------------------------------------------------

def logsumexp(x, dim, keepdim=False):
    """log(sum(exp(x))) over `dim`, shifted by the (gradient-free) maximum;
    infinite maxima shift by 0, as PyTorch."""
    x = _float(_tensor(x, "logsumexp"))
    dims = _dims(x, dim, "logsumexp")
    shift = detach(_reduce(x, "max", dims, True))
    shift = where(shift.abs() == math.inf, 0.0, shift)
    out = _reduce((x - shift).exp(), "sum", dims, True).log() + shift
    return out if keepdim else out.reshape([s for d, s in enumerate(out.shape) if d not in dims])


def var(x, dim=None, unbiased=None, keepdim=False, correction=None):
    """Variance over `dim` with Bessel's correction (correction=1) by
    default, as torch.var; unbiased=False means correction=0."""
    x = _float(_tensor(x, "var"))
    if unbiased is not None and correction is not None:
        raise CompileError("var/std: give unbiased or correction, not both")
    c = 1 if correction is None and unbiased is None else (
        correction if correction is not None else int(bool(unbiased)))
    dims = _dims(x, dim, "var")
    n = int(np.prod([x.shape[d] for d in dims], dtype=np.int64))
    mean = _reduce(x, "sum", dims, True) / float(max(n, 1))
    d = x - mean
    return _reduce(d * d, "sum", dims, keepdim) / float(max(n - c, 0))


def std(x, dim=None, unbiased=None, keepdim=False, correction=None):
    return var(x, dim, unbiased, keepdim, correction).sqrt()


def cumsum(x, dim):
    """Inclusive prefix sum along `dim` (log2(n) shifted adds, exact for
    integers); integer and boolean inputs sum in int64, as PyTorch."""
    x = _tensor(x, "cumsum")
    d = x._dim(dim, "cumsum")
    if not is_float(x.dtype):
        x = x.to("i64")
    n = x.shape[d]
    shift = 1
    while shift < n:
        zero_shape = list(x.shape)
        zero_shape[d] = shift
        zeros = Tensor(x._tracer, x._tracer.full(0.0, x.dtype, zero_shape))
        keep = [slice(None)] * x.ndim
        keep[d] = slice(0, n - shift)
        x = x + cat([zeros, x[tuple(keep)]], d)
        shift *= 2
    return x


# -- layout ------------------------------------------------------------------------

def split(x, split_size_or_sections, dim=0):
    """Tuple of views along `dim`: chunks of split_size (the last smaller), or
    the given list of section sizes (which must add up to the dim)."""
    x = _tensor(x, "split")
    d = x._dim(dim, "split")
    n = x.shape[d]
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise CompileError(f"split: sections {sizes} do not add up to dim {d} of size {n} "
                               f"(shape {list(x.shape)})")
    else:
        size = int(split_size_or_sections)
        if size <= 0:
            raise CompileError(f"split: split_size must be positive, got {size}")
        sizes = [min(size, n - s) for s in range(0, n, size)] or [0]
    out, start = [], 0
    for s in sizes:
        key = [slice(None)] * x.ndim
        key[d] = slice(start, start + s)
        out.append(x[tuple(key)])
        start += s
    return tuple(out)


def chunk(x, chunks, dim=0):
    """torch.chunk: pieces of ceil(n / chunks) (possibly fewer pieces)."""
    x = _tensor(x, "chunk")
    if int(chunks) <= 0:
        raise CompileError(f"chunk: chunks must be positive, got {chunks}")
    n = x.shape[x._dim(dim, "chunk")]
    return split(x, max(1, -(-n // int(chunks))), dim)


def flip(x, dims):
    """Reverses the order of elements along each of `dims`."""
    x = _tensor(x, "flip")
    for d in _dims(x, dims, "flip"):
        n = x.shape[d]
        if n <= 1:
            continue
        perm = [d] + [k for k in range(x.ndim) if k != d]
        moved = x.permute(perm)
        rows = Tensor(x._tracer, x._tracer.constant(np.arange(n - 1, -1, -1, dtype=np.int64)))
        flipped = moved[rows]
        x = flipped.permute(list(np.argsort(perm)))
    return x


def one_hot(ids, num_classes=-1):
    """int64 one-hot rows [..., num_classes] of integer `ids` (PyTorch's
    F.one_hot; num_classes must be given: a trace cannot read the ids)."""
    ids = _tensor(ids, "one_hot")
    if is_float(ids.dtype):
        raise CompileError(f"one_hot: expects integer class ids, got {ids.dtype}")
    if num_classes is None or int(num_classes) < 0:
        raise CompileError("one_hot: pass num_classes (a traced function cannot infer it "
                           "from the values of its input)")
    classes = Tensor(ids._tracer, ids._tracer.constant(np.arange(int(num_classes), dtype=np.int64)))
    return (ids.to("i64").unsqueeze(-1) == classes).to("i64")


# -- arithmetic ----------------------------------------------------------------------

def fmod(a, b):
    """C's fmod / torch.fmod: the remainder has the sign of `a`."""
    return a._binary("rem", b) if isinstance(a, Tensor) else b._binary("rem", a, True)


def remainder(a, b):
    """Python's and torch's `%`: the remainder has the sign of `b`."""
    r = fmod(a, b)
    b = r._lift(b)
    fix = _all(r != 0, _xor(r < 0, b < 0))
    return where(fix, r + b, r)


def floor_divide(a, b):
    """Python's and torch's `//`: floor(a / b), computed as PyTorch does
    (through fmod, so that e.g. 1 // 0.1 is 9 as in Python)."""
    if not isinstance(a, Tensor):
        a = b._lift(a)
    b = a._lift(b)
    if not is_float(a.dtype) and not is_float(b.dtype):
        q = a._binary("trunc_div", b)  # rounds toward zero
        r = a - q * b
        return where(_all(r != 0, _xor(r < 0, b < 0)), q - 1, q)
    mod = fmod(a, b)
    div = (a - mod) / b
    div = where(_all(mod != 0, _xor(b < 0, mod < 0)), div - 1, div)
    fl = floor(div)
    fl = where(div - fl > 0.5, fl + 1, fl)
    quotient = a / b
    signed_zero = where(quotient < 0, -0.0, 0.0)
    return where(b == 0, quotient, where(div != 0, fl, signed_zero))


# -- losses and attention ------------------------------------------------------------

def _reduce_loss(loss, reduction, what):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise CompileError(f"{what}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean",
                                     pos_weight=None):
    """PyTorch's stable form: (1 - t) x + w_pos (log1p(exp(-|x|)) + max(-x, 0)),
    with w_pos = 1 + (pos_weight - 1) t."""
    x = _float(_tensor(input, "binary_cross_entropy_with_logits"))
    t = _lift(x._tracer, target, x)
    if tuple(t.shape) != tuple(x.shape):
        raise CompileError(f"binary_cross_entropy_with_logits: target shape {list(t.shape)} "
                           f"differs from input shape {list(x.shape)}")
    softplus_neg = log1p((-x.abs()).exp()) + (-x).maximum(0.0)
    if pos_weight is not None:
        pw = _lift(x._tracer, pos_weight, x)
        softplus_neg = (1.0 + (pw - 1.0) * t) * softplus_neg
    loss = (1.0 - t) * x + softplus_neg
    if weight is not None:
        loss = loss * _lift(x._tracer, weight, x)
    return _reduce_loss(loss, reduction, "binary_cross_entropy_with_logits")


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, seed=None):
    """softmax(q k^T * scale + mask) v over the last two dims (PyTorch's
    F.scaled_dot_product_attention); a boolean mask keeps where True, a float
    mask is added; is_causal keeps j <= i. f32 operands become one
    graph.attention (the fused kernels); others are written out with matmul
    and softmax. Dropout (dropout_p > 0) draws its mask from `seed`, a 0-d
    int64 traced tensor, as F.dropout does: the written-out form, which the
    compiler fuses into graph.attention where the mask is causal, constant
    or absent."""
    q = _float(_tensor(query, "scaled_dot_product_attention"))
    k = _lift(q._tracer, key, q)
    v = _lift(q._tracer, value, q)
    if dropout_p and seed is None:
        raise CompileError("scaled_dot_product_attention: dropout_p > 0 needs seed=, a 0-d "
                           "int64 tensor argument of the traced function (as F.dropout), so "
                           "masks are reproducible")
    if not 0 <= dropout_p < 1:
        raise CompileError(f"scaled_dot_product_attention: dropout_p must be in [0, 1), got "
                           f"{dropout_p}")
    if is_causal and attn_mask is not None:
        raise CompileError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2 or q.shape[-1] != k.shape[-1] or \
            k.shape[-2] != v.shape[-2]:
        raise CompileError(
            f"scaled_dot_product_attention: expects query [..., L, E], key [..., S, E], "
            f"value [..., S, Ev]; got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    mask = None if attn_mask is None else _lift(q._tracer, attn_mask)
    fused = None if dropout_p else fused_attention(q, k, v, mask, scale, is_causal)
    if fused is not None:  # graph.attention: no L x S scores in memory
        return fused[0]
    factor = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = (q @ k.transpose(-2, -1)) * factor
    L, S = q.shape[-2], k.shape[-2]
    if is_causal:
        keep = Tensor(q._tracer, q._tracer.constant(np.tril(np.ones((L, S), dtype=bool))))
        scores = where(keep, scores, -math.inf)
    elif mask is not None:
        scores = where(mask, scores, -math.inf) if mask.dtype == "i1" else scores + mask.to(
            scores.dtype)
    weights = Tensor(q._tracer, q._tracer.softmax(scores._id, -1))
    if dropout_p:
        from .functional import dropout
        weights = dropout(weights, dropout_p, True, seed=seed)
    return weights @ v


# -- activations and normalization -----------------------------------------------------

def _float_only(x, what):
    x = _tensor(x, what)
    if not is_float(x.dtype):
        raise CompileError(f"{what}: expects a floating-point tensor, got {x.dtype} "
                           f"{list(x.shape)} (as PyTorch); cast it first with x.float()")
    return x


def leaky_relu(input, negative_slope=0.01, inplace=False):
    """x where x > 0, else negative_slope * x (the gradient at 0 is
    negative_slope, as PyTorch's)."""
    x = _float_only(input, "leaky_relu")
    if inplace:
        raise CompileError("leaky_relu(inplace=True): a traced tensor cannot be changed in "
                           "place; use the returned tensor (inplace=False)")
    return where(x > 0, x, x * float(negative_slope))


# torch.finfo(dtype).eps: rms_norm's default eps.
_FINFO_EPS = {"f32": 2.0 ** -23, "f64": 2.0 ** -52, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """PyTorch's F.rms_norm: x / sqrt(mean(x^2) + eps) * weight over the
    trailing `normalized_shape` dims; eps defaults to the input dtype's
    machine epsilon (torch.finfo(dtype).eps); f16/bf16 compute in f32."""
    x = _float_only(input, "rms_norm")
    shape = (int(normalized_shape),) if isinstance(normalized_shape, (int, np.integer)) \
        else tuple(int(s) for s in normalized_shape)
    k = len(shape)
    if k == 0 or k > x.ndim or tuple(x.shape[x.ndim - k:]) != shape:
        raise CompileError(f"rms_norm: normalized_shape {list(shape)} does not match the "
                           f"trailing dimensions of the input {list(x.shape)}")
    low = x.dtype in ("f16", "bf16")
    xc = x.to("f32") if low else x
    dims = list(range(x.ndim - k, x.ndim))
    e = _FINFO_EPS[x.dtype] if eps is None else float(eps)
    y = xc * ((xc * xc).mean(dims, keepdim=True) + e).rsqrt()
    if weight is not None:
        w = _lift(x._tracer, weight, x)
        if tuple(w.shape) != shape:
            raise CompileError(f"rms_norm: weight has shape {list(w.shape)}; it must have the "
                               f"normalized shape {list(shape)}")
        y = y * (w if w.dtype == y.dtype else w.to(y.dtype))
    return y.to(x.dtype) if low else y


def _vector_norm(x, p, d):
    """The p-norm of `x` along `d` (kept), with a zero gradient, not NaN,
    where the norm is 0 (as PyTorch's)."""
    if p == math.inf:
        return _reduce(x.abs(), "max", [d], True)
    if p == -math.inf:
        return _reduce(x.abs(), "min", [d], True)
    if p == 0:
        return _reduce((x != 0).to(x.dtype), "sum", [d], True)
    if p == 1:
        return _reduce(x.abs(), "sum", [d], True)
    s = _reduce(x * x if p == 2 else x.abs() ** p, "sum", [d], True)
    positive = s > 0
    safe = where(positive, s, 1.0)
    return where(positive, safe.sqrt() if p == 2 else safe ** (1.0 / p), 0.0)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """PyTorch's F.normalize: x / max(||x||_p, eps) along `dim`."""
    x = _float_only(input, "normalize")
    if out is not None:
        raise CompileError("normalize(out=...): a traced tensor cannot be written in place; "
                           "use the returned tensor")
    d = x._dim(dim, "normalize")
    return x / clamp(_vector_norm(x, float(p), d), min=float(eps))


_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def pad(input, pad, mode="constant", value=None):
    """PyTorch's F.pad: `pad` lists (left, right) amounts from the last dim
    backwards: (1, 2) pads the last dim by 1 before and 2 after, (1, 2, 3, 4)
    also the dim before it by 3 and 4. "constant" fills with `value` (0)
    and crops where an amount is negative; "reflect" mirrors without the
    edge (an amount < that dim's size), "replicate" repeats the edge,
    "circular" wraps around (an amount <= the size); those three take
    amounts >= 0, on any of the last len(pad) // 2 dims."""
    x = _tensor(input, "pad")
    amounts = [int(a) for a in pad]
    if len(amounts) % 2:
        raise CompileError(f"pad: the padding length must be divisible by 2, got {amounts}")
    if len(amounts) // 2 > x.ndim:
        raise CompileError(f"pad: {amounts} pads {len(amounts) // 2} dims; the input "
                           f"{list(x.shape)} has {x.ndim}")
    if mode not in _PAD_MODES:
        raise CompileError(f"pad: mode must be one of {', '.join(_PAD_MODES)}, got {mode!r}")
    if mode != "constant":
        if value is not None and value != 0:
            raise CompileError(f"pad: mode {mode!r} takes no value (only 'constant' fills "
                               f"with one), got value={value}")
        if any(a < 0 for a in amounts):
            raise CompileError(f"pad: mode {mode!r} takes amounts >= 0, got {amounts}; crop "
                               f"with a slice (or mode='constant', whose negative amounts "
                               f"crop) first")
    for i in range(len(amounts) // 2):
        d = x.ndim - 1 - i
        x = _pad_dim(x, d, amounts[2 * i], amounts[2 * i + 1], mode,
                     0.0 if value is None else float(value), amounts)
    return x


def _take(x, d, start, stop):
    key = [slice(None)] * x.ndim
    key[d] = slice(start, stop)
    return x[tuple(key)]


def _pad_dim(x, d, left, right, mode, value, amounts):
    n = x.shape[d]
    if n + left + right < 0:
        raise CompileError(f"pad: {amounts} leaves dim {d} of {list(x.shape)} with a negative "
                           f"size {n + left + right}")
    if left < 0 or right < 0:  # constant mode: negative amounts crop
        x = _take(x, d, max(-left, 0), n - max(-right, 0))
        left, right, n = max(left, 0), max(right, 0), x.shape[d]
    if left == 0 and right == 0:
        return x
    if mode == "reflect" and max(left, right) >= n:
        raise CompileError(f"pad: mode 'reflect' needs amounts smaller than the dim's size: "
                           f"{amounts} on dim {d} of size {n} (input {list(x.shape)})")
    if mode == "replicate" and n == 0:
        raise CompileError(f"pad: mode 'replicate' cannot pad dim {d} of size 0")
    if mode == "circular" and max(left, right) > n:
        raise CompileError(f"pad: mode 'circular' needs amounts at most the dim's size: "
                           f"{amounts} on dim {d} of size {n} (input {list(x.shape)})")

    def piece(size, at_start):
        if mode == "constant":
            shape = list(x.shape)
            shape[d] = size
            return Tensor(x._tracer, x._tracer.full(value, x.dtype, shape))
        if mode == "replicate":
            shape = list(x.shape)
            shape[d] = size
            edge = _take(x, d, 0, 1) if at_start else _take(x, d, n - 1, n)
            return edge.expand(shape)
        if mode == "reflect":
            part = _take(x, d, 1, size + 1) if at_start else _take(x, d, n - 1 - size, n - 1)
            return flip(part, [d])
        return _take(x, d, n - size, n) if at_start else _take(x, d, 0, size)  # circular

    parts = ([piece(left, True)] if left else []) + [x] + ([piece(right, False)] if right else [])
    return cat(parts, d)
