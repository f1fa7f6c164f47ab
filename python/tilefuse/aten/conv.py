"""Convolution and pooling: windows over the spatial dims of [N, C, *S]
inputs, 1-d to 3-d.

f32 and f64 convolutions become graph.conv and its gradient ops (oneDNN on
the CPU; tilefuse/_conv.py); other types, and every convolution under
TILEFUSE_LIBRARY_CONV=0, are written out as below.

A window's elements are a gather of the input at fixed positions (im2col:
numpy builds the table of positions once, one slot past the input standing
for the padding, which holds 0 or -inf); pooling reduces over the window, a
convolution multiplies the windows by the weights (a batched matmul over
the groups). The backward ops add back into the same positions
(graph.scatter_add). Window sizes, output sizes, average-pooling divisors
and max-pooling's choice of index follow PyTorch's CPU kernels: the index
of a window's maximum is its first, or its last NaN, and a window of -inf
points at its first element inside the input.
"""
import math

import numpy as np

from .._conv import conv, conv_transpose, library_conv
from .._tracing import cat, where
from . import aten, converts, importer
from .indexing import _rows_gather, _rows_scatter_add


def _const(values, dtype="i64"):
    return importer().constant(np.asarray(values), dtype)


def _positions(spatial, coords):
    """[Ot, Kt] flat positions in the spatial plane of the window elements,
    from per-dim coordinates coords[i] ([O_i, K_i], out of range: padding);
    the padding is position prod(spatial)."""
    d = len(spatial)
    flat = np.zeros([c.shape[0] for c in coords] + [c.shape[1] for c in coords], np.int64)
    valid = np.ones(flat.shape, bool)
    step = 1
    for i in reversed(range(d)):
        shape = [1] * (2 * d)
        shape[i], shape[d + i] = coords[i].shape
        c = coords[i].reshape(shape)
        valid &= (c >= 0) & (c < spatial[i])
        flat = flat + c * step
        step *= spatial[i]
    flat = np.where(valid, flat, step)
    ot = int(np.prod([c.shape[0] for c in coords], dtype=np.int64))
    return flat.reshape(ot, -1)


def _strided_coords(out, kernel, stride, padding, dilation):
    return [np.arange(o)[:, None] * s - p + np.arange(k)[None, :] * dl
            for o, k, s, p, dl in zip(out, kernel, stride, padding, dilation)]


def _adaptive_coords(spatial, out):
    coords, counts = [], []
    for s, o in zip(spatial, out):
        start = (np.arange(o) * s) // o
        end = -((-(np.arange(o) + 1) * s) // o)  # ceil
        k = int((end - start).max())
        c = start[:, None] + np.arange(k)[None, :]
        c = np.where(np.arange(k)[None, :] < (end - start)[:, None], c, -1)
        coords.append(c)
        counts.append(end - start)
    return coords, counts


def _columns(x, positions, fill):
    """x [N, C, *S] -> [Ot, K, N*C]: the window elements, `fill` in the
    padding."""
    n, c = x.shape[:2]
    plane = int(np.prod(x.shape[2:], dtype=np.int64))
    table = x.reshape(n * c, plane).transpose(0, 1)
    pad = _const(np.full((1, n * c), fill), x.dtype)
    return _rows_gather(cat([table, pad], 0), _const(positions))


def _planes(values, x_shape, out):
    """[Ot, N*C] -> [N, C, *out]."""
    n, c = x_shape[:2]
    return values.transpose(0, 1).reshape(n, c, *out)


def _scatter_back(values, positions, x_shape):
    """The gradient of _columns: values [Ot, K, N*C] added at their
    positions, [N, C, *S] (the padding's share dropped)."""
    n, c = x_shape[:2]
    plane = int(np.prod(x_shape[2:], dtype=np.int64))
    k = positions.shape[1]
    base = _const(np.zeros((plane + 1, n * c)), values.dtype)
    rows = _const(positions.reshape(-1))
    out = _rows_scatter_add(base, rows, values.reshape(positions.shape[0] * k, n * c))
    return out[0:plane].transpose(0, 1).reshape(*x_shape)


def _expand(v, d):
    """An int or a list of one or d ints as d ints."""
    v = [int(v)] if isinstance(v, int) else [int(a) for a in v]
    return v * d if len(v) == 1 else v


# -- average pooling ----------------------------------------------------------------------

def _avg_divisors(spatial, out, kernel, stride, padding, count_include_pad, divisor_override):
    """[Ot] divisors of PyTorch's avg_pool: the window within the padded
    input (count_include_pad), or within the input, or the override."""
    if divisor_override:
        return np.full(int(np.prod(out, dtype=np.int64)), float(divisor_override))
    sizes = []
    for s, o, k, st, p in zip(spatial, out, kernel, stride, padding):
        start = np.arange(o) * st - p
        end = np.minimum(start + k, s + p)
        pool = end - start
        inside = np.minimum(end, s) - np.maximum(start, 0)
        sizes.append(pool if count_include_pad else inside)
    return _count_grid(sizes)


def _avg_setup(x_shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override,
               out):
    d = len(x_shape) - 2
    kernel = _expand(kernel, d)
    stride = _expand(stride, d) if stride else kernel
    padding = _expand(padding, d)
    spatial = list(x_shape[2:])
    coords = _strided_coords(out, kernel, stride, padding, [1] * d)
    positions = _positions(spatial, coords)
    divisors = _avg_divisors(spatial, out, kernel, stride, padding, count_include_pad,
                             divisor_override)
    return positions, divisors


def _batched(x, d):
    """x as [N, C, *S] (an unbatched [C, *S] gets N = 1) and whether it was."""
    if x.ndim == d + 1:
        return x.unsqueeze(0), True
    return x, False


@converts(aten.avg_pool2d.default, aten.avg_pool3d.default)
def _avg_pool(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    d = 3 if importer().node.target is aten.avg_pool3d.default else 2
    xb, unbatched = _batched(x, d)
    out = list(importer().result_shape()[-d:])
    positions, divisors = _avg_setup(xb.shape, kernel_size, stride, padding, ceil_mode,
                                     count_include_pad, divisor_override, out)
    sums = _columns(xb, positions, 0.0).sum((1,))
    y = _planes(sums / _const(divisors.reshape(-1, 1), x.dtype), xb.shape, out)
    return y.squeeze(0) if unbatched else y


@converts(aten.avg_pool2d_backward.default, aten.avg_pool3d_backward.default)
def _avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override):
    d = 3 if importer().node.target is aten.avg_pool3d_backward.default else 2
    xb, unbatched = _batched(x, d)
    gb = grad.unsqueeze(0) if unbatched else grad
    out = list(gb.shape[2:])
    positions, divisors = _avg_setup(xb.shape, kernel_size, stride, padding, ceil_mode,
                                     count_include_pad, divisor_override, out)
    n, c = xb.shape[:2]
    g = gb.reshape(n * c, int(np.prod(out, dtype=np.int64))).transpose(0, 1)
    g = g / _const(divisors.reshape(-1, 1), x.dtype)
    k = positions.shape[1]
    spread = g.unsqueeze(1).expand(positions.shape[0], k, n * c)
    dx = _scatter_back(spread, positions, xb.shape)
    return dx.squeeze(0) if unbatched else dx


@converts(aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default)
def _adaptive_avg_pool(x, output_size):
    d = len(output_size)
    xb, unbatched = _batched(x, d)
    coords, counts = _adaptive_coords(list(xb.shape[2:]), list(output_size))
    positions = _positions(list(xb.shape[2:]), coords)
    divisors = _count_grid(counts)
    sums = _columns(xb, positions, 0.0).sum((1,))
    y = _planes(sums / _const(divisors.reshape(-1, 1), x.dtype), xb.shape, list(output_size))
    return y.squeeze(0) if unbatched else y


def _count_grid(counts):
    """The flattened outer product of per-dim window sizes (f64)."""
    grid = np.ones([len(z) for z in counts])
    for i, z in enumerate(counts):
        shape = [1] * len(counts)
        shape[i] = len(z)
        grid = grid * z.reshape(shape)
    return grid.reshape(-1).astype(np.float64)


@converts(aten._adaptive_avg_pool2d_backward.default,
          aten._adaptive_avg_pool3d_backward.default)
def _adaptive_avg_pool_backward(grad, x):
    d = 3 if importer().node.target is aten._adaptive_avg_pool3d_backward.default else 2
    xb, unbatched = _batched(x, d)
    gb = grad.unsqueeze(0) if unbatched else grad
    out = list(gb.shape[2:])
    coords, counts = _adaptive_coords(list(xb.shape[2:]), out)
    positions = _positions(list(xb.shape[2:]), coords)
    n, c = xb.shape[:2]
    g = gb.reshape(n * c, int(np.prod(out, dtype=np.int64))).transpose(0, 1)
    g = g / _const(_count_grid(counts).reshape(-1, 1), x.dtype)
    spread = g.unsqueeze(1).expand(positions.shape[0], positions.shape[1], n * c)
    dx = _scatter_back(spread, positions, xb.shape)
    return dx.squeeze(0) if unbatched else dx


# -- max pooling ---------------------------------------------------------------------------

def _max_and_index(x, positions, out):
    """(values, indices) [N, C, *out] of max pooling over the windows."""
    cols = _columns(x, positions, -math.inf)              # [Ot, K, NC]
    k = positions.shape[1]
    values = cols.amax((1,))
    first_max = cols.argmax(1)                            # [Ot, NC]
    nan = (cols != cols).to("i32")
    any_nan = nan.amax((1,)) > 0
    last_nan = (k - 1) - nan.flip([1]).argmax(1)
    pick = where(any_nan, last_nan, first_max)
    pad = positions == int(np.prod(x.shape[2:], dtype=np.int64))
    first_valid = np.argmax(~pad, axis=1)                 # [Ot]
    table = _const(positions)                             # [Ot, K]
    hit = _const(np.arange(k)).reshape(1, k, 1) == pick.unsqueeze(1)
    chosen = where(hit, table.unsqueeze(2), 0).sum((1,))  # [Ot, NC]
    plane = int(np.prod(x.shape[2:], dtype=np.int64))
    fallback = _const(positions[np.arange(len(first_valid)), first_valid].reshape(-1, 1))
    chosen = where(chosen == plane, fallback, chosen)
    return _planes(values, x.shape, out), _planes(chosen, x.shape, out)


def _max_pool_setup(x_shape, kernel_size, stride, padding, dilation, out):
    d = len(x_shape) - 2
    kernel = _expand(kernel_size, d)
    stride = _expand(stride, d) if stride else kernel
    coords = _strided_coords(out, kernel, stride, _expand(padding, d), _expand(dilation, d))
    return _positions(list(x_shape[2:]), coords)


@converts(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default)
def _max_pool_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    d = 3 if importer().node.target is aten.max_pool3d_with_indices.default else 2
    xb, unbatched = _batched(x, d)
    out = list(importer().result_shape()[-d:])
    positions = _max_pool_setup(xb.shape, kernel_size, stride, padding, dilation, out)
    values, indices = _max_and_index(xb, positions, out)
    if unbatched:
        return values.squeeze(0), indices.squeeze(0)
    return values, indices


@converts(aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default)
def _adaptive_max_pool(x, output_size):
    d = len(output_size)
    xb, unbatched = _batched(x, d)
    coords, _ = _adaptive_coords(list(xb.shape[2:]), list(output_size))
    positions = _positions(list(xb.shape[2:]), coords)
    values, indices = _max_and_index(xb, positions, list(output_size))
    if unbatched:
        return values.squeeze(0), indices.squeeze(0)
    return values, indices


@converts(aten.max_pool2d_with_indices_backward.default,
          aten.max_pool3d_with_indices_backward.default)
def _max_pool_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return _scatter_indices(grad, x, indices)


@converts(aten.adaptive_max_pool2d_backward.default, aten.adaptive_max_pool3d_backward.default)
def _adaptive_max_pool_backward(grad, x, indices):
    return _scatter_indices(grad, x, indices)


def _scatter_indices(grad, x, indices):
    """grad [.., *out] added into zeros like x [.., *S] at each plane's
    flat spatial index (the pooled dims are the trailing ones of indices
    beyond x's leading N, C or C)."""
    d = {aten.max_pool3d_with_indices_backward.default: 3,
         aten.adaptive_max_pool3d_backward.default: 3}.get(importer().node.target, 2)
    lead = x.ndim - d
    planes = int(np.prod(x.shape[:lead], dtype=np.int64))
    plane = int(np.prod(x.shape[lead:], dtype=np.int64))
    per = int(np.prod(grad.shape[lead:], dtype=np.int64))
    offsets = _const((np.arange(planes) * plane).reshape(planes, 1))
    rows = (indices.reshape(planes, per) + offsets).reshape(planes * per)
    base = _const(np.zeros(planes * plane), grad.dtype)
    return _rows_scatter_add(base, rows, grad.reshape(planes * per)).reshape(*x.shape)



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
    cols = _columns(x, positions, 0.0).reshape(ot, k, n, groups, c // groups)
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
    return _positions(list(spatial), _strided_coords(out, kernel, stride, padding, dilation))


def _bias_shape(c, d):
    return [1, c] + [1] * d


@converts(aten.convolution.default)
def _convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    d = w.ndim - 2
    if library_conv(x.dtype) and w.dtype == x.dtype:  # graph.conv: oneDNN on the CPU
        if transposed:
            return conv_transpose(x, w, bias, stride, padding, output_padding, groups, dilation,
                                  d=d)
        return conv(x, w, bias, stride, padding, dilation, groups, d=d)
    xb, unbatched = _batched(x, d)
    stride, padding, dilation = _expand(stride, d), _expand(padding, d), _expand(dilation, d)
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
        y = _scatter_back(spread, positions, [n, groups * cout_g] + out)
    if bias is not None:
        y = y + bias.reshape(*_bias_shape(y.shape[1], d))
    return y.squeeze(0) if unbatched else y


@converts(aten.convolution_backward.default)
def _convolution_backward(grad, x, w, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    """(d input, d weight, d bias), those output_mask asks for."""
    d = w.ndim - 2
    xb, unbatched = _batched(x, d)
    gb = grad.unsqueeze(0) if unbatched else grad
    stride, padding, dilation = _expand(stride, d), _expand(padding, d), _expand(dilation, d)
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
            dx = _scatter_back(dcols.reshape(ot, k, n * groups * cin_g), positions,
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
