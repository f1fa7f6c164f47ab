"""PyTorch-style functions on traced tensors (`import tilefuse.functional as F`).

Composite functions (softmax, layer_norm, losses, ...) become one composite
graph op each, so later passes can choose a hand-written rule for them.

Losses follow PyTorch: `cross_entropy` and `nll_loss` take the classes in
dimension 1 -- input [N, C] with target [N], [N, C, d1, ...] with target
[N, d1, ...], or [C] with a 0-d target -- with `weight=`, `ignore_index=`,
`reduction='mean'|'sum'|'none'` and (cross_entropy) `label_smoothing=` and
class-probability targets of the input's shape. Sequence logits [B, T, V]
therefore need `F.cross_entropy(logits.reshape(-1, V), target.reshape(-1))`
(or `logits.permute(0, 2, 1)`), exactly as in PyTorch.
"""
import numpy as np

from . import _interpolate, _pooling
from ._core import CompileError
from ._dtypes import is_float
from ._tracing import _RETURN_TYPES, Tensor, _lift, _pair_misuse, _user_location, _where, where


def _tensor(x, what):
    for name, pair in _RETURN_TYPES.items():
        if isinstance(x, pair):
            raise CompileError(f"{what}: {_pair_misuse(name)}")
    if not isinstance(x, Tensor):
        raise CompileError(f"{what}: expects a traced tensor, got {type(x).__name__}")
    return x


def _apply(method, x, *args, what):
    x = _tensor(x, what)
    _user_location(x._tracer)
    return x._wrap(getattr(x._tracer, method)(*args))


def relu(x):
    return _apply("unary", x, "relu", _tensor(x, "relu")._id, what="relu")


def silu(x):
    return _apply("unary", x, "silu", _tensor(x, "silu")._id, what="silu")


def sigmoid(x):
    return _apply("unary", x, "sigmoid", _tensor(x, "sigmoid")._id, what="sigmoid")


def tanh(x):
    return _tensor(x, "tanh").tanh()


def gelu(x, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise CompileError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _apply("gelu", x, _tensor(x, "gelu")._id, approximate, what="gelu")


def softmax(x, dim=-1):
    return _apply("softmax", x, _tensor(x, "softmax")._id, dim, what="softmax")


def log_softmax(x, dim=-1):
    return _apply("log_softmax", x, _tensor(x, "log_softmax")._id, dim, what="log_softmax")


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalises over the trailing `normalized_shape` dims; weight and bias
    have that shape (ones and zeros when not given, as PyTorch)."""
    x = _tensor(x, "layer_norm")
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    if tuple(normalized_shape) != tuple(x.shape[len(x.shape) - len(normalized_shape):]):
        raise CompileError(
            f"layer_norm: normalized_shape {tuple(normalized_shape)} does not match the "
            f"trailing dimensions of the input {x.shape}"
        )
    shape = tuple(normalized_shape)
    dtype = np.float32 if x.dtype == "f32" else np.float64
    w = _lift(x._tracer, np.ones(shape, dtype) if weight is None else weight, x)
    b = _lift(x._tracer, np.zeros(shape, dtype) if bias is None else bias, x)
    if w.dtype != x.dtype:
        w = w.to(x.dtype)
    if b.dtype != x.dtype:
        b = b.to(x.dtype)
    return _apply("layer_norm", x, x._id, w._id, b._id, float(eps), what="layer_norm")


def linear(x, weight, bias=None):
    """x @ weight.T + bias, weight [out, in] (PyTorch layout)."""
    x = _tensor(x, "linear")
    w = _lift(x._tracer, weight, x)
    b = -1 if bias is None else _lift(x._tracer, bias, x)._id
    return _apply("linear", x, x._id, w._id, b, what="linear")


def embedding(ids, table):
    """Rows of `table` [V, D...] at integer `ids` [...] -> [..., D...]."""
    table = _tensor(table, "embedding")
    ids = _lift(table._tracer, ids)
    return _apply("gather", table, table._id, ids._id, what="embedding")


def dropout(x, p=0.5, training=True, seed=None):
    """Inverted dropout; the mask comes from graph.random_uniform(seed), a
    0-d int64 traced tensor, so it is reproducible on every target."""
    x = _tensor(x, "dropout")
    if not training or p == 0:
        return x
    if not 0 <= p < 1:
        raise CompileError(f"dropout: p must be in [0, 1), got {p}")
    if seed is None:
        raise CompileError(
            "dropout: training mode needs seed=, a 0-d int64 tensor argument of the traced "
            "function (e.g. np.int64(step)), so masks are reproducible"
        )
    seed = _lift(x._tracer, seed)
    return _apply("dropout", x, x._id, seed._id, float(p), what="dropout")


# ---------------------------------------------------------------------------
# Losses (PyTorch semantics)
# ---------------------------------------------------------------------------
def _type_text(t):
    """`tensor<3x4xf32>`, as the tracer's own messages write types."""
    return "tensor<" + "".join(f"{s}x" for s in t.shape) + f"{t.dtype}>"


def _reduction(what, reduction, size_average, reduce):
    """PyTorch's reduction, including its deprecated size_average/reduce pair."""
    if size_average is not None or reduce is not None:
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        return "mean" if size_average and reduce else "sum" if reduce else "none"
    if reduction not in ("mean", "sum", "none"):
        raise CompileError(f"{what}: reduction must be 'mean', 'sum' or 'none', got "
                           f"{reduction!r}{_where()}")
    return reduction


def _as_dtype_of(t, x):
    """`t` cast to the floating dtype of `x` (a float64 numpy weight must not
    turn an f32 loss into f64)."""
    return t if t.dtype == x.dtype else t.to(x.dtype)


def _class_weight(what, x, weight, classes):
    if weight is None:
        return None
    w = _lift(x._tracer, weight, x)
    if w.shape != (classes,):
        raise CompileError(f"{what}: weight must hold one value per class, shape [{classes}] "
                           f"for input {_type_text(x)}, got {_type_text(w)}{_where()}")
    if not is_float(w.dtype):
        w = w.to(x.dtype)
    return _as_dtype_of(w, x)


def _class_target(what, x, target, allow_probs):
    """Lifts and checks `target` against input `x` (classes in dim 1, or dim 0
    of a 1-d input); returns (target, is_probabilities)."""
    t = _lift(x._tracer, target)
    if x.ndim == 0:
        raise CompileError(f"{what}: the input needs a class dimension: [C], [N, C] or "
                           f"[N, C, d1, ...]; got a 0-d {_type_text(x)}{_where()}")
    if allow_probs and t.shape == x.shape:
        if not is_float(t.dtype):
            raise CompileError(
                f"{what}: a target of the input's shape holds class probabilities and must "
                f"be floating-point, got {_type_text(t)} for input {_type_text(x)}; class "
                f"indices have the input's shape without its class dim 1{_where()}")
        return _as_dtype_of(t, x), True
    expected = () if x.ndim == 1 else (x.shape[0],) + x.shape[2:]
    if t.shape != expected or t.dtype not in ("i32", "i64"):
        probs = (" (or float class probabilities of the input's shape)" if allow_probs
                 else "")
        raise CompileError(
            f"{what}: target {_type_text(t)} does not fit input {_type_text(x)}: the classes "
            f"are dim {0 if x.ndim == 1 else 1} of the input (as in PyTorch), so the target "
            f"must hold integer class indices of shape {list(expected)}{probs}. For "
            f"sequence logits [B, T, C] with targets [B, T], pass logits.reshape(-1, C) and "
            f"target.reshape(-1){_where()}")
    return t, False


def _classes_last(x):
    """[N, C, d1, ...] -> [N, d1, ..., C]; [C] and [N, C] unchanged."""
    if x.ndim <= 2:
        return x
    return x.permute([0] + list(range(2, x.ndim)) + [1])


def _class_index_loss(x, t, log_probs, weight, ignore_index, reduction, smoothing):
    """PyTorch's nll_loss / cross_entropy on class indices, composed from
    elementwise ops and sums: rows [M, C] with the classes last."""
    classes = x.shape[0] if x.ndim == 1 else x.shape[1]
    logp = _classes_last(log_probs).reshape(-1, classes)
    rows = t.reshape(-1)
    _user_location(x._tracer)
    iota = x._wrap(x._tracer.constant(np.arange(classes, dtype=np.int64)))
    hit = rows.unsqueeze(1) == iota                        # one-hot [M, C]
    valid = rows != int(ignore_index)
    picked = where(hit, logp, 0.0).sum(1)                  # logp[m, t[m]]
    # A target outside [0, C) would pick nothing, a silent zero loss: a
    # gather of zero rows checks each non-ignored target at run time (as
    # embedding ids are checked) and adds exactly 0.
    no_rows = x._wrap(x._tracer.full(0.0, logp.dtype, [classes, 1]))
    safe = where(valid, rows, 0)
    picked = picked + x._wrap(x._tracer.gather(no_rows._id, safe._id)).reshape(-1)
    if weight is None:
        nll = where(valid, -picked, 0.0)
        denom = valid.to(x.dtype).sum()
    else:
        row_weight = where(valid, where(hit, weight, 0.0).sum(1), 0.0)
        nll = where(valid, -picked * row_weight, 0.0)
        denom = row_weight.sum()
    loss = nll
    if smoothing:
        smooth = -(logp if weight is None else logp * weight).sum(1)
        loss = (1.0 - smoothing) * nll + (smoothing / classes) * where(valid, smooth, 0.0)
    if reduction == "none":
        return loss.reshape(t.shape)
    total = loss.sum()
    return total if reduction == "sum" else total / denom


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """torch.nn.functional.cross_entropy: softmax cross-entropy with the classes
    in dim 1 -- input [N, C] / target [N], [N, C, d1, ...] / [N, d1, ...], or
    [C] / 0-d -- with integer class indices (targets equal to `ignore_index`
    contribute nothing; 'mean' divides by the summed `weight` of the others,
    or their count), or float class probabilities of the input's shape.
    `label_smoothing` mixes in the uniform distribution, as PyTorch does."""
    what = "cross_entropy"
    x = _tensor(input, what)
    reduction = _reduction(what, reduction, size_average, reduce)
    t, probs = _class_target(what, x, target, allow_probs=True)
    smoothing = float(label_smoothing)
    if not 0.0 <= smoothing <= 1.0:
        raise CompileError(f"{what}: label_smoothing must be in [0, 1], got "
                           f"{label_smoothing}{_where()}")
    classes = x.shape[0] if x.ndim == 1 else x.shape[1]
    w = _class_weight(what, x, weight, classes)
    class_dim = 0 if x.ndim == 1 else 1
    if probs:
        if int(ignore_index) >= 0:
            raise CompileError(f"{what}: ignore_index is not supported with class-probability "
                               f"(floating-point) targets{_where()}")
        logp = log_softmax(x, class_dim)
        if smoothing:
            t = t * (1.0 - smoothing) + smoothing / classes
        if w is not None:
            t = t * w.reshape([classes] + [1] * (x.ndim - 1 - class_dim))
        per = -(logp * t).sum(class_dim)
        if reduction == "none":
            return per
        total = per.sum()
        return total if reduction == "sum" else total / float(x.numel() // classes)
    if reduction == "mean" and w is None and not smoothing:
        # The fused composite takes the classes last.
        xl = _classes_last(x)
        return _apply("cross_entropy", xl, xl._id, t._id, int(ignore_index), what=what)
    return _class_index_loss(x, t, log_softmax(x, class_dim), w, ignore_index, reduction,
                             smoothing)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """torch.nn.functional.nll_loss on log-probabilities with the classes in
    dim 1 (input [N, C] / target [N], [N, C, d1, ...] / [N, d1, ...], or
    [C] / 0-d); `weight`, `ignore_index` and `reduction` as PyTorch."""
    what = "nll_loss"
    x = _tensor(input, what)
    reduction = _reduction(what, reduction, size_average, reduce)
    t, _ = _class_target(what, x, target, allow_probs=False)
    classes = x.shape[0] if x.ndim == 1 else x.shape[1]
    w = _class_weight(what, x, weight, classes)
    if reduction == "mean" and w is None:
        xl = _classes_last(x)
        return _apply("nll", xl, xl._id, t._id, int(ignore_index), what=what)
    return _class_index_loss(x, t, x, w, ignore_index, reduction, 0.0)


def _pair(what, input, target):
    x = _tensor(input, what)
    t = _lift(x._tracer, target, x)
    if t.shape != x.shape:
        raise CompileError(f"{what}: input {_type_text(x)} and target {_type_text(t)} must "
                           f"have the same shape{_where()}")
    if t.dtype != x.dtype:  # one dtype for every reduction (the composites need it)
        wide = "f64" if "f64" in (x.dtype, t.dtype) else x.dtype if is_float(x.dtype) else "f32"
        x, t = (x if x.dtype == wide else x.to(wide)), (t if t.dtype == wide else t.to(wide))
    return x, t


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """torch.nn.functional.mse_loss: (input - target)^2, averaged, summed or
    per element; input and target have the same shape."""
    what = "mse_loss"
    reduction = _reduction(what, reduction, size_average, reduce)
    x, t = _pair(what, input, target)
    if reduction == "mean":
        return _apply("mse", x, x._id, t._id, what=what)
    d = x - t
    return d * d if reduction == "none" else (d * d).sum()


def _clamped_log(x):
    """max(log x, -100) with a finite gradient everywhere (the log never sees
    x <= 0), as the bce composite."""
    positive = x > 0
    return where(positive, where(positive, x, 1.0).log(), -100.0).maximum(-100.0)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """torch.nn.functional.binary_cross_entropy on probabilities:
    -weight * (t log p + (1 - t) log(1 - p)), each log clamped at -100 (as
    PyTorch); `weight` broadcasts to the input's shape."""
    what = "binary_cross_entropy"
    reduction = _reduction(what, reduction, size_average, reduce)
    x, t = _pair(what, input, target)
    w = None
    if weight is not None:
        w = _lift(x._tracer, weight, x)
        lead = x.ndim - w.ndim
        if lead < 0 or any(b not in (1, a) for a, b in zip(x.shape[lead:], w.shape)):
            raise CompileError(f"{what}: weight {_type_text(w)} does not broadcast to the "
                               f"input's shape {_type_text(x)}{_where()}")
        w = _as_dtype_of(w if is_float(w.dtype) else w.to(x.dtype), x)
    if reduction == "mean" and w is None:
        return _apply("bce", x, x._id, t._id, what=what)
    # log(1 - p) as log1p(-p), as the composite and PyTorch: exact for small p.
    below = x < 1.0
    log1m = where(below, (-where(below, x, 0.0)).log1p(), -100.0).maximum(-100.0)
    loss = -(t * _clamped_log(x) + (1.0 - t) * log1m)
    if w is not None:
        loss = loss * w
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.mean()


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """torch.nn.functional.l1_loss: |input - target|, averaged, summed or per
    element (the gradient at input == target is 0, as PyTorch's sign);
    input and target have the same shape."""
    what = "l1_loss"
    reduction = _reduction(what, reduction, size_average, reduce)
    x, t = _pair(what, input, target)
    d = (x - t).abs()
    if reduction == "none":
        return d
    return d.sum() if reduction == "sum" else d.mean()


# -- written from primitives (tilefuse/_composites.py) -----------------------------
from ._composites import (  # noqa: E402
    binary_cross_entropy_with_logits, leaky_relu, normalize, one_hot, pad, rms_norm,
    scaled_dot_product_attention, softplus)


# -- normalisation over channels (dim 1 of [N, C, *]) ---------------------------
def _channel_param(p, x, what):
    """A [C] weight, bias or statistic shaped [1, C, 1, ...] against `x`."""
    c = x.shape[1]
    t = _lift(x._tracer, p, x)
    if tuple(t.shape) != (c,):
        raise CompileError(f"{what} has shape {tuple(t.shape)}; the input {x.shape} has {c} "
                           "channels (dim 1), so it needs shape ({c},)".replace("{c}", str(c)))
    return t.reshape((1, c) + (1,) * (len(x.shape) - 2))


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """PyTorch's F.group_norm: input [N, C, *] with C a multiple of
    num_groups, normalised per sample and group of C / num_groups channels
    over those channels and every position (biased variance), then
    weight * x + bias per channel ([C] each, optional)."""
    x = _tensor(input, "group_norm")
    if len(x.shape) < 2 or not isinstance(num_groups, int) or num_groups < 1 or \
            x.shape[1] % num_groups:
        raise CompileError(f"group_norm: an input of shape {x.shape} cannot be split into "
                           f"{num_groups!r} groups of channels (dim 1 must be a multiple of "
                           "num_groups)")
    groups = x.reshape(x.shape[0], num_groups, -1)
    centered = groups - groups.mean(dim=2, keepdim=True)
    var = (centered * centered).mean(dim=2, keepdim=True)
    y = (centered * (var + eps).rsqrt()).reshape(x.shape)
    if weight is not None:
        y = y * _channel_param(weight, x, "group_norm: weight")
    if bias is not None:
        y = y + _channel_param(bias, x, "group_norm: bias")
    return y


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """PyTorch's F.batch_norm over the channels (dim 1) of [N, C, *]: with
    `training`, normalised by the batch's statistics per channel (biased
    variance), else by running_mean and running_var ([C]); then weight * x +
    bias per channel. PyTorch also updates running_mean and running_var in
    place when training; a traced function cannot change its inputs, so
    training with them given is refused: pass None for both, and keep the
    statistics as step state (compile_train_step(state=)), updated as
    (1 - momentum) * running + momentum * batch statistic (the variance
    unbiased)."""
    x = _tensor(input, "batch_norm")
    if len(x.shape) < 2:
        raise CompileError(f"batch_norm: the input {x.shape} has no channel dimension (dim 1)")
    if training and (running_mean is not None or running_var is not None):
        raise CompileError(
            "batch_norm(training=True) with running_mean/running_var: PyTorch updates them in "
            "place, which a traced function cannot do; pass None for both and carry the "
            "statistics as step state (compile_train_step(state=)): new = (1 - momentum) * "
            "running + momentum * batch statistic (the variance unbiased)")
    if not training and (running_mean is None or running_var is None):
        raise CompileError("batch_norm(training=False) normalises with running_mean and "
                           "running_var: pass both (or training=True for batch statistics)")
    dims = tuple(d for d in range(len(x.shape)) if d != 1)
    if training:
        mean = x.mean(dim=dims, keepdim=True)
        centered = x - mean
        var = (centered * centered).mean(dim=dims, keepdim=True)
    else:
        centered = x - _channel_param(running_mean, x, "batch_norm: running_mean")
        var = _channel_param(running_var, x, "batch_norm: running_var")
    y = centered * (var + eps).rsqrt()
    if weight is not None:
        y = y * _channel_param(weight, x, "batch_norm: weight")
    if bias is not None:
        y = y + _channel_param(bias, x, "batch_norm: bias")
    return y


# -- convolutions (tilefuse/_conv.py: graph.conv, oneDNN on the CPU) -------------
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    from ._conv import conv
    return conv(input, weight, bias, stride, padding, dilation, groups, d=1)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """PyTorch's F.conv2d: input [N, C, H, W] (or [C, H, W]), weight
    [O, C / groups, kH, kW]; padding an int, a pair, 'valid' or 'same'."""
    from ._conv import conv
    return conv(input, weight, bias, stride, padding, dilation, groups, d=2)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    from ._conv import conv
    return conv(input, weight, bias, stride, padding, dilation, groups, d=3)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    from ._conv import conv_transpose
    return conv_transpose(input, weight, bias, stride, padding, output_padding, groups,
                          dilation, d=1)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """PyTorch's F.conv_transpose2d: weight [C, O / groups, kH, kW]."""
    from ._conv import conv_transpose
    return conv_transpose(input, weight, bias, stride, padding, output_padding, groups,
                          dilation, d=2)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    from ._conv import conv_transpose
    return conv_transpose(input, weight, bias, stride, padding, output_padding, groups,
                          dilation, d=3)


# -- pooling and resizing (tilefuse/_pooling.py, tilefuse/_interpolate.py) -----
def _pool_input(input, d, what):
    """(input as [N, C, *S] with d spatial dims, whether it had no batch)."""
    from ._conv import _batched
    return _batched(_tensor(input, what), d, what)


def _pool_window(x, d, what, kernel_size, stride, padding, dilation, ceil_mode):
    """(kernel, stride, padding, dilation, output sizes) of a pooling."""
    kernel = _pooling.window_ints(kernel_size, d, what, "kernel_size")
    stride = kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) \
        else _pooling.window_ints(stride, d, what, "stride")
    padding = _pooling.window_ints(padding, d, what, "padding")
    dilation = _pooling.window_ints(dilation, d, what, "dilation")
    out = _pooling.pool_output_size(list(x.shape[2:]), kernel, stride, padding, dilation,
                                    ceil_mode, what)
    return kernel, stride, padding, dilation, out


def _max_pool(input, d, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    what = f"max_pool{d}d"
    x, unbatched = _pool_input(input, d, what)
    kernel, stride, padding, dilation, out = _pool_window(x, d, what, kernel_size, stride,
                                                          padding, dilation, ceil_mode)
    values, indices = _pooling.max_pool(x, kernel, stride, padding, dilation, out,
                                        differentiable=True)
    if unbatched:
        values, indices = values.squeeze(0), indices.squeeze(0)
    return (values, indices) if return_indices else values


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_pool(input, 1, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """PyTorch's F.max_pool2d: padding counts as -inf, at most half the
    kernel; with return_indices also each maximum's flat index in its
    [H, W] plane (int64). The gradient goes to that element only."""
    return _max_pool(input, 2, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_pool(input, 3, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def _avg_pool(input, d, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override):
    what = f"avg_pool{d}d"
    x, unbatched = _pool_input(input, d, what)
    kernel, stride, padding, _, out = _pool_window(x, d, what, kernel_size, stride, padding, 1,
                                                   ceil_mode)
    if divisor_override is not None and divisor_override == 0:
        raise CompileError(f"{what}: divisor_override must be non-zero")
    y = _pooling.avg_pool(x, kernel, stride, padding, count_include_pad, divisor_override, out)
    return y.squeeze(0) if unbatched else y


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    return _avg_pool(input, 1, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """PyTorch's F.avg_pool2d: each window's sum over the window's size
    (padding included with count_include_pad, else only the input's
    elements; or divisor_override)."""
    return _avg_pool(input, 2, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _avg_pool(input, 3, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def _adaptive_size(x, output_size, d, what):
    """output_size as d ints (None keeps the input's size)."""
    sizes = [output_size] * d if output_size is None or isinstance(output_size, int) \
        else list(output_size)
    if len(sizes) != d:
        raise CompileError(f"{what}: output_size {output_size!r} must have {d} values")
    out = [x.shape[2 + i] if s is None else int(s) for i, s in enumerate(sizes)]
    if any(o < 1 for o in out):
        raise CompileError(f"{what}: output_size {out} must be positive")
    return out


def _adaptive_avg_pool(input, output_size, d):
    what = f"adaptive_avg_pool{d}d"
    x, unbatched = _pool_input(input, d, what)
    y = _pooling.adaptive_avg_pool(x, _adaptive_size(x, output_size, d, what))
    return y.squeeze(0) if unbatched else y


def adaptive_avg_pool1d(input, output_size):
    return _adaptive_avg_pool(input, output_size, 1)


def adaptive_avg_pool2d(input, output_size):
    """PyTorch's F.adaptive_avg_pool2d: output cell i averages input rows
    floor(i*H/OH) .. ceil((i+1)*H/OH) - 1 (and the same for columns)."""
    return _adaptive_avg_pool(input, output_size, 2)


def adaptive_avg_pool3d(input, output_size):
    return _adaptive_avg_pool(input, output_size, 3)


def _adaptive_max_pool(input, output_size, return_indices, d):
    what = f"adaptive_max_pool{d}d"
    x, unbatched = _pool_input(input, d, what)
    values, indices = _pooling.adaptive_max_pool(x, _adaptive_size(x, output_size, d, what),
                                                 differentiable=True)
    if unbatched:
        values, indices = values.squeeze(0), indices.squeeze(0)
    return (values, indices) if return_indices else values


def adaptive_max_pool1d(input, output_size, return_indices=False):
    return _adaptive_max_pool(input, output_size, return_indices, 1)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    return _adaptive_max_pool(input, output_size, return_indices, 2)


def adaptive_max_pool3d(input, output_size, return_indices=False):
    return _adaptive_max_pool(input, output_size, return_indices, 3)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """PyTorch's F.interpolate: modes nearest, nearest-exact, linear (3-d
    input), bilinear and bicubic (4-d), trilinear (5-d) and area; sizes,
    source coordinates and align_corners as PyTorch computes them."""
    return _interpolate.interpolate(input, size, scale_factor, mode, align_corners,
                                    recompute_scale_factor, antialias)
