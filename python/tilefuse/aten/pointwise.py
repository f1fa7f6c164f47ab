"""Pointwise ops: arithmetic, unary math, comparisons and logic."""
import math
import operator

import numpy as np

from .. import _trig
from .._composites import floor_divide
from .._dtypes import is_float
from .._tracing import Tensor, where
from . import CONVERSIONS, UnsupportedOp, _math, _scalar_like, aten, converts, importer


@converts(aten.add.Tensor, aten.add.Scalar)
def _add(a, b, alpha=1):
    return a + (b if alpha == 1 else b * alpha)


@converts(aten.sub.Tensor, aten.sub.Scalar)
def _sub(a, b, alpha=1):
    return a - (b if alpha == 1 else b * alpha)


@converts(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(a, b, alpha=1):
    return b - (a if alpha == 1 else a * alpha)


@converts(aten.mul.Tensor, aten.mul.Scalar)
def _mul(a, b):
    return a * b


@converts(aten.div.Tensor, aten.div.Scalar)
def _div(a, b):
    return a / b


@converts(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(a, b, rounding_mode=None):
    if rounding_mode == "floor":  # exact for integers, PyTorch's fmod method for floats
        return floor_divide(a, b)
    if rounding_mode == "trunc":
        ints = not is_float(a.dtype) and not (isinstance(b, Tensor) and is_float(b.dtype)) \
            and not isinstance(b, float)
        if ints:
            return a._binary("trunc_div", b)
        return (a / b).trunc()
    return a / b


def _unary(name):
    return lambda x: getattr(x, name)()


for _op, _name in [(aten.neg, "neg"), (aten.exp, "exp"), (aten.log, "log"),
                   (aten.tanh, "tanh"), (aten.sqrt, "sqrt"), (aten.rsqrt, "rsqrt"),
                   (aten.abs, "abs"), (aten.sigmoid, "sigmoid"), (aten.relu, "relu"),
                   (aten.erf, "erf"), (aten.log1p, "log1p"), (aten.expm1, "expm1"),
                   (aten.floor, "floor"), (aten.ceil, "ceil"), (aten.trunc, "trunc")]:
    CONVERSIONS[_op] = _unary(_name)


@converts(aten.sin)
def _sin(x):
    return _trig.sin(x)


@converts(aten.cos)
def _cos(x):
    return _trig.cos(x)


@converts(aten.reciprocal)
def _reciprocal(x):
    return 1.0 / x


@converts(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar)
def _pow(a, b):
    """a ** b in PyTorch's result type. Integers: small whole exponents
    multiply exactly (graph.pow is for floats). Floats: PyTorch's CPU
    kernel's exact forms for the exponents 2, 3, 0.5, -0.5, -1 and -2, else
    graph.pow with C's pow in every special case (_float_pow)."""
    dtype = importer().result_dtype()
    if not is_float(dtype):
        if isinstance(a, Tensor) and not isinstance(b, Tensor) and isinstance(b, int) \
                and 0 <= b <= 8:
            out = a * 0 + 1
            for _ in range(b):
                out = out * a
            return out
        raise UnsupportedOp(aten.pow, f"{dtype} ** {b!r}")
    if isinstance(a, Tensor) and not isinstance(b, Tensor) and not isinstance(b, bool):
        a = a if a.dtype == dtype else a.to(dtype)
        exact = {2: lambda: a * a, 3: lambda: a * a * a, 0.5: lambda: a.sqrt(),
                 -0.5: lambda: a.rsqrt(), -1: lambda: 1.0 / a, -2: lambda: 1.0 / (a * a)}
        if b in exact:
            return exact[b]()
    a, b = _operands(a, b)
    return _float_pow(a, b)


def _float_pow(a, b):
    """graph.pow, exact in C pow's special cases: x ** 0 and 1 ** y are 1
    (NaN included), (-1) ** +-inf is 1, a finite negative base to a finite
    non-integer power is NaN, and the signs of zero and infinite bases
    follow an odd integer exponent."""
    r = a ** b
    finite_b = b.abs() < math.inf
    integer = b.floor() == b
    odd = integer & (b._binary("rem", 2.0) != 0)
    negative = _math.signbit(a)
    r = where((a < 0) & (a > -math.inf) & finite_b & ~integer, math.nan, r)
    small = b < 0  # 0 ** y < 0 and (-inf) ** y > 0 are infinite
    zero = where(small, where(negative & odd, -math.inf, math.inf),
                 where(negative & odd, -0.0, 0.0))
    r = where((a == 0) & (b == b), zero, r)
    minus_inf = where(small, where(odd, -0.0, 0.0), where(odd, -math.inf, math.inf))
    r = where((a == -math.inf) & (b == b), minus_inf, r)
    one = (b == 0) | (a == 1) | ((a == -1) & ~finite_b & (b == b))
    return where(one, 1.0, r)


@converts(aten.maximum)
def _maximum(a, b):
    return a.maximum(b)


@converts(aten.minimum)
def _minimum(a, b):
    return a.minimum(b)


@converts(aten.clamp)
def _clamp(x, min=None, max=None):
    return x.clamp(min, max)


@converts(aten.clamp_min)
def _clamp_min(x, min):
    return x.clamp(min, None)


@converts(aten.clamp_max)
def _clamp_max(x, max):
    return x.clamp(None, max)


for _op, _fn in [(aten.eq, operator.eq), (aten.ne, operator.ne), (aten.lt, operator.lt),
                 (aten.le, operator.le), (aten.gt, operator.gt), (aten.ge, operator.ge)]:
    CONVERSIONS[_op] = (lambda fn: lambda a, b: fn(a, b))(_fn)


@converts(aten.logical_not)
def _logical_not(x):
    return x == 0  # (i1 == false; a number == 0)


@converts(aten.bitwise_not)
def _bitwise_not(x):
    if x.dtype != "i1":
        raise UnsupportedOp(aten.bitwise_not, f"on {x.dtype} (only bool tensors convert)")
    return x == False  # noqa: E712


def _truth(x):
    return x if x.dtype == "i1" else x != 0


@converts(aten.logical_and)
def _logical_and(a, b):
    return where(_truth(a), _truth(b), False)


@converts(aten.logical_or)
def _logical_or(a, b):
    return where(_truth(a), True, _truth(b))


@converts(aten.logical_xor)
def _logical_xor(a, b):
    return _truth(a) != _truth(b)


def _bitwise(op, logical):
    """A bitwise op of bool tensors (logical); integers have no bitwise ops
    in the graph."""
    def convert(a, b):
        for v in (a, b):
            if isinstance(v, Tensor) and v.dtype != "i1" or isinstance(v, int) and \
                    not isinstance(v, bool):
                raise UnsupportedOp(op, "on integers (only bool tensors convert)")
        return logical(a, b)
    return convert


CONVERSIONS[aten.bitwise_and.Tensor] = _bitwise(aten.bitwise_and, _logical_and)
CONVERSIONS[aten.bitwise_or.Tensor] = _bitwise(aten.bitwise_or, _logical_or)
CONVERSIONS[aten.bitwise_xor.Tensor] = _bitwise(aten.bitwise_xor, _logical_xor)
CONVERSIONS[aten.bitwise_and.Scalar] = CONVERSIONS[aten.bitwise_and.Tensor]
CONVERSIONS[aten.bitwise_or.Scalar] = CONVERSIONS[aten.bitwise_or.Tensor]
CONVERSIONS[aten.bitwise_xor.Scalar] = CONVERSIONS[aten.bitwise_xor.Tensor]


@converts(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(cond, a, b):
    return where(cond, a, b)


@converts(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(x, mask, value):
    return where(mask, value, x)


@converts("prims.fma.default")
def _fma(a, b, c):
    """a * b + c (PyTorch's decompositions use it for lerp and addcmul)."""
    return a * b + c


# -- unary math the graph has no op for --------------------------------------------

def _lifted(x, v):
    """`v` (a tensor or a Python number) as a tensor beside `x`."""
    return _scalar_like(x, v) if not isinstance(v, Tensor) else v


def _float_result(x):
    """x in the float dtype PyTorch computes a float function of it in."""
    dtype = importer().result_dtype()
    return x if x.dtype == dtype else x.to(dtype)


def _via_f64(fn):
    """A float function computed in float64 and rounded once to PyTorch's
    result type."""
    def convert(x):
        out_dtype = importer().result_dtype()
        return fn(_math.f64(x)).to(out_dtype)
    return convert


@converts(aten.sign, aten.sgn)
def _sign(x):
    """-1, 0 or 1 (0 for 0, -0.0 and NaN, as PyTorch); bools as they are."""
    if x.dtype == "i1":
        return x
    return (x > 0).to(x.dtype) - (x < 0).to(x.dtype)


@converts(aten.isnan)
def _isnan(x):
    return x != x


@converts(aten.isinf)
def _isinf(x):
    if not is_float(x.dtype):
        return x != x
    return x.abs() == float("inf")


@converts(aten.isfinite)
def _isfinite(x):
    if not is_float(x.dtype):
        return x == x
    return x.abs() < float("inf")


@converts(aten.isposinf)
def _isposinf(x):
    return x == float("inf") if is_float(x.dtype) else x != x


@converts(aten.isneginf)
def _isneginf(x):
    return x == float("-inf") if is_float(x.dtype) else x != x


CONVERSIONS[aten.exp2.default] = _via_f64(lambda d: (d * math.log(2.0)).exp())
CONVERSIONS[aten.log2.default] = _via_f64(lambda d: d.log() * (1.0 / math.log(2.0)))
CONVERSIONS[aten.log10.default] = _via_f64(lambda d: d.log() * (1.0 / math.log(10.0)))
CONVERSIONS[aten.erfc.default] = _via_f64(lambda d: 1.0 - d.erf())
CONVERSIONS[aten.tan.default] = _via_f64(lambda d: _trig.sin(d) / _trig.cos(d))
# sinh and cosh from expm1 and exp: no cancellation near 0; in f64 no
# overflow before the f32 result does.
CONVERSIONS[aten.sinh.default] = _via_f64(lambda d: (d.expm1() - (-d).expm1()) * 0.5)
CONVERSIONS[aten.cosh.default] = _via_f64(lambda d: (d.exp() + (-d).exp()) * 0.5)
CONVERSIONS[aten.atan.default] = _via_f64(_math.atan)


def _asinh(d):
    a = d.abs()
    r = (a + a * a / (1.0 + (1.0 + a * a).sqrt())).log1p()
    big = a > 1e150  # a * a overflows: asinh(a) = log(2a)
    r = where(big, where(big, a, 1.0).log() + math.log(2.0), r)
    return where(d < 0, -r, where(d == 0, d, r))


def _acosh(d):
    t = d - 1.0
    r = (t + (t * (d + 1.0)).sqrt()).log1p()
    big = d > 1e150
    return where(big, where(big, d, 1.0).log() + math.log(2.0), r)


def _asin(d):
    return _math.atan2(d, ((1.0 - d) * (1.0 + d)).sqrt())


def _acos(d):
    return _math.atan2(((1.0 - d) * (1.0 + d)).sqrt(), d)


CONVERSIONS[aten.asinh.default] = _via_f64(_asinh)
CONVERSIONS[aten.acosh.default] = _via_f64(_acosh)
CONVERSIONS[aten.atanh.default] = _via_f64(lambda d: (2.0 * d / (1.0 - d)).log1p() * 0.5)
CONVERSIONS[aten.asin.default] = _via_f64(_asin)
CONVERSIONS[aten.acos.default] = _via_f64(_acos)


@converts(aten.atan2.default)
def _atan2(y, x):
    return _math.atan2(_math.f64(y), _math.f64(x)).to(importer().result_dtype())


@converts(aten.sinc.default)
def _sinc(x):
    """sin(pi x) / (pi x), 1 at 0 (in f64)."""
    d = _math.f64(x) * math.pi
    zero = d == 0
    safe = where(zero, 1.0, d)
    return where(zero, 1.0, _trig.sin(safe) / safe).to(importer().result_dtype())


@converts(aten.ldexp.Tensor)
def _ldexp(x, other):
    """x * 2 ** other (PyTorch's ldexp), 2 ** other exact for whole other."""
    dtype = importer().result_dtype()
    power = (_math.f64(other) * math.log(2.0)).exp().to(dtype)
    return (x if x.dtype == dtype else x.to(dtype)) * power


@converts(aten.frac.default)
def _frac(x):
    return x - x.trunc()


@converts(aten.angle.default)
def _angle(x):
    """The argument of a real number: pi below 0, else 0 (NaN stays)."""
    out = _float_result(x)
    return where(out != out, out, where(out < 0, math.pi, 0.0))


@converts(aten.logit.default)
def _logit(x, eps=None):
    x = _float_result(x)
    if eps is not None:
        lo, hi = float(eps), 1.0 - float(eps)
        x = where(x < lo, lo, where(x > hi, hi, x))
    return (x / (1.0 - x)).log()


@converts(aten.round.default, aten.round.decimals)
def _round(x, decimals=0):
    """Round half to even (nearbyint); with `decimals`, PyTorch's
    nearbyint(x * 10^d) / 10^d (d > 0) or nearbyint(x / 10^-d) * 10^-d."""
    if not is_float(x.dtype):
        return x
    if decimals == 0:
        return _nearbyint(x)
    if decimals > 0:
        ten = float(np.float32(10.0 ** decimals)) if x.dtype == "f32" else 10.0 ** decimals
        return _nearbyint(x * ten) / ten
    ten = float(np.float32(10.0 ** -decimals)) if x.dtype == "f32" else 10.0 ** -decimals
    return _nearbyint(x / ten) * ten


def _nearbyint(x):
    """x rounded to the nearest integer, ties to even; -0.0 for negative
    values that round to 0. x - floor(x) is exact but where x in (-1, 0)
    rounds, and there it rounds only to 0.5 from above, which is rounded to
    the even 0 either way."""
    r = x.floor()
    d = x - r
    odd = r._binary("rem", 2.0) != 0
    up = where(d > 0.5, True, where(d < 0.5, False, odd))
    out = where(up, r + 1.0, r)
    return where(out == 0, x * 0.0, out)


# -- binary math --------------------------------------------------------------------------

def _operands(a, b):
    """a and b in the dtype PyTorch computes the op's result in."""
    dtype = importer().result_dtype()
    base = a if isinstance(a, Tensor) else b
    a = _lifted(base, a)
    b = _lifted(base, b)
    return (a if a.dtype == dtype else a.to(dtype)), (b if b.dtype == dtype else b.to(dtype))


@converts(aten.fmod.Tensor, aten.fmod.Scalar)
def _fmod(a, b):
    a, b = _operands(a, b)
    return a.fmod(b)


@converts(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def _remainder(a, b):
    a, b = _operands(a, b)
    return a.remainder(b)


@converts(aten.copysign.Scalar)
def _copysign_scalar(a, b):
    """|a| with the sign of the number b (its sign is known: a NaN tensor's
    is not readable in the graph, so copysign.Tensor runs in PyTorch)."""
    a = _float_result(a)
    negative = math.copysign(1.0, float(b)) < 0
    return -a.abs() if negative else a.abs()


@converts(aten.logaddexp.default)
def _logaddexp(a, b):
    """log(e^a + e^b) as PyTorch: a where a == b is infinite, else
    max + log1p(exp(-|a - b|))."""
    a, b = _operands(a, b)
    m = a.maximum(b)
    out = m + (-(a - b).abs()).exp().log1p()
    return where((a == b) & (a.abs() == math.inf), a, out)


@converts(aten.logaddexp2.default)
def _logaddexp2(a, b):
    a, b = _operands(a, b)
    m = a.maximum(b)
    ln2 = math.log(2.0)
    out = m + (-(a - b).abs() * ln2).exp().log1p() * (1.0 / ln2)
    return where((a == b) & (a.abs() == math.inf), a, out)


@converts(aten.nan_to_num.default)
def _nan_to_num(x, nan=None, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced (by 0 and the dtype's largest and lowest
    finite values unless given)."""
    if not is_float(x.dtype):
        return x
    info = np.finfo({"f32": np.float32, "f64": np.float64, "f16": np.float16}.get(
        x.dtype, np.float32))
    if x.dtype == "bf16":
        raise UnsupportedOp(aten.nan_to_num, "bf16 (its largest value is not numpy's)")
    nan = 0.0 if nan is None else float(nan)
    posinf = float(info.max) if posinf is None else float(posinf)
    neginf = float(info.min) if neginf is None else float(neginf)
    return where(x != x, nan, where(x == math.inf, posinf, where(x == -math.inf, neginf, x)))


@converts(aten.fmax.default)
def _fmax(a, b):
    """The larger, ignoring a NaN (NaN only where both are)."""
    a, b = _operands(a, b)
    return where(a != a, b, where(b != b, a, a.maximum(b)))


@converts(aten.fmin.default)
def _fmin(a, b):
    a, b = _operands(a, b)
    return where(a != a, b, where(b != b, a, a.minimum(b)))


@converts(aten.hypot.default)
def _hypot(a, b):
    """sqrt(a^2 + b^2) in f64 (no overflow of the squares; inf wins over
    NaN, as C's hypot)."""
    a, b = _operands(a, b)
    ad, bd = _math.f64(a), _math.f64(b)
    out = (ad * ad + bd * bd).sqrt()
    out = where((ad.abs() == math.inf) | (bd.abs() == math.inf), math.inf, out)
    return out.to(a.dtype)


@converts(aten.xlogy.Tensor, aten.xlogy.Scalar_Self, aten.xlogy.Scalar_Other)
def _xlogy(x, y):
    """x * log(y), 0 where x == 0 (unless y is NaN)."""
    x, y = _operands(x, y)
    return where(y != y, y, where(x == 0, 0.0, x * y.log()))


@converts(aten.heaviside.default)
def _heaviside(x, values):
    x, values = _operands(x, values)
    return where(x == 0, values, where(x > 0, 1, 0).to(x.dtype))
