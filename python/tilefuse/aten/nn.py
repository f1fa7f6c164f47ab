"""Neural-network ops: softmax, normalization, activations, losses and
embeddings (kept whole by the backend's decompositions where tilefuse's
fused composites are faster than the pieces).

A normalization's forward returns what PyTorch's kernel saves for its
backward (mean and 1 / std per group), exactly those, since PyTorch may
run the backward op whole on them.
"""
import numpy as np

from .. import functional as F
from .._tracing import where
from . import UnsupportedOp, aten, converts, importer


def _affine(y, weight, bias, shape=None):
    """y * weight + bias, the parameters reshaped to `shape` when given."""
    if weight is not None:
        y = y * (weight if shape is None else weight.reshape(*shape))
    if bias is not None:
        y = y + (bias if shape is None else bias.reshape(*shape))
    return y


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
    dims = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    # mean and rstd are what the backward of PyTorch's kernel saves: kept
    # for graphs that return them (unused ones are dead code).
    mean = x.mean(dims, keepdim=True)
    var = ((x - mean) * (x - mean)).mean(dims, keepdim=True)
    rstd = (var + eps).rsqrt()
    if eps >= 0:
        out = F.layer_norm(x, tuple(normalized_shape), weight, bias, eps)
    else:  # graph.layer_norm takes eps >= 0; PyTorch computes any
        out = _affine((x - mean) * rstd, weight, bias)
    return out, mean, rstd


_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}  # at::Reduction


@converts(aten.nll_loss_forward, aten.nll_loss2d_forward)
def _nll_loss_forward(x, target, weight, reduction, ignore_index):
    loss = F.nll_loss(x, target, weight, ignore_index=ignore_index,
                      reduction=_REDUCTIONS[reduction])
    if _REDUCTIONS[reduction] == "none":  # ATen's total_weight is then 0
        return loss, importer().constant(np.zeros(()), x.dtype)
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


@converts(aten.nll_loss_backward, aten.nll_loss2d_backward)
def _nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    """d loss / d x: -grad (/ total_weight for "mean") at each row's target
    class, weighted, 0 elsewhere and on ignored rows."""
    classes = x.shape[1] if x.ndim >= 2 else x.shape[0]
    class_dim = 1 if x.ndim >= 2 else 0
    iota_shape = [1] * x.ndim
    iota_shape[class_dim] = classes
    iota = importer().constant(np.arange(classes).reshape(iota_shape), target.dtype)
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
    base = importer().constant(np.zeros((num_weights, *width)), grad.dtype)
    return grad._wrap(grad._tracer.scatter_add(base._id, indices._id, grad._id))


# -- normalization -------------------------------------------------------------------

def _moments(x, dims):
    """(mean, biased variance) over `dims`, kept."""
    mean = x.mean(dims, keepdim=True)
    d = x - mean
    return mean, (d * d).mean(dims, keepdim=True)


@converts(aten.native_group_norm.default)
def _native_group_norm(x, weight, bias, n, c, hxw, group, eps):
    """(out, mean [N, G], rstd [N, G]) over groups of C / G channels and
    every spatial element."""
    xg = x.reshape(n, group, (c // group) * hxw)
    mean, var = _moments(xg, (2,))
    rstd = (var + eps).rsqrt()
    y = ((xg - mean) * rstd).reshape(*x.shape)
    param_shape = [1, c] + [1] * (x.ndim - 2)
    return (_affine(y, weight, bias, param_shape), mean.reshape(n, group),
            rstd.reshape(n, group))


def _channel_dims(x):
    return tuple(d for d in range(x.ndim) if d != 1)


def _channel_shape(x):
    return [1, x.shape[1]] + [1] * (x.ndim - 2)


def _batch_statistics(x, momentum, eps, running_mean, running_var):
    """Training batch norm: (mean, rstd) per channel and the running
    statistics updated as PyTorch does (the variance unbiased: n / (n - 1))."""
    dims = _channel_dims(x)
    mean, var = _moments(x, dims)
    rstd = (var + eps).rsqrt()
    count = int(np.prod([x.shape[d] for d in dims], dtype=np.int64))
    new_mean = new_var = None
    if running_mean is not None:
        m = float(momentum)
        new_mean = running_mean * (1.0 - m) + mean.reshape(x.shape[1]) * m
        unbiased = var.reshape(x.shape[1]) * (count / max(count - 1, 1) if count > 1
                                              else float("nan"))
        new_var = running_var * (1.0 - m) + unbiased * m
    return mean, rstd, new_mean, new_var


def _normalized(x, mean, rstd, weight, bias):
    shape = _channel_shape(x)
    return _affine((x - mean.reshape(*shape)) * rstd.reshape(*shape), weight, bias, shape)


def _empty(dtype):
    return importer().constant(np.zeros((0,)), dtype)


@converts(aten._native_batch_norm_legit_functional.default)
def _batch_norm_functional(x, weight, bias, running_mean, running_var, training, momentum,
                           eps):
    if not training:
        rstd = (running_var + eps).rsqrt()
        out = _normalized(x, running_mean, rstd, weight, bias)
        return out, _empty(x.dtype), _empty(x.dtype), running_mean, running_var
    mean, rstd, new_mean, new_var = _batch_statistics(x, momentum, eps, running_mean,
                                                      running_var)
    out = _normalized(x, mean, rstd, weight, bias)
    return out, mean.reshape(x.shape[1]), rstd.reshape(x.shape[1]), new_mean, new_var


@converts(aten._native_batch_norm_legit.no_stats)
def _batch_norm_no_stats(x, weight, bias, training, momentum, eps):
    mean, rstd, _, _ = _batch_statistics(x, momentum, eps, None, None)
    out = _normalized(x, mean, rstd, weight, bias)
    return out, mean.reshape(x.shape[1]), rstd.reshape(x.shape[1])


@converts(aten._native_batch_norm_legit_no_training.default)
def _batch_norm_inference(x, weight, bias, running_mean, running_var, momentum, eps):
    rstd = (running_var + eps).rsqrt()
    return (_normalized(x, running_mean, rstd, weight, bias), _empty(x.dtype),
            _empty(x.dtype))


@converts(aten._batch_norm_with_update_functional.default)
def _batch_norm_with_update(x, weight, bias, running_mean, running_var, momentum, eps):
    """(out, save_mean, save_rstd, reserve (empty on the CPU), new running
    mean, new running variance)."""
    mean, rstd, new_mean, new_var = _batch_statistics(x, momentum, eps, running_mean,
                                                      running_var)
    out = _normalized(x, mean, rstd, weight, bias)
    # The reserve is an empty uint8 buffer on the CPU, which only
    # batch_norm_backward receives (and ignores there): None here.
    return out, mean.reshape(x.shape[1]), rstd.reshape(x.shape[1]), None, new_mean, new_var


@converts(aten.native_batch_norm_backward.default)
def _batch_norm_backward(grad, x, weight, running_mean, running_var, save_mean, save_invstd,
                         train, eps, output_mask):
    """(dx, dweight, dbias) as PyTorch's decomposition computes them: with
    the saved batch statistics in training, the running ones otherwise."""
    shape = _channel_shape(x)
    dims = _channel_dims(x)
    count = float(np.prod([x.shape[d] for d in dims], dtype=np.int64))
    if train:
        mean, invstd = save_mean, save_invstd
    else:
        mean, invstd = running_mean, (running_var + eps).rsqrt()
    centered = x - mean.reshape(*shape)
    grad_sum = grad.sum(dims)
    dot = (grad * centered).sum(dims)
    scale = invstd if weight is None else invstd * weight
    if train:
        grad_mean = (grad_sum * (1.0 / count)).reshape(*shape)
        proj = centered * (dot * (1.0 / count) * invstd * invstd).reshape(*shape)
        dx = ((grad - proj) - grad_mean) * scale.reshape(*shape)
    else:
        dx = grad * scale.reshape(*shape)
    return (dx if output_mask[0] else None, dot * invstd if output_mask[1] else None,
            grad_sum if output_mask[2] else None)


@converts(aten.batch_norm_backward.default)
def _batch_norm_backward_update(grad, x, weight, running_mean, running_var, save_mean,
                                save_var, update, eps, output_mask, reserve=None):
    return _batch_norm_backward(grad, x, weight, running_mean, running_var, save_mean,
                                save_var, update, eps, output_mask)


@converts(aten._weight_norm_interface_backward.default)
def _weight_norm_backward(grad_w, v, g, norms, dim):
    """(dv, dg) of w = v * g / norms, `norms` the 2-norm of v over every dim
    but `dim` (kept, as g), as PyTorch's kernel computes them from the
    forward's saved norms: with s the sum of grad_w * v over those dims,
    dv = g / norms * (grad_w - v * s / norms^2) and dg = s / norms."""
    others = tuple(d for d in range(v.ndim) if d != dim % v.ndim)
    s = (grad_w * v).sum(others, keepdim=True)
    dv = (g / norms) * (grad_w - v * (s / (norms * norms)))
    return dv, s / norms


# -- activations --------------------------------------------------------------------------

@converts(aten.elu.default)
def _elu(x, alpha=1, scale=1, input_scale=1):
    """x * scale above 0, else expm1(x * input_scale) * alpha * scale."""
    return where(x > 0, x * float(scale),
                 (x * float(input_scale)).expm1() * (float(alpha) * float(scale)))


@converts(aten.elu_backward.default)
def _elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result):
    neg = float(alpha) * float(scale)
    y = self_or_result
    if is_result:
        inside = grad * float(input_scale) * (y + neg)
    else:
        inside = grad * float(input_scale) * neg * (y * float(input_scale)).exp()
    return where(y <= 0, inside, grad * float(scale))


@converts(aten.hardtanh.default)
def _hardtanh(x, min_val=-1, max_val=1):
    """PyTorch's hardtanh: clamp to [min_val, max_val] (NaN stays)."""
    return x.clamp(min_val, max_val)


@converts(aten.hardtanh_backward.default)
def _hardtanh_backward(grad, x, min_val, max_val):
    return where((x <= min_val) | (x >= max_val), 0.0, grad)


@converts(aten.leaky_relu.default)
def _leaky_relu(x, negative_slope=0.01):
    return where(x > 0, x, x * float(negative_slope))


@converts(aten.leaky_relu_backward.default)
def _leaky_relu_backward(grad, x, negative_slope, self_is_result):
    return where(x > 0, grad, grad * float(negative_slope))


@converts("torch_nn._linear_cross_entropy_batch_chunked.default")
def _linear_cross_entropy_chunked(x, w, target, b, weight, reduction, ignore_index,
                                  label_smoothing, batch_chunk_size, acc_policy, acc_dtype,
                                  allow_retain_graph, need_dx, need_dw, need_db):
    """F.linear_cross_entropy's chunked form (torch 2.15+), which returns the
    loss and, already in the forward, the gradients of x, w and b (its
    backward scales them by the loss's gradient). Its chunks only bound
    PyTorch's memory; tilefuse computes the same sums whole and lets the
    fusion and memory plan keep the logits' footprint. Class weights,
    label smoothing and 16-bit inputs run in PyTorch."""
    op = "torch_nn._linear_cross_entropy_batch_chunked"
    if weight is not None or label_smoothing:
        raise UnsupportedOp(op, "class weights or label smoothing")
    if x.dtype != "f32" or w.dtype != "f32" or reduction not in ("mean", "sum") \
            or x.ndim not in (1, 2):
        raise UnsupportedOp(op, f"{x.dtype} input of rank {x.ndim}, reduction {reduction!r}")
    xs = x.reshape(1, -1) if x.ndim == 1 else x
    ys = target.reshape(1) if target.ndim == 0 else target
    z = xs @ w.t()
    if b is not None:
        z = z + b
    classes = z.shape[1]
    log_p = F.log_softmax(z, 1)
    valid = ys != ignore_index
    hit = where(valid, ys, 0).unsqueeze(1) == importer().constant(np.arange(classes), "i64")
    nll = where(valid, -where(hit, log_p, 0.0).sum(1), 0.0)
    count = valid.to("f32").sum()
    loss = nll.sum() / count if reduction == "mean" else nll.sum()
    per_row = where(valid, 1.0 / count if reduction == "mean" else 1.0, 0.0).unsqueeze(1)
    dz = (log_p.exp() - hit.to("f32")) * per_row
    empty = importer().constant(np.zeros((0, 0)), "f32")
    dx = (dz @ w).reshape(*x.shape) if need_dx else empty
    dw = dz.t() @ xs if need_dw else empty
    db = dz.sum(0) if need_db else importer().constant(np.zeros((0,)), "f32")
    return loss, dx, dw, db
