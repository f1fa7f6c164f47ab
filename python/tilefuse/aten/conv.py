"""Convolution, pooling and interpolation over the spatial dims of
[N, C, *S] inputs, 1-d to 3-d.

Convolutions become graph.conv and its gradient ops (oneDNN on the CPU,
cuDNN on CUDA; tilefuse/_conv.py), in PyTorch's result type where the
operands' types differ; every convolution under TILEFUSE_LIBRARY_CONV=0 is
written out as below.

A window's elements are a gather of the input at fixed positions (im2col,
tilefuse/_pooling.py); pooling reduces over the window, a convolution
multiplies the windows by the weights (a batched matmul over the groups);
the backward ops add back into the same positions (graph.scatter_add).
Window sizes, output sizes, divisors and max-pooling's choice of index
follow PyTorch's CPU kernels (tilefuse/_pooling.py).
"""
from typing import List

import numpy as np
import torch

from .. import _pooling as pooling
from .._conv import conv, conv_transpose, library_conv
from .._interpolate import resample, resample_backward
from . import aten, converts, importer


def _batched(x, d):
    """x as [N, C, *S] (an unbatched [C, *S] gets N = 1) and whether it was."""
    if x.ndim == d + 1:
        return x.unsqueeze(0), True
    return x, False


def _unbatch(t, unbatched):
    return t.squeeze(0) if unbatched else t


def _dims(*three_d):
    """2, or 3 when the node being converted is one of `three_d`."""
    return 3 if importer().node.target in three_d else 2


# -- pooling (tilefuse/_pooling.py builds the windows) -------------------------------------

@converts(aten.avg_pool2d.default, aten.avg_pool3d.default)
def _avg_pool(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    d = _dims(aten.avg_pool3d.default)
    xb, unbatched = _batched(x, d)
    out = list(importer().result_shape()[-d:])
    return _unbatch(pooling.avg_pool(xb, kernel_size, stride, padding, count_include_pad,
                                     divisor_override, out), unbatched)


@converts(aten.avg_pool2d_backward.default, aten.avg_pool3d_backward.default)
def _avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override):
    d = _dims(aten.avg_pool3d_backward.default)
    xb, unbatched = _batched(x, d)
    gb = grad.unsqueeze(0) if unbatched else grad
    return _unbatch(pooling.avg_pool_backward(gb, xb.shape, kernel_size, stride, padding,
                                              count_include_pad, divisor_override), unbatched)


@converts(aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default)
def _adaptive_avg_pool(x, output_size):
    xb, unbatched = _batched(x, len(output_size))
    return _unbatch(pooling.adaptive_avg_pool(xb, list(output_size)), unbatched)


@converts(aten._adaptive_avg_pool2d_backward.default,
          aten._adaptive_avg_pool3d_backward.default)
def _adaptive_avg_pool_backward(grad, x):
    d = _dims(aten._adaptive_avg_pool3d_backward.default)
    xb, unbatched = _batched(x, d)
    gb = grad.unsqueeze(0) if unbatched else grad
    return _unbatch(pooling.adaptive_avg_pool_backward(gb, xb.shape), unbatched)


@converts(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default)
def _max_pool_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    d = _dims(aten.max_pool3d_with_indices.default)
    xb, unbatched = _batched(x, d)
    out = list(importer().result_shape()[-d:])
    values, indices = pooling.max_pool(xb, kernel_size, stride, padding, dilation, out)
    return _unbatch(values, unbatched), _unbatch(indices, unbatched)


@converts(aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default)
def _adaptive_max_pool(x, output_size):
    xb, unbatched = _batched(x, len(output_size))
    values, indices = pooling.adaptive_max_pool(xb, list(output_size))
    return _unbatch(values, unbatched), _unbatch(indices, unbatched)


@converts(aten.max_pool2d_with_indices_backward.default,
          aten.max_pool3d_with_indices_backward.default)
def _max_pool_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    d = _dims(aten.max_pool3d_with_indices_backward.default)
    return _fixed_max_pool_backward(grad, x, d, kernel_size, stride, padding, dilation, indices)


def _fixed_max_pool_backward(grad, x, d, kernel_size, stride, padding, dilation, indices):
    xb, unbatched = _batched(x, d)
    gb, ib = (t.unsqueeze(0) if unbatched else t for t in (grad, indices))
    return _unbatch(pooling.max_pool_backward(gb, xb.shape, ib, kernel_size, stride, padding,
                                              dilation), unbatched)


@converts(aten.adaptive_max_pool2d_backward.default, aten.adaptive_max_pool3d_backward.default)
def _adaptive_max_pool_backward(grad, x, indices):
    d = _dims(aten.adaptive_max_pool3d_backward.default)
    uniform = pooling.uniform_windows(list(x.shape[-d:]), list(grad.shape[-d:]))
    if uniform:  # windows of one size: the fixed windows' backward
        return _fixed_max_pool_backward(grad, x, d, uniform[0], uniform[1], 0, 1, indices)
    return pooling.scatter_indices(grad, x.shape, indices, d)


# -- interpolation (tilefuse/_interpolate.py: per-dim taps, numpy-computed) ---------------
#
# PyTorch's own decompositions compute every output element's source
# indices and weights in the graph over the whole output and gather the
# corners; here they are constants, one row per output element of a dim,
# and the backward ops add each gradient back into its taps.

_RESAMPLE_MODE = {aten.upsample_linear1d: "linear", aten.upsample_bilinear2d: "linear",
                  aten.upsample_trilinear3d: "linear", aten.upsample_bicubic2d: "bicubic"}


def _resample_scales(d, rest):
    """The user's scale factor per spatial dim (the kernels use 1 / it) or
    None: the .vec overloads pass a list (or None), the others one optional
    float per dim."""
    if len(rest) == 1 and (rest[0] is None or isinstance(rest[0], (list, tuple))):
        return list(rest[0]) if rest[0] is not None else [None] * d
    scales = list(rest) + [None] * (d - len(rest))
    return scales[:d]


@converts(*_RESAMPLE_MODE)
def _upsample(x, output_size, align_corners, *scales):
    d = x.ndim - 2
    mode = _RESAMPLE_MODE[importer().node.target.overloadpacket]
    out = list(importer().result_shape()[-d:])
    return resample(x, out, _resample_scales(d, scales), mode, align_corners)


@converts(aten.upsample_linear1d_backward, aten.upsample_bilinear2d_backward,
          aten.upsample_trilinear3d_backward, aten.upsample_bicubic2d_backward)
def _upsample_backward(grad, output_size, input_size, align_corners, *scales):
    d = grad.ndim - 2
    name = importer().node.target.overloadpacket.__name__.replace("_backward", "")
    mode = _RESAMPLE_MODE[getattr(aten, name)]
    return resample_backward(grad, list(input_size)[-d:], _resample_scales(d, scales), mode,
                             align_corners)


# The backend's route: PyTorch applies the upsampling ops' Python
# decompositions at the autograd level while aot_autograd traces, before any
# decomposition table is read, so torch_integration redirects Dynamo's
# F.interpolate calls to this custom op (PyTorch's own op when run eagerly)
# whose backward is a second one: both reach the importer whole.
# `scales` holds each dim's scale factor or 0 for none (PyTorch's kernels
# read a scale <= 0 as none).

_UPSAMPLE_NAME = {("linear", 1): "upsample_linear1d", ("linear", 2): "upsample_bilinear2d",
                  ("linear", 3): "upsample_trilinear3d", ("bicubic", 2): "upsample_bicubic2d"}


@torch.library.custom_op("tilefuse::upsample", mutates_args=())
def upsample(x: torch.Tensor, output_size: List[int], mode: str, align_corners: bool,
             scales: List[float]) -> torch.Tensor:
    """PyTorch's (bi/tri)linear or bicubic upsampling of x [N, C, *S]."""
    op = getattr(torch.ops.aten, _UPSAMPLE_NAME[mode, x.dim() - 2]).default
    return op(x, output_size, align_corners, *[s if s > 0 else None for s in scales])


@upsample.register_fake
def _upsample_shape(x, output_size, mode, align_corners, scales):
    return x.new_empty(tuple(x.shape[:2]) + tuple(output_size))


@torch.library.custom_op("tilefuse::upsample_backward", mutates_args=())
def upsample_backward(grad: torch.Tensor, input_size: List[int], mode: str,
                      align_corners: bool, scales: List[float]) -> torch.Tensor:
    name = _UPSAMPLE_NAME[mode, grad.dim() - 2] + "_backward"
    return getattr(torch.ops.aten, name).default(
        grad, list(grad.shape[2:]), input_size, align_corners,
        *[s if s > 0 else None for s in scales])


@upsample_backward.register_fake
def _upsample_backward_shape(grad, input_size, mode, align_corners, scales):
    return grad.new_empty(tuple(input_size))


def _upsample_context(ctx, inputs, output):
    x, _, ctx.mode, ctx.align_corners, ctx.scales = inputs
    ctx.input_size = list(x.shape)


def _upsample_grad(ctx, grad):
    return (upsample_backward(grad, ctx.input_size, ctx.mode, ctx.align_corners, ctx.scales),
            None, None, None, None)


upsample.register_autograd(_upsample_grad, setup_context=_upsample_context)


@converts(torch.ops.tilefuse.upsample)
def _tilefuse_upsample(x, output_size, mode, align_corners, scales):
    return resample(x, list(output_size), [s if s > 0 else None for s in scales], mode,
                    align_corners)


@converts(torch.ops.tilefuse.upsample_backward)
def _tilefuse_upsample_backward(grad, input_size, mode, align_corners, scales):
    d = grad.ndim - 2
    return resample_backward(grad, list(input_size)[-d:], [s if s > 0 else None for s in scales],
                             mode, align_corners)


# -- convolution ------------------------------------------------------------------------------
#
# Per group g of `groups`: input channels cin_g = Cin / G, output channels
# cout_g = Cout / G, kernel elements K. A convolution's windows [G, N*Ot,
# cin_g*K] times its weights [G, cin_g*K, cout_g]; a transposed one's input
# [G, N*S, cin_g] times its weights [G, cin_g, cout_g*K], added into the
# output's windows.

def _out_spatial(shape, d):
    return list(shape[-d:])


def _grouped_columns(x, positions, groups):
    """x's windows as [G, N*Ot, cin_g*K]."""
    n, c = x.shape[:2]
    ot, k = positions.shape
    cols = pooling.columns(x, positions, 0.0).reshape(ot, k, n, groups, c // groups)
    return cols.permute(3, 2, 0, 4, 1).reshape(groups, n * ot, (c // groups) * k)


def _grouped_planes(t, groups):
    """[N, C, *S] as [G, N*St, C / G]."""
    n, c = t.shape[:2]
    st = int(np.prod(t.shape[2:], dtype=np.int64))
    return t.reshape(n, groups, c // groups, st).permute(1, 0, 3, 2).reshape(
        groups, n * st, c // groups)


def _ungrouped(y, n, spatial):
    """[G, N*St, c_g] -> [N, G*c_g, *spatial]."""
    g, _, cg = y.shape
    st = int(np.prod(spatial, dtype=np.int64))
    return y.reshape(g, n, st, cg).permute(1, 0, 3, 2).reshape(n, g * cg, *spatial)


def _window_positions(spatial, out, kernel, stride, padding, dilation):
    """[Ot, K]: positions in a plane of `spatial` of the windows of `out`."""
    coords = pooling.strided_coords(out, kernel, stride, padding, dilation)
    return pooling.positions(list(spatial), coords)


def _bias_shape(c, d):
    return [1, c] + [1] * d


def _in_result_type(*operands):
    """The operands in the type PyTorch computes the node in (its first
    result's), where their types differ (a value held in f32 meeting a bf16
    one; narrowing a value that was bf16 back to bf16 is exact)."""
    types = {t.dtype for t in operands if t is not None}
    if len(types) <= 1:
        return operands
    want = next(importer().result_dtype(i) for i, v in enumerate(importer().node.meta["val"])
                if v is not None) if isinstance(importer().node.meta.get("val"), (list, tuple)) \
        else importer().result_dtype()
    return tuple(t if t is None or t.dtype == want else t.to(want) for t in operands)


@converts(aten.convolution.default)
def _convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    d = w.ndim - 2
    x, w = _in_result_type(x, w)
    if library_conv(x.dtype) and w.dtype == x.dtype:  # graph.conv: oneDNN on the CPU
        if transposed:
            return conv_transpose(x, w, bias, stride, padding, output_padding, groups, dilation,
                                  d=d)
        return conv(x, w, bias, stride, padding, dilation, groups, d=d)
    xb, unbatched = _batched(x, d)
    stride, padding, dilation = (pooling.expand(v, d) for v in (stride, padding, dilation))
    kernel = list(w.shape[2:])
    n = xb.shape[0]
    out = _out_spatial(importer().result_shape(), d)
    if not transposed:
        positions = _window_positions(xb.shape[2:], out, kernel, stride, padding, dilation)
        cols = _grouped_columns(xb, positions, groups)
        cout_g = w.shape[0] // groups
        wg = w.reshape(groups, cout_g, int(np.prod(w.shape[1:]))).transpose(1, 2)
        y = _ungrouped(cols @ wg, n, out)
    else:
        # each input element's contribution spread over its window of the output
        positions = _window_positions(out, xb.shape[2:], kernel, stride, padding, dilation)
        cin_g = w.shape[0] // groups
        cout_g, k = w.shape[1], int(np.prod(kernel, dtype=np.int64))
        prod = _grouped_planes(xb, groups) @ w.reshape(groups, cin_g, cout_g * k)
        st = positions.shape[0]
        spread = prod.reshape(groups, n, st, cout_g, k).permute(2, 4, 1, 0, 3)
        spread = spread.reshape(st, k, n * groups * cout_g)
        y = pooling.scatter_back(spread, positions, [n, groups * cout_g] + out)
    if bias is not None:
        y = y + bias.reshape(*_bias_shape(y.shape[1], d))
    return y.squeeze(0) if unbatched else y


@converts(aten.convolution_backward.default)
def _convolution_backward(grad, x, w, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    """(d input, d weight, d bias), those output_mask asks for."""
    d = w.ndim - 2
    grad, x, w = _in_result_type(grad, x, w)
    xb, unbatched = _batched(x, d)
    gb = grad.unsqueeze(0) if unbatched else grad
    stride, padding, dilation = (pooling.expand(v, d) for v in (stride, padding, dilation))
    kernel = list(w.shape[2:])
    k = int(np.prod(kernel, dtype=np.int64))
    n = xb.shape[0]
    out = list(gb.shape[2:])
    dx = dw = db = None
    if output_mask[2]:
        db = gb.sum(tuple(d_ for d_ in range(gb.ndim) if d_ != 1))
    if library_conv(x.dtype) and w.dtype == x.dtype == grad.dtype:
        # graph.conv's gradient ops; a transposed convolution is
        # conv_grad_input, whose gradients are a convolution and
        # conv_grad_weight with the roles of input and output swapped.
        t = x._tracer
        window = (stride, padding, padding, dilation, int(groups))
        if output_mask[0]:
            dx = x._wrap(t.conv("conv", gb._id, w._id, *window) if transposed else
                         t.conv("grad_input", gb._id, w._id, *window, list(xb.shape[2:])))
        if output_mask[1]:
            dw = x._wrap(t.conv("grad_weight", gb._id, xb._id, *window, kernel) if transposed
                         else t.conv("grad_weight", xb._id, gb._id, *window, kernel))
        if unbatched and dx is not None:
            dx = dx.squeeze(0)
        return dx, dw, db
    if not transposed:
        positions = _window_positions(xb.shape[2:], out, kernel, stride, padding, dilation)
        go = _grouped_planes(gb, groups)                     # [G, N*Ot, cout_g]
        cout_g, cin_g = w.shape[0] // groups, w.shape[1]
        if output_mask[1]:
            cols = _grouped_columns(xb, positions, groups)   # [G, N*Ot, cin_g*K]
            dw = (go.transpose(1, 2) @ cols).reshape(*w.shape)
        if output_mask[0]:
            dcols = go @ w.reshape(groups, cout_g, cin_g * k)  # [G, N*Ot, cin_g*K]
            ot = positions.shape[0]
            dcols = dcols.reshape(groups, n, ot, cin_g, k).permute(2, 4, 1, 0, 3)
            dx = pooling.scatter_back(dcols.reshape(ot, k, n * groups * cin_g), positions,
                               list(xb.shape))
    else:
        positions = _window_positions(out, xb.shape[2:], kernel, stride, padding, dilation)
        cin_g, cout_g = w.shape[0] // groups, w.shape[1]
        cols = _grouped_columns(gb, positions, groups)       # [G, N*St, cout_g*K]
        if output_mask[0]:
            dxg = cols @ w.reshape(groups, cin_g, cout_g * k).transpose(1, 2)
            dx = _ungrouped(dxg, n, list(xb.shape[2:]))
        if output_mask[1]:
            dw = (_grouped_planes(xb, groups).transpose(1, 2) @ cols).reshape(*w.shape)
    if unbatched and dx is not None:
        dx = dx.squeeze(0)
    return dx, dw, db
