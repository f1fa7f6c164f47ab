"""Every traced op against numpy on random inputs, in float32 and float64.

References are computed in float64 from the (already rounded) inputs and
then cast to the dtype under test, so the only error allowed is the
interpreter's per-op rounding. Tolerances are the module constants below;
they are never loosened per test.
"""
import math
import operator

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F
from backend_checks import TOLERANCES, out_of_tolerance

# Tolerances: backend_checks.TOLERANCES (|got - want| <= ATOL + RTOL * |want|,
# elementwise, per dtype).
DTYPES = [np.float32, np.float64]
with_dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])

# Elementwise shapes: awkward sizes around powers of two and GPT-2's vocab.
SHAPES = [(1,), (1023,), (3, 1025), (2, 50257)]
shape_ids = ["x".join(map(str, s)) for s in SHAPES]
with_shapes = pytest.mark.parametrize("shape", SHAPES, ids=shape_ids)

_erf = np.vectorize(math.erf, otypes=[np.float64])


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
def _context(op, dtype, seed, shapes, out_shape):
    name = np.dtype(dtype).name if dtype is not None else "?"
    return (f"{op}: dtype {name}, input shapes {shapes}, output shape {out_shape}, "
            f"seed {seed}")


def assert_close(op, got, want, dtype, seed, shapes=None, magnitude=None):
    """`want` is a float64 reference; it is cast to `dtype` first, then
    compared with the module tolerances for `dtype`. NaNs and infinities must
    match exactly. For sums of many terms, `magnitude` (the sum of the
    terms' absolute values, e.g. |A| @ |B| for a matmul) replaces |want| in
    the relative bound: a correctly rounded float32 sum is only that
    accurate when its terms cancel."""
    dtype = np.dtype(dtype)
    got = np.asarray(got)
    want = np.asarray(want).astype(dtype)
    ctx = _context(op, dtype, seed, shapes, want.shape)
    assert got.shape == want.shape, f"{ctx}: got shape {got.shape}"
    assert got.dtype == dtype, f"{ctx}: got dtype {got.dtype}"
    rtol, atol = TOLERANCES[dtype]
    bad, err, bound = out_of_tolerance(got, want, rtol, atol, magnitude)
    if bad.any():
        g, w = got.astype(np.float64), want.astype(np.float64)
        ratio = np.where(bad, err / bound, 0.0)
        worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), err.shape))
        finite = np.isfinite(err) & np.isfinite(w)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(finite, err / np.maximum(np.abs(w), 1e-300), np.inf)
        raise AssertionError(
            f"{ctx}: {int(bad.sum())} of {bad.size} elements exceed "
            f"rtol={rtol:g} atol={atol:g}; max abs error {float(err.max()):.3e}, "
            f"max rel error {float(rel.max()):.3e}; worst at index {worst}: "
            f"got {float(g[worst])!r}, want {float(w[worst])!r}"
        )


def assert_exact(op, got, want, seed, shapes=None):
    """Bit-for-bit (NaN == NaN) comparison, including the result dtype."""
    got, want = np.asarray(got), np.asarray(want)
    ctx = _context(op, want.dtype, seed, shapes, want.shape)
    assert got.shape == want.shape, f"{ctx}: got shape {got.shape}"
    assert got.dtype == want.dtype, f"{ctx}: got dtype {got.dtype}"
    equal_nan = want.dtype.kind == "f"
    if not np.array_equal(got, want, equal_nan=equal_nan):
        diff = ~((got == want) | ((got != got) & (want != want)))
        idx = np.argwhere(diff)
        first = tuple(int(i) for i in idx[0]) if idx.size else ()
        with np.errstate(invalid="ignore", over="ignore"):
            err = (np.abs(got.astype(np.float64) - want.astype(np.float64)).max()
                   if want.dtype.kind in "fiu" else "n/a")
        raise AssertionError(
            f"{ctx}: {int(diff.sum())} of {diff.size} elements differ, max error {err}; "
            f"first at {first}: got {got[first].item()!r}, want {want[first].item()!r}"
        )


# How graphs run: "interpret" (the reference interpreter) here;
# test_compiled_ops.py runs every test of this file again with "cpu"
# (compiled kernels) against the same references and tolerances.
BACKEND = "interpret"


def execute(graph, *args):
    """Runs a Graph on `args` with the module's BACKEND."""
    if BACKEND == "interpret":
        return graph.interpret(*args)
    return graph.compile(BACKEND)(*args)


def run(fn, *args):
    """Traces `fn` on `args` and runs it on them."""
    return execute(tilefuse.trace(fn, *args), *args)


def normal(rng, shape, dtype, scale=1.0, shift=0.0):
    return (rng.standard_normal(shape) * scale + shift).astype(dtype)


def uniform(rng, shape, dtype, lo, hi):
    return rng.uniform(lo, hi, shape).astype(dtype)


def f64(x):
    return np.asarray(x).astype(np.float64)


def ttype(shape, dtype):
    """MLIR tensor type text: tensor<3x4xf32>, tensor<i64>."""
    elem = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
            np.dtype(np.int64): "i64", np.dtype(np.int32): "i32"}[np.dtype(dtype)]
    return "tensor<" + "".join(f"{d}x" for d in shape) + elem + ">"


def np_log_softmax(x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_sigmoid(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


# ---------------------------------------------------------------------------
# Elementwise binary arithmetic
# ---------------------------------------------------------------------------
BINARY_OPS = {
    "add": (operator.add, np.add),
    "sub": (operator.sub, np.subtract),
    "mul": (operator.mul, np.multiply),
    "div": (operator.truediv, np.divide),
    "pow": (operator.pow, np.power),
    "maximum": (lambda a, b: a.maximum(b), np.maximum),
    "minimum": (lambda a, b: a.minimum(b), np.minimum),
}

BINARY_SHAPES = [
    ((1,), (1,)),
    ((1023,), (1023,)),
    ((3, 1025), (3, 1025)),
    ((3, 1025), (1025,)),   # broadcast rhs over rows
    ((3, 1), (1, 1025)),    # broadcast both
    ((2, 50257), (2, 50257)),
    ((2, 50257), (1,)),
]


def binary_operands(op, rng, sa, sb, dtype):
    if op == "pow":
        return uniform(rng, sa, dtype, 0.1, 4.0), uniform(rng, sb, dtype, -3.0, 3.0)
    a = normal(rng, sa, dtype, 3.0)
    if op == "div":
        b = (rng.choice([-1.0, 1.0], sb) * rng.uniform(0.25, 4.0, sb)).astype(dtype)
    else:
        b = normal(rng, sb, dtype, 3.0)
    if op in ("maximum", "minimum") and sa == sb:
        tie = rng.random(sa) < 0.1  # some exact ties
        b = np.where(tie, a, b).astype(dtype)
    return a, b


@with_dtypes
@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=lambda s: f"{s[0]}-{s[1]}")
@pytest.mark.parametrize("op", list(BINARY_OPS))
def test_binary(op, shapes, dtype, rng, seed):
    sa, sb = shapes
    traced, ref = BINARY_OPS[op]
    a, b = binary_operands(op, rng, sa, sb, dtype)
    got = run(traced, a, b)
    assert_close(op, got, ref(f64(a), f64(b)), dtype, seed, shapes)


SCALAR_CASES = {
    "x + 2.5": (lambda x: x + 2.5, lambda x: x + 2.5),
    "2.5 - x": (lambda x: 2.5 - x, lambda x: 2.5 - x),
    "x * 3": (lambda x: x * 3, lambda x: x * 3),
    "2.0 / x": (lambda x: 2.0 / x, lambda x: 2.0 / x),
    "x / 4": (lambda x: x / 4, lambda x: x / 4),
    "x ** 2": (lambda x: x ** 2, lambda x: x ** 2),
    "x ** 0.5": (lambda x: x ** 0.5, np.sqrt),
    "2 ** x": (lambda x: 2 ** x, lambda x: 2.0 ** x),
    "x.maximum(1.0)": (lambda x: x.maximum(1.0), lambda x: np.maximum(x, 1.0)),
    "x.minimum(1.0)": (lambda x: x.minimum(1.0), lambda x: np.minimum(x, 1.0)),
    "-x": (lambda x: -x, np.negative),
}


@with_dtypes
@pytest.mark.parametrize("case", list(SCALAR_CASES))
def test_python_scalar_operand(case, dtype, rng, seed):
    traced, ref = SCALAR_CASES[case]
    x = uniform(rng, (3, 1025), dtype, 0.25, 4.0)
    got = run(traced, x)
    assert_close(case, got, ref(f64(x)), dtype, seed, [(3, 1025)])


@with_dtypes
def test_numpy_array_operands(dtype, rng, seed):
    """A numpy array on either side of an operator becomes a graph constant."""
    x = normal(rng, (3, 1025), dtype)
    c = normal(rng, (1025,), dtype)
    got = run(lambda t: (c + t, t * c, c - t, (c @ t.T)), x)
    want = (f64(c) + f64(x), f64(x) * f64(c), f64(c) - f64(x), f64(c) @ f64(x).T)
    for name, g, w in zip(["c + x", "x * c", "c - x", "c @ x.T"], got, want):
        assert_close(name, g, w, dtype, seed, [(1025,), (3, 1025)])


INT_BINARY = {
    "add": (operator.add, np.add),
    "sub": (operator.sub, np.subtract),
    "mul": (operator.mul, np.multiply),
    "maximum": (lambda a, b: a.maximum(b), np.maximum),
    "minimum": (lambda a, b: a.minimum(b), np.minimum),
}


@pytest.mark.parametrize("itype", [np.int32, np.int64], ids=["i32", "i64"])
@pytest.mark.parametrize("op", list(INT_BINARY))
def test_integer_binary_wraps(op, itype, rng, seed):
    """Integer arithmetic stays in the integer dtype and wraps like numpy."""
    info = np.iinfo(itype)
    a = rng.integers(info.min, info.max, (3, 1025), dtype=itype)
    b = rng.integers(info.min, info.max, (1025,), dtype=itype)
    a[0, :3] = [info.max, info.min, -1]
    traced, ref = INT_BINARY[op]
    with np.errstate(over="ignore"):
        want = ref(a, b)
    assert_exact(f"{op} {np.dtype(itype).name}", run(traced, a, b), want, seed,
                 [a.shape, b.shape])


@pytest.mark.parametrize("itype", [np.int32, np.int64], ids=["i32", "i64"])
def test_integer_unary_and_true_division(itype, rng, seed):
    info = np.iinfo(itype)
    x = rng.integers(-1000, 1000, 1025).astype(itype)
    x[:3] = [info.min, info.max, 0]
    with np.errstate(over="ignore"):
        assert_exact("neg int", run(lambda t: -t, x), -x, seed, [x.shape])
        assert_exact("abs int", run(lambda t: abs(t), x), np.abs(x), seed, [x.shape])
    y = rng.integers(-1000, 1000, 1025).astype(itype)
    y[y == 0] = 7
    x[:3] = [-7, 7, 0]
    # int / int is true division in f32 (as PyTorch), not floor division.
    got = run(lambda a, b: a / b, x, y)
    assert_close("div int/int", got, f64(x) / f64(y), np.float32, seed, [x.shape, y.shape])
    got = run(lambda a: a / 2, x)
    assert_close("div int/2", got, f64(x) / 2, np.float32, seed, [x.shape])
    z = rng.integers(1, 50, 1025).astype(itype)
    for name, fn, ref in [("exp", lambda t: (t / 10).exp(), lambda v: np.exp(v / 10)),
                          ("sqrt", lambda t: t.sqrt(), np.sqrt),
                          ("log", lambda t: t.log(), np.log)]:
        assert_close(f"{name} of int (as f32)", run(fn, z), ref(f64(z)), np.float32, seed,
                     [z.shape])


@with_dtypes
def test_pow_negative_base_integer_exponent(dtype, rng, seed):
    x = normal(rng, (3, 1025), dtype, 2.0)
    for e in (2, 3, -1, 0):
        got = run(lambda t: t ** e, x)
        with np.errstate(divide="ignore"):
            want = f64(x) ** e
        assert_close(f"pow(x, {e})", got, want, dtype, seed, [x.shape])


# ---------------------------------------------------------------------------
# Comparisons and where (exact)
# ---------------------------------------------------------------------------
COMPARISONS = {
    "eq": (operator.eq, np.equal),
    "ne": (operator.ne, np.not_equal),
    "lt": (operator.lt, np.less),
    "le": (operator.le, np.less_equal),
    "gt": (operator.gt, np.greater),
    "ge": (operator.ge, np.greater_equal),
}


@pytest.mark.parametrize("dtype", DTYPES + [np.int32, np.int64],
                         ids=["f32", "f64", "i32", "i64"])
@pytest.mark.parametrize("shapes", [((1,), (1,)), ((3, 1025), (3, 1025)),
                                    ((3, 1025), (1025,)), ((2, 50257), (1,))],
                         ids=lambda s: f"{s[0]}-{s[1]}")
@pytest.mark.parametrize("op", list(COMPARISONS))
def test_comparison(op, shapes, dtype, rng, seed):
    sa, sb = shapes
    a = rng.integers(-3, 4, sa).astype(dtype)  # small range: many ties
    b = rng.integers(-3, 4, sb).astype(dtype)
    traced, ref = COMPARISONS[op]
    got = run(traced, a, b)
    assert_exact(op, got, ref(a, b), seed, shapes)
    got = run(lambda t: traced(t, 1), a)
    assert_exact(f"{op} with python scalar", got, ref(a, 1), seed, [sa])


@with_dtypes
def test_comparison_special_values(dtype, seed):
    a = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0], dtype)
    b = np.array([np.nan, np.inf, np.inf, -0.0, 0.0, np.nan], dtype)
    for op, (traced, ref) in COMPARISONS.items():
        with np.errstate(invalid="ignore"):
            want = ref(a, b)
        assert_exact(op, run(traced, a, b), want, seed, [a.shape, b.shape])


@with_dtypes
@with_shapes
def test_where(shape, dtype, rng, seed):
    cond = rng.random(shape) < 0.4
    a = normal(rng, shape, dtype)
    b = normal(rng, shape[-1:], dtype)  # broadcast along leading dims
    got = run(lambda c, x, y: tilefuse.where(c, x, y), cond, a, b)
    assert_exact("where", got, np.where(cond, a, b), seed, [shape, shape, shape[-1:]])
    got = run(lambda c, x: tilefuse.where(c, 0.5, x), cond, a)
    assert_exact("where(scalar)", got, np.where(cond, dtype(0.5), a), seed, [shape])
    got = run(lambda x: x.masked_fill(x > 0, -1.0), a)
    assert_exact("masked_fill", got, np.where(a > 0, dtype(-1.0), a), seed, [shape])


# ---------------------------------------------------------------------------
# Elementwise unary ops and activations
# ---------------------------------------------------------------------------
def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


# name: (traced fn, float64 reference, input domain)
UNARY_OPS = {
    "neg": (lambda x: x.neg(), np.negative, "normal"),
    "abs": (lambda x: abs(x), np.abs, "normal"),
    "abs_method": (lambda x: x.abs(), np.abs, "normal"),
    "exp": (lambda x: x.exp(), np.exp, "normal"),
    "log": (lambda x: x.log(), np.log, "positive"),
    "tanh": (lambda x: x.tanh(), np.tanh, "normal"),
    "F.tanh": (F.tanh, np.tanh, "normal"),
    "sqrt": (lambda x: x.sqrt(), np.sqrt, "positive"),
    "rsqrt": (lambda x: x.rsqrt(), lambda x: 1.0 / np.sqrt(x), "positive"),
    "sigmoid": (lambda x: x.sigmoid(), np_sigmoid, "wide"),
    "F.sigmoid": (F.sigmoid, np_sigmoid, "wide"),
    "erf": (lambda x: x.erf(), _erf, "normal"),
    "relu": (F.relu, lambda x: np.maximum(x, 0.0), "normal"),
    "relu_method": (lambda x: x.relu(), lambda x: np.maximum(x, 0.0), "normal"),
    "gelu": (F.gelu, _gelu, "normal"),
    "gelu_none": (lambda x: F.gelu(x, approximate="none"), _gelu, "normal"),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), _gelu_tanh, "normal"),
    "silu": (F.silu, lambda x: x * np_sigmoid(x), "wide"),
}


def unary_input(domain, rng, shape, dtype):
    if domain == "positive":
        return np.exp(rng.uniform(-6.0, 6.0, shape)).astype(dtype)
    if domain == "wide":  # sigmoid/silu: exercise both stable branches
        x = rng.standard_normal(shape) * 8.0
        x.flat[: min(x.size, 4)] = [60.0, -60.0, 0.0, -0.0][: min(x.size, 4)]
        return x.astype(dtype)
    x = rng.standard_normal(shape) * 2.5
    x.flat[0] = 0.0
    return x.astype(dtype)


@with_dtypes
@with_shapes
@pytest.mark.parametrize("op", list(UNARY_OPS))
def test_unary(op, shape, dtype, rng, seed):
    traced, ref, domain = UNARY_OPS[op]
    x = unary_input(domain, rng, shape, dtype)
    got = run(traced, x)
    assert_close(op, got, ref(f64(x)), dtype, seed, [shape])


@with_dtypes
def test_unary_special_values(dtype, seed):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0], dtype)
    with np.errstate(all="ignore"):
        cases = {
            "neg": (lambda t: -t, -x),
            "abs": (lambda t: abs(t), np.abs(x)),
            "exp": (lambda t: t.exp(), np.exp(x)),
            "log": (lambda t: t.log(), np.log(x)),
            "sqrt": (lambda t: t.sqrt(), np.sqrt(x)),
            "rsqrt": (lambda t: t.rsqrt(), 1.0 / np.sqrt(x)),
            "tanh": (lambda t: t.tanh(), np.tanh(x)),
            "erf": (lambda t: t.erf(), np.array([math.erf(v) for v in x], dtype)),
            "sigmoid": (lambda t: t.sigmoid(), np_sigmoid(x).astype(dtype)),
            "relu": (F.relu, np.maximum(x, dtype(0))),
        }
    for op, (fn, want) in cases.items():
        assert_close(op, run(fn, x), want, dtype, seed, [x.shape])


@with_dtypes
def test_subnormal_results_and_inputs(dtype, seed):
    """exp into the subnormal range, log of subnormals, sigmoid far left:
    no flush to zero (float32 kernels use polynomials that would)."""
    tiny = np.finfo(dtype).smallest_subnormal
    x = np.array([-87.5, -95.0, -103.0, -745.0, 1e-3], dtype)
    with np.errstate(all="ignore"):
        cases = {
            "exp": (lambda t: t.exp(), np.exp(f64(x))),
            "sigmoid": (lambda t: t.sigmoid(), np_sigmoid(f64(x))),
        }
        sub = np.array([tiny, tiny * 3, np.finfo(dtype).tiny / 2, 1e-39, 1.0], dtype)
        cases_log = {"log": (lambda t: t.log(), np.log(f64(sub)))}
    for op, (fn, want) in cases.items():
        got = run(fn, x)
        assert_close(op, got, want, dtype, seed, [x.shape])
        # The absolute tolerance hides a flush to zero: relative error here
        # (up to the subnormal spacing; -745 rounds to 0 exactly).
        w = want.astype(dtype).astype(np.float64)
        err = np.abs(got.astype(np.float64) - w)
        assert (err <= 1e-5 * np.abs(w) + tiny).all(), (
            f"{op}: dtype {np.dtype(dtype).name}, inputs {x.tolist()}: got {got.tolist()}, "
            f"want {w.tolist()} (seed {seed})")
    for op, (fn, want) in cases_log.items():
        assert_close(op, run(fn, sub), want, dtype, seed, [sub.shape])


@with_dtypes
def test_maximum_minimum_propagate_nan(dtype, seed):
    a = np.array([np.nan, 1.0, np.nan, -np.inf], dtype)
    b = np.array([1.0, np.nan, np.nan, 2.0], dtype)
    assert_exact("maximum", run(lambda x, y: x.maximum(y), a, b), np.maximum(a, b), seed,
                 [a.shape, b.shape])
    assert_exact("minimum", run(lambda x, y: x.minimum(y), a, b), np.minimum(a, b), seed,
                 [a.shape, b.shape])


# ---------------------------------------------------------------------------
# Casts
# ---------------------------------------------------------------------------
def test_cast_f32_f64(rng, seed):
    x32 = normal(rng, (3, 1025), np.float32, 100.0)
    assert_exact("cast f32->f64", run(lambda t: t.to(tilefuse.float64), x32),
                 x32.astype(np.float64), seed, [x32.shape])
    x64 = rng.standard_normal((2, 50257)) * np.exp(rng.uniform(-30, 30, (2, 50257)))
    assert_exact("cast f64->f32", run(lambda t: t.to(np.float32), x64),
                 x64.astype(np.float32), seed, [x64.shape])
    assert_exact("cast f64->f32 (.float())", run(lambda t: t.float(), x64),
                 x64.astype(np.float32), seed, [x64.shape])
    # Ties: halfway between two f32 values round to even.
    half_ulp = np.array([1.0 + 2.0 ** -24, 1.0 + 3 * 2.0 ** -24, -(1.0 + 2.0 ** -24)])
    assert_exact("cast f64->f32 ties", run(lambda t: t.to("f32"), half_ulp),
                 half_ulp.astype(np.float32), seed, [half_ulp.shape])


@with_dtypes
@pytest.mark.parametrize("to", [np.int32, np.int64], ids=["i32", "i64"])
def test_cast_float_to_int_truncates(dtype, to, rng, seed):
    x = rng.standard_normal(1025) * 1000.0
    x[:8] = [2.5, -2.5, 0.999, -0.999, 3.0, -3.0, 0.0, -0.0]
    x = x.astype(dtype)
    assert_exact(f"cast {np.dtype(dtype).name}->{np.dtype(to).name}",
                 run(lambda t: t.to(to), x), np.trunc(x).astype(to), seed, [x.shape])


@pytest.mark.parametrize("src", [np.int32, np.int64], ids=["i32", "i64"])
@with_dtypes
def test_cast_int_to_float(src, dtype, rng, seed):
    info = np.iinfo(np.int32)
    x = rng.integers(info.min, info.max, 2050, dtype=np.int64)
    x[:4] = [0, -1, 2 ** 24 + 1, -(2 ** 24 + 3)]
    x = x.astype(src)
    assert_exact(f"cast {np.dtype(src).name}->{np.dtype(dtype).name}",
                 run(lambda t: t.to(dtype), x), x.astype(dtype), seed, [x.shape])


def test_cast_large_int64_to_f32_rounds_once(seed):
    x = np.array([2 ** 60 + 2 ** 36 + 1, -(2 ** 60 + 2 ** 36 + 1)], np.int64)
    assert_exact("cast i64->f32", run(lambda t: t.to("f32"), x), x.astype(np.float32),
                 seed, [x.shape])


def test_cast_f64_to_f16_rounds_once(seed):
    x = np.array([1.0 + 2.0 ** -11 + 2.0 ** -40, 1.0 + 2.0 ** -11], np.float64)
    assert_exact("cast f64->f16", run(lambda t: t.to("f16"), x), x.astype(np.float16),
                 seed, [x.shape])


@pytest.mark.parametrize("src", DTYPES + [np.int32, np.int64],
                         ids=["f32", "f64", "i32", "i64"])
def test_cast_to_bool(src, rng, seed):
    x = rng.integers(-2, 3, 1023).astype(src)
    if np.dtype(src).kind == "f":
        x[:4] = [np.nan, -0.0, 0.5, -np.inf]
    assert_exact(f"cast {np.dtype(src).name}->bool", run(lambda t: t.to(bool), x),
                 x.astype(bool), seed, [x.shape])


@pytest.mark.parametrize("to", DTYPES + [np.int32, np.int64], ids=["f32", "f64", "i32", "i64"])
def test_cast_from_bool(to, rng, seed):
    x = rng.random((3, 1025)) < 0.5
    assert_exact(f"cast bool->{np.dtype(to).name}", run(lambda t: t.to(to), x),
                 x.astype(to), seed, [x.shape])


def test_cast_between_ints_wraps(rng, seed):
    x = rng.integers(-(2 ** 40), 2 ** 40, 1025, dtype=np.int64)
    assert_exact("cast i64->i32", run(lambda t: t.to("i32"), x), x.astype(np.int32),
                 seed, [x.shape])
    y = x.astype(np.int32)
    assert_exact("cast i32->i64", run(lambda t: t.to("i64"), y), y.astype(np.int64),
                 seed, [y.shape])


# ---------------------------------------------------------------------------
# Layout: reshape, transpose, slicing, cat/stack, expand
# ---------------------------------------------------------------------------
RESHAPES = [
    ((3, 1025), lambda t: t.reshape(1025, 3), lambda a: a.reshape(1025, 3)),
    ((3, 1025), lambda t: t.reshape(-1), lambda a: a.reshape(-1)),
    ((3, 1025), lambda t: t.view(3, 5, -1), lambda a: a.reshape(3, 5, -1)),
    ((3, 1025), lambda t: t.reshape((5, 205, 3)), lambda a: a.reshape(5, 205, 3)),
    ((2, 50257), lambda t: t.reshape(50257, 2), lambda a: a.reshape(50257, 2)),
    ((1,), lambda t: t.reshape(1, 1, 1), lambda a: a.reshape(1, 1, 1)),
    ((1,), lambda t: t.reshape(()), lambda a: a.reshape(())),
    ((1023,), lambda t: t.reshape(3, 11, 31), lambda a: a.reshape(3, 11, 31)),
    ((2, 3, 5), lambda t: t.flatten(), lambda a: a.reshape(-1)),
    ((2, 3, 5), lambda t: t.flatten(1), lambda a: a.reshape(2, 15)),
    ((2, 3, 5), lambda t: t.unsqueeze(1), lambda a: a[:, None]),
    ((2, 3, 5), lambda t: t.unsqueeze(-1), lambda a: a[..., None]),
    ((2, 1, 5), lambda t: t.squeeze(1), lambda a: a.squeeze(1)),
    ((1, 3, 1), lambda t: t.squeeze(), lambda a: a.squeeze()),
]


@with_dtypes
@pytest.mark.parametrize("case", range(len(RESHAPES)))
def test_reshape(case, dtype, rng, seed):
    shape, traced, ref = RESHAPES[case]
    x = normal(rng, shape, dtype)
    assert_exact(f"reshape case {case}", run(traced, x), ref(x), seed, [shape])


TRANSPOSES = [
    ((3, 1025), lambda t: t.transpose(0, 1), lambda a: a.T),
    ((3, 1025), lambda t: t.T, lambda a: a.T),
    ((2, 50257), lambda t: t.permute(1, 0), lambda a: a.T),
    ((3, 5, 7), lambda t: t.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    ((3, 5, 7), lambda t: t.permute([1, 2, 0]), lambda a: a.transpose(1, 2, 0)),
    ((3, 5, 7), lambda t: t.permute(-1, -3, -2), lambda a: a.transpose(2, 0, 1)),
    ((3, 5, 7), lambda t: t.transpose(0, -1), lambda a: a.swapaxes(0, -1)),
    ((2, 3, 4, 5), lambda t: t.transpose(1, 2), lambda a: a.swapaxes(1, 2)),
    ((1,), lambda t: t.permute(0), lambda a: a),
    # Rows of several blocks with a masked tail: programs step along the
    # input's rows first (one row of programs per block of the result).
    ((130, 70), lambda t: t.T, lambda a: a.T),
    ((4, 130, 70), lambda t: t.transpose(1, 2), lambda a: a.swapaxes(1, 2)),
    ((70, 3, 130), lambda t: t.permute(2, 1, 0), lambda a: a.transpose(2, 1, 0)),
]


@with_dtypes
@pytest.mark.parametrize("case", range(len(TRANSPOSES)))
def test_transpose(case, dtype, rng, seed):
    shape, traced, ref = TRANSPOSES[case]
    x = normal(rng, shape, dtype)
    assert_exact(f"transpose case {case}", run(traced, x), ref(x), seed, [shape])


# Each key is applied to a traced tensor and to the numpy array alike.
SLICES = [
    ((3, 1025), np.s_[1:]),
    ((3, 1025), np.s_[:, ::2]),
    ((3, 1025), np.s_[:, 3:1000:7]),
    ((3, 1025), np.s_[::2, -5:]),
    ((3, 1025), np.s_[0]),
    ((3, 1025), np.s_[-1, 5]),
    ((3, 1025), np.s_[None, :, None]),
    ((3, 1025), np.s_[..., 1]),
    ((3, 1025), np.s_[1:2, -3:]),
    ((3, 1025), np.s_[:, 1024:]),
    ((3, 1025), np.s_[:, 2000:]),      # empty
    ((2, 50257), np.s_[:, 50000::100]),
    ((1023,), np.s_[::1022]),
    ((1023,), np.s_[-1]),
    ((1,), np.s_[0]),
    ((1,), np.s_[None]),
    ((2, 3, 4, 5), np.s_[1, ..., ::3]),
    ((2, 3, 4, 5), np.s_[:, None, 2, 1:3, None]),
]


@with_dtypes
@pytest.mark.parametrize("case", range(len(SLICES)))
def test_slicing(case, dtype, rng, seed):
    shape, key = SLICES[case]
    x = normal(rng, shape, dtype)
    got = run(lambda t: t[key] * 1.0, x)  # * 1.0: the result is never the argument itself
    assert_exact(f"slice {key!r}", got, x[key], seed, [shape])


@with_dtypes
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(dim, dtype, rng, seed):
    shapes = {0: [(1, 1025), (3, 1025), (2, 1025)],
              1: [(3, 1), (3, 1023), (3, 1025)],
              -1: [(3, 1), (3, 1023), (3, 1025)]}[dim]
    xs = [normal(rng, s, dtype) for s in shapes]
    got = run(lambda a, b, c: tilefuse.cat([a, b, c], dim), *xs)
    assert_exact(f"cat dim={dim}", got, np.concatenate(xs, dim), seed, shapes)


@with_dtypes
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_stack(dim, dtype, rng, seed):
    xs = [normal(rng, (3, 1025), dtype) for _ in range(3)]
    got = run(lambda a, b, c: tilefuse.stack([a, b, c], dim), *xs)
    assert_exact(f"stack dim={dim}", got, np.stack(xs, dim), seed, [(3, 1025)] * 3)


EXPANDS = [
    ((3, 1), lambda t: t.expand(3, 1025), (3, 1025)),
    ((3, 1), lambda t: t.expand(-1, 1025), (3, 1025)),
    ((1025,), lambda t: t.expand(2, 3, 1025), (2, 3, 1025)),
    ((1,), lambda t: t.expand([50257]), (50257,)),
    ((1, 3, 1), lambda t: t.expand(4, 3, 5), (4, 3, 5)),
    ((2, 3), lambda t: t.expand(2, 3), (2, 3)),
]


@with_dtypes
@pytest.mark.parametrize("case", range(len(EXPANDS)))
def test_expand(case, dtype, rng, seed):
    shape, traced, out = EXPANDS[case]
    x = normal(rng, shape, dtype)
    got = run(lambda t: traced(t) * 1.0, x)
    assert_exact(f"expand {shape}->{out}", got, np.broadcast_to(x, out), seed, [shape])


BROADCAST_PAIRS = [
    ((3, 1, 5), (4, 1)),
    ((5,), (2, 3, 5)),
    ((1,), (1023,)),
    ((2, 1, 1025), (1, 3, 1)),
    ((), (3, 1025)),
    ((1, 1), (1,)),
]


@with_dtypes
@pytest.mark.parametrize("shapes", BROADCAST_PAIRS, ids=lambda s: f"{s[0]}-{s[1]}")
def test_numpy_broadcasting(shapes, dtype, rng, seed):
    sa, sb = shapes
    a, b = normal(rng, sa, dtype), normal(rng, sb, dtype)
    got = run(lambda x, y: x * y + x, a, b)
    want = f64(a) * f64(b) + f64(a)
    assert want.shape == np.broadcast_shapes(sa, sb)
    assert_close("broadcast mul/add", got, want, dtype, seed, shapes)


# ---------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------
REDUCE_CASES = [
    ((3, 1025), None, False),
    ((3, 1025), None, True),
    ((3, 1025), 0, False),
    ((3, 1025), 1, True),
    ((3, 1025), -1, False),
    ((2, 50257), 1, False),
    ((2, 50257), (0, 1), True),
    ((1,), 0, False),
    ((1023,), 0, True),
    ((4, 5, 6), (0, 2), False),
    ((4, 5, 6), (2, 0), True),
    ((4, 5, 6), -2, False),
]


def _axis(dim):
    return tuple(dim) if isinstance(dim, (list, tuple)) else dim


@with_dtypes
@pytest.mark.parametrize("case", REDUCE_CASES, ids=lambda c: f"{c[0]}-dim{c[1]}-keep{c[2]}")
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_reduce(op, case, dtype, rng, seed):
    shape, dim, keep = case
    x = normal(rng, shape, dtype, 2.0, 0.5)
    method = {"max": "amax", "min": "amin"}.get(op, op)  # values only, as PyTorch
    got = run(lambda t: getattr(t, method)(dim, keep), x)
    want = getattr(np, op)(f64(x), axis=_axis(dim), keepdims=keep)
    name = f"{op}(dim={dim}, keepdim={keep})"
    if op in ("max", "min"):
        assert_exact(name, got, want.astype(dtype), seed, [shape])
    else:
        assert_close(name, got, want, dtype, seed, [shape])


@with_dtypes
def test_reduce_nan_and_inf(dtype, seed):
    x = np.array([[1.0, np.nan, 3.0], [np.inf, -np.inf, 0.0], [-np.inf, 2.0, -1.0]], dtype)
    for op in ("sum", "max", "min"):
        with np.errstate(invalid="ignore"):
            want = getattr(np, op)(f64(x), axis=1)
        assert_close(f"{op}(dim=1) with nan/inf", run(lambda t: getattr(t, {"max": "amax", "min": "amin"}.get(op, op))(1), x), want,
                     dtype, seed, [x.shape])


def test_reduce_ints_and_bools(rng, seed):
    x = rng.integers(-1000, 1000, (3, 1025), dtype=np.int64)
    assert_exact("sum i64", run(lambda t: t.sum(1), x), x.sum(1), seed, [x.shape])
    assert_exact("max i64", run(lambda t: t.amax(0), x), x.max(0), seed, [x.shape])
    assert_exact("min i64", run(lambda t: t.min(), x), np.asarray(x.min()), seed, [x.shape])
    b = x > 0
    assert_exact("sum bool (count)", run(lambda t: t.sum(-1), b), b.sum(-1), seed, [b.shape])
    got = run(lambda t: t.mean(1), x)
    assert_close("mean i64 (as f32)", got, f64(x).mean(1), np.float32, seed, [x.shape])


ARGMAX_CASES = [
    ((3, 1025), 1, False),
    ((3, 1025), 0, True),
    ((3, 1025), -1, True),
    ((2, 50257), -1, False),
    ((1023,), 0, False),
    ((1,), 0, False),
    ((4, 5, 6), 1, False),
]


@pytest.mark.parametrize("dtype", DTYPES + [np.int64], ids=["f32", "f64", "i64"])
@pytest.mark.parametrize("case", ARGMAX_CASES, ids=lambda c: f"{c[0]}-dim{c[1]}-keep{c[2]}")
def test_argmax_first_on_ties(case, dtype, rng, seed):
    shape, dim, keep = case
    x = rng.integers(0, 4, shape).astype(dtype)  # many ties
    got = run(lambda t: t.argmax(dim, keep), x)
    want = np.argmax(x, axis=dim, keepdims=keep)
    assert_exact(f"argmax(dim={dim}, keepdim={keep})", got, want.astype(np.int64), seed,
                 [shape])


@with_dtypes
def test_argmax_default_dim_and_nan(dtype, seed):
    x = np.array([[1.0, 5.0, 5.0, np.nan, np.nan, 7.0],
                  [-np.inf, -np.inf, -np.inf, -np.inf, -np.inf, -np.inf],
                  [0.0, -0.0, 0.0, 0.0, 0.0, 0.0]], dtype)
    # PyTorch's default: the index into the flattened tensor.
    got = run(lambda t: t.argmax(), x)
    assert_exact("argmax (default dim, NaN is max)", got, np.asarray(np.argmax(x)), seed,
                 [x.shape])
    got = run(lambda t: t.argmax(-1), x)
    assert_exact("argmax (dim -1, NaN is max)", got, np.argmax(x, axis=-1), seed, [x.shape])


# ---------------------------------------------------------------------------
# Matmul
# ---------------------------------------------------------------------------
MATMUL_CASES = [
    ((3, 1025), (1025, 5)),
    ((1, 1), (1, 1)),
    ((1,), (1,)),          # dot product -> 0-d
    ((1025,), (1025,)),
    ((17,), (17, 5)),      # vector @ matrix
    ((3, 17), (17,)),      # matrix @ vector
    ((4, 3, 17), (4, 17, 5)),
    ((2, 1, 3, 7), (5, 7, 4)),  # broadcast batch
    ((1, 3, 7), (4, 7, 2)),
    ((7,), (2, 7, 4)),
    ((2, 3, 7), (7,)),
    ((2, 1023), (1023, 3)),
]


@with_dtypes
@pytest.mark.parametrize("shapes", MATMUL_CASES, ids=lambda s: f"{s[0]}@{s[1]}")
def test_matmul(shapes, dtype, rng, seed):
    sa, sb = shapes
    a, b = normal(rng, sa, dtype), normal(rng, sb, dtype)
    got = run(lambda x, y: x @ y, a, b)
    assert_close("matmul", got, np.matmul(f64(a), f64(b)), dtype, seed, shapes,
                 magnitude=np.matmul(np.abs(f64(a)), np.abs(f64(b))))


@with_dtypes
@pytest.mark.parametrize("tl,tr", [(False, True), (True, False), (True, True)])
def test_matmul_transpose_flags_parsed(tl, tr, dtype, rng, seed):
    m, k, n = 3, 1025, 5
    sa = (2, k, m) if tl else (2, m, k)
    sb = (2, n, k) if tr else (2, k, n)
    ta, tb, to = ttype(sa, dtype), ttype(sb, dtype), ttype((2, m, n), dtype)
    text = (f"func.func @mm(%a: {ta}, %b: {tb}) -> {to} {{\n"
            f"  %r = graph.matmul %a, %b {{transpose_lhs = {str(tl).lower()}, "
            f"transpose_rhs = {str(tr).lower()}}} : ({ta}, {tb}) -> {to}\n"
            f"  return %r : {to}\n}}\n")
    a, b = normal(rng, sa, dtype), normal(rng, sb, dtype)
    got = execute(tilefuse.parse(text), a, b)
    a64 = f64(a).swapaxes(1, 2) if tl else f64(a)
    b64 = f64(b).swapaxes(1, 2) if tr else f64(b)
    assert_close(f"matmul(transpose_lhs={tl}, transpose_rhs={tr})", got, a64 @ b64, dtype,
                 seed, [sa, sb], magnitude=np.abs(a64) @ np.abs(b64))


# ---------------------------------------------------------------------------
# Embedding / gather and scatter_add
# ---------------------------------------------------------------------------
EMBED_CASES = [
    ((10334, 16), (4, 37), np.int64),
    ((10334, 16), (129,), np.int32),
    ((50257, 3), (2, 5), np.int64),
    ((7, 2, 3), (3, 4), np.int64),
    ((1, 5), (6,), np.int32),
    ((10, 4), (), np.int64),
]


@with_dtypes
@pytest.mark.parametrize("case", EMBED_CASES, ids=lambda c: f"{c[0]}[{c[1]}]-{np.dtype(c[2]).name}")
def test_embedding(case, dtype, rng, seed):
    tshape, ishape, itype = case
    table = normal(rng, tshape, dtype)
    rows = tshape[0]
    ids = rng.integers(0, rows, ishape).astype(itype)
    if ids.size >= 3:
        ids.flat[0], ids.flat[1], ids.flat[2] = 0, rows - 1, rows - 1  # edges, repeat
    want = table[ids]
    assert_exact("embedding", run(lambda i, t: F.embedding(i, t), ids, table), want, seed,
                 [ishape, tshape])
    assert_exact("table[ids]", run(lambda t, i: t[i], table, ids), want, seed,
                 [tshape, ishape])


def _scatter_ir(bshape, ishape, dtype, itype):
    ushape = tuple(ishape) + tuple(bshape[1:])
    tb, ti, tu = ttype(bshape, dtype), ttype(ishape, itype), ttype(ushape, dtype)
    return (
        f"func.func @scatter(%base: {tb}, %ids: {ti}, %upd: {tu}) -> {tb} {{\n"
        f"  %r = graph.scatter_add %base, %ids, %upd : ({tb}, {ti}, {tu}) -> {tb}\n"
        f"  return %r : {tb}\n"
        f"}}\n"
    ), ushape


@with_dtypes
@pytest.mark.parametrize("case", [((10, 3), (7,), np.int64), ((10334, 4), (2, 50), np.int64),
                                  ((5,), (9,), np.int32), ((6, 2, 2), (3, 3), np.int32)],
                         ids=lambda c: f"{c[0]}-{c[1]}-{np.dtype(c[2]).name}")
def test_scatter_add_parsed(case, dtype, rng, seed):
    bshape, ishape, itype = case
    text, ushape = _scatter_ir(bshape, ishape, dtype, itype)
    g = tilefuse.parse(text)
    base = normal(rng, bshape, dtype)
    ids = rng.integers(0, min(bshape[0], 4), ishape).astype(itype)  # many repeats
    ids.flat[-1] = bshape[0] - 1
    upd = normal(rng, ushape, dtype)
    want = f64(base).copy()
    np.add.at(want, ids, f64(upd))
    assert_close("scatter_add", execute(g, base, ids, upd), want, dtype, seed,
                 [bshape, ishape, ushape])


# ---------------------------------------------------------------------------
# Composite ops: softmax, log_softmax, layer_norm, linear
# ---------------------------------------------------------------------------
SOFTMAX_CASES = [
    ((3, 5, 7), 0), ((3, 5, 7), 1), ((3, 5, 7), 2), ((3, 5, 7), -1), ((3, 5, 7), -3),
    ((2, 50257), -1), ((2, 50257), 0), ((1,), 0), ((1023,), 0), ((3, 1025), 1),
]


@with_dtypes
@pytest.mark.parametrize("case", SOFTMAX_CASES, ids=lambda c: f"{c[0]}-dim{c[1]}")
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax(op, case, dtype, rng, seed):
    shape, dim = case
    x = normal(rng, shape, dtype, 3.0)
    x.flat[0] = 80.0  # large logits must not overflow
    traced = F.softmax if op == "softmax" else F.log_softmax
    ref = np_softmax if op == "softmax" else np_log_softmax
    got = run(lambda t: traced(t, dim), x)
    assert_close(f"{op}(dim={dim})", got, ref(f64(x), dim), dtype, seed, [shape])


@with_dtypes
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_masked_with_neg_inf(op, dtype, rng, seed):
    """Causal-attention style: masked_fill(-inf) then softmax over the last dim."""
    x = normal(rng, (4, 17, 17), dtype, 3.0)
    mask = np.triu(np.ones((17, 17), bool), k=1)
    traced = F.softmax if op == "softmax" else F.log_softmax
    got = run(lambda t: traced(t.masked_fill(mask, float("-inf")), -1), x)
    masked = np.where(mask, -np.inf, f64(x))
    with np.errstate(invalid="ignore", divide="ignore"):
        want = np_softmax(masked, -1) if op == "softmax" else np_log_softmax(masked, -1)
    assert_close(f"{op} after masked_fill(-inf)", got, want, dtype, seed, [x.shape])


@with_dtypes
def test_composite_from_primitives(dtype, rng, seed):
    """A hand-written layer norm and softmax: keepdim reductions broadcast back."""
    x = normal(rng, (2, 3, 1025), dtype, 2.0, 1.0)

    def fn(t):
        mu = t.mean(-1, keepdim=True)
        var = ((t - mu) ** 2).mean(-1, keepdim=True)
        ln = (t - mu) * (var + 1e-5).rsqrt()
        e = (t - t.amax(1, keepdim=True)).exp()
        return ln, e / e.sum(1, keepdim=True)

    ln, sm = run(fn, x)
    x64 = f64(x)
    mu = x64.mean(-1, keepdims=True)
    want_ln = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    assert_close("manual layer norm", ln, want_ln, dtype, seed, [x.shape])
    assert_close("manual softmax(dim=1)", sm, np_softmax(x64, 1), dtype, seed, [x.shape])


def np_layer_norm(x, w, b, eps, k):
    axes = tuple(range(x.ndim - k, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


LAYER_NORM_CASES = [
    ((3, 1025), (1025,), 1e-5),
    ((2, 50257), (50257,), 1e-5),
    ((2, 3, 4, 5), (4, 5), 1e-5),
    ((7, 6), (7, 6), 1e-3),
    ((1, 1), (1,), 1e-5),  # zero variance: output is the bias
    ((1023,), (1023,), 1e-2),
]


@with_dtypes
@pytest.mark.parametrize("case", LAYER_NORM_CASES, ids=lambda c: f"{c[0]}-norm{c[1]}-eps{c[2]}")
def test_layer_norm(case, dtype, rng, seed):
    shape, nshape, eps = case
    x = normal(rng, shape, dtype, 2.0, 3.0)
    w = normal(rng, nshape, dtype, 1.0, 1.0)
    b = normal(rng, nshape, dtype)
    got = run(lambda t, ww, bb: F.layer_norm(t, nshape, ww, bb, eps), x, w, b)
    want = np_layer_norm(f64(x), f64(w), f64(b), eps, len(nshape))
    assert_close("layer_norm", got, want, dtype, seed, [shape, nshape, nshape])


LINEAR_CASES = [
    ((3, 1025), (7, 1025), True),
    ((3, 1025), (7, 1025), False),
    ((2, 3, 17), (5, 17), True),
    ((2, 3, 17), (5, 17), False),
    ((17,), (4, 17), True),
    ((1, 1), (1, 1), True),
]


@with_dtypes
@pytest.mark.parametrize("case", LINEAR_CASES, ids=lambda c: f"{c[0]}-w{c[1]}-bias{c[2]}")
def test_linear(case, dtype, rng, seed):
    xs, ws, has_bias = case
    x, w = normal(rng, xs, dtype), normal(rng, ws, dtype)
    want = f64(x) @ f64(w).T
    if has_bias:
        b = normal(rng, ws[:1], dtype)
        got = run(lambda t, ww, bb: F.linear(t, ww, bb), x, w, b)
        want = want + f64(b)
        shapes = [xs, ws, ws[:1]]
    else:
        got = run(lambda t, ww: F.linear(t, ww), x, w)
        shapes = [xs, ws]
    magnitude = np.abs(f64(x)) @ np.abs(f64(w)).T + (np.abs(f64(b)) if has_bias else 0.0)
    assert_close("linear", got, want, dtype, seed, shapes, magnitude=magnitude)


# ---------------------------------------------------------------------------
# Losses
# ---------------------------------------------------------------------------
def np_nll(logp, target, ignore_index):
    valid = target != ignore_index
    safe = np.where(valid, target, 0).astype(np.int64)
    picked = np.take_along_axis(logp, safe[..., None], axis=-1)[..., 0]
    with np.errstate(invalid="ignore"):
        return np.asarray(-(picked * valid).sum() / valid.sum())


CLASS_LOSS_CASES = [
    ((6, 11), -100, np.int64),
    ((2, 3, 11), 3, np.int64),
    ((4, 50257), -100, np.int64),
    ((1025, 3), -1, np.int32),
    ((1, 1), -100, np.int64),
]


def class_loss_inputs(rng, shape, ignore_index, itype, dtype):
    logits = normal(rng, shape, dtype, 2.0)
    logits.flat[0] = 500.0  # must not overflow (the row max is subtracted)
    classes = shape[-1]
    target = rng.integers(0, classes, shape[:-1]).astype(itype)
    flat = target.reshape(-1)
    if flat.size > 2:
        flat[1] = ignore_index  # some ignored entries
        flat[-1] = ignore_index
    if ignore_index >= 0:  # a target equal to a real class id that is ignored
        flat[: max(1, flat.size // 3)] = ignore_index
        flat[0] = (ignore_index + 1) % classes
    return logits, target


@with_dtypes
@pytest.mark.parametrize("case", CLASS_LOSS_CASES, ids=lambda c: f"{c[0]}-ignore{c[1]}")
def test_cross_entropy(case, dtype, rng, seed):
    shape, ignore, itype = case
    logits, target = class_loss_inputs(rng, shape, ignore, itype, dtype)
    # Classes in dim 1 (PyTorch): rows of the [..., C] cases as [M, C].
    got = run(lambda x, t: F.cross_entropy(x.reshape(-1, x.shape[-1]), t.reshape(-1),
                                           ignore_index=ignore), logits, target)
    want = np_nll(np_log_softmax(f64(logits), -1), target, ignore)
    assert_close("cross_entropy", got, want, dtype, seed, [shape, shape[:-1]])


@with_dtypes
@pytest.mark.parametrize("case", CLASS_LOSS_CASES, ids=lambda c: f"{c[0]}-ignore{c[1]}")
def test_nll_loss(case, dtype, rng, seed):
    shape, ignore, itype = case
    logits, target = class_loss_inputs(rng, shape, ignore, itype, dtype)
    logp = np_log_softmax(f64(logits), -1).astype(dtype)
    got = run(lambda x, t: F.nll_loss(x.reshape(-1, x.shape[-1]), t.reshape(-1),
                                      ignore_index=ignore), logp, target)
    want = np_nll(f64(logp), target, ignore)
    assert_close("nll_loss", got, want, dtype, seed, [shape, shape[:-1]])


@with_dtypes
def test_class_losses_all_ignored_is_nan(dtype, rng, seed):
    logits = normal(rng, (4, 5), dtype)
    target = np.full(4, -100, np.int64)
    for name, fn in [("cross_entropy", F.cross_entropy), ("nll_loss", F.nll_loss)]:
        got = run(lambda x, t: fn(x, t), logits, target)
        assert_exact(name, got, np.asarray(np.nan, dtype), seed, [(4, 5), (4,)])


@with_dtypes
@with_shapes
def test_mse_loss(shape, dtype, rng, seed):
    a, b = normal(rng, shape, dtype), normal(rng, shape, dtype)
    got = run(lambda x, y: F.mse_loss(x, y), a, b)
    want = np.asarray(((f64(a) - f64(b)) ** 2).mean())
    assert_close("mse_loss", got, want, dtype, seed, [shape, shape])


def np_bce(p, t):
    with np.errstate(divide="ignore"):
        logp = np.maximum(np.log(p), -100.0)
        log1mp = np.maximum(np.log(1.0 - p), -100.0)
    return np.asarray(-(t * logp + (1.0 - t) * log1mp).mean())


@with_dtypes
@with_shapes
def test_binary_cross_entropy(shape, dtype, rng, seed):
    p = rng.uniform(0.0, 1.0, shape)
    t = rng.uniform(0.0, 1.0, shape)
    tiny = np.finfo(dtype).smallest_subnormal  # log(tiny) < -100: clamped
    edge_p = [0.0, 1.0, tiny, 1.0 - np.finfo(dtype).epsneg, 1e-30, 0.5]
    edge_t = [1.0, 0.0, 1.0, 0.0, 0.3, 0.5]
    n = min(p.size, len(edge_p))
    p.flat[:n], t.flat[:n] = edge_p[:n], edge_t[:n]
    p, t = p.astype(dtype), t.astype(dtype)
    got = run(lambda x, y: F.binary_cross_entropy(x, y), p, t)
    assert_close("binary_cross_entropy", got, np_bce(f64(p), f64(t)), dtype, seed,
                 [shape, shape])


@with_dtypes
def test_binary_cross_entropy_clamp_only(dtype, seed):
    """Each log is clamped at -100, as PyTorch: p=0 with t=1 costs exactly 100."""
    p = np.array([0.0, 1.0, 0.0, 1.0], dtype)
    t = np.array([1.0, 0.0, 0.0, 1.0], dtype)
    got = run(lambda x, y: F.binary_cross_entropy(x, y), p, t)
    assert_close("binary_cross_entropy clamp", got, np.asarray(50.0), dtype, seed,
                 [p.shape, t.shape])


# ---------------------------------------------------------------------------
# Philox 4x32-10: an independent numpy implementation (uint64 arithmetic)
# ---------------------------------------------------------------------------
_M32 = np.uint64(0xFFFFFFFF)


def np_philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Random123's Philox 4x32-10 on arrays of uint32 values held in uint64:
    the key is bumped before rounds 2..10."""
    c = [np.asarray(v, np.uint64) & _M32 for v in (c0, c1, c2, c3)]
    k0, k1 = np.uint64(k0) & _M32, np.uint64(k1) & _M32
    m0, m1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    w0, w1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
    shift = np.uint64(32)
    for r in range(10):
        if r:
            k0, k1 = (k0 + w0) & _M32, (k1 + w1) & _M32
        p0, p1 = c[0] * m0, c[2] * m1  # < 2**64: exact in uint64
        c = [(p1 >> shift) ^ c[1] ^ k0, p1 & _M32, (p0 >> shift) ^ c[3] ^ k1, p0 & _M32]
    return c


def np_random_bits(seed_value, stream, n):
    """The 32 random bits of elements 0..n-1 of graph.random_uniform."""
    s = int(seed_value) % 2 ** 64  # two's complement of a negative i64 seed
    i = np.arange(n, dtype=np.uint64)
    block = i // np.uint64(4)
    words = np_philox4x32_10(block & _M32, block >> np.uint64(32),
                             np.full(n, stream % 2 ** 32, np.uint64), np.zeros(n, np.uint64),
                             s & 0xFFFFFFFF, s >> 32)
    which = (i % np.uint64(4)).astype(np.int64)
    return np.choose(which, words)


_UNIFORM_BITS = {"f32": 24, "f64": 32, "f16": 11, "bf16": 8}  # m in the op's spec
_RESULT_DTYPE = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.float32}


def np_random_uniform(seed_value, stream, shape, dtype):
    """graph.random_uniform: (u32 >> (32 - m)) * 2**-m, exact in the result dtype."""
    name = dtype if isinstance(dtype, str) else {np.dtype(np.float32): "f32",
                                                 np.dtype(np.float64): "f64"}[np.dtype(dtype)]
    m = _UNIFORM_BITS[name]
    bits = np_random_bits(seed_value, stream, int(np.prod(shape, dtype=np.int64)))
    u = (bits >> np.uint64(32 - m)).astype(np.float64) * 2.0 ** -m
    return u.reshape(shape).astype(_RESULT_DTYPE[name])


def test_numpy_philox_known_answers():
    """Random123's kat_vectors for philox4x32 10 validate the test's own reference."""
    kat = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
         (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
    ]
    for ctr, key, want in kat:
        got = tuple(int(w) for w in np_philox4x32_10(*ctr, *key))
        assert got == want, f"philox4x32_10 ctr={ctr} key={key}: got {got}, want {want}"


RANDOM_CASES = [
    ((3, 1025), "f32", 0, 3),
    ((1023,), "f64", 12345, 0),
    ((2, 50257), "f32", 2 ** 40 + 7, 1),
    ((1,), "f64", -3, 2 ** 33 + 5),
    ((5, 4), "f32", -(2 ** 63), 7),
    ((1025,), "f16", 77, 2),
    ((1025,), "bf16", 2 ** 32, 0),
]


@pytest.mark.parametrize("case", RANDOM_CASES,
                         ids=lambda c: f"{c[0]}-{c[1]}-seed{c[2]}-stream{c[3]}")
def test_random_uniform_parsed(case, seed):
    shape, dtype, key_seed, stream = case
    out = "tensor<" + "".join(f"{d}x" for d in shape) + dtype + ">"
    text = (f"func.func @rand(%seed: tensor<i64>) -> {out} {{\n"
            f"  %u = graph.random_uniform %seed {{stream = {stream} : i64}} : "
            f"(tensor<i64>) -> {out}\n"
            f"  return %u : {out}\n}}\n")
    got = execute(tilefuse.parse(text), np.array(key_seed, np.int64))
    want = np_random_uniform(key_seed, stream, shape, dtype)
    assert_exact(f"random_uniform(seed={key_seed}, stream={stream})", got, want, seed,
                 [(), shape])
    assert got.min() >= 0.0 and got.max() < 1.0


DROPOUT_CASES = [
    ((3, 1025), 0.1, 0),
    ((3, 1025), 0.5, 12345),
    ((2, 50257), 0.25, 2 ** 40 + 7),
    ((1023,), 0.75, -3),
    ((1,), 0.5, 1),
]


@with_dtypes
@pytest.mark.parametrize("case", DROPOUT_CASES, ids=lambda c: f"{c[0]}-p{c[1]}-seed{c[2]}")
def test_dropout(case, dtype, rng, seed):
    shape, p, key_seed = case
    x = normal(rng, shape, dtype)
    x[x == 0] = 1.0
    s = np.array(key_seed, np.int64)
    got = run(lambda t, sd: F.dropout(t, p, training=True, seed=sd), x, s)
    u = np_random_uniform(key_seed, 0, shape, dtype)
    keep = u >= p
    ctx = f"dropout(p={p}, seed={key_seed}) shape {shape} dtype {np.dtype(dtype).name} seed {seed}"
    assert_exact("dropout mask", got != 0, keep, seed, [shape])
    want = np.where(keep, f64(x) / (1.0 - p), 0.0)
    assert_close(f"dropout(p={p}, seed={key_seed})", got, want, dtype, seed, [shape, ()])
    if keep.any():
        assert_close("dropout scale", got[keep] / x[keep],
                     np.full(int(keep.sum()), 1.0 / (1.0 - p)), dtype, seed, [shape])
    n = keep.size
    if n >= 1000:
        frac, sd = keep.mean(), math.sqrt(p * (1 - p) / n)
        assert abs(frac - (1 - p)) < 5 * sd, f"{ctx}: keep fraction {frac}, want ~{1 - p}"


@with_dtypes
def test_dropout_streams_and_identity(dtype, rng, seed):
    """Two dropouts in one trace use streams 0 and 1; p=0 or eval mode is identity."""
    x = normal(rng, (3, 1025), dtype)
    x[x == 0] = 1.0
    s = np.array(99, np.int64)
    a, b, c, d = run(lambda t, sd: (F.dropout(t, 0.5, seed=sd), F.dropout(t, 0.5, seed=sd),
                                    F.dropout(t, 0.0, seed=sd),
                                    F.dropout(t, 0.5, training=False, seed=sd) * 1.0), x, s)
    for stream, got in [(0, a), (1, b)]:
        keep = np_random_uniform(99, stream, x.shape, dtype) >= 0.5
        assert_exact(f"dropout stream {stream} mask", got != 0, keep, seed, [x.shape])
    assert not np.array_equal(a != 0, b != 0), "dropout: both streams drew the same mask"
    assert_exact("dropout p=0", c, x, seed, [x.shape])
    assert_exact("dropout eval", d, x, seed, [x.shape])
