"""F.interpolate: PyTorch's resizing of [N, C, *S] tensors (1-3 spatial
dims) by nearest, nearest-exact, (bi/tri)linear, bicubic and area modes.

Every mode but area is separable: along each spatial dim, output element o
is a weighted sum of a few input elements (taps) whose indices and weights
depend only on the sizes, so numpy computes them once and the graph does a
gather of the taps ([O, taps] rows of the dim moved to the front) times the
weights, summed; the gradient is the gather's (a scatter-add). Upsampling
by a whole number s whose taps are shifts of the input in each phase
(output s*q + r reads input q + offset, but at the clipped edges: nearest,
linear and cubic at align_corners=False) is instead a weighted sum of
shifted views per phase, the phases interleaved, with exactly the taps and
weights of the gather: no gather, and its gradient (autodiff's, or
_spread_by_phases for PyTorch's backward ops) no scatter-add. The source
coordinates follow PyTorch's CPU kernels, in the precision they use (float
for f32/bf16/f16 inputs, double for f64), so indices agree exactly at
fractional scales. Area is adaptive average pooling.
"""
import math

import numpy as np

from . import _pooling as pooling
from ._core import CompileError
from ._tracing import Tensor, cat

_LINEAR_DIMS = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
_MODES = ("nearest", "nearest-exact", "area") + tuple(_LINEAR_DIMS)


def _sizes(x, size, scale_factor, recompute_scale_factor, d):
    """(output sizes, the scales the kernels use or None per dim)."""
    if (size is None) == (scale_factor is None):
        raise CompileError("interpolate: give exactly one of size and scale_factor")
    if size is not None:
        out = [int(size)] * d if isinstance(size, (int, np.integer)) else [int(s) for s in size]
        if len(out) != d:
            raise CompileError(f"interpolate: size {list(out)} must have {d} values for an "
                               f"input of shape {list(x.shape)}")
        scales = [None] * d
    else:
        scales = [float(scale_factor)] * d if isinstance(scale_factor, (int, float)) else \
            [float(s) for s in scale_factor]
        if len(scales) != d:
            raise CompileError(f"interpolate: scale_factor {scales} must have {d} values for "
                               f"an input of shape {list(x.shape)}")
        out = [math.floor(float(s) * f) for s, f in zip(x.shape[2:], scales)]
        if recompute_scale_factor:
            scales = [None] * d
    if any(o < 1 for o in out):
        raise CompileError(f"interpolate: the output size {out} of input {list(x.shape)} must "
                           "be positive")
    return out, scales


def _kernel_scale(real, size_in, size_out, scale):
    """PyTorch's compute_scales_value: 1 / scale_factor when one was
    given, else in / out."""
    if scale is not None and scale > 0:
        return real(1.0 / scale)
    return real(size_in) / real(size_out)


def _nearest_taps(real, size_in, size_out, scale, exact):
    """[O, 1] indices (PyTorch's nearest_idx / nearest_exact_idx)."""
    o = np.arange(size_out)
    if not exact and size_out == size_in:
        idx = o
    elif not exact and size_out == 2 * size_in:
        idx = o >> 1
    else:
        s = _kernel_scale(real, size_in, size_out, scale)
        src = (o.astype(real) + real(0.5)) * s if exact else o.astype(real) * s
        idx = np.minimum(np.floor(src).astype(np.int64), size_in - 1)
    return idx.reshape(-1, 1), None


def _source_index(real, size_in, size_out, scale, align_corners, cubic):
    """PyTorch's area_pixel_compute_source_index for every output index."""
    o = np.arange(size_out).astype(real)
    if align_corners:
        s = real(size_in - 1) / real(size_out - 1) if size_out > 1 else real(0)
        return (s * o).astype(real)
    s = _kernel_scale(real, size_in, size_out, scale)
    src = (s * (o + real(0.5)) - real(0.5)).astype(real)
    return src if cubic else np.maximum(src, real(0))


def _guard(real, src, size_in):
    """PyTorch's guard_index_and_lambda: (floor index capped at the last,
    the fraction clamped to [0, 1])."""
    idx = np.minimum(np.floor(src).astype(np.int64), size_in - 1)
    lam = np.clip(src - idx.astype(real), real(0), real(1)).astype(real)
    return idx, lam


def _linear_taps(real, size_in, size_out, scale, align_corners):
    src = _source_index(real, size_in, size_out, scale, align_corners, cubic=False)
    i0, lam = _guard(real, src, size_in)
    i1 = i0 + (i0 < size_in - 1)
    return np.stack([i0, i1], 1), np.stack([real(1) - lam, lam], 1)


def _cubic_taps(real, size_in, size_out, scale, align_corners):
    """Keys' cubic convolution with A = -0.75, taps clamped to the input."""
    a = real(-0.75)

    def near(t):  # |t| <= 1
        return ((a + 2) * t - (a + 3)) * t * t + 1

    def far(t):  # 1 < |t| < 2
        return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    src = _source_index(real, size_in, size_out, scale, align_corners, cubic=True)
    i0, t = _guard(real, src, size_in)
    idx = np.stack([np.clip(i0 - 1 + j, 0, size_in - 1) for j in range(4)], 1)
    weights = np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], 1).astype(real)
    return idx, weights


def _moved_to_front(x, dim):
    """(x with `dim` first, flattened to [x.shape[dim], rest], the rest's
    shape, the permutation that undoes it once the rest is unflattened)."""
    perm = [dim] + [i for i in range(x.ndim) if i != dim]
    moved = x.permute(*perm)
    rest = list(moved.shape[1:])
    rows = moved.reshape(moved.shape[0], int(np.prod(rest, dtype=np.int64)))
    back = [0] * x.ndim
    for i, p in enumerate(perm):
        back[p] = i
    return rows, rest, back


def _runs(col):
    """[(first, end, start)]: col[q] = start + (q - first) for q in [first,
    end) -- the rows of one tap column of a phase as runs of consecutive
    input elements."""
    runs, first = [], 0
    for q in range(1, len(col) + 1):
        if q == len(col) or col[q] != col[q - 1] + 1:
            runs.append((first, q, int(col[first])))
            first = q
    return runs


# A phase's tap column that is more than this many runs of consecutive input
# elements is no shift of the input (not whole-number upsampling).
_MAX_RUNS = 5


def _phases(idx, weights, size_in):
    """Whole-number upsampling (O = s * n, s > 1) whose taps are shifts of
    the input in each phase: output s*q + r reads idx[s*q + r, t], which for
    every (r, t) is a few runs of consecutive input elements (the middle
    one, clipped ends). Returns (s, [[runs per tap] per phase], [weights
    [n, taps] or None per phase]), else None."""
    size_out, taps = idx.shape
    if size_out % size_in or size_out == size_in:
        return None
    s, q = size_out // size_in, np.arange(size_in)
    columns, phase_weights = [], []
    for r in range(s):
        rows = idx[q * s + r]
        runs = [_runs(rows[:, t]) for t in range(taps)]
        if any(len(rr) > _MAX_RUNS for rr in runs):
            return None
        columns.append(runs)
        phase_weights.append(None if weights is None else weights[q * s + r])
    return s, columns, phase_weights


def _rows(x, dim, runs):
    """x's elements along dim at the runs' positions, in order: slices of x
    concatenated (views of one value: no gather, no kernel of its own)."""
    pieces = [x[tuple([slice(None)] * dim + [slice(start, start + end - first)])]
              for first, end, start in runs]
    return pieces[0] if len(pieces) == 1 else cat(pieces, dim)


def _weighted(t, dim, w, tap):
    """t (one row per phase element along dim) times the phase's weights
    of tap `tap` (w [n, taps], or None: 1): one number where they are all
    equal, else a constant along dim."""
    if w is None:
        return t
    wt = w[:, tap].astype(np.float64)
    if np.all(wt == wt[0]):
        return t * float(wt[0]) if wt[0] != 1 else t
    shape = [1] * t.ndim
    shape[dim] = len(wt)
    return t * pooling.const(t, wt.reshape(shape), t.dtype)


def _resample_by_phases(x, dim, phases):
    """_resample_dim for whole-number upsampling: each phase r (outputs
    s*q + r) is a weighted sum of x's rows at its taps (shifted views), and
    the phases are interleaved: the lanes read x spread, no gather."""
    s, columns, phase_weights = phases
    n = x.shape[dim]
    parts = []
    for runs, w in zip(columns, phase_weights):
        y = None
        for t, tap in enumerate(runs):
            term = _weighted(_rows(x, dim, tap), dim, w, t)
            y = term if y is None else y + term
        parts.append(y)
    shape = list(x.shape)
    split = shape[:dim + 1] + [1] + shape[dim + 1:]
    y = cat([part.reshape(*split) for part in parts], dim + 1)
    return y.reshape(*(shape[:dim] + [n * s] + shape[dim + 1:]))


def _resample_dim(x, dim, idx, weights):
    """x with dim `dim` replaced by sum_t x[idx[:, t]] * weights[:, t]."""
    phases = _phases(idx, weights, x.shape[dim])
    if phases is not None:
        return _resample_by_phases(x, dim, phases)
    rows, rest, back = _moved_to_front(x, dim)
    picked = pooling._gather(rows, pooling.const(x, idx))        # [O, taps, rest]
    if weights is None:
        y = picked.reshape(idx.shape[0], *rest)
    else:
        w = pooling.const(x, weights.astype(np.float64), x.dtype)
        y = (picked * w.unsqueeze(2)).sum((1,)).reshape(idx.shape[0], *rest)
    return y.permute(*back)


def _spread_by_phases(g, dim, phases, size):
    """_spread_dim for whole-number upsampling: each phase's rows of g
    (a strided slice), times each tap's weights, added back at the tap's
    runs of input rows (placed by zero padding): no scatter-add."""
    s, columns, phase_weights = phases
    total = None
    for r, (runs, w) in enumerate(zip(columns, phase_weights)):
        g_r = g[tuple([slice(None)] * dim + [slice(r, None, s)])]
        for t, tap in enumerate(runs):
            term = _weighted(g_r, dim, w, t)
            for first, end, start in tap:
                piece = term[tuple([slice(None)] * dim + [slice(first, end)])]
                piece = pooling._zero_pad(piece, dim, start, size - start - (end - first))
                total = piece if total is None else total + piece
    return total


def _spread_dim(g, dim, idx, weights, size):
    """The gradient of _resample_dim: g's dim `dim` (one row per output
    element) added back, times each tap's weight, into `size` rows."""
    phases = _phases(idx, weights, size)
    if phases is not None:
        return _spread_by_phases(g, dim, phases, size)
    rows, rest, back = _moved_to_front(g, dim)
    o, taps = idx.shape
    updates = rows.unsqueeze(1)                                  # [O, 1, rest]
    if weights is None:
        updates = updates.expand(o, taps, rows.shape[1])
    else:
        updates = updates * pooling.const(g, weights.astype(np.float64), g.dtype).unsqueeze(2)
    base = pooling.const(g, np.zeros((size, rows.shape[1])), g.dtype)
    out = pooling._scatter_add(base, pooling.const(g, idx.reshape(-1)),
                               updates.reshape(o * taps, rows.shape[1]))
    return out.reshape(size, *rest).permute(*back)


def _taps(mode, real, size_in, size_out, scale, align_corners):
    """(indices [O, taps], weights or None) of one dim, or None where the
    dim is kept as it is (nearest between equal sizes, as PyTorch)."""
    if mode == "nearest" and size_in == size_out:
        return None
    if mode.startswith("nearest"):
        return _nearest_taps(real, size_in, size_out, scale, mode == "nearest-exact")
    if mode == "bicubic":
        return _cubic_taps(real, size_in, size_out, scale, bool(align_corners))
    return _linear_taps(real, size_in, size_out, scale, bool(align_corners))


def _real(x):
    """The precision PyTorch computes source coordinates in: double for f64
    tensors, float otherwise."""
    return np.float64 if x.dtype == "f64" else np.float32


def _order(in_spatial, out):
    """The order resample() takes the dims in. The dims act independently,
    so any order gives the same values; moving the last (contiguous) dim
    to the front is an element-by-element transpose, the costliest move, so
    it is done while the tensor is smaller: first when it grows, last when
    it shrinks (resample_backward takes the reverse order)."""
    d = len(out)
    others = list(range(d - 1))
    return [d - 1] + others if out[-1] >= in_spatial[-1] else others + [d - 1]


def resample(x, out, scales, mode, align_corners):
    """x [N, C, *S] resized to spatial sizes `out`; `scales[i]` the scale
    factor the user gave for dim i (the kernels use 1 / it), or None (they
    use in / out). mode: nearest, nearest-exact, linear (any dims), bicubic."""
    y = x
    for i in _order(list(x.shape[2:]), out):
        taps = _taps(mode, _real(x), x.shape[2 + i], out[i], scales[i], align_corners)
        if taps is not None:
            y = _resample_dim(y, 2 + i, *taps)
    return y


def resample_backward(grad, in_spatial, scales, mode, align_corners):
    """The input's gradient of resample() to `grad`'s spatial sizes."""
    out = list(grad.shape[2:])
    g = grad
    for i in reversed(_order(in_spatial, out)):
        taps = _taps(mode, _real(grad), in_spatial[i], out[i], scales[i], align_corners)
        if taps is not None:
            g = _spread_dim(g, 2 + i, *taps, in_spatial[i])
    return g


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """PyTorch's F.interpolate on a traced [N, C, *S] tensor."""
    if not isinstance(input, Tensor):
        raise CompileError(f"interpolate: expects a traced tensor, got {type(input).__name__}")
    x = input
    if mode not in _MODES:
        raise CompileError(f"interpolate: mode {mode!r} is not one of {', '.join(_MODES)}")
    d = x.ndim - 2
    if d < 1 or d > 3:
        raise CompileError(f"interpolate: expects an input [N, C, *S] with 1 to 3 spatial "
                           f"dims, got {list(x.shape)}")
    if mode in _LINEAR_DIMS and _LINEAR_DIMS[mode] != d:
        raise CompileError(f"interpolate: mode {mode!r} needs a {_LINEAR_DIMS[mode] + 2}-d input, "
                           f"got {list(x.shape)}")
    if align_corners is not None and mode not in _LINEAR_DIMS:
        raise CompileError("interpolate: align_corners can only be set with the interpolating "
                           "modes linear, bilinear, bicubic and trilinear (as in PyTorch)")
    if antialias:
        raise CompileError("interpolate: antialias=True is not supported; resize without it or "
                           "low-pass filter first (e.g. avg_pool2d)")
    if mode == "area" and recompute_scale_factor is False:
        recompute_scale_factor = None
    out, scales = _sizes(x, size, scale_factor, recompute_scale_factor, d)
    if mode == "area":
        return pooling.adaptive_avg_pool(x, out)
    return resample(x, out, scales, "linear" if mode in ("bilinear", "trilinear") else mode,
                    align_corners)
