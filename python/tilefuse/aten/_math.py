"""Elementwise functions the graph has no op for, as composites computed in
float64 and rounded once to the result's type (as _trig's sin and cos): a
float32 result is then within an ulp or two of the correctly rounded
value, as PyTorch's own (libm / SLEEF) are.

atan reduces |x| > 1 by atan(x) = pi/2 - atan(1/x), then halves the angle
twice (atan(u) = 2 atan(u / (1 + sqrt(1 + u^2))): |u| <= tan(pi/16) ~ 0.199)
and sums its Taylor series to u^27 (truncation below 0.199^29 / 29 ~ 2e-22).
atan2 follows C's atan2 in every special case (signed zeros, infinities,
NaN).
"""
import math

from .._dtypes import is_float
from .._tracing import where


def result_type(x):
    """PyTorch's result dtype of a float function of `x` (ints -> f32)."""
    return x.dtype if is_float(x.dtype) else "f32"


def f64(x):
    return x if x.dtype == "f64" else x.to("f64")


def signbit(x):
    """Whether float x is negative or -0.0 (a NaN counts as positive)."""
    return where(x < 0, True, (x == 0) & ((1.0 / x) < 0))


def _atan_series(u):
    u2 = u * u
    out = -1.0 / 27
    for n in range(12, -1, -1):
        out = out * u2 + ((-1) ** n) / (2 * n + 1)
    return u * out


def atan(xd):
    """arctan of a float64 tensor (odd, |result| <= pi/2, NaN -> NaN)."""
    a = xd.abs()
    big = a > 1.0
    t = where(big, 1.0 / where(big, a, 1.0), a)  # in [0, 1]; 1/inf = 0
    for _ in range(2):
        t = t / (1.0 + (1.0 + t * t).sqrt())
    r = 4.0 * _atan_series(t)
    r = where(big, math.pi / 2 - r, r)
    return where(xd < 0, -r, where(xd == 0, xd, r))  # keeps -0.0 and NaN


def atan2(yd, xd):
    """C's atan2(y, x) of float64 tensors."""
    ay, ax = yd.abs(), xd.abs()
    both_inf = (ay == math.inf) & (ax == math.inf)
    # angle of (|x|, |y|) in [0, pi/2]
    ratio_small = ay <= ax
    safe_ax = where(ax == 0, 1.0, ax)
    safe_ay = where(ay == 0, 1.0, ay)
    base = where(ratio_small, atan(ay / safe_ax), math.pi / 2 - atan(ax / safe_ay))
    base = where(ay == 0, 0.0, base)
    base = where(both_inf, math.pi / 4, base)
    base = where((ax == 0) & (ay != 0), math.pi / 2, base)
    angle = where(signbit(xd), math.pi - base, base)
    signed = where(signbit(yd), -angle, angle)
    return where((yd != yd) | (xd != xd), yd + xd, signed)
