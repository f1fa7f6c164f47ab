"""sin and cos as composites of the graph's ops (rotary position embeddings
need them; the graph has no trigonometric op).

Both are computed in float64 and rounded once to the input's type:
x = k * pi/2 + r with k = round(x / (pi/2)) and |r| <= pi/4 (in f64, pi/2
held to 53 bits, so for |x| < 2^20 the reduction error is below 2^-32
absolute: f32 results are correctly rounded but for ties, as PyTorch's
to an ulp), then Taylor polynomials of sin and cos on |r| <= pi/4 (terms to
r^15 and r^16, truncation below 1e-16), chosen and signed by k mod 4. The
gradient follows: k is piecewise constant (floor has zero derivative), and
the derivative of each polynomial is the other's, to the same accuracy.
"""
import math

# 1/(2n+1)! and 1/(2n)! for the Horner forms in r^2.
_SIN = [(-1) ** n / math.factorial(2 * n + 1) for n in range(8)]
_COS = [(-1) ** n / math.factorial(2 * n) for n in range(9)]


def _horner(coefficients, r2):
    out = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        out = out * r2 + c
    return out


def _reduced(x):
    """(sin(r), cos(r), k mod 4) of x = k pi/2 + r, in f64."""
    xd = x.to("f64")
    k = (xd * (2.0 / math.pi) + 0.5).floor()
    r = xd - k * (math.pi / 2)
    r2 = r * r
    quadrant = k - 4.0 * (k * 0.25).floor()
    return r * _horner(_SIN, r2), _horner(_COS, r2), quadrant


def _select(quadrant, values):
    from ._tracing import where
    out = values[3]
    for q in (2, 1, 0):
        out = where(quadrant == float(q), values[q], out)
    return out


def _result_type(x):
    from ._dtypes import is_float
    return x.dtype if is_float(x.dtype) else "f32"


def sin(x):
    """Elementwise sine (PyTorch's torch.sin; integer inputs give f32)."""
    s, c, q = _reduced(x)
    return _select(q, (s, c, -s, -c)).to(_result_type(x))


def cos(x):
    """Elementwise cosine (PyTorch's torch.cos; integer inputs give f32)."""
    s, c, q = _reduced(x)
    return _select(q, (c, -s, -c, s)).to(_result_type(x))
