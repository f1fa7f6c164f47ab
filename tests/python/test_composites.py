"""Functions users reached for first: values against float64 numpy (PyTorch's
formulas written out), gradients against finite differences (the harness
of test_autodiff.py), each through the interpreter and compiled for the CPU.

Tolerances: float64 results within 1e-12 relative of the float64 reference
(interpreter) or 1e-10 (compiled: vectorised reductions sum in another
order); float32 within 1e-6 relative (a few ulps; log1p/expm1 use
polynomial approximations on the CPU).
"""
import math

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F
from test_autodiff import check_gradients


def both(fn, *args):
    """(interpreted, compiled) results of fn on args."""
    g = tilefuse.trace(fn, *args)
    return g.interpret(*args), g.compile("cpu")(*args)


def assert_both(name, fn, args, want, rtol=1e-12, crtol=1e-10, atol=0.0):
    interp, comp = both(fn, *args)
    interp = interp if isinstance(interp, tuple) else (interp,)
    comp = comp if isinstance(comp, tuple) else (comp,)
    want = want if isinstance(want, tuple) else (want,)
    for k, (i, c, w) in enumerate(zip(interp, comp, want)):
        w = np.asarray(w)
        assert i.shape == w.shape and c.shape == w.shape, (name, k, i.shape, c.shape, w.shape)
        np.testing.assert_allclose(i, w, rtol=rtol, atol=atol, err_msg=f"{name} [{k}] interpreter")
        np.testing.assert_allclose(c, w, rtol=crtol, atol=atol, err_msg=f"{name} [{k}] compiled")


# -- precise elementwise forms ------------------------------------------------------

@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-13), (np.float32, 2e-6)])
def test_log1p_expm1_are_precise_for_small_inputs(dtype, rtol):
    x = np.concatenate([np.geomspace(1e-30, 1e-3, 200), -np.geomspace(1e-30, 1e-3, 200),
                        np.linspace(-0.9, 5, 101)]).astype(dtype)
    ref = x.astype(np.float64)
    assert_both("log1p", lambda t: t.log1p(), [x], np.log1p(ref).astype(dtype), rtol, rtol)
    assert_both("expm1", lambda t: t.expm1(), [x], np.expm1(ref).astype(dtype), rtol, rtol)


def test_binary_cross_entropy_is_precise_near_zero_and_one():
    """log(1 - p) as log1p(-p): the naive form loses everything at p <= 1e-9."""
    for dtype in (np.float64, np.float32):
        p = np.array([1e-12, 1e-9, 1e-7, 0.3, 1 - 1e-7], dtype)
        t = np.array([0.0, 0.0, 0.0, 1.0, 1.0], dtype)
        p64, t64 = p.astype(np.float64), t.astype(np.float64)
        per = -(t64 * np.maximum(np.log(p64), -100) + (1 - t64) * np.maximum(np.log1p(-p64), -100))
        rtol = 1e-12 if dtype == np.float64 else 1e-6
        assert_both("bce none", lambda a, b: F.binary_cross_entropy(a, b, reduction="none"),
                    [p, t], per.astype(dtype), rtol, rtol)


def test_bce_with_logits_matches_the_stable_formula_and_gradient(rng):
    x = rng.standard_normal((4, 5)) * 6
    t = rng.random((4, 5))
    w = rng.random(5) + 0.5
    pw = rng.random(5) + 0.5
    lw = 1 + (pw - 1) * t
    per = (1 - t) * x + lw * (np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0))
    assert_both("bce_with_logits", lambda a, b: F.binary_cross_entropy_with_logits(
        a, b, weight=w, pos_weight=pw, reduction="none"), [x, t], per * w)
    assert_both("bce_with_logits mean", F.binary_cross_entropy_with_logits, [x, t],
                np.mean((1 - t) * x + np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0)))
    # d/dx = sigmoid(x) - t (no pos_weight), also at x = 0 exactly.
    x[0, 0] = 0.0
    g = tilefuse.trace(lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction="sum"),
                       x, t).value_and_grad(wrt=(0,))
    for name, run in [("interpreter", g.interpret), ("compiled", g.compile("cpu"))]:
        np.testing.assert_allclose(run(x, t)[1], 1 / (1 + np.exp(-x)) - t, rtol=1e-12, atol=1e-15,
                                   err_msg=name)


def test_softplus_follows_the_threshold_and_has_finite_gradients():
    x = np.array([-800.0, -5.0, 0.0, 3.0, 9.99, 10.0, 10.01, 800.0])
    beta, thr = 2.0, 20.0
    z = beta * x
    want = np.where(z > thr, x, np.log1p(np.exp(np.minimum(z, thr))) / beta)
    assert_both("softplus", lambda t: F.softplus(t, beta=beta, threshold=thr), [x], want)
    g = tilefuse.trace(lambda t: F.softplus(t, beta, thr).sum(), x).value_and_grad(wrt=(0,))
    with np.errstate(over="ignore"):
        sig = 1 / (1 + np.exp(-np.minimum(z, thr)))
    np.testing.assert_allclose(g.compile("cpu")(x)[1], np.where(z > thr, 1.0, sig), rtol=1e-12)


def test_clamp_values_nan_and_gradients_follow_pytorch():
    x = np.array([-2.0, -1.0, 0.0, 1.0, 2.0, np.nan])
    assert_both("clamp", lambda t: t.clamp(-1.0, 1.0), [x], np.clip(x, -1, 1))
    assert_both("clamp min", lambda t: t.clamp(min=0.5), [x], np.where(x < 0.5, 0.5, x))
    assert_both("clip max", lambda t: t.clip(max=0.5), [x], np.where(x > 0.5, 0.5, x))
    # min > max: every element becomes max (PyTorch).
    assert_both("clamp crossed", lambda t: t.clamp(1.0, -1.0), [x[:5]], np.full(5, -1.0))
    # The gradient passes at the bounds (inclusive), not beyond, not at NaN.
    g = tilefuse.trace(lambda t: t.clamp(-1.0, 1.0).sum(), x).value_and_grad(wrt=(0,))
    want = np.array([0.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    for name, run in [("interpreter", g.interpret), ("compiled", g.compile("cpu"))]:
        np.testing.assert_array_equal(run(x)[1], want, err_msg=name)
    # Tensor bounds receive the cotangent where they were taken.
    lo, hi = np.full(6, -1.0), np.full(6, 1.0)
    x0 = np.nan_to_num(x)
    gl = tilefuse.trace(lambda t, a, b: tilefuse.clamp(t, a, b).sum(), x0, lo, hi)
    _, gx, ga, gb = gl.value_and_grad(wrt=(0, 1, 2)).compile("cpu")(x0, lo, hi)
    np.testing.assert_array_equal(ga, (x0 < -1).astype(float))
    np.testing.assert_array_equal(gb, (x0 > 1).astype(float))
    np.testing.assert_array_equal(gx, ((x0 >= -1) & (x0 <= 1)).astype(float))


def test_detach_blocks_the_gradient():
    x = np.array([1.0, 2.0, 3.0])
    g = tilefuse.trace(lambda t: (t * t.detach()).sum(), x).value_and_grad(wrt=(0,))
    for run in (g.interpret, g.compile("cpu")):
        value, grad = run(x)
        assert value == pytest.approx(14.0)
        np.testing.assert_array_equal(grad, x)  # d/dx x*c = c, not 2x


# -- reductions --------------------------------------------------------------------

def test_logsumexp_including_infinite_rows(rng):
    x = rng.standard_normal((3, 7)) * 50
    x[1] = -np.inf
    x[2, 3] = np.inf
    m = x.max(1, keepdims=True)
    m = np.where(np.isinf(m), 0, m)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = (np.log(np.exp(x - m).sum(1, keepdims=True)) + m)
    with np.errstate(invalid="ignore"):
        assert_both("logsumexp", lambda t: t.logsumexp(1), [x], want[:, 0])
    assert_both("logsumexp keepdim", lambda t: tilefuse.logsumexp(t, dim=1, keepdim=True),
                [x[:1]], want[:1])
    y = rng.standard_normal((3, 5))
    check_gradients("logsumexp", lambda t: t.logsumexp(-1), [y], rng)


@pytest.mark.parametrize("correction", [None, 0, 2])
def test_var_std_match_numpy(correction, rng):
    x = rng.standard_normal((4, 6))
    ddof = 1 if correction is None else correction
    kw = {} if correction is None else {"correction": correction}
    assert_both("var", lambda t: t.var(1, **kw), [x], np.var(x, axis=1, ddof=ddof))
    assert_both("std all", lambda t: t.std(**kw), [x], np.std(x, ddof=ddof))
    assert_both("std unbiased=False", lambda t: t.std(0, unbiased=False, keepdim=True), [x],
                np.std(x, axis=0, keepdims=True))
    check_gradients("var", lambda t: t.var(1, **kw), [x], rng)


def test_cumsum_float_and_exact_integers(rng):
    x = rng.standard_normal((3, 1025))
    assert_both("cumsum f64", lambda t: t.cumsum(1), [x], np.cumsum(x, 1), 1e-12, 1e-12,
                atol=1e-12)
    i = rng.integers(-2**40, 2**40, (5, 9))
    assert_both("cumsum i64", lambda t: tilefuse.cumsum(t, 0), [i], np.cumsum(i, 0), 0, 0)
    b = rng.random((2, 6)) < 0.5
    interp, comp = both(lambda t: t.cumsum(1), b)
    assert interp.dtype == np.int64 and comp.dtype == np.int64
    np.testing.assert_array_equal(comp, np.cumsum(b, 1))
    check_gradients("cumsum", lambda t: t.cumsum(0), [rng.standard_normal((5, 3))], rng)


# -- layout --------------------------------------------------------------------------

def test_split_chunk_flip(rng):
    x = rng.standard_normal((7, 4))
    assert_both("split size", lambda t: t.split(3), [x], (x[:3], x[3:6], x[6:]))
    assert_both("split sections", lambda t: tilefuse.split(t, [1, 3], dim=1), [x],
                (x[:, :1], x[:, 1:]))
    # torch.chunk(7 rows, 3) -> sizes 3, 3, 1; chunk(4 cols, 3) -> 2, 2.
    assert_both("chunk", lambda t: t.chunk(3), [x], (x[:3], x[3:6], x[6:]))
    assert_both("chunk cols", lambda t: tilefuse.chunk(t, 3, dim=1), [x], (x[:, :2], x[:, 2:]))
    assert_both("flip", lambda t: t.flip(0), [x], np.flip(x, 0))
    assert_both("flip both", lambda t: tilefuse.flip(t, (0, 1)), [x], np.flip(x, (0, 1)))
    check_gradients("flip", lambda t: t.flip(1) * np.arange(4.0), [x], rng)
    with pytest.raises(tilefuse.CompileError, match="do not add up"):
        tilefuse.trace(lambda t: t.split([2, 2]), x)


def test_one_hot():
    ids = np.array([[0, 3], [2, 1]])
    assert_both("one_hot", lambda t: F.one_hot(t, 4), [ids], np.eye(4, dtype=np.int64)[ids], 0, 0)
    with pytest.raises(tilefuse.CompileError, match="num_classes"):
        tilefuse.trace(lambda t: F.one_hot(t), ids)


# -- arithmetic ----------------------------------------------------------------------

def test_floor_divide_and_remainder_follow_python(rng):
    a = np.concatenate([rng.standard_normal(50) * 10, [1.0, -1.0, 7.5, -7.5, 0.0, 5.0]])
    b = np.concatenate([rng.standard_normal(50) * 3, [0.1, 0.1, -2.0, 2.0, 3.0, -0.0]])
    with np.errstate(divide="ignore", invalid="ignore"):
        assert_both("//", lambda x, y: x // y, [a, b], np.floor_divide(a, b), 0, 0)
        assert_both("%", lambda x, y: x % y, [a, b], np.remainder(a, b), 1e-15, 1e-15)
        assert_both("fmod", lambda x, y: x.fmod(y), [a, b], np.fmod(a, b), 0, 0)
    assert math.floor(1 / 0.1) == 10 and 1 // 0.1 == 9.0  # why PyTorch's algorithm
    ai = rng.integers(-100, 100, 60)
    bi = rng.integers(1, 9, 60) * rng.choice([-1, 1], 60)
    assert_both("// int", lambda x, y: x // y, [ai, bi], ai // bi, 0, 0)
    assert_both("% int", lambda x, y: x % y, [ai, bi], ai % bi, 0, 0)
    assert_both("scalar // and %", lambda x: (7 // x, x % 4), [bi], (7 // bi, bi % 4), 0, 0)


def test_true_division_of_integers_is_float():
    a, b = np.array([7, -7, 1]), np.array([2, 2, 3])
    interp, comp = both(lambda x, y: x / y, a, b)
    assert comp.dtype == np.float32
    np.testing.assert_allclose(comp, (a / b).astype(np.float32), rtol=1e-7)


# -- attention and layer_norm --------------------------------------------------------

def _sdpa_reference(q, k, v, mask=None, causal=False, scale=None):
    s = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        mask = np.tril(np.ones(s.shape[-2:], bool))
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def test_scaled_dot_product_attention(rng):
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    assert_both("sdpa", F.scaled_dot_product_attention, [q, k, v], _sdpa_reference(q, k, v))
    assert_both("sdpa causal", lambda a, b, c: F.scaled_dot_product_attention(
        a, b, c, is_causal=True, scale=0.3), [q, k, v], _sdpa_reference(q, k, v, causal=True,
                                                                      scale=0.3))
    mask = rng.random((5, 5)) < 0.7
    np.fill_diagonal(mask, True)
    assert_both("sdpa bool mask", lambda a, b, c: F.scaled_dot_product_attention(
        a, b, c, attn_mask=mask), [q, k, v], _sdpa_reference(q, k, v, mask))
    check_gradients("sdpa", lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True),
                    [q[:1, :1], k[:1, :1], v[:1, :1]], rng)
    with pytest.raises(tilefuse.CompileError, match="dropout_p"):
        tilefuse.trace(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, dropout_p=0.1),
                       q, k, v)


def test_layer_norm_without_weight_and_bias(rng):
    x = rng.standard_normal((3, 8))
    mu, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    assert_both("layer_norm", lambda t: F.layer_norm(t, (8,)), [x], (x - mu) / np.sqrt(var + 1e-5))
    check_gradients("layer_norm", lambda t: F.layer_norm(t, 8), [x], rng)


def test_functional_calls_on_a_max_pair_say_what_to_pass():
    x = np.ones((2, 3))
    with pytest.raises(tilefuse.CompileError, match=r"relu: x.max\(dim\) returns a \(values, "
                                                    r"indices\) pair.*\.values"):
        tilefuse.trace(lambda t: F.relu(t.max(1)), x)
