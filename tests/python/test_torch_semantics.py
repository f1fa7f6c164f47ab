"""PyTorch semantics of the reductions that pick an element and of the losses.

* `x.max(dim)` / `x.min(dim)` return a `(values, indices)` pair (first
  extreme on ties, NaN counts as the extreme), `x.max()` is the 0-d maximum,
  `amax`/`amin` reduce one or several dims, `argmin`, `argmax(dim=None)`.
  Gradients: `max(dim).values` sends the whole gradient to the selected
  element (PyTorch's value_selecting_reduction_backward); `amax`/`amin` and
  the full `x.max()` split it evenly between ties (PyTorch's
  scale_grad_by_count / evenly_distribute_backward).
* `F.cross_entropy` / `F.nll_loss` with the classes in dim 1 ([N, C],
  [N, C, d1, ...]) or dim 0 of a [C] input (0-d target), `reduction=`,
  `weight=`, `ignore_index=`, `label_smoothing=`, class-probability targets;
  `F.mse_loss` / `F.binary_cross_entropy` with `reduction=` and `weight=`.

torch is not a dependency: the references below are float64 numpy
implementations of PyTorch's documented formulas (aten/src/ATen/native/
LossNLL.cpp, Loss.cpp), written element by element so that they share no
structure with the implementation under test. Every case runs on the
reference interpreter (Graph.interpret) AND on compiled CPU kernels
(tilefuse.compile(..., device="cpu")).

Tolerances (|got - want| <= ATOL + RTOL * |want|, elementwise), as in
test_ops_numerics.py: float32 RTOL 1e-5, ATOL 1e-6; float64 RTOL 1e-12,
ATOL 1e-12. References are computed in float64 from the (already rounded)
inputs and then rounded to the dtype under test. Every loss term below is
non-negative (positive weights, probabilities), so sums do not cancel and
|want| is the right scale. Selections (values, indices, argmin/argmax) are
compared bit for bit. Gradients: test_autodiff.check_gradients (fourth-order
central differences in float64, RTOL 1e-8, ATOL 1e-9; see that file), and the
compiled value_and_grad against the interpreted one (GRAD_RTOL, GRAD_ATOL
below: both are float64 sums of the same few terms in different orders).
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F
from test_autodiff import check_gradients
from compile_errors import raises_compile_error
from backend_checks import TOLERANCES, assert_exact, context, out_of_tolerance, run_both

GRAD_RTOL, GRAD_ATOL = 1e-10, 1e-12

FLOATS = [np.float32, np.float64]
with_floats = pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f64"])
BACKENDS = ["interpret", "compiled cpu"]

THIS_FILE = os.path.basename(__file__)


# ---------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------

def value_and_grad_both(fn, args, wrt=(0,)):
    """{backend: (value, grad, ...)} of value_and_grad, interpreted and compiled."""
    gg = tilefuse.trace(fn, *args).value_and_grad(wrt=tuple(wrt))
    return {"interpret": gg.interpret(*args), "compiled cpu": gg.compile("cpu")(*args)}


def assert_close(what, backend, got, want, dtype, seed, shapes):
    """`want` (float64) rounded to `dtype`, then compared with the tolerances
    for `dtype`; NaN and infinities must match exactly."""
    dtype = np.dtype(dtype)
    got = np.asarray(got)
    want = np.asarray(want, np.float64).astype(dtype)
    ctx = context(what, backend, dtype, seed, shapes)
    assert got.shape == want.shape, f"{ctx}: got shape {got.shape}, want {want.shape}"
    assert got.dtype == dtype, f"{ctx}: got dtype {got.dtype}, want {dtype}"
    rtol, atol = TOLERANCES[dtype]
    bad, err, bound = out_of_tolerance(got, want, rtol, atol)
    if bad.any():
        g, w = got.astype(np.float64), want.astype(np.float64)
        worst = np.unravel_index(int(np.argmax(np.where(bad, err / bound, 0.0))), err.shape)
        worst = tuple(int(i) for i in worst)
        raise AssertionError(
            f"{ctx}: {int(bad.sum())} of {bad.size} elements exceed rtol={rtol:g} "
            f"atol={atol:g}; max abs error {float(np.max(err)):.3e}; worst at {worst}: "
            f"got {float(g[worst])!r}, want {float(w[worst])!r}")


def names_shape(msg, shape):
    """Whether `msg` writes `shape` as 2x3x5, [2, 3, 5] or (2, 3, 5)."""
    forms = ["x".join(map(str, shape)) + "x", str(list(shape)), str(tuple(shape))]
    return any(f in msg for f in forms)


def _child_env():
    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(tilefuse.__file__)))
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_isolated(code):
    """Runs `code` in a child Python (a crash must not take pytest down)."""
    code = textwrap.dedent(code)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_child_env(), timeout=300)
    if proc.returncode != 0:
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        pytest.fail(f"child process died ({how}) running:\n{code}\nstdout:\n{proc.stdout}\n"
                    f"stderr:\n{proc.stderr[-3000:]}", pytrace=False)
    return proc.stdout


# ---------------------------------------------------------------------------
# numpy references of PyTorch's formulas (float64)
# ---------------------------------------------------------------------------
def np_log_softmax(x, axis):
    x = np.asarray(x, np.float64)
    z = x - x.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


def np_class_index_loss(logp, target, weight=None, ignore_index=-100, reduction="mean",
                        label_smoothing=0.0):
    """PyTorch's nll_loss (label_smoothing 0) / cross_entropy on log-probabilities
    `logp` with the classes in dim 1 ([N, C, d1, ...]) or dim 0 of [C]:
        loss_i = (1 - eps) w[t_i] (-logp[i, t_i]) + (eps / C) sum_c w[c] (-logp[i, c]),
    zero where t_i == ignore_index; 'mean' divides the sum by sum_i w[t_i] over
    the targets not ignored (NaN when there are none)."""
    logp = np.asarray(logp, np.float64)
    target = np.asarray(target)
    unbatched = logp.ndim == 1
    if unbatched:
        logp, target = logp[None], target[None]
    classes = logp.shape[1]
    w = np.ones(classes) if weight is None else np.asarray(weight, np.float64)
    eps = float(label_smoothing)
    loss = np.zeros(target.shape)
    weight_sum = np.float64(0.0)
    for idx in np.ndindex(target.shape):
        t = int(target[idx])
        if t == ignore_index:
            continue
        assert 0 <= t < classes, "reference: target out of range"
        row = logp[(idx[0], slice(None)) + idx[1:]]  # the C log-probabilities of element idx
        loss[idx] = (1.0 - eps) * w[t] * -row[t] + (eps / classes) * float(np.sum(w * -row))
        weight_sum += w[t]
    if reduction == "none":
        return loss[0] if unbatched else loss
    if reduction == "sum":
        return np.float64(loss.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.float64(loss.sum()) / weight_sum


def np_cross_entropy_probs(x, probs, weight=None, reduction="mean", label_smoothing=0.0):
    """PyTorch's cross_entropy with class-probability targets (the input's shape):
    q = p (1 - eps) + eps / C;  loss = -sum_c w[c] q[c] logp[c] per element;
    'mean' divides by the number of elements (numel / C), not by the weights."""
    x = np.asarray(x, np.float64)
    cd = 0 if x.ndim == 1 else 1
    classes = x.shape[cd]
    logp = np_log_softmax(x, cd)
    q = np.asarray(probs, np.float64) * (1.0 - label_smoothing) + label_smoothing / classes
    shape = [1] * x.ndim
    shape[cd] = classes
    w = np.ones(shape) if weight is None else np.asarray(weight, np.float64).reshape(shape)
    per = -(logp * q * w).sum(axis=cd)
    if reduction == "none":
        return per
    if reduction == "sum":
        return per.sum()
    return per.sum() / (x.size // classes)


def np_reduce(loss, reduction):
    return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()


def np_bce(p, t, weight=None, reduction="mean"):
    """-w (t log p + (1 - t) log(1 - p)), each log clamped at -100 (PyTorch)."""
    p, t = np.asarray(p, np.float64), np.asarray(t, np.float64)
    with np.errstate(divide="ignore"):
        loss = -(t * np.maximum(np.log(p), -100.0) + (1 - t) * np.maximum(np.log1p(-p), -100.0))
    if weight is not None:
        loss = loss * np.asarray(weight, np.float64)
    return np_reduce(loss, reduction)


# ---------------------------------------------------------------------------
# max(dim) / min(dim): (values, indices)
# ---------------------------------------------------------------------------
EXTREME_CASES = [((5, 7), 1, False), ((5, 7), 1, True), ((5, 7), 0, False),
                 ((5, 7), -1, True), ((2, 3, 4), 1, False), ((2, 3, 4), 2, True),
                 ((6,), 0, False), ((1, 9), 1, False)]
ALL_DTYPES = [np.float32, np.float64, np.int32, np.int64]
all_dtypes = pytest.mark.parametrize("dtype", ALL_DTYPES, ids=["f32", "f64", "i32", "i64"])


@all_dtypes
@pytest.mark.parametrize("what", ["max", "min"])
@pytest.mark.parametrize("case", EXTREME_CASES, ids=lambda c: f"{c[0]}-dim{c[1]}-keep{c[2]}")
def test_max_min_dim_pair(case, what, dtype, rng, seed):
    """x.max(dim)[0], .values, .indices and unpacking against numpy: the values
    are the extremes along dim (not row 0 of them), the indices the FIRST
    extreme on ties (np.argmax/np.argmin)."""
    shape, dim, keep = case
    x = rng.integers(-3, 4, shape).astype(dtype)  # many ties
    npfun = np.max if what == "max" else np.min
    nparg = np.argmax if what == "max" else np.argmin
    want_v = npfun(x, axis=dim, keepdims=keep)
    want_i = nparg(x, axis=dim, keepdims=keep).astype(np.int64)

    def fn(a):
        pair = getattr(a, what)(dim, keep) if keep else getattr(a, what)(dim=dim)
        v, i = pair  # unpacks as (values, indices)
        return pair[0], pair.values, pair[1], pair.indices, v, i

    for backend, out in run_both(fn, x).items():
        assert isinstance(out, tuple) and len(out) == 6, f"{backend}: {type(out)}"
        for k, name in enumerate(["[0]", ".values", "[1]", ".indices", " -> v", " -> i"]):
            want = want_v if k in (0, 1, 4) else want_i
            assert_exact(f"x.{what}(dim={dim}, keepdim={keep}){name}", backend, out[k], want,
                         seed, [shape])


@pytest.mark.parametrize("what", ["max", "min"])
def test_max_dim_index_zero_is_not_row_zero(what, seed):
    """Regression: x.max(dim=1)[0] is the vector of row maxima (the values),
    not the maximum of row 0."""
    x = np.array([[1.0, 9.0, 2.0], [8.0, -4.0, 0.5], [3.0, 3.5, -7.0], [0.0, 0.0, 6.0]])
    want = x.max(1) if what == "max" else x.min(1)
    for backend, out in run_both(lambda a: getattr(a, what)(dim=1)[0], x).items():
        assert_exact(f"x.{what}(dim=1)[0]", backend, out, want, seed, [x.shape])


def test_max_min_dim_types_and_fields(seed):
    x = np.arange(6.0).reshape(2, 3)
    seen = {}

    def fn(a):
        pair = a.max(1)
        seen["max"] = pair
        seen["min"] = a.min(0)
        return pair.values

    tilefuse.trace(fn, x)
    for name, pair in seen.items():
        assert isinstance(pair, tuple), f"{name}(dim): {type(pair)} is not a tuple"
        assert len(pair) == 2 and pair._fields == ("values", "indices"), \
            f"{name}(dim): fields {getattr(pair, '_fields', None)}"
        assert type(pair).__name__ == name, f"{name}(dim): type named {type(pair).__name__}"


@with_floats
@pytest.mark.parametrize("what", ["max", "min"])
def test_max_min_dim_nan_and_inf(what, dtype, seed):
    """A NaN is the extreme (values NaN, index of the first NaN); infinities
    are selected as they are (PyTorch, like np.max/np.argmax)."""
    x = np.array([[1.0, np.nan, 3.0, np.nan],
                  [np.inf, 2.0, np.inf, -np.inf],
                  [-np.inf, -np.inf, -np.inf, -np.inf],
                  [-1.0, np.inf, -np.inf, 5.0]], dtype)
    npfun, nparg = (np.max, np.argmax) if what == "max" else (np.min, np.argmin)
    for backend, (v, i) in run_both(lambda a: getattr(a, what)(1), x).items():
        assert_exact(f"x.{what}(1).values", backend, v, npfun(x, 1), seed, [x.shape])
        assert_exact(f"x.{what}(1).indices", backend, i, nparg(x, 1).astype(np.int64), seed,
                     [x.shape])


@all_dtypes
def test_max_min_full_reduction_is_0d(dtype, rng, seed):
    x = rng.integers(-50, 50, (4, 6)).astype(dtype)
    for backend, (mx, mn) in run_both(lambda a: (a.max(), a.min()), x).items():
        assert_exact("x.max()", backend, mx, np.max(x), seed, [x.shape])
        assert_exact("x.min()", backend, mn, np.min(x), seed, [x.shape])


def test_max_dim_on_0d_tensor(seed):
    """PyTorch: a 0-d tensor's max(0)/min(-1) is (itself, 0)."""
    x = np.array(2.5)
    for backend, out in run_both(lambda a: (a.max(0), a.min(-1)), x).items():
        (v1, i1), (v2, i2) = out
        assert_exact("0-d x.max(0).values", backend, v1, x, seed, [()])
        assert_exact("0-d x.max(0).indices", backend, i1, np.array(0, np.int64), seed, [()])
        assert_exact("0-d x.min(-1).values", backend, v2, x, seed, [()])
        assert_exact("0-d x.min(-1).indices", backend, i2, np.array(0, np.int64), seed, [()])


def test_max_with_tensor_is_maximum(rng, seed):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    for backend, (mx, mn) in run_both(lambda x, y: (x.max(y), x.min(y)), a, b).items():
        assert_exact("x.max(t)", backend, mx, np.maximum(a, b), seed, [a.shape, b.shape])
        assert_exact("x.min(t)", backend, mn, np.minimum(a, b), seed, [a.shape, b.shape])


# -- amax / amin --------------------------------------------------------------
AMAX_CASES = [((2, 3, 4), [0, 2], False), ((2, 3, 4), (1,), True), ((2, 3, 4), -1, False),
              ((2, 3, 4), [0, 1, 2], True), ((2, 3, 4), [-1, 0], True), ((5, 7), 0, False)]


@all_dtypes
@pytest.mark.parametrize("what", ["amax", "amin"])
@pytest.mark.parametrize("case", AMAX_CASES, ids=lambda c: f"{c[0]}-dim{c[1]}-keep{c[2]}")
def test_amax_amin(case, what, dtype, rng, seed):
    shape, dim, keep = case
    x = rng.integers(-20, 20, shape).astype(dtype)
    axis = tuple(dim) if isinstance(dim, (list, tuple)) else dim
    want = (np.max if what == "amax" else np.min)(x, axis=axis, keepdims=keep)
    for backend, out in run_both(lambda a: getattr(a, what)(dim, keepdim=keep), x).items():
        assert_exact(f"x.{what}({dim!r}, keepdim={keep})", backend, out, want, seed, [shape])


@with_floats
@pytest.mark.parametrize("what", ["amax", "amin"])
def test_amax_amin_default_all_dims(what, dtype, rng, seed):
    x = rng.standard_normal((3, 4, 2)).astype(dtype)
    npfun = np.max if what == "amax" else np.min
    fn = lambda a: (getattr(a, what)(), getattr(a, what)(keepdim=True))  # noqa: E731
    for backend, (full, kept) in run_both(fn, x).items():
        assert_exact(f"x.{what}()", backend, full, npfun(x), seed, [x.shape])
        assert_exact(f"x.{what}(keepdim=True)", backend, kept, npfun(x, keepdims=True), seed,
                     [x.shape])


# -- argmin / argmax ---------------------------------------------------------
@all_dtypes
@pytest.mark.parametrize("case", [((5, 7), 1, False), ((5, 7), 0, True), ((2, 3, 4), -2, False),
                                  ((9,), 0, True)],
                         ids=lambda c: f"{c[0]}-dim{c[1]}-keep{c[2]}")
def test_argmin_first_on_ties(case, dtype, rng, seed):
    shape, dim, keep = case
    x = rng.integers(0, 3, shape).astype(dtype)
    want = np.argmin(x, axis=dim, keepdims=keep).astype(np.int64)
    for backend, out in run_both(lambda a: a.argmin(dim, keep), x).items():
        assert_exact(f"argmin(dim={dim}, keepdim={keep})", backend, out, want, seed, [shape])


@all_dtypes
def test_argmin_argmax_flattened(dtype, rng, seed):
    """argmin() (default dim=None) and argmax(dim=None): the index into the
    flattened tensor, first on ties; keepdim keeps every dim as 1."""
    x = rng.integers(0, 3, (3, 4, 5)).astype(dtype)

    def fn(a):
        return (a.argmin(), a.argmin(dim=None, keepdim=True), a.argmax(dim=None),
                a.argmax(dim=None, keepdim=True))

    want = (np.argmin(x), np.argmin(x, keepdims=True), np.argmax(x),
            np.argmax(x, keepdims=True))
    for backend, out in run_both(fn, x).items():
        for name, g, w in zip(["argmin()", "argmin(None, keepdim)", "argmax(None)",
                               "argmax(None, keepdim)"], out, want):
            assert_exact(name, backend, g, np.asarray(w, np.int64), seed, [x.shape])


@pytest.mark.parametrize("itype", [np.int32, np.int64], ids=["i32", "i64"])
def test_argmin_and_min_dim_integer_extremes(itype, seed):
    """-x overflows at the most negative integer; argmin must not negate ints."""
    info = np.iinfo(itype)
    x = np.array([[3, info.min, 2, info.min], [info.max, 1, 1, info.max],
                  [0, 0, info.min + 1, info.min]], itype)
    fn = lambda a: (a.argmin(1), a.min(1), a.max(1))  # noqa: E731
    for backend, (am, (mv, mi), (xv, xi)) in run_both(fn, x).items():
        assert_exact("argmin(1)", backend, am, np.argmin(x, 1).astype(np.int64), seed, [x.shape])
        assert_exact("min(1).values", backend, mv, np.min(x, 1), seed, [x.shape])
        assert_exact("min(1).indices", backend, mi, np.argmin(x, 1).astype(np.int64), seed,
                     [x.shape])
        assert_exact("max(1).values", backend, xv, np.max(x, 1), seed, [x.shape])
        assert_exact("max(1).indices", backend, xi, np.argmax(x, 1).astype(np.int64), seed,
                     [x.shape])


@with_floats
def test_argmin_nan_is_minimum(dtype, seed):
    x = np.array([[1.0, np.nan, -5.0, np.nan], [2.0, -np.inf, -np.inf, 0.0],
                  [0.0, -0.0, 0.0, 1.0]], dtype)
    for backend, (a1, a0) in run_both(lambda a: (a.argmin(1), a.argmin()), x).items():
        assert_exact("argmin(1) with NaN", backend, a1, np.argmin(x, 1).astype(np.int64), seed,
                     [x.shape])
        assert_exact("argmin() with NaN", backend, a0, np.argmin(x).astype(np.int64), seed,
                     [x.shape])


def test_argmax_argmin_of_0d_tensor(seed):
    """PyTorch: torch.tensor(2.5).argmax() == argmax(0) == argmax(-1) == 0, and
    likewise argmin (a 0-d tensor takes dim 0 and -1)."""
    x = np.array(2.5)
    zero = np.array(0, np.int64)
    cases = {"argmin()": lambda a: a.argmin(), "argmin(0)": lambda a: a.argmin(0),
             "argmax(None)": lambda a: a.argmax(None), "argmax()": lambda a: a.argmax(),
             "argmax(0)": lambda a: a.argmax(0), "argmax(-1)": lambda a: a.argmax(-1)}
    failures = []
    for name, fn in cases.items():
        try:
            for backend, out in run_both(fn, x).items():
                assert_exact(f"0-d {name}", backend, out, zero, seed, [()])
        except (tilefuse.CompileError, AssertionError) as e:
            failures.append(f"{name}: {type(e).__name__}: {' '.join(str(e).split())}")
    assert not failures, "0-d argmax/argmin differ from PyTorch (0):\n" + "\n".join(failures)


ZERO_D_REDUCTIONS = {"amax(0)": "a.amax(0)", "amin(0)": "a.amin(0)", "amax([0])": "a.amax([0])",
                     "amin(-1)": "a.amin(-1)"}


@pytest.mark.parametrize("name", list(ZERO_D_REDUCTIONS))
def test_amax_amin_of_0d_tensor_do_not_crash(name):
    """A 0-d tensor's amax(0)/amin(0) is the value itself in PyTorch; it may
    also be refused with a CompileError, but it must not crash the process
    (it segfaulted: Tracer::reduce reads shape[d] of a rank-0 shape)."""
    out = run_isolated(f"""
        import numpy as np
        import tilefuse
        x = np.array(2.5)
        try:
            got = tilefuse.trace(lambda a: {ZERO_D_REDUCTIONS[name]}, x).interpret(x)
            print("value", float(got))
        except tilefuse.CompileError as e:
            print("compile-error", " ".join(str(e).split()))
        """)
    line = out.strip().splitlines()[-1]
    assert line == "value 2.5" or line.startswith("compile-error"), f"0-d {name}: {line}"


# -- gradients ------------------------------------------------------------------
def _tie_matrix():
    """Rows with a 2-way tie, a 3-way tie, no tie and all equal (max and min)."""
    return np.array([[0.5, 2.0, -1.0, 2.0, 1.0],
                     [3.0, -2.0, 3.0, 0.0, 3.0],
                     [0.25, -0.5, 1.5, 0.75, -1.0],
                     [1.0, 1.0, 1.0, 1.0, 1.0],
                     [-1.0, 4.0, -1.0, 2.0, 0.0]])


@pytest.mark.parametrize("what", ["max", "min"])
@pytest.mark.parametrize("dim,keep", [(1, False), (1, True), (0, False), (-1, True)])
def test_max_min_dim_gradient_selects_first_extreme(what, dim, keep, rng, seed):
    """The gradient of x.max(dim).values goes to x[indices] only, the first
    maximum of a tie (PyTorch), not split between the tied elements."""
    x = _tie_matrix() if what == "max" else -_tie_matrix()
    other = 1 - (dim % 2)
    W = rng.uniform(0.5, 2.0, x.shape[other])
    Wk = np.expand_dims(W, dim % 2) if keep else W

    def loss(a):
        return (getattr(a, what)(dim, keep).values * Wk).sum()

    first = (np.argmax if what == "max" else np.argmin)(x, axis=dim)
    want = np.zeros_like(x)
    for k in range(x.shape[other]):
        pos = (k, first[k]) if dim % 2 == 1 else (first[k], k)
        want[pos] = W[k]
    for backend, (value, grad) in value_and_grad_both(loss, [x]).items():
        assert_close(f"{what}(dim={dim}, keepdim={keep}).values: value", backend, value,
                     ((np.max if what == "max" else np.min)(x, axis=dim) * W).sum(),
                     np.float64, seed, [x.shape])
        assert_exact(f"d/dx sum({what}(dim={dim}, keepdim={keep}).values * W)", backend,
                     grad, want, seed, [x.shape])


@pytest.mark.parametrize("what", ["amax", "amin"])
@pytest.mark.parametrize("dim", [1, 0])
def test_amax_amin_gradient_splits_ties_evenly(what, dim, rng, seed):
    """amax/amin (PyTorch's scale_grad_by_count): k tied extremes get 1/k each."""
    x = _tie_matrix() if what == "amax" else -_tie_matrix()
    other = 1 - dim
    W = rng.uniform(0.5, 2.0, x.shape[other])
    ext = (np.max if what == "amax" else np.min)(x, axis=dim, keepdims=True)
    hit = x == ext
    want = hit * np.expand_dims(W, dim) / hit.sum(axis=dim, keepdims=True)
    for backend, (value, grad) in value_and_grad_both(
            lambda a: (getattr(a, what)(dim) * W).sum(), [x]).items():
        assert_close(f"d/dx sum({what}({dim}) * W)", backend, grad, want, np.float64, seed,
                     [x.shape])


@pytest.mark.parametrize("what", ["max", "min"])
def test_full_max_min_gradient_splits_ties_evenly(what, seed):
    """x.max() (no dim): PyTorch's evenly_distribute_backward."""
    x = _tie_matrix() if what == "max" else -_tie_matrix()
    ext = x.max() if what == "max" else x.min()
    want = (x == ext) / np.sum(x == ext)
    for backend, (value, grad) in value_and_grad_both(
            lambda a: getattr(a, what)() * 3.0, [x]).items():
        assert_close(f"d/dx 3 * x.{what}()", backend, grad, 3.0 * want, np.float64, seed,
                     [x.shape])


@pytest.mark.parametrize("case", [((4, 5), "max", 1, False), ((4, 5), "min", 0, True),
                                  ((2, 3, 4), "max", 2, True), ((2, 3, 4), "min", 1, False)],
                         ids=lambda c: f"{c[1]}{c[0]}-dim{c[2]}-keep{c[3]}")
def test_max_min_dim_gradient_finite_differences(case, rng, seed):
    shape, what, dim, keep = case
    n = int(np.prod(shape))
    x = ((rng.permutation(n) - n / 2) * 0.25 + rng.uniform(-0.05, 0.05, n)).reshape(shape)

    def fn(a):
        return getattr(a, what)(dim, keep).values * 1.0

    check_gradients(f"{what}(dim={dim}, keepdim={keep}).values (seed {seed})", fn, [x], rng)
    _compiled_grads_match(fn, [x], (0,), rng, f"{what}(dim={dim}).values", seed)


def _compiled_grads_match(fn, args, wrt, rng, what, seed):
    """Compiled value_and_grad of sum(fn * W) equals the interpreted one."""
    out = np.asarray(tilefuse.trace(fn, *args).interpret(*args))
    W = rng.standard_normal(out.shape)

    def loss(*xs):
        y = fn(*xs)
        return y * float(W) if y.ndim == 0 else (y * W).sum()

    res = value_and_grad_both(loss, list(args), wrt)
    ref = res["interpret"]
    got = res["compiled cpu"]
    for k, (g, r) in enumerate(zip(got, ref)):
        g, r = np.asarray(g), np.asarray(r)
        assert g.shape == r.shape and g.dtype == r.dtype, f"{what}: result {k}"
        err = np.abs(g - r)
        bad = ~(err <= GRAD_ATOL + GRAD_RTOL * np.abs(r))
        assert not bad.any(), (
            f"{what} (seed {seed}): compiled value_and_grad result {k} differs from the "
            f"interpreter: max abs error {float(err.max()):.3e}")


# -- misuse of the pair ---------------------------------------------------------------
PAIR_MISUSES = {
    "x - x.max(-1, keepdim=True)": lambda a: a - a.max(-1, keepdim=True),
    "x.max(1, keepdim=True) - x": lambda a: a.max(1, keepdim=True) - a,
    "x.min(0) * x": lambda a: a.min(0) * a,
    "where(c, x.max(1, True), 0)": lambda a: tilefuse.where(a > 0, a.max(1, True), 0.0),
    "np.exp(x.max(1))": lambda a: np.exp(a.max(1)),
    "np.asarray(x.max(1))": lambda a: np.asarray(a.max(1)),
}


@pytest.mark.parametrize("name", list(PAIR_MISUSES))
def test_pair_used_as_tensor_is_a_clear_error(name):
    x = np.ones((3, 4))
    which = "min" if "min" in name else "max"
    msg = raises_compile_error(lambda: tilefuse.trace(PAIR_MISUSES[name], x),
                               "(values, indices)", ".values", f"a{which}")
    assert THIS_FILE in msg, f"{name}: message does not name the user's line: {msg!r}"


def test_max_dim_arguments_errors():
    x = np.ones((3, 4))
    raises_compile_error(lambda: tilefuse.trace(lambda a: a.max([0, 1]), x), "amax", "[0, 1]")
    raises_compile_error(lambda: tilefuse.trace(lambda a: a.min((0,)), x), "amin")
    raises_compile_error(lambda: tilefuse.trace(lambda a: a.max(keepdim=True), x), "amax")
    raises_compile_error(lambda: tilefuse.trace(lambda a: a.max(2), x), "max", "2")


def test_traced_pair_comes_back_as_tuple_of_arrays(rng, seed):
    x = rng.standard_normal((3, 5))
    for backend, out in run_both(lambda a: {"m": a.max(1), "n": [a.min(0, keepdim=True)]},
                                 x).items():
        assert isinstance(out, dict), f"{backend}: {type(out)}"
        v, i = out["m"]
        assert_exact("returned max(1).values", backend, v, x.max(1), seed, [x.shape])
        assert_exact("returned max(1).indices", backend, i, x.argmax(1).astype(np.int64), seed,
                     [x.shape])
        (v, i), = out["n"]
        assert_exact("returned min(0, keepdim).values", backend, v, x.min(0, keepdims=True),
                     seed, [x.shape])


def test_max_dim_values_keep_negative_zero(seed):
    """The selected element as it is: max over [-0.0, -1.0] is -0.0 (PyTorch,
    numpy, and this tracer's own amax), not +0.0."""
    x = np.array([[-0.0, -1.0, -2.0], [-3.0, -0.0, -0.0]])
    want = np.array([-0.0, -0.0])
    for backend, (v, amax) in run_both(lambda a: (a.max(1).values, a.amax(1)), x).items():
        assert np.array_equal(np.signbit(amax), np.signbit(want)), f"{backend}: amax {amax}"
        assert np.array_equal(np.signbit(v), np.signbit(want)), (
            f"x.max(1).values [{backend}] (seed {seed}): got {v!r} (sign bits "
            f"{np.signbit(v)}), want {want!r}: the sign of a selected -0.0 is lost")


# ---------------------------------------------------------------------------
# cross_entropy / nll_loss on class indices
# ---------------------------------------------------------------------------
# (name, input shape, target dtype); the classes are dim 1 (dim 0 of a 1-d input)
CLASS_SHAPES = [("NC", (7, 5), np.int64), ("NCd1d2", (2, 5, 3, 4), np.int64),
                ("NCd1", (3, 4, 6), np.int32), ("C", (6,), np.int64)]
# option name -> (uses weight, ignore_index or None for the default, label smoothing)
CE_OPTIONS = {"plain": (False, None, 0.0), "weight": (True, None, 0.0),
              "ignore_index": (False, 2, 0.0), "label_smoothing": (False, None, 0.2),
              "all": (True, 1, 0.3)}
REDUCTIONS = ["mean", "sum", "none"]


def class_targets(rng, shape, itype, ignore_index):
    """Class indices for an input of `shape` (target shape: without dim 1),
    some of them ignored (-100, PyTorch's default, when ignore_index is None)."""
    classes = shape[0] if len(shape) == 1 else shape[1]
    tshape = () if len(shape) == 1 else (shape[0],) + shape[2:]
    t = rng.integers(0, classes, tshape).astype(itype)
    flat = t.reshape(-1)
    ig = -100 if ignore_index is None else ignore_index
    if flat.size >= 4:
        flat[1] = ig
        flat[-1] = ig
        flat[0] = (ig + 1) % classes if ig >= 0 else 0  # at least one that counts
    elif ig >= 0 and flat.size:
        flat[0] = (ig + 1) % classes
    return t, classes


def _ce_kwargs(option, reduction, weight):
    use_weight, ignore, smoothing = CE_OPTIONS[option]
    kw = {"reduction": reduction}
    if use_weight:
        kw["weight"] = weight
    if ignore is not None:
        kw["ignore_index"] = ignore
    if smoothing:
        kw["label_smoothing"] = smoothing
    return kw


@with_floats
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("option", list(CE_OPTIONS))
@pytest.mark.parametrize("case", CLASS_SHAPES, ids=lambda c: c[0])
def test_cross_entropy_class_indices(case, option, reduction, dtype, rng, seed):
    _, shape, itype = case
    use_weight, ignore, smoothing = CE_OPTIONS[option]
    t, classes = class_targets(rng, shape, itype, ignore)
    x = (rng.standard_normal(shape) * 2.0).astype(dtype)
    x.flat[0] = 500.0  # exp must not overflow (the max is subtracted)
    w = rng.uniform(0.5, 2.0, classes)
    kw = _ce_kwargs(option, reduction, w)
    want = np_class_index_loss(np_log_softmax(x, 0 if x.ndim == 1 else 1), t,
                               weight=w.astype(dtype) if use_weight else None,
                               ignore_index=-100 if ignore is None else ignore,
                               reduction=reduction, label_smoothing=smoothing)
    for backend, got in run_both(lambda a, b: F.cross_entropy(a, b, **kw), x, t).items():
        assert_close(f"cross_entropy({option}, reduction={reduction})", backend, got, want,
                     dtype, seed, [shape, t.shape])


@with_floats
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("option", ["plain", "weight", "ignore_index", "weight_ignore"])
@pytest.mark.parametrize("case", CLASS_SHAPES, ids=lambda c: c[0])
def test_nll_loss_class_indices(case, option, reduction, dtype, rng, seed):
    _, shape, itype = case
    ignore = 2 if "ignore" in option else None
    t, classes = class_targets(rng, shape, itype, ignore)
    cd = 0 if len(shape) == 1 else 1
    logp = np_log_softmax(rng.standard_normal(shape) * 2.0, cd).astype(dtype)
    w = rng.uniform(0.5, 2.0, classes)
    kw = {"reduction": reduction}
    if "weight" in option:
        kw["weight"] = w
    if ignore is not None:
        kw["ignore_index"] = ignore
    want = np_class_index_loss(logp, t, weight=w.astype(dtype) if "weight" in option else None,
                               ignore_index=-100 if ignore is None else ignore,
                               reduction=reduction)
    for backend, got in run_both(lambda a, b: F.nll_loss(a, b, **kw), logp, t).items():
        assert_close(f"nll_loss({option}, reduction={reduction})", backend, got, want, dtype,
                     seed, [shape, t.shape])


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
def test_class_loss_unbatched_ignored_target(loss, seed):
    """[C] input whose 0-d target is ignored: 'none' and 'sum' give 0, 'mean' 0/0 = NaN."""
    x = np.array([0.5, -1.0, 2.0, 0.0])
    t = np.array(-100)
    fn = getattr(F, loss)
    want = {"none": 0.0, "sum": 0.0, "mean": np.nan}
    for reduction, w in want.items():
        for backend, got in run_both(lambda a, b: fn(a, b, reduction=reduction), x, t).items():
            assert_close(f"{loss}([C], ignored 0-d target, {reduction})", backend, got,
                         np.float64(w), np.float64, seed, [x.shape, ()])


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
def test_class_loss_python_int_target_for_unbatched_input(loss, rng, seed):
    x = rng.standard_normal(5)
    fn = getattr(F, loss)
    want = np_class_index_loss(np_log_softmax(x, 0) if loss == "cross_entropy" else x,
                               np.array(3))
    for backend, got in run_both(lambda a: fn(a, 3), x).items():
        assert_close(f"{loss}([C], target=3)", backend, got, want, np.float64, seed, [x.shape])


@pytest.mark.parametrize("legacy,reduction", [({"size_average": False}, "sum"),
                                              ({"reduce": False}, "none"),
                                              ({"size_average": True, "reduce": True}, "mean")])
def test_class_loss_legacy_size_average_reduce(legacy, reduction, rng, seed):
    x = rng.standard_normal((4, 3))
    t = np.array([0, 2, -100, 1])
    want = np_class_index_loss(np_log_softmax(x, 1), t, reduction=reduction)
    for backend, got in run_both(lambda a, b: F.cross_entropy(a, b, **legacy), x, t).items():
        assert_close(f"cross_entropy({legacy})", backend, got, want, np.float64, seed,
                     [x.shape, t.shape])


# -- class probabilities ---------------------------------------------------------------
PROB_SHAPES = [("NC", (6, 5)), ("NCd1d2", (2, 4, 3, 2)), ("C", (7,))]
PROB_OPTIONS = {"plain": (False, 0.0), "weight": (True, 0.0), "label_smoothing": (False, 0.25),
                "weight_smoothing": (True, 0.1)}


@with_floats
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("option", list(PROB_OPTIONS))
@pytest.mark.parametrize("case", PROB_SHAPES, ids=lambda c: c[0])
def test_cross_entropy_class_probabilities(case, option, reduction, dtype, rng, seed):
    _, shape = case
    cd = 0 if len(shape) == 1 else 1
    x = (rng.standard_normal(shape) * 2.0).astype(dtype)
    p = np.exp(np_log_softmax(rng.standard_normal(shape), cd)).astype(dtype)
    use_weight, smoothing = PROB_OPTIONS[option]
    w = rng.uniform(0.5, 2.0, shape[cd])
    kw = {"reduction": reduction}
    if use_weight:
        kw["weight"] = w
    if smoothing:
        kw["label_smoothing"] = smoothing
    want = np_cross_entropy_probs(x, p, w.astype(dtype) if use_weight else None, reduction,
                                  smoothing)
    for backend, got in run_both(lambda a, b: F.cross_entropy(a, b, **kw), x, p).items():
        assert_close(f"cross_entropy(probabilities, {option}, reduction={reduction})", backend,
                     got, want, dtype, seed, [shape, shape])


# -- gradients -------------------------------------------------------------------------
def _class_grad_cases():
    return {
        "ce NC weight+ignore+smoothing mean": (
            (5, 4), lambda a, b: F.cross_entropy(a, b, weight=np.array([0.5, 2.0, 1.0, 1.5]),
                                                 ignore_index=1, label_smoothing=0.2)),
        "ce NC weight+ignore+smoothing none": (
            (5, 4), lambda a, b: F.cross_entropy(a, b, weight=np.array([0.5, 2.0, 1.0, 1.5]),
                                                 ignore_index=1, label_smoothing=0.2,
                                                 reduction="none")),
        "ce NCd1d2 mean (fused composite)": ((2, 3, 2, 2), lambda a, b: F.cross_entropy(a, b)),
        "ce NCd1d2 sum smoothing": (
            (2, 3, 2, 2), lambda a, b: F.cross_entropy(a, b, reduction="sum",
                                                       label_smoothing=0.3)),
        "ce C 0-d target weight": ((5,), lambda a, b: F.cross_entropy(
            a, b, weight=np.array([1.0, 2.0, 0.5, 1.5, 3.0]), label_smoothing=0.1)),
        "nll NCd1 weight+ignore mean": (
            (3, 4, 2), lambda a, b: F.nll_loss(a, b, weight=np.array([0.5, 2.0, 1.0, 1.5]),
                                               ignore_index=1)),
        "nll NC none": ((4, 3), lambda a, b: F.nll_loss(a, b, reduction="none")),
    }


@pytest.mark.parametrize("name", list(_class_grad_cases()))
def test_class_loss_gradients(name, rng, seed):
    shape, fn = _class_grad_cases()[name]
    classes = shape[0] if len(shape) == 1 else shape[1]
    tshape = () if len(shape) == 1 else (shape[0],) + shape[2:]
    t = rng.integers(0, classes, tshape)
    if t.size >= 4:
        t.reshape(-1)[:2] = 1  # the ignored class where ignore_index=1
    x = rng.standard_normal(shape)
    check_gradients(f"{name} (seed {seed})", fn, [x, t], rng, wrt=[0])
    _compiled_grads_match(fn, [x, t], (0,), rng, name, seed)


def test_cross_entropy_gradient_wrt_weight(rng, seed):
    x, t = rng.standard_normal((5, 4)), np.array([0, 3, 2, -100, 1])
    w = rng.uniform(0.5, 2.0, 4)
    fn = lambda a, b, c: F.cross_entropy(a, b, weight=c, label_smoothing=0.15)  # noqa: E731
    check_gradients(f"cross_entropy d/dweight (seed {seed})", fn, [x, t, w], rng, wrt=[0, 2])
    _compiled_grads_match(fn, [x, t, w], (0, 2), rng, "cross_entropy d/dweight", seed)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_probabilities_gradients(reduction, rng, seed):
    """d/dinput and d/dtarget (PyTorch differentiates soft targets too)."""
    x = rng.standard_normal((3, 4, 2))
    p = np.exp(np_log_softmax(rng.standard_normal((3, 4, 2)), 1))
    w = np.array([0.5, 2.0, 1.0, 1.5])
    fn = lambda a, b: F.cross_entropy(a, b, weight=w, label_smoothing=0.2,  # noqa: E731
                                      reduction=reduction)
    check_gradients(f"cross_entropy(probabilities, {reduction}) (seed {seed})", fn, [x, p], rng,
                    wrt=[0, 1])
    _compiled_grads_match(fn, [x, p], (0, 1), rng, f"ce probabilities {reduction}", seed)


# -- errors --------------------------------------------------------------------------------
@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
def test_class_loss_last_dim_layout_target_is_refused(loss):
    """Logits laid out [N, d1, C] = [2, 3, 5] with target [N, d1] = [2, 3] fitted
    the old classes-last layout; with the classes in dim 1 (PyTorch) the target
    of a [2, 3, 5] input is [2, 5]: a CompileError naming the shapes, not a
    silently different loss."""
    x = np.zeros((2, 3, 5))
    t = np.zeros((2, 3), np.int64)
    msg = raises_compile_error(lambda: tilefuse.trace(lambda a, b: getattr(F, loss)(a, b), x, t),
                               loss)
    assert names_shape(msg, (2, 3, 5)), f"message does not name the input shape: {msg!r}"
    assert names_shape(msg, (2, 3)), f"message does not name the target shape: {msg!r}"
    assert names_shape(msg, (2, 5)), f"message does not name the expected target shape: {msg!r}"
    assert THIS_FILE in msg, f"message does not name the user's line: {msg!r}"


CLASS_LOSS_ERRORS = {
    "int target of the input's shape": (
        lambda a: F.cross_entropy(a, np.zeros((4, 3), np.int64)), ["floating"]),
    "float target without class dim": (
        lambda a: F.cross_entropy(a, np.zeros(4)), ["cross_entropy", "[4]"]),
    "weight of the wrong length": (
        lambda a: F.cross_entropy(a, np.zeros(4, np.int64), weight=np.ones(4)), ["weight"]),
    "nll weight of the wrong length": (
        lambda a: F.nll_loss(a, np.zeros(4, np.int64), weight=np.ones(2)), ["weight"]),
    "unknown reduction": (
        lambda a: F.cross_entropy(a, np.zeros(4, np.int64), reduction="avg"), ["'avg'"]),
    "label_smoothing out of range": (
        lambda a: F.cross_entropy(a, np.zeros(4, np.int64), label_smoothing=1.5),
        ["label_smoothing"]),
    "ignore_index with probabilities": (
        lambda a: F.cross_entropy(a, np.full((4, 3), 1 / 3), ignore_index=0), ["ignore_index"]),
    "0-d input": (lambda a: F.cross_entropy(a.sum(), np.array(0)), ["class"]),
    "nll float target": (lambda a: F.nll_loss(a, np.zeros((4, 3))), ["nll_loss"]),
}


@pytest.mark.parametrize("name", list(CLASS_LOSS_ERRORS))
def test_class_loss_errors(name):
    fn, substrings = CLASS_LOSS_ERRORS[name]
    raises_compile_error(lambda: tilefuse.trace(fn, np.zeros((4, 3))), *substrings)


# ---------------------------------------------------------------------------
# mse_loss / binary_cross_entropy
# ---------------------------------------------------------------------------
@with_floats
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 5), (7,)], ids=lambda s: "x".join(map(str, s)))
def test_mse_loss_reductions(shape, reduction, dtype, rng, seed):
    a = rng.standard_normal(shape).astype(dtype)
    b = rng.standard_normal(shape).astype(dtype)
    want = np_reduce((a.astype(np.float64) - b) ** 2, reduction)
    for backend, got in run_both(lambda x, y: F.mse_loss(x, y, reduction=reduction),
                                 a, b).items():
        assert_close(f"mse_loss(reduction={reduction})", backend, got, want, dtype, seed,
                     [shape, shape])


BCE_WEIGHTS = {"none": None, "per-column [C]": (5,), "per-row [N,1]": (3, 1),
               "scalar 0-d": (), "full [N,C]": (3, 5), "[1,C]": (1, 5)}


@with_floats
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("wname", list(BCE_WEIGHTS))
def test_binary_cross_entropy_reduction_and_weight(wname, reduction, dtype, rng, seed):
    p = rng.uniform(0.02, 0.98, (3, 5))
    t = rng.uniform(0.0, 1.0, (3, 5))
    p[0, :3] = [0.0, 1.0, 0.0]  # each log is clamped at -100 (PyTorch)
    t[0, :3] = [1.0, 0.0, 0.0]
    p, t = p.astype(dtype), t.astype(dtype)
    wshape = BCE_WEIGHTS[wname]
    w = None if wshape is None else rng.uniform(0.5, 2.0, wshape).astype(dtype)
    kw = {"reduction": reduction}
    if w is not None:
        kw["weight"] = w
    want = np_bce(p, t, w, reduction)
    for backend, got in run_both(lambda a, b: F.binary_cross_entropy(a, b, **kw), p, t).items():
        assert_close(f"binary_cross_entropy(weight {wname}, reduction={reduction})", backend,
                     got, want, dtype, seed, [p.shape, t.shape])


@pytest.mark.parametrize("case", ["mse none", "mse sum", "bce weight none", "bce weight mean",
                                  "bce weight sum"])
def test_mse_bce_gradients(case, rng, seed):
    p = rng.uniform(0.25, 0.75, (3, 4))
    t = rng.uniform(0.0, 1.0, (3, 4))
    w = rng.uniform(0.5, 2.0, (4,))
    reduction = case.split()[-1]
    if case.startswith("mse"):
        fn = lambda a, b: F.mse_loss(a, b, reduction=reduction)  # noqa: E731
    else:
        fn = lambda a, b: F.binary_cross_entropy(a, b, weight=w, reduction=reduction)  # noqa
    check_gradients(f"{case} (seed {seed})", fn, [p, t], rng, wrt=[0, 1])
    _compiled_grads_match(fn, [p, t], (0, 1), rng, case, seed)


@pytest.mark.parametrize("loss", ["mse_loss", "binary_cross_entropy"])
def test_mean_reduction_accepts_what_sum_accepts(loss, seed):
    """With an f32 input and an f64 target, reduction='sum' and 'none' promote
    to f64; 'mean' must give sum / numel in the same dtype, not fail."""
    p = np.array([0.25, 0.5, 0.75, 0.125], np.float32)
    t = np.array([0.0, 0.5, 1.0, 0.25], np.float64)
    fn = getattr(F, loss)
    sums = run_both(lambda a, b: fn(a, b, reduction="sum"), p, t)
    try:
        means = run_both(lambda a, b: fn(a, b, reduction="mean"), p, t)
    except tilefuse.CompileError as e:
        pytest.fail(f"{loss}(f32 input, f64 target): reduction='sum' gives "
                    f"{sums['interpret']!r} ({np.asarray(sums['interpret']).dtype}) but "
                    f"reduction='mean' raises: {' '.join(str(e).split())}")
    for backend in BACKENDS:
        s, m = np.asarray(sums[backend]), np.asarray(means[backend])
        assert m.dtype == s.dtype, f"{loss} [{backend}]: mean {m.dtype}, sum {s.dtype}"
        assert_close(f"{loss} mean vs sum / n", backend, m, s / p.size, m.dtype, seed,
                     [p.shape, t.shape])


def test_mse_bce_errors():
    x = np.full((3, 4), 0.5)
    raises_compile_error(lambda: tilefuse.trace(lambda a: F.mse_loss(a, np.zeros(4)), x),
                         "mse_loss", "3x4", "4x")
    raises_compile_error(
        lambda: tilefuse.trace(lambda a: F.binary_cross_entropy(a, a, weight=np.ones(3)), x),
        "binary_cross_entropy", "weight")
    raises_compile_error(
        lambda: tilefuse.trace(lambda a: F.binary_cross_entropy(a, a, weight=np.ones((2, 3, 4))),
                               x), "weight")
    raises_compile_error(lambda: tilefuse.trace(lambda a: F.mse_loss(a, a, reduction="x"), x),
                         "reduction")
