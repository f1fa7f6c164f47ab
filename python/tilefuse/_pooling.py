"""Pooling over the spatial dims of [N, C, *S] tensors, 1-d to 3-d, with
PyTorch's window sizes, output sizes, divisors and index choices: the
functional API (F.max_pool2d, F.avg_pool2d, F.adaptive_avg_pool2d, ...)
and the PyTorch importer's pooling ops both build on these.

A window's elements are a gather of the input at fixed positions (numpy
builds the table of positions once; one slot past the input stands for the
padding, which holds 0 or -inf); pooling reduces over the window; the
backward ops add back into the same positions (graph.scatter_add). The
index of a window's maximum is its first, or its last NaN, and a window of
-inf points at its first element inside the input (PyTorch's CPU kernels).
"""
import math

import numpy as np

from ._core import CompileError
from ._tracing import _lift, cat, where


def const(like, values, dtype="i64"):
    """`values` (numpy) as a constant in `like`'s trace, of type `dtype`."""
    c = _lift(like._tracer, np.asarray(values))
    return c if c.dtype == dtype else c.to(dtype)


def _gather(table, rows):
    """table[rows[i...], ...]: graph.gather."""
    return table._wrap(table._tracer.gather(table._id, rows._id))


def _scatter_add(base, rows, updates):
    """base with updates[k] added to row rows[k]: graph.scatter_add."""
    updates = updates if updates.dtype == base.dtype else updates.to(base.dtype)
    return base._wrap(base._tracer.scatter_add(base._id, rows._id, updates._id))


def expand(v, d):
    """An int or a list of one or d ints as d ints."""
    v = [int(v)] if isinstance(v, (int, np.integer)) else [int(a) for a in v]
    return v * d if len(v) == 1 else v


def window_ints(v, d, what, name):
    """expand(), refusing a count other than 1 or d and negative values."""
    try:
        out = expand(v, d)
    except TypeError:
        raise CompileError(f"{what}: {name} must be an int or {d} ints, got {v!r}") from None
    if len(out) != d:
        raise CompileError(f"{what}: {name} expects 1 or {d} values, got {len(out)}")
    if any(a < 0 for a in out):
        raise CompileError(f"{what}: {name} must be >= 0, got {out}")
    return out


def pool_output_size(spatial, kernel, stride, padding, dilation, ceil_mode, what):
    """PyTorch's pooling output size per spatial dim, with its checks: a
    positive kernel and stride, padding at most half the (dilated) kernel,
    an output of at least one element. With ceil_mode the last window must
    start inside the input or its left padding."""
    if any(k < 1 for k in kernel) or any(s < 1 for s in stride) or any(dl < 1 for dl in dilation):
        raise CompileError(f"{what}: kernel_size {kernel}, stride {stride} and dilation "
                           f"{dilation} must be positive")
    out = []
    for s, k, st, p, dl in zip(spatial, kernel, stride, padding, dilation):
        effective = dl * (k - 1) + 1
        if p > effective // 2:
            raise CompileError(
                f"{what}: padding {padding} is more than half the kernel {kernel}"
                f"{' dilated by ' + str(dilation) if any(v != 1 for v in dilation) else ''} "
                f"(PyTorch refuses it too): use padding <= {effective // 2}, or pad the input "
                "first")
        span = s + 2 * p - effective + (st - 1 if ceil_mode else 0)
        o = span // st + 1
        if ceil_mode and (o - 1) * st >= s + p:
            o -= 1
        out.append(o)
    if any(o < 1 for o in out):
        raise CompileError(f"{what}: input of spatial size {list(spatial)} with kernel {kernel}, "
                           f"stride {stride}, padding {padding}, dilation {dilation} gives output "
                           f"size {out}: too small")
    return out


def positions(spatial, coords):
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


def strided_coords(out, kernel, stride, padding, dilation):
    return [np.arange(o)[:, None] * s - p + np.arange(k)[None, :] * dl
            for o, k, s, p, dl in zip(out, kernel, stride, padding, dilation)]


def adaptive_coords(spatial, out):
    """Per-dim window coordinates of adaptive pooling (window i covers
    [floor(i*S/O), ceil((i+1)*S/O))), -1 past a shorter window's end, and
    each window's size."""
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


def columns(x, table, fill):
    """x [N, C, *S] -> [Ot, K, N*C]: the window elements, `fill` in the
    padding."""
    n, c = x.shape[:2]
    plane = int(np.prod(x.shape[2:], dtype=np.int64))
    rows = x.reshape(n * c, plane).transpose(0, 1)
    pad = const(x, np.full((1, n * c), fill), x.dtype)
    return _gather(cat([rows, pad], 0), const(x, table))


def planes(values, x_shape, out):
    """[Ot, N*C] -> [N, C, *out]."""
    n, c = x_shape[:2]
    return values.transpose(0, 1).reshape(n, c, *out)


def scatter_back(values, table, x_shape):
    """The gradient of columns(): values [Ot, K, N*C] added at their
    positions, [N, C, *S] (the padding's share dropped)."""
    n, c = x_shape[:2]
    plane = int(np.prod(x_shape[2:], dtype=np.int64))
    k = table.shape[1]
    base = const(values, np.zeros((plane + 1, n * c)), values.dtype)
    rows = const(values, table.reshape(-1))
    out = _scatter_add(base, rows, values.reshape(table.shape[0] * k, n * c))
    return out[0:plane].transpose(0, 1).reshape(*x_shape)


def count_grid(counts):
    """The flattened outer product of per-dim window sizes (f64)."""
    grid = np.ones([len(z) for z in counts])
    for i, z in enumerate(counts):
        shape = [1] * len(counts)
        shape[i] = len(z)
        grid = grid * z.reshape(shape)
    return grid.reshape(-1).astype(np.float64)


# -- average pooling ----------------------------------------------------------------------

def avg_divisors(spatial, out, kernel, stride, padding, count_include_pad, divisor_override):
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
    return count_grid(sizes)


def avg_setup(x_shape, kernel, stride, padding, count_include_pad, divisor_override, out):
    """(window positions, divisors) of average pooling into `out`."""
    d = len(x_shape) - 2
    kernel = expand(kernel, d)
    stride = expand(stride, d) if stride else kernel
    padding = expand(padding, d)
    spatial = list(x_shape[2:])
    table = positions(spatial, strided_coords(out, kernel, stride, padding, [1] * d))
    divisors = avg_divisors(spatial, out, kernel, stride, padding, count_include_pad,
                            divisor_override)
    return table, divisors


def avg_pool(x, kernel, stride, padding, count_include_pad, divisor_override, out):
    """x [N, C, *S] average-pooled into [N, C, *out]."""
    table, divisors = avg_setup(x.shape, kernel, stride, padding, count_include_pad,
                                divisor_override, out)
    sums = columns(x, table, 0.0).sum((1,))
    return planes(sums / const(x, divisors.reshape(-1, 1), x.dtype), x.shape, out)


def avg_pool_backward(grad, x_shape, kernel, stride, padding, count_include_pad,
                      divisor_override):
    out = list(grad.shape[2:])
    table, divisors = avg_setup(x_shape, kernel, stride, padding, count_include_pad,
                                divisor_override, out)
    return spread_back(grad, x_shape, table, divisors)


def spread_back(grad, x_shape, table, divisors):
    """grad [N, C, *out] / divisors added to every element of its window."""
    n, c = x_shape[:2]
    ot = table.shape[0]
    g = grad.reshape(n * c, ot).transpose(0, 1)
    g = g / const(grad, divisors.reshape(-1, 1), grad.dtype)
    return scatter_back(g.unsqueeze(1).expand(ot, table.shape[1], n * c), table, x_shape)


def adaptive_avg_pool(x, out):
    spatial = list(x.shape[2:])
    coords, counts = adaptive_coords(spatial, out)
    sums = columns(x, positions(spatial, coords), 0.0).sum((1,))
    return planes(sums / const(x, count_grid(counts).reshape(-1, 1), x.dtype), x.shape, out)


def adaptive_avg_pool_backward(grad, x_shape):
    coords, counts = adaptive_coords(list(x_shape[2:]), list(grad.shape[2:]))
    return spread_back(grad, x_shape, positions(list(x_shape[2:]), coords), count_grid(counts))


# -- max pooling ---------------------------------------------------------------------------

def max_and_index(x, table, out, differentiable=False):
    """(values, indices) [N, C, *out] of max pooling over the windows.
    With `differentiable`, the values are the chosen elements picked out
    of their windows, so a gradient reaches exactly the element the index
    names (PyTorch's rule, ties included) rather than every maximum."""
    cols = columns(x, table, -math.inf)                   # [Ot, K, NC]
    k = table.shape[1]
    first_max = cols.argmax(1)                            # [Ot, NC]
    nan = (cols != cols).to("i32")
    any_nan = nan.amax((1,)) > 0
    last_nan = (k - 1) - nan.flip([1]).argmax(1)
    pick = where(any_nan, last_nan, first_max)
    hit = const(x, np.arange(k)).reshape(1, k, 1) == pick.unsqueeze(1)
    values = where(hit, cols, 0.0).sum((1,)) if differentiable else cols.amax((1,))
    plane = int(np.prod(x.shape[2:], dtype=np.int64))
    first_valid = np.argmax(table != plane, axis=1)       # [Ot]
    chosen = where(hit, const(x, table).unsqueeze(2), 0).sum((1,))  # [Ot, NC]
    fallback = const(x, table[np.arange(len(first_valid)), first_valid].reshape(-1, 1))
    chosen = where(chosen == plane, fallback, chosen)
    return planes(values, x.shape, out), planes(chosen, x.shape, out)


def max_pool(x, kernel, stride, padding, dilation, out, differentiable=False):
    d = x.ndim - 2
    kernel = expand(kernel, d)
    stride = expand(stride, d) if stride else kernel
    coords = strided_coords(out, kernel, stride, expand(padding, d), expand(dilation, d))
    return max_and_index(x, positions(list(x.shape[2:]), coords), out, differentiable)


def adaptive_max_pool(x, out, differentiable=False):
    coords, _ = adaptive_coords(list(x.shape[2:]), out)
    return max_and_index(x, positions(list(x.shape[2:]), coords), out, differentiable)


def scatter_indices(grad, x_shape, indices, d):
    """grad [.., *out] added into zeros of x_shape [.., *S] at each plane's
    flat spatial index (the pooled dims are the trailing d)."""
    lead = len(x_shape) - d
    count = int(np.prod(x_shape[:lead], dtype=np.int64))
    plane = int(np.prod(x_shape[lead:], dtype=np.int64))
    per = int(np.prod(grad.shape[lead:], dtype=np.int64))
    offsets = const(grad, (np.arange(count) * plane).reshape(count, 1))
    rows = (indices.reshape(count, per) + offsets).reshape(count * per)
    base = const(grad, np.zeros(count * plane), grad.dtype)
    return _scatter_add(base, rows, grad.reshape(count * per)).reshape(*x_shape)
