"""Pooling over the spatial dims of [N, C, *S] tensors, 1-d to 3-d, with
PyTorch's window sizes, output sizes, divisors and index choices: the
functional API (F.max_pool2d, F.avg_pool2d, F.adaptive_avg_pool2d, ...)
and the PyTorch importer's pooling ops both build on these.

Windows of a fixed size and stride (max and average pooling, and adaptive
pooling whose windows are uniform) are strided slices: one per position in
the window, of the input padded with 0 or -inf by concatenation, each
[N, C, *out]; pooling folds them elementwise, and the backward places each
position's share back with the slices' inverse (grouped by phase: the
terms landing on positions of one residue modulo the stride are summed
shifted, the phases interleaved once). All of it is views and elementwise
ops, so fusion makes the forward one kernel and the backward one, with no
[out, window] buffer. Adaptive windows of varying sizes stay gathers of the input at
fixed positions (numpy builds the table of positions once; one slot past
the input stands for the padding), reduced over the window, their backward
added back into the same positions (graph.scatter_add). The index of a
window's maximum is its first, or its last NaN, and a window of -inf points
at its first element inside the input (PyTorch's CPU kernels).
"""
import itertools
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


# -- fixed windows as strided slices -------------------------------------------------------

def window_offsets(kernel):
    """The positions in a window, in PyTorch's scan order (row-major)."""
    return list(itertools.product(*[range(k) for k in kernel]))


def padded_sizes(spatial, kernel, stride, padding, dilation, out):
    """Per spatial dim: (elements before the input, after it) so every
    window lies inside; the after part may be negative (windows stop short
    of the input's end)."""
    return [(p, (o - 1) * st + dl * (k - 1) + 1 - s - p)
            for s, k, st, p, dl, o in zip(spatial, kernel, stride, padding, dilation, out)]


def window_slices(x, kernel, stride, padding, dilation, out, fill):
    """[(offset, x's elements at that window position)]: x [N, C, *S]
    padded with `fill` on every side it needs, then one strided slice
    [N, C, *out] per window offset."""
    spatial = list(x.shape[2:])
    xp = x
    for i, (low, high) in enumerate(padded_sizes(spatial, kernel, stride, padding, dilation,
                                                 out)):
        dim = 2 + i
        parts = []
        for size, where_ in ((low, 0), (high, 1)):
            if size > 0:
                shape = list(xp.shape)
                shape[dim] = size
                parts.append((where_, const(xp, np.full(shape, fill), xp.dtype)))
        if parts:
            xp = cat([t for w, t in parts if w == 0] + [xp] + [t for w, t in parts if w == 1],
                     dim)
    out_slices = []
    for offset in window_offsets(kernel):
        key = [slice(None), slice(None)]
        for i, k in enumerate(offset):
            start = k * dilation[i]
            key.append(slice(start, start + (out[i] - 1) * stride[i] + 1, stride[i]))
        out_slices.append((offset, xp[tuple(key)]))
    return out_slices


def window_tables(spatial, kernel, stride, padding, dilation, out):
    """([K, *out] flat position in the spatial plane of each window
    element, [K, *out] whether it lies inside the input)."""
    pos, valid = [], []
    for offset in window_offsets(kernel):
        coords = [np.arange(o) * st - p + k * dl
                  for o, st, p, k, dl in zip(out, stride, padding, offset, dilation)]
        grids = np.meshgrid(*coords, indexing="ij")
        inside = np.ones(out, bool)
        flat = np.zeros(out, np.int64)
        for g, s in zip(grids, spatial):
            inside &= (g >= 0) & (g < s)
            flat = flat * s + g
        pos.append(flat)
        valid.append(inside)
    return np.stack(pos), np.stack(valid)


def _zero_pad(t, dim, before, after):
    """t with `before` and `after` zeros around it along dim."""
    def zeros(size):
        shape = list(t.shape)
        shape[dim] = size
        return const(t, np.zeros(shape), t.dtype)
    parts = ([zeros(before)] if before > 0 else []) + [t] + ([zeros(after)] if after > 0 else [])
    return cat(parts, dim) if len(parts) > 1 else t


def window_sum_back(terms, x_shape, kernel, stride, padding, dilation):
    """The sum of each offset's term [N, C, *out] placed back into zeros of
    x_shape: the gradient of a window fold.

    Grouped by phase: along a dim of stride s, input position h = s*q + r
    receives offset k's term exactly when (k*dl - p) % s == r, from output
    o = q - (k*dl - p) // s. So each phase r is a sum of the terms shifted
    by a constant ([N, C, *Q], Q = ceil(S / s)), and the phases are
    interleaved once per dim: lanes along the innermost dim read every
    term at q = w // s, a contiguous load spread over the lanes."""
    spatial = list(x_shape[2:])
    d = len(spatial)
    rows = [-(-n // st) for n, st in zip(spatial, stride)]
    phases = {}
    for offset, t in zip(window_offsets(kernel), terms):
        phase = []
        for i, (k, st, p, dl) in enumerate(zip(offset, stride, padding, dilation)):
            start = k * dl - p
            phase.append(start % st)
            t = _shift(t, 2 + i, start // st, rows[i])
            if t is None:
                break
        if t is not None:
            key = tuple(phase)
            phases[key] = t if key not in phases else phases[key] + t
    like = terms[0]
    for i in reversed(range(d)):  # innermost first: keys lose their last residue
        dim, st = 2 + i, stride[i]
        merged = {}
        for prefix in itertools.product(*[range(s) for s in stride[:i]]):
            parts = [phases.get(prefix + (r,)) for r in range(st)]
            if all(part is None for part in parts):
                continue
            shape = list(next(part for part in parts if part is not None).shape)
            parts = [part if part is not None else const(like, np.zeros(shape), like.dtype)
                     for part in parts]
            merged[prefix] = _interleave_phases(parts, dim, spatial[i])
        phases = merged
    return phases.get((), const(like, np.zeros(x_shape), like.dtype))


def _shift(t, dim, shift, size):
    """t's element o along dim at o + shift in zeros of `size` elements
    there; None when nothing of t lands inside."""
    m = t.shape[dim]
    lo, hi = max(0, -shift), min(m, size - shift)
    if hi <= lo:
        return None
    key = [slice(None)] * dim
    t = t[tuple(key + [slice(lo, hi)])] if (lo, hi) != (0, m) else t
    return _zero_pad(t, dim, shift + lo, size - (shift + hi))


def _interleave_phases(parts, dim, size):
    """[.., Q, ..] phases r = 0..s-1 along dim -> [.., size, ..]: element
    s*q + r from phase r (s*Q cropped to size)."""
    if len(parts) == 1:
        t = parts[0]
    else:
        shape = list(parts[0].shape)
        split = shape[:dim + 1] + [1] + shape[dim + 1:]
        t = cat([part.reshape(*split) for part in parts], dim + 1)
        t = t.reshape(*(shape[:dim] + [shape[dim] * len(parts)] + shape[dim + 1:]))
    if t.shape[dim] != size:
        t = t[tuple([slice(None)] * dim + [slice(0, size)])]
    return t


# Windows of more elements than this stay gathers: a slice per element
# would make the kernels' bodies as long as the window (a global pool's
# window is the whole plane).
MAX_WINDOW_SLICES = 64


def sliced(kernel):
    return int(np.prod(kernel, dtype=np.int64)) <= MAX_WINDOW_SLICES


def uniform_windows(spatial, out):
    """Adaptive pooling's windows as (kernel, stride) where every output
    cell's window has one size (each spatial size a multiple of its output
    size), else None."""
    if any(s % o for s, o in zip(spatial, out)):
        return None
    kernel = [s // o for s, o in zip(spatial, out)]
    return kernel, kernel


def tiles(spatial, kernel, stride, padding, dilation, out):
    """Whether the windows tile the input (stride = kernel, no padding or
    dilation, every window inside): each window is then a block of a
    reshape of the input, and a large one needs neither slices nor gathers."""
    return (list(kernel) == list(stride) and not any(padding) and all(dl == 1 for dl in dilation)
            and all(o * k <= n for o, k, n in zip(out, kernel, spatial)))


def _tiled(x, kernel, out):
    """x [N, C, *S] -> [N, C, *out, *kernel]: each window's elements in the
    last dims (the part of S past the windows cropped)."""
    d = len(kernel)
    spatial = list(x.shape[2:])
    if any(o * k != n for o, k, n in zip(out, kernel, spatial)):
        x = x[tuple([slice(None)] * 2 + [slice(0, o * k) for o, k in zip(out, kernel)])]
    split = list(x.shape[:2])
    for o, k in zip(out, kernel):
        split += [o, k]
    x = x.reshape(*split)
    return x.permute(0, 1, *[2 + 2 * i for i in range(d)], *[3 + 2 * i for i in range(d)])


def _untiled(t, x_shape, kernel):
    """The inverse of _tiled for t [N, C, *out, *kernel] (zeros where the
    windows left the input)."""
    d = len(kernel)
    out = list(t.shape[2:2 + d])
    perm = [0, 1]
    for i in range(d):
        perm += [2 + i, 2 + d + i]
    t = t.permute(*perm).reshape(*(list(x_shape[:2]) + [o * k for o, k in zip(out, kernel)]))
    for i, (o, k, n) in enumerate(zip(out, kernel, x_shape[2:])):
        t = _zero_pad(t, 2 + i, 0, n - o * k)
    return t


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


def gathered_window(spatial, kernel, stride, padding, dilation, out):
    """The [Ot, K] position table of fixed windows too large to slice."""
    return positions(spatial, strided_coords(out, kernel, stride, padding, dilation))


def fixed_window(d, kernel, stride, padding, dilation=1):
    """kernel, stride, padding, dilation as d ints each (stride None or
    empty: the kernel)."""
    kernel = expand(kernel, d)
    stride = expand(stride, d) if stride else kernel
    return kernel, stride, expand(padding, d), expand(dilation, d)


def avg_pool(x, kernel, stride, padding, count_include_pad, divisor_override, out):
    """x [N, C, *S] average-pooled into [N, C, *out]: the window's slices
    summed (zeros in the padding) over the divisors."""
    d = x.ndim - 2
    kernel, stride, padding, dilation = fixed_window(d, kernel, stride, padding)
    divisors = avg_divisors(list(x.shape[2:]), out, kernel, stride, padding, count_include_pad,
                            divisor_override)
    if not sliced(kernel) and tiles(list(x.shape[2:]), kernel, stride, padding, dilation, out):
        dims = tuple(range(2 + d, 2 + 2 * d))
        return _tiled(x, kernel, out).sum(dims) / float(divisors[0])
    if not sliced(kernel):
        table = gathered_window(list(x.shape[2:]), kernel, stride, padding, dilation, out)
        sums = columns(x, table, 0.0).sum((1,))
        return planes(sums / const(x, divisors.reshape(-1, 1), x.dtype), x.shape, out)
    total = None
    for _, s in window_slices(x, kernel, stride, padding, dilation, out, 0.0):
        total = s if total is None else total + s
    return total / const(x, divisors.reshape([1, 1] + list(out)), x.dtype)


def avg_pool_backward(grad, x_shape, kernel, stride, padding, count_include_pad,
                      divisor_override):
    d = len(x_shape) - 2
    out = list(grad.shape[2:])
    kernel, stride, padding, dilation = fixed_window(d, kernel, stride, padding)
    divisors = avg_divisors(list(x_shape[2:]), out, kernel, stride, padding, count_include_pad,
                            divisor_override)
    if not sliced(kernel) and tiles(list(x_shape[2:]), kernel, stride, padding, dilation, out):
        share = (grad / float(divisors[0])).reshape(*(list(grad.shape) + [1] * d))
        return _untiled(share.expand(*(list(grad.shape) + kernel)), x_shape, kernel)
    if not sliced(kernel):
        table = gathered_window(list(x_shape[2:]), kernel, stride, padding, dilation, out)
        return spread_back(grad, x_shape, table, divisors)
    share = grad / const(grad, divisors.reshape([1, 1] + out), grad.dtype)
    return window_sum_back([share] * len(window_offsets(kernel)), x_shape, kernel, stride,
                           padding, dilation)


def spread_back(grad, x_shape, table, divisors):
    """grad [N, C, *out] / divisors added to every element of its window."""
    n, c = x_shape[:2]
    ot = table.shape[0]
    g = grad.reshape(n * c, ot).transpose(0, 1)
    g = g / const(grad, divisors.reshape(-1, 1), grad.dtype)
    return scatter_back(g.unsqueeze(1).expand(ot, table.shape[1], n * c), table, x_shape)


def adaptive_avg_pool(x, out):
    spatial = list(x.shape[2:])
    if all(o == 1 for o in out):  # the plane's mean: one reduction
        dims = tuple(range(2, x.ndim))
        count = float(np.prod(spatial, dtype=np.int64))
        return x.sum(dims, keepdim=True) / count
    uniform = uniform_windows(spatial, out)
    if uniform:
        return avg_pool(x, uniform[0], uniform[1], 0, True, None, out)
    coords, counts = adaptive_coords(spatial, out)
    sums = columns(x, positions(spatial, coords), 0.0).sum((1,))
    return planes(sums / const(x, count_grid(counts).reshape(-1, 1), x.dtype), x.shape, out)


def adaptive_avg_pool_backward(grad, x_shape):
    if all(o == 1 for o in grad.shape[2:]):  # the plane's mean's: a broadcast
        count = float(np.prod(x_shape[2:], dtype=np.int64))
        return (grad / count).expand(*x_shape)
    uniform = uniform_windows(list(x_shape[2:]), list(grad.shape[2:]))
    if uniform:
        return avg_pool_backward(grad, x_shape, uniform[0], uniform[1], 0, True, None)
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
    """(values, indices) [N, C, *out]: the window's slices folded in scan
    order, an element taken where it is inside the input and greater than
    the best so far or NaN (so the first maximum, or the last NaN; a window
    of -inf keeps its first element inside the input). The values are the
    taken slices picked by the index, so a gradient reaches exactly that
    element (PyTorch's rule; `differentiable` is accepted for the adaptive
    form's signature)."""
    d = x.ndim - 2
    kernel, stride, padding, dilation = fixed_window(d, kernel, stride, padding, dilation)
    if not sliced(kernel):
        table = gathered_window(list(x.shape[2:]), kernel, stride, padding, dilation, out)
        return max_and_index(x, table, out, differentiable)
    pos, valid = window_tables(list(x.shape[2:]), kernel, stride, padding, dilation, out)
    lead = list(x.shape[:2])
    full = lead + list(out)
    best = const(x, np.full([1, 1] + list(out), -np.inf), x.dtype).expand(*full)
    first = np.argmax(valid, axis=0)  # the first position inside the input
    index = const(x, first.reshape([1, 1] + list(out))).expand(*full)
    slices = window_slices(x, kernel, stride, padding, dilation, out, -math.inf)
    for k, (_, s) in enumerate(slices):
        inside = const(x, valid[k].reshape([1, 1] + list(out)), "i1")
        take = ((s > best) | (s != s)) & inside
        best = where(take, s, best)
        index = where(take, k, index)
    # The others add -0.0, which leaves every value as it is (a -0.0
    # maximum included; +0.0 would turn it into +0.0).
    values = None
    for k, (_, s) in enumerate(slices):
        picked = where(index == k, s, -0.0)
        values = picked if values is None else values + picked
    flat = None
    for k in range(len(slices)):
        at = where(index == k, const(x, pos[k].reshape([1, 1] + list(out))), 0)
        flat = at if flat is None else flat + at
    return values, flat


def max_pool_backward(grad, x_shape, indices, kernel, stride, padding, dilation):
    """The gradient of max_pool from its indices (flat positions in each
    plane): each window's gradient to the element its index names, placed
    back by the window slices' inverse."""
    d = len(x_shape) - 2
    kernel, stride, padding, dilation = fixed_window(d, kernel, stride, padding, dilation)
    if not sliced(kernel):
        return scatter_indices(grad, x_shape, indices, d)
    out = list(grad.shape[2:])
    pos, _ = window_tables(list(x_shape[2:]), kernel, stride, padding, dilation, out)
    terms = [where(indices == const(grad, pos[k].reshape([1, 1] + out)), grad, 0.0)
             for k in range(pos.shape[0])]
    return window_sum_back(terms, x_shape, kernel, stride, padding, dilation)


def adaptive_max_pool(x, out, differentiable=False):
    uniform = uniform_windows(list(x.shape[2:]), out)
    if uniform:
        return max_pool(x, uniform[0], uniform[1], 0, 1, out, differentiable)
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
