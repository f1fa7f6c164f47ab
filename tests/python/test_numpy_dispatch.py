"""numpy functions on traced tensors (Tensor.__array_ufunc__ and
__array_function__): each supported ufunc and function builds graph ops whose
result equals numpy's on the same concrete values; everything else raises a
tilefuse.CompileError that names the numpy function (and the user's line),
never a Python error from deep inside the dispatch; np.asarray(traced) is a
CompileError too.

Every case runs on the reference interpreter and on compiled CPU kernels
(tilefuse.compile(..., device="cpu")), with float32 and float64 inputs (and
int64 / int32 where the result stays an integer).

Comparisons: ops that select, move or exactly round values (add, sub, mul,
max/min, comparisons, floor/ceil/trunc, floor_divide/remainder/fmod, layout
functions, where, concatenate, argmax...) are compared bit for bit,
including the dtype numpy gives. Transcendental ops, division, power and sums
use the tolerances of test_ops_numerics.py (|got - want| <= ATOL + RTOL *
scale): float32 RTOL 1e-5, ATOL 1e-6; float64 RTOL 1e-12, ATOL 1e-12, the
reference computed in float64 from the rounded inputs; for sums and
contractions the scale is the sum of the absolute terms (a correctly rounded
float32 sum is only that accurate when its terms cancel).
"""
import os

import numpy as np
import pytest

import tilefuse
from test_autodiff import check_gradients
from compile_errors import raises_compile_error
from backend_checks import TOLERANCES, assert_exact, context, out_of_tolerance, run_both

FLOATS = [np.float32, np.float64]
with_floats = pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f64"])
THIS_FILE = os.path.basename(__file__)


# ---------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------
def assert_close(what, backend, got, want, seed, shapes, magnitude=None):
    """`want`: the float64 reference; rounded to numpy's result dtype for the
    float inputs (`dtype`), then compared with that dtype's tolerances."""
    got, want = np.asarray(got), np.asarray(want)
    ctx = context(what, backend, want.dtype, seed, shapes)
    assert got.shape == want.shape, f"{ctx}: got shape {got.shape}, want {want.shape}"
    assert got.dtype == want.dtype, f"{ctx}: got dtype {got.dtype}, want {want.dtype}"
    rtol, atol = TOLERANCES[want.dtype]
    bad, err, bound = out_of_tolerance(got, want, rtol, atol, magnitude)
    if bad.any():
        g, w = got.astype(np.float64), want.astype(np.float64)
        worst = tuple(int(i) for i in np.unravel_index(
            int(np.argmax(np.where(bad, err / bound, 0.0))), err.shape))
        raise AssertionError(
            f"{ctx}: {int(bad.sum())} of {bad.size} elements exceed rtol={rtol:g} atol={atol:g}; "
            f"worst at {worst}: got {float(g[worst])!r}, want {float(w[worst])!r}")


def f64(x):
    return np.asarray(x).astype(np.float64)


# ---------------------------------------------------------------------------
# ufuncs: unary
# ---------------------------------------------------------------------------
# name -> (numpy ufunc, domain (lo, hi), exact?)
UNARY = {
    "exp": (np.exp, (-3, 3), False),
    "log": (np.log, (0.1, 5), False),
    "tanh": (np.tanh, (-3, 3), False),
    "sqrt": (np.sqrt, (0.0, 5), False),
    "negative": (np.negative, (-3, 3), True),
    "absolute": (np.absolute, (-3, 3), True),
    "abs": (np.abs, (-3, 3), True),
    "log1p": (np.log1p, (-0.9, 3), False),
    "expm1": (np.expm1, (-3, 3), False),
    "floor": (np.floor, (-4, 4), True),
    "ceil": (np.ceil, (-4, 4), True),
    "trunc": (np.trunc, (-4, 4), True),
    "positive": (np.positive, (-3, 3), True),
    "square": (np.square, (-3, 3), False),
    "reciprocal": (np.reciprocal, (0.5, 3), False),
}


@with_floats
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_ufunc(name, dtype, rng, seed):
    ufunc, (lo, hi), exact = UNARY[name]
    x = rng.uniform(lo, hi, (3, 17)).astype(dtype)
    if name in ("floor", "ceil", "trunc"):  # integers, halves, signed zeros
        x[0, :8] = [-2.0, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 3.0]
    if name == "log1p":
        x[0, :2] = [1e-10, -1e-10]  # log1p is exact for tiny x where log(1 + x) is not
    with np.errstate(all="ignore"):
        want = ufunc(x) if exact else ufunc(f64(x)).astype(dtype)
    for backend, got in run_both(lambda a: ufunc(a), x).items():
        if exact:
            assert_exact(f"np.{name}", backend, got, want, seed, [x.shape])
        else:
            assert_close(f"np.{name}", backend, got, want, seed, [x.shape])


@pytest.mark.parametrize("name", ["negative", "absolute", "square", "floor", "ceil", "trunc",
                                  "positive"])
@pytest.mark.parametrize("itype", [np.int32, np.int64], ids=["i32", "i64"])
def test_unary_ufunc_integers(name, itype, rng, seed):
    ufunc = UNARY[name][0]
    x = rng.integers(-1000, 1000, (4, 9)).astype(itype)
    for backend, got in run_both(lambda a: ufunc(a), x).items():
        assert_exact(f"np.{name} on {np.dtype(itype).name}", backend, got, ufunc(x), seed,
                     [x.shape])


# ---------------------------------------------------------------------------
# ufuncs: binary, with every arrangement of traced / numpy / scalar operands
# ---------------------------------------------------------------------------
# name -> (ufunc, exact?, second-operand maker)
def _any(rng, shape, dtype):
    return (rng.standard_normal(shape) * 2).astype(dtype)


def _positive(rng, shape, dtype):
    return rng.uniform(0.5, 2.0, shape).astype(dtype)


def _divisor(rng, shape, dtype):
    return (rng.choice([-1, 1], shape) * rng.uniform(0.25, 2.0, shape)).astype(dtype)


BINARY = {
    "add": (np.add, True, _any), "subtract": (np.subtract, True, _any),
    "multiply": (np.multiply, True, _any), "divide": (np.divide, False, _divisor),
    "true_divide": (np.true_divide, False, _divisor), "power": (np.power, False, _any),
    "maximum": (np.maximum, True, _any), "minimum": (np.minimum, True, _any),
    "equal": (np.equal, True, _any), "not_equal": (np.not_equal, True, _any),
    "less": (np.less, True, _any), "less_equal": (np.less_equal, True, _any),
    "greater": (np.greater, True, _any), "greater_equal": (np.greater_equal, True, _any),
    "floor_divide": (np.floor_divide, True, _divisor), "remainder": (np.remainder, True, _divisor),
    "fmod": (np.fmod, True, _divisor),
}
ARRANGEMENTS = ["tensor,tensor", "tensor,ndarray", "ndarray,tensor", "scalar,tensor",
                "tensor,scalar", "ndarray op tensor"]
OPERATORS = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "true_divide": "/",
             "power": "**", "equal": "==", "not_equal": "!=", "less": "<", "less_equal": "<=",
             "greater": ">", "greater_equal": ">=", "floor_divide": "//", "remainder": "%"}


@with_floats
@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_ufunc(name, arrangement, dtype, rng, seed):
    """np.<ufunc>(lhs, rhs) with the traced tensor on either side, the other
    operand a traced tensor, a numpy array or a Python scalar; and `ndarray
    <op> tensor`, which numpy itself routes through __array_ufunc__."""
    ufunc, exact, second = BINARY[name]
    if arrangement == "ndarray op tensor" and name not in OPERATORS:
        pytest.skip(f"np.{name} has no Python operator")
    a = (_positive if name == "power" else _any)(rng, (3, 7), dtype)
    b = second(rng, (3, 7), dtype)
    if name != "power":
        a.flat[:3] = b.flat[:3]  # ties and equal operands
    if name == "floor_divide":  # quotients landing on integers, and a zero dividend
        a.flat[3:6] = [b.flat[3] * 3, -b.flat[4] * 2, 0.0]
    scalar = 0.5 if name == "power" else 1.75
    lhs, rhs = {"tensor,tensor": (a, b), "tensor,ndarray": (a, b), "ndarray,tensor": (a, b),
                "scalar,tensor": (scalar, b), "tensor,scalar": (a, scalar),
                "ndarray op tensor": (a, b)}[arrangement]
    args, fn = {
        "tensor,tensor": ((a, b), lambda x, y: ufunc(x, y)),
        "tensor,ndarray": ((a,), lambda x: ufunc(x, b)),
        "ndarray,tensor": ((b,), lambda y: ufunc(a, y)),
        "scalar,tensor": ((b,), lambda y: ufunc(scalar, y)),
        "tensor,scalar": ((a,), lambda x: ufunc(x, scalar)),
        "ndarray op tensor": ((b,), lambda y: eval(f"a {OPERATORS.get(name)} y",
                                                    {"a": a, "y": y})),
    }[arrangement]
    with np.errstate(all="ignore"):
        if exact:
            want = ufunc(lhs, rhs)  # a Python scalar is weak: the array's dtype wins
        else:
            want = ufunc(f64(lhs), f64(rhs)).astype(dtype)
        results = run_both(fn, *args)
    for backend, got in results.items():
        what = f"np.{name}({arrangement})"
        if exact:
            assert_exact(what, backend, got, want, seed, [a.shape, b.shape])
        else:
            assert_close(what, backend, got, want, seed, [a.shape, b.shape])


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "maximum", "minimum",
                                  "floor_divide", "remainder", "fmod", "less", "equal"])
@pytest.mark.parametrize("itype", [np.int32, np.int64], ids=["i32", "i64"])
def test_binary_ufunc_integers(name, itype, rng, seed):
    """Integer in, integer out (numpy's floor_divide / remainder signs)."""
    ufunc = BINARY[name][0]
    a = rng.integers(-50, 50, (4, 9)).astype(itype)
    b = (rng.choice([-1, 1], (4, 9)) * rng.integers(1, 9, (4, 9))).astype(itype)
    a[0, :4] = [7, -7, 7, -7]
    b[0, :4] = [2, 2, -2, -2]
    for backend, got in run_both(lambda x, y: ufunc(x, y), a, b).items():
        assert_exact(f"np.{name} on {np.dtype(itype).name}", backend, got, ufunc(a, b), seed,
                     [a.shape, b.shape])


@with_floats
def test_floor_divide_remainder_special_values(dtype, seed):
    """Division by zero and inexact quotients as numpy (= Python's // and %)."""
    a = np.array([1.0, -1.0, 0.0, 7.5, 1.0, -7.5, 5.0, 0.3], dtype)
    b = np.array([0.0, 0.0, 0.0, -2.0, 0.1, 2.0, -3.0, 0.1], dtype)
    with np.errstate(all="ignore"):
        want = (np.floor_divide(a, b), np.remainder(a, b), np.fmod(a, b))
        results = run_both(lambda x, y: (np.floor_divide(x, y), np.remainder(x, y),
                                         np.fmod(x, y)), a, b)
    for backend, got in results.items():
        for name, g, w in zip(["floor_divide", "remainder", "fmod"], got, want):
            assert_exact(f"np.{name} special values", backend, g, w, seed, [a.shape, b.shape])


@with_floats
@pytest.mark.parametrize("shapes", [((3, 5), (5, 4)), ((5,), (5, 2)), ((2, 3, 5), (5,)),
                                    ((2, 3, 4), (2, 4, 5))], ids=str)
def test_matmul_ufunc(shapes, dtype, rng, seed):
    a = rng.standard_normal(shapes[0]).astype(dtype)
    b = rng.standard_normal(shapes[1]).astype(dtype)
    want = np.matmul(f64(a), f64(b)).astype(dtype)
    magnitude = np.matmul(np.abs(f64(a)), np.abs(f64(b)))
    for arrangement, (args, fn) in {"tensor,tensor": ((a, b), lambda x, y: np.matmul(x, y)),
                                    "ndarray,tensor": ((b,), lambda y: np.matmul(a, y)),
                                    "ndarray @ tensor": ((b,), lambda y: a @ y)}.items():
        for backend, got in run_both(fn, *args).items():
            assert_close(f"np.matmul({arrangement})", backend, got, want, seed, list(shapes),
                         magnitude)


@with_floats
def test_ufuncs_propagate_nan_like_numpy(dtype, seed):
    a = np.array([1.0, np.nan, 2.0, np.nan, -np.inf], dtype)
    b = np.array([np.nan, 0.0, 3.0, np.nan, 1.0], dtype)
    fns = {"maximum": np.maximum, "minimum": np.minimum, "clip": lambda x, y: np.clip(x, 0, 1.5)}
    for name, f in fns.items():
        for backend, got in run_both(lambda x, y: f(x, y), a, b).items():
            assert_exact(f"np.{name} with NaN", backend, got, f(a, b), seed, [a.shape, b.shape])


# ---------------------------------------------------------------------------
# ufuncs: what is not supported
# ---------------------------------------------------------------------------
UNSUPPORTED_UFUNCS = {
    "np.sin": lambda a: np.sin(a),
    "np.isnan": lambda a: np.isnan(a),
    "np.arctan2": lambda a: np.arctan2(a, a),
    "np.logical_and": lambda a: np.logical_and(a > 0, a < 1),
    "np.hypot": lambda a: np.hypot(a, 2.0),
    "np.copysign": lambda a: np.copysign(a, -1.0),
    "np.logaddexp": lambda a: np.logaddexp(a, a),
}


@pytest.mark.parametrize("name", list(UNSUPPORTED_UFUNCS))
def test_unsupported_ufunc_is_a_compile_error(name):
    """Unary and binary alike: a CompileError naming the ufunc (np.arctan2 and
    the other binary ones raised 'ValueError: too many values to unpack')."""
    x = np.full((2, 3), 0.5)
    try:
        tilefuse.trace(UNSUPPORTED_UFUNCS[name], x)
    except tilefuse.CompileError as e:
        msg = str(e)
        assert name in msg, f"{name}: message does not name the function: {msg!r}"
        assert "not supported" in msg, msg
        assert THIS_FILE in msg, f"{name}: message does not name the user's line: {msg!r}"
    except Exception as e:  # noqa: BLE001 -- the point of the test
        pytest.fail(f"{name} on a traced tensor raised {type(e).__name__}: {e} -- want a "
                    f"tilefuse.CompileError naming {name}", pytrace=False)
    else:
        pytest.fail(f"{name} on a traced tensor did not raise")


UFUNC_METHODS = {
    "np.add.reduce": (lambda a: np.add.reduce(a), ["x.sum"]),
    "np.maximum.reduce": (lambda a: np.maximum.reduce(a, axis=1), ["x.amax"]),
    "np.minimum.reduce": (lambda a: np.minimum.reduce(a), ["x.amin"]),
    "np.multiply.reduce": (lambda a: np.multiply.reduce(a), []),
    "np.add.accumulate": (lambda a: np.add.accumulate(a), []),
    "np.multiply.outer": (lambda a: np.multiply.outer(a, a), []),
    "np.add.reduceat": (lambda a: np.add.reduceat(a, [0, 1]), []),
}


@pytest.mark.parametrize("name", list(UFUNC_METHODS))
def test_ufunc_methods_are_compile_errors(name):
    fn, hints = UFUNC_METHODS[name]
    raises_compile_error(lambda: tilefuse.trace(fn, np.ones((2, 3))), name, "not supported",
                         *hints)


UFUNC_KWARGS = {
    "np.add out=": (lambda a: np.add(a, 1.0, out=np.empty((2, 3))), ["np.add", "out="]),
    "np.exp out=": (lambda a: np.exp(a, out=np.empty((2, 3))), ["np.exp", "out="]),
    "np.matmul out=": (lambda a: np.matmul(a, a.T, out=np.empty((2, 2))), ["np.matmul", "out="]),
    "np.multiply dtype=": (lambda a: np.multiply(a, 2.0, dtype=np.float32),
                           ["np.multiply", "dtype="]),
    "np.add where=": (lambda a: np.add(a, 1.0, where=np.array([True, False, True]),
                                       out=None), ["np.add", "where="]),
}


@pytest.mark.parametrize("name", list(UFUNC_KWARGS))
def test_ufunc_keywords_are_compile_errors(name):
    fn, substrings = UFUNC_KWARGS[name]
    raises_compile_error(lambda: tilefuse.trace(fn, np.ones((2, 3))), *substrings)


# ---------------------------------------------------------------------------
# array functions
# ---------------------------------------------------------------------------
X234 = (2, 3, 4)

# name -> (fn on an array, exact?) for one float input of shape (2, 3, 4)
FUNCTIONS = {
    "sum": (lambda a: np.sum(a), False),
    "sum axis=1": (lambda a: np.sum(a, axis=1), False),
    "sum axis=(0,2) keepdims": (lambda a: np.sum(a, axis=(0, 2), keepdims=True), False),
    "sum axis=-1": (lambda a: np.sum(a, -1), False),
    "sum axis=()": (lambda a: np.sum(a, axis=()), True),
    "mean": (lambda a: np.mean(a), False),
    "mean axis=(1,2)": (lambda a: np.mean(a, axis=(1, 2)), False),
    "mean axis=0 keepdims": (lambda a: np.mean(a, 0, keepdims=True), False),
    "max": (lambda a: np.max(a), True),
    "max axis=1 keepdims": (lambda a: np.max(a, axis=1, keepdims=True), True),
    "max axis=(0,2)": (lambda a: np.max(a, axis=(0, 2)), True),
    "max axis=()": (lambda a: np.max(a, axis=()), True),
    "amax axis=-1": (lambda a: np.amax(a, -1), True),
    "min": (lambda a: np.min(a), True),
    "min axis=(0,1)": (lambda a: np.min(a, axis=(0, 1)), True),
    "min axis=()": (lambda a: np.min(a, axis=()), True),
    "amin axis=0 keepdims": (lambda a: np.amin(a, 0, keepdims=True), True),
    "argmax": (lambda a: np.argmax(a), True),
    "argmax axis=1": (lambda a: np.argmax(a, axis=1), True),
    "argmax axis=-1 keepdims": (lambda a: np.argmax(a, -1, keepdims=True), True),
    "argmin": (lambda a: np.argmin(a), True),
    "argmin axis=0": (lambda a: np.argmin(a, 0), True),
    "argmin keepdims": (lambda a: np.argmin(a, keepdims=True), True),
    "reshape": (lambda a: np.reshape(a, (4, 6)), True),
    "reshape -1": (lambda a: np.reshape(a, -1), True),
    "reshape (3,-1)": (lambda a: np.reshape(a, (3, -1)), True),
    "ravel": (lambda a: np.ravel(a), True),
    "transpose": (lambda a: np.transpose(a), True),
    "transpose axes": (lambda a: np.transpose(a, (1, 2, 0)), True),
    "transpose negative axes": (lambda a: np.transpose(a, (-1, 0, 1)), True),
    "swapaxes": (lambda a: np.swapaxes(a, 0, 2), True),
    "moveaxis": (lambda a: np.moveaxis(a, 0, -1), True),
    "moveaxis lists": (lambda a: np.moveaxis(a, [0, 1], [2, 0]), True),
    "squeeze": (lambda a: np.squeeze(a[:, :1]), True),
    "squeeze axis": (lambda a: np.squeeze(a[:1, :, :1], axis=2), True),
    "expand_dims": (lambda a: np.expand_dims(a, 1), True),
    "expand_dims tuple": (lambda a: np.expand_dims(a, (0, -1)), True),
    "broadcast_to": (lambda a: np.broadcast_to(a[:, :1], (5, 2, 3, 4)), True),
    "clip": (lambda a: np.clip(a, -0.5, 0.75), True),
    "clip None lower": (lambda a: np.clip(a, None, 0.5), True),
    "clip keywords": (lambda a: np.clip(a, min=-0.25, max=0.5), True),
    "clip min > max": (lambda a: np.clip(a, 0.5, -0.5), True),
    "cumsum axis=1": (lambda a: np.cumsum(a, axis=1), False),
    "cumsum flat": (lambda a: np.cumsum(a), False),
    "flip": (lambda a: np.flip(a), True),
    "flip axis=-1": (lambda a: np.flip(a, -1), True),
    "flip axes": (lambda a: np.flip(a, (0, 2)), True),
    "where": (lambda a: np.where(a > 0, a, -2.0 * a), True),
    "where scalar branch": (lambda a: np.where(a > 0.5, a, 0.0), True),
    "where float condition": (lambda a: np.where(a - a + (a > 0), a, 1.0), True),
    "concatenate": (lambda a: np.concatenate([a, a * 2.0], 1), True),
    "concatenate axis=None": (lambda a: np.concatenate([a, a[0]], axis=None), True),
    "concatenate ndarray first": (
        lambda a: np.concatenate([np.ones((1, 3, 4)), a], axis=0), True),
    "stack": (lambda a: np.stack([a, -a]), True),
    "stack axis=-1": (lambda a: np.stack([a, -a, a], axis=-1), True),
    "stack ndarray first": (lambda a: np.stack([np.full(X234, 0.5), a], 1), True),
    "zeros_like": (lambda a: np.zeros_like(a) + a, True),
    "ones_like": (lambda a: np.ones_like(a), True),
    "full_like": (lambda a: np.full_like(a, 2.5), True),
    "full_like dtype": (lambda a: np.full_like(a, 7, dtype=np.int64), True),
    "shape/ndim/size": (lambda a: np.reshape(a, (np.shape(a)[0] * np.ndim(a), np.size(a, 2), -1)),
                        True),
}


@with_floats
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_array_function(name, dtype, rng, seed):
    fn, exact = FUNCTIONS[name]
    x = rng.standard_normal(X234).astype(dtype)
    x.flat[[5, 17]] = x.flat[[4, 16]]  # ties for the argmin/argmax
    want = fn(x)
    for backend, got in run_both(fn, x).items():
        if exact:
            assert_exact(f"np.{name}", backend, got, want, seed, [X234])
        else:
            ref = np.asarray(fn(f64(x))).astype(np.asarray(want).dtype)
            assert_close(f"np.{name}", backend, got, ref, seed, [X234],
                         magnitude=np.asarray(fn(np.abs(f64(x)))))


@with_floats
def test_clip_with_array_bounds_and_traced_bound(dtype, rng, seed):
    x = rng.standard_normal((3, 4)).astype(dtype)
    lo = rng.uniform(-1.0, 0.0, (3, 4)).astype(dtype)
    hi = rng.uniform(0.0, 1.0, (4,)).astype(dtype)
    cases = {"ndarray bounds": ((x,), lambda a: np.clip(a, lo, hi), np.clip(x, lo, hi)),
             "traced lower bound": ((lo,), lambda l: np.clip(x, l, hi), np.clip(x, lo, hi))}
    for name, (args, fn, want) in cases.items():
        for backend, got in run_both(fn, *args).items():
            assert_exact(f"np.clip({name})", backend, got, want, seed, [x.shape])


@with_floats
def test_where_condition_and_branches_from_numpy(dtype, rng, seed):
    x = rng.standard_normal((2, 5)).astype(dtype)
    y = rng.standard_normal((2, 5)).astype(dtype)
    cond = rng.standard_normal((2, 5)) > 0
    icond = rng.integers(0, 3, (2, 5))  # numpy: nonzero is True
    cases = {"ndarray condition": ((x,), lambda a: np.where(cond, a, y), np.where(cond, x, y)),
             "traced int condition": ((icond, x), lambda c, a: np.where(c, a, y),
                                      np.where(icond, x, y)),
             "traced branch only in y": ((y,), lambda b: np.where(cond, x, b),
                                         np.where(cond, x, y))}
    for name, (args, fn, want) in cases.items():
        for backend, got in run_both(fn, *args).items():
            assert_exact(f"np.where({name})", backend, got, want, seed, [x.shape])


# -- einsum and dot -------------------------------------------------------------
EINSUM = {
    "ij,kj->ik": [(3, 4), (5, 4)],
    "bij,bjk->bik": [(2, 3, 4), (2, 4, 5)],
    "bij,bjk->ik": [(2, 3, 4), (2, 4, 5)],
    "i,j->ij": [(3,), (4,)],
    "ij->": [(3, 4)],
    "ij->j": [(3, 4)],
    "ijk->kji": [(2, 3, 4)],
    "ij,jk,kl->il": [(2, 3), (3, 4), (4, 5)],
    "ij,jk": [(2, 3), (3, 4)],
    "ba,ac": [(2, 3), (3, 4)],
    "ij,ij->i": [(3, 4), (1, 4)],
    "ij,ij->ij": [(3, 4), (3, 4)],
    "ij,kl->": [(2, 3), (4, 5)],
    "ijk,kl->il": [(2, 3, 4), (4, 5)],
    "bi,bj,bk->bijk": [(2, 3), (2, 4), (2, 2)],
    "ij,jk,ki->i": [(2, 3), (3, 4), (4, 2)],
    "iJ,Jk->ik": [(2, 3), (3, 4)],
    "bhqd,bhkd->bhqk": [(2, 2, 3, 4), (2, 2, 5, 4)],
}


@with_floats
@pytest.mark.parametrize("spec", list(EINSUM))
def test_einsum(spec, dtype, rng, seed):
    shapes = EINSUM[spec]
    ops = [rng.standard_normal(s).astype(dtype) for s in shapes]
    want = np.einsum(spec, *[f64(o) for o in ops]).astype(dtype)
    magnitude = np.einsum(spec, *[np.abs(f64(o)) for o in ops])
    for backend, got in run_both(lambda *xs: np.einsum(spec, *xs), *ops).items():
        assert_close(f"np.einsum({spec!r})", backend, got, want, seed, shapes, magnitude)
    if len(ops) == 1:
        return
    # a numpy operand first, the traced one after it
    for backend, got in run_both(lambda *xs: np.einsum(spec, ops[0], *xs), *ops[1:]).items():
        assert_close(f"np.einsum({spec!r}, ndarray, traced...)", backend, got, want, seed,
                     shapes, magnitude)


@with_floats
@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((4,), (4,)), ((4,), (4, 2)),
                                    ((3, 4), (4,)), ((3, 4), ())], ids=str)
def test_dot(shapes, dtype, rng, seed):
    a = rng.standard_normal(shapes[0]).astype(dtype)
    b = np.asarray(rng.standard_normal(shapes[1])).astype(dtype)
    want = np.asarray(np.dot(f64(a), f64(b))).astype(dtype)
    magnitude = np.dot(np.abs(f64(a)), np.abs(f64(b)))
    for backend, got in run_both(lambda x, y: np.dot(x, y), a, b).items():
        assert_close(f"np.dot{shapes}", backend, got, want, seed, list(shapes), magnitude)
    for backend, got in run_both(lambda y: np.dot(a, y), b).items():
        assert_close(f"np.dot{shapes} (ndarray, traced)", backend, got, want, seed,
                     list(shapes), magnitude)


@pytest.mark.parametrize("itype", [np.int32, np.int64], ids=["i32", "i64"])
def test_integer_array_functions(itype, rng, seed):
    x = rng.integers(-9, 9, (3, 4)).astype(itype)
    fns = {"max axis=1": lambda a: np.max(a, axis=1), "argmin": lambda a: np.argmin(a, 0),
           "reshape": lambda a: np.reshape(a, (2, 6)), "transpose": lambda a: np.transpose(a),
           "concatenate": lambda a: np.concatenate([a, a], 0),
           "clip": lambda a: np.clip(a, -3, 4), "where": lambda a: np.where(a > 0, a, 0)}
    for name, fn in fns.items():
        for backend, got in run_both(fn, x).items():
            assert_exact(f"np.{name} on {np.dtype(itype).name}", backend, got, fn(x), seed,
                         [x.shape])


def test_numpy_functions_are_differentiable(rng, seed):
    """Gradients flow through the graph ops the numpy functions build."""
    a = rng.standard_normal((3, 4))
    b = rng.uniform(0.5, 2.0, (4, 2))
    a[np.abs(a - 0.25) < 0.1] += 0.3  # away from the np.maximum kink at 0.25

    def fn(x, y):
        h = np.einsum("ij,jk->ik", np.tanh(x), y)
        h = np.concatenate([h, np.transpose(np.log1p(np.square(np.transpose(x)))[:2])], axis=1)
        z = np.where(x > 0, np.exp(x) * 0.5, np.maximum(x, 0.25))
        return np.sum(h, axis=0) + np.mean(z) * np.sum(np.stack([y, y * y]), axis=(0, 2))

    check_gradients(f"numpy-built graph (seed {seed})", fn, [a, b], rng)


# ---------------------------------------------------------------------------
# array functions: what is not supported
# ---------------------------------------------------------------------------
UNSUPPORTED_FUNCTIONS = {
    "np.sort": lambda a: np.sort(a),
    "np.linalg.norm": lambda a: np.linalg.norm(a),
    "np.linalg.inv": lambda a: np.linalg.inv(a[:, :2]),
    "np.unique": lambda a: np.unique(a),
    "np.pad": lambda a: np.pad(a, 1),
    "np.prod": lambda a: np.prod(a),
    "np.round": lambda a: np.round(a),
    "np.fft.fft": lambda a: np.fft.fft(a),
}


@pytest.mark.parametrize("name", list(UNSUPPORTED_FUNCTIONS))
def test_unsupported_function_is_a_compile_error(name):
    msg = raises_compile_error(lambda: tilefuse.trace(UNSUPPORTED_FUNCTIONS[name],
                                                      np.ones((2, 3))), name, "not supported")
    assert THIS_FILE in msg, f"{name}: message does not name the user's line: {msg!r}"


FUNCTION_ERRORS = {
    "np.sum out=": (lambda a: np.sum(a, out=np.empty(())), ["np.sum", "out="]),
    "np.sum initial=": (lambda a: np.sum(a, initial=1.0), ["np.sum", "initial="]),
    "np.max where=": (lambda a: np.max(a, where=np.ones((2, 3), bool), initial=0.0),
                      ["np.max"]),
    "np.mean where=": (lambda a: np.mean(a, where=np.ones((2, 3), bool)), ["np.mean", "where="]),
    "np.argmax out=": (lambda a: np.argmax(a, out=np.empty((), np.int64)), ["np.argmax", "out="]),
    "np.concatenate out=": (lambda a: np.concatenate([a, a], out=np.empty((4, 3))),
                            ["np.concatenate", "out="]),
    "np.dot out=": (lambda a: np.dot(a, a.T, out=np.empty((2, 2))), ["np.dot", "out="]),
    "np.cumsum dtype=": (lambda a: np.cumsum(a, dtype=np.float32), ["np.cumsum", "dtype="]),
    "np.reshape order=F": (lambda a: np.reshape(a, (3, 2), order="F"), ["np.reshape", "'F'"]),
    "np.var": (lambda a: np.var(a), ["np.var", "ddof", "correction"]),
    "np.std": (lambda a: np.std(a, 0), ["np.std", "correction"]),
    "np.where(cond)": (lambda a: np.where(a > 0), ["np.where", "static"]),
    "np.squeeze non-1 axis": (lambda a: np.squeeze(a, 0), ["np.squeeze", "axis 0"]),
    "np.dot 3-d": (lambda a: np.dot(a.reshape(1, 2, 3), np.ones((3, 2))), ["np.dot", "einsum"]),
    "np.einsum ellipsis": (lambda a: np.einsum("...j->...", a), ["np.einsum", "..."]),
    "np.einsum diagonal": (lambda a: np.einsum("ii->i", a[:, :2]), ["np.einsum", "'ii'"]),
    "np.einsum operand count": (lambda a: np.einsum("ij,jk->ik", a), ["np.einsum", "2", "1"]),
    "np.einsum size mismatch": (lambda a: np.einsum("ij,jk->ik", a, a), ["np.einsum", "'j'"]),
    "np.einsum sublist form": (lambda a: np.einsum(a, [0, 1], [1]), ["np.einsum", "sublist"]),
    "np.full_like traced fill": (lambda a: np.full_like(a, a), ["np.full_like"]),
    "np.max axis out of range": (lambda a: np.max(a, axis=2), ["np.max", "2"]),
}


@pytest.mark.parametrize("name", list(FUNCTION_ERRORS))
def test_function_argument_errors(name):
    fn, substrings = FUNCTION_ERRORS[name]
    raises_compile_error(lambda: tilefuse.trace(fn, np.ones((2, 3))), *substrings)


# ---------------------------------------------------------------------------
# np.asarray of a traced tensor
# ---------------------------------------------------------------------------
TO_ARRAY = {
    "np.asarray(t)": lambda a: np.asarray(a),
    "np.array(t)": lambda a: np.array(a),
    "np.asarray(t, dtype)": lambda a: np.asarray(a, np.float32),
    "np.ascontiguousarray(t)": lambda a: np.ascontiguousarray(a),
    "np.asarray([t, t])": lambda a: np.asarray([a, a]),
    "ndarray + np.asarray(t)": lambda a: np.ones(3) + np.asarray(a),
}


@pytest.mark.parametrize("name", list(TO_ARRAY))
def test_asarray_of_traced_tensor_is_a_compile_error(name):
    msg = raises_compile_error(lambda: tilefuse.trace(TO_ARRAY[name], np.ones(3)), "np.asarray",
                               "no values while tracing")
    assert THIS_FILE in msg, f"{name}: message does not name the user's line: {msg!r}"
