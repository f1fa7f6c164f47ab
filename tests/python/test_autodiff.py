"""Reverse-mode autodiff (Graph.value_and_grad) against finite differences.

Every differentiable op is checked the same way, in float64: a small traced
function out = op(inputs) becomes the loss L = sum(out * W) with W fixed
random weights (so every output element gets a different cotangent), and
the gradients of value_and_grad are compared with finite differences of the
forward graph (the same traced loss, run on the interpreter).

Finite differences: the fourth-order central stencil
    dL/dx ~ [8 (L(x+h) - L(x-h)) - (L(x+2h) - L(x-2h))] / (12 h),  h = 1e-3,
on the forward graph in float64. Its truncation error is h^4 |L^(5)| / 30
~ 3e-14 |L^(5)| and its rounding error about (3/2) eps |L| / h ~ 3e-13 |L|
(eps = 2.2e-16). Measured on every case below by comparing the stencil at
h with the stencil at h/2 and 2h: the error at h = 1e-3 is at most ~5e-11,
and at most 2% of the tolerance below. Inputs that would make L^(5) large
are kept in tame domains (log/sqrt/rsqrt/pow bases in [0.5, 2.5], divisors
|b| >= 0.5, BCE probabilities in [0.25, 0.75]), and at least 0.1 away from
kinks (relu/abs at 0, maximum/minimum ties, reduce max/min ties), so the
stencil, which reaches 2h = 2e-3 away, never crosses one -- except in the
edge-case tests, which put inputs exactly on a kink on purpose: the
functions there are piecewise linear, and the symmetric stencil gives
exactly the average of the one-sided slopes, which is the documented tie
rule for 2-way ties of maximum/minimum and reductions (even split, as
PyTorch); relu'(0) = 0 and abs'(0) = 0 follow PyTorch instead of the
average, so those tests check the exact expected values only.

Tolerance, elementwise: |grad - fd| <= ATOL + RTOL * |fd| with
RTOL = 1e-8, ATOL = 1e-9: >= 50x above the measured FD error; any real
gradient bug (a wrong factor, sign, missing term or a float32 intermediate,
~1e-7 relative) is far outside it. Never loosened per test.
"""
import math

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F

import numpy_reference as R

H = 1e-3
RTOL, ATOL = 1e-8, 1e-9


# ---------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------

def _is_float(a):
    return np.asarray(a).dtype.kind == "f"


def weighted_loss(fn, args, rng):
    """Returns (traced loss graph, W): L(*args) = sum(fn(*args) * W)."""
    out = tilefuse.trace(fn, *args).interpret(*args)
    out = np.asarray(out)
    W = rng.standard_normal(out.shape)

    def loss(*xs):
        y = fn(*xs)
        return (y * float(W)) if y.ndim == 0 else (y * W).sum()

    return tilefuse.trace(loss, *args), W


def fd_gradient(graph, args, i):
    """Fourth-order central differences of the scalar graph w.r.t. args[i]."""
    x = np.asarray(args[i], dtype=np.float64)
    grad = np.zeros_like(x)

    def f(j, delta):
        xp = x.copy()
        xp[j] += delta
        a = list(args)
        a[i] = xp
        out = graph.interpret(*a)
        return float(out[0] if isinstance(out, tuple) else out)

    for j in np.ndindex(x.shape):
        d1 = f(j, H) - f(j, -H)
        d2 = f(j, 2 * H) - f(j, -2 * H)
        grad[j] = (8.0 * d1 - d2) / (12.0 * H)
    return grad


def value_and_grad(graph, args, wrt):
    """Runs graph.value_and_grad(wrt) and checks the result's structure:
    (primal outputs..., one gradient per wrt index shaped like its argument)."""
    gg = graph.value_and_grad(wrt=tuple(wrt))
    out = gg.interpret(*args)
    assert isinstance(out, tuple), f"value_and_grad().interpret returned {type(out).__name__}"
    primal = graph.interpret(*args)
    primal = primal if isinstance(primal, tuple) else (primal,)
    assert len(out) == len(primal) + len(wrt), \
        f"{len(out)} results, want {len(primal)} outputs + {len(wrt)} gradients"
    for k, (got, want) in enumerate(zip(out, primal)):
        got, want = np.asarray(got), np.asarray(want)
        assert got.shape == want.shape and got.dtype == want.dtype, f"output {k}"
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=0,
                                   err_msg=f"primal output {k} differs from the forward graph")
    grads = [np.asarray(g) for g in out[len(primal):]]
    for i, g in zip(wrt, grads):
        a = np.asarray(args[i])
        assert g.shape == a.shape, f"gradient {i}: shape {g.shape}, argument {a.shape}"
        assert g.dtype == a.dtype, f"gradient {i}: dtype {g.dtype}, argument {a.dtype}"
    return out[: len(primal)], grads


def assert_grad_close(name, i, got, want):
    err = np.abs(got - want)
    bound = ATOL + RTOL * np.abs(want)
    bad = ~(err <= bound)
    if bad.any():
        j = np.unravel_index(int(np.argmax(np.where(bad, err / bound, 0))), got.shape)
        raise AssertionError(
            f"{name}: gradient of argument {i}: {int(bad.sum())} of {bad.size} elements off "
            f"(rtol {RTOL:g}, atol {ATOL:g}); max abs error {float(err.max()):.3e}; worst at "
            f"{tuple(int(k) for k in j)}: value_and_grad {float(got[j])!r}, finite "
            f"difference {float(want[j])!r}")


def check_gradients(name, fn, args, rng, wrt=None):
    """The whole check for one case; returns (grads, W) for extra assertions."""
    args = list(args)
    if wrt is None:
        wrt = [i for i, a in enumerate(args) if _is_float(a)]
    graph, W = weighted_loss(fn, args, rng)
    _, grads = value_and_grad(graph, args, wrt)
    for i, g in zip(wrt, grads):
        assert_grad_close(name, i, g, fd_gradient(graph, args, i))
    return grads, W


# ---------------------------------------------------------------------------
# Inputs (float64; kinks kept >= 0.1 away unless a test says otherwise)
# ---------------------------------------------------------------------------

def normal(rng, shape, scale=1.0):
    return rng.standard_normal(shape) * scale


def positive(rng, shape, lo=0.5, hi=2.5):
    return rng.uniform(lo, hi, shape)


def away_from_zero(rng, shape, lo=0.1, hi=2.0):
    return rng.choice([-1.0, 1.0], shape) * rng.uniform(lo, hi, shape)


def distinct(rng, shape):
    """Values spaced >= 0.15 apart (no ties anywhere), in random order."""
    n = int(np.prod(shape, dtype=np.int64))
    v = (rng.permutation(n) - n / 2) * 0.25 + rng.uniform(-0.05, 0.05, n)
    return v.reshape(shape)


def apart_from(rng, a, gap=0.1):
    """b with |b - a| >= gap elementwise."""
    return a + away_from_zero(rng, np.shape(a), gap, 1.5)


# ---------------------------------------------------------------------------
# Elementwise ops
# ---------------------------------------------------------------------------

def _mk(*makers):
    return lambda rng: [m(rng) for m in makers]


N = lambda *s: (lambda rng: normal(rng, s))          # noqa: E731
P = lambda *s: (lambda rng: positive(rng, s))        # noqa: E731
A = lambda *s: (lambda rng: away_from_zero(rng, s))  # noqa: E731
Q = lambda *s: (lambda rng: away_from_zero(rng, s, 0.5, 2.0))  # divisors  # noqa: E731


def _pair_apart(shape):
    def make(rng):
        a = normal(rng, shape)
        return [a, apart_from(rng, a)]
    return make


ELEMENTWISE = {
    "add": (lambda a, b: a + b, _mk(N(3, 4), N(3, 4))),
    "add_broadcast": (lambda a, b: a + b, _mk(N(3, 1), N(1, 4))),
    "add_scalar": (lambda a: 2.5 + a, _mk(N(3, 4))),
    "sub": (lambda a, b: a - b, _mk(N(3, 4), N(3, 4))),
    "sub_broadcast": (lambda a, b: a - b, _mk(N(2, 3, 4), N(4))),
    "rsub_scalar": (lambda a: 1.5 - a, _mk(N(5))),
    "mul": (lambda a, b: a * b, _mk(N(3, 4), N(3, 4))),
    "mul_broadcast": (lambda a, b: a * b, _mk(N(2, 1, 4), N(3, 1))),
    "mul_0d": (lambda a, b: a * b, _mk(N(), N(3, 4))),
    "mul_self": (lambda a: a * a, _mk(N(3, 4))),
    "div": (lambda a, b: a / b, _mk(N(3, 4), Q(3, 4))),
    "div_broadcast": (lambda a, b: a / b, _mk(N(3, 4), Q(4))),
    "rdiv_scalar": (lambda a: 3.0 / a, _mk(Q(5))),
    "pow": (lambda a, b: a ** b, _mk(P(3, 4), N(3, 4))),
    "pow_broadcast": (lambda a, b: a ** b, _mk(P(3, 4), N(1))),
    "pow_scalar_exponent": (lambda a: a ** 2.5, _mk(P(5))),
    "pow_square_negative_base": (lambda a: a ** 2, _mk(A(6))),
    "pow_cube_negative_base": (lambda a: a ** 3, _mk(A(6))),
    "rpow_scalar_base": (lambda a: 2.0 ** a, _mk(N(5))),
    "maximum": (lambda a, b: a.maximum(b), _pair_apart((3, 4))),
    # distinct() values are 0.25 k + noise(0.05): shifting by 0.125 keeps every pair apart
    "maximum_broadcast": (lambda a, b: a.maximum(b),
                          lambda rng: [distinct(rng, (3, 4)), distinct(rng, (4,)) + 0.125]),
    "minimum": (lambda a, b: a.minimum(b), _pair_apart((3, 4))),
    "neg": (lambda a: -a, _mk(N(3, 4))),
    "neg_method": (lambda a: a.neg(), _mk(N(3, 4))),
    "abs": (lambda a: abs(a), _mk(A(3, 4))),
    "abs_method": (lambda a: a.abs(), _mk(A(3, 4))),
    "exp": (lambda a: a.exp(), _mk(N(3, 4))),
    "log": (lambda a: a.log(), _mk(P(3, 4))),
    "tanh": (lambda a: a.tanh(), _mk(N(3, 4))),
    "sqrt": (lambda a: a.sqrt(), _mk(P(3, 4))),
    "rsqrt": (lambda a: a.rsqrt(), _mk(P(3, 4))),
    "sigmoid": (lambda a: a.sigmoid(), _mk(lambda rng: normal(rng, (3, 4), 3.0))),
    "F.sigmoid": (F.sigmoid, _mk(N(3, 4))),
    "erf": (lambda a: a.erf(), _mk(N(3, 4))),
    "relu": (F.relu, _mk(A(3, 4))),
    "relu_method": (lambda a: a.relu(), _mk(A(3, 4))),
    "gelu_erf": (lambda a: F.gelu(a), _mk(lambda rng: normal(rng, (3, 4), 2.0))),
    "gelu_tanh": (lambda a: F.gelu(a, approximate="tanh"), _mk(lambda rng: normal(rng, (3, 4), 2.0))),
    "silu": (F.silu, _mk(lambda rng: normal(rng, (3, 4), 2.0))),
    "tanh_F": (F.tanh, _mk(N(3, 4))),
    "cast_f64_identity": (lambda a: a.to(tilefuse.float64) * 1.5, _mk(N(3, 4))),
    "cast_int_operand": (lambda a, k: a * k.to(tilefuse.float64),
                         lambda rng: [normal(rng, (3, 4)), rng.integers(-3, 4, (3, 4))]),
}


@pytest.mark.parametrize("op", list(ELEMENTWISE))
def test_elementwise(op, rng):
    fn, make = ELEMENTWISE[op]
    check_gradients(op, fn, make(rng), rng)


def test_cast_round_trip_through_float32(rng):
    """f64 -> f32 -> f64 is lossy, so no finite differences: the gradient is
    the cotangent cast back through f32, i.e. exactly f64(f32(W))."""
    x = normal(rng, (3, 4))
    W = rng.standard_normal((3, 4))
    g = tilefuse.trace(lambda t: (t.to(tilefuse.float32).to(tilefuse.float64) * W).sum(), x)
    _, (gx,) = value_and_grad(g, [x], [0])
    np.testing.assert_array_equal(gx, W.astype(np.float32).astype(np.float64))


def _where_mask(rng, shape):
    m = rng.random(shape) < 0.5
    m.flat[0], m.flat[-1] = True, False
    return m


WHERE = {
    # condition as a bool argument (not differentiable, not in wrt)
    "bool_argument": (lambda c, a, b: tilefuse.where(c, a, b),
                      lambda rng: [_where_mask(rng, (3, 4)), normal(rng, (3, 4)),
                                   normal(rng, (3, 4))]),
    # condition from a comparison of a differentiable input: leaky relu
    "comparison": (lambda a: tilefuse.where(a > 0, a, a * 0.1), _mk(A(3, 4))),
    # broadcasting condition and branches; both branches read the same input
    "broadcast": (lambda c, a, b: tilefuse.where(c, a * b, b.exp()),
                  lambda rng: [_where_mask(rng, (3, 1)), normal(rng, (1, 4)), normal(rng, (3, 4))]),
    # a scalar branch (as the causal mask of attention) and a numpy mask
    "scalar_branch": (lambda a: tilefuse.where(np.tril(np.ones((4, 4), bool)), a, -1e9).exp(),
                      _mk(N(2, 4, 4))),
    "masked_fill": (lambda a: a.masked_fill(np.eye(4, dtype=bool), 0.0) * a, _mk(N(4, 4))),
}


@pytest.mark.parametrize("case", list(WHERE))
def test_where(case, rng):
    fn, make = WHERE[case]
    check_gradients(f"where/{case}", fn, make(rng), rng)


# ---------------------------------------------------------------------------
# Layout
# ---------------------------------------------------------------------------

LAYOUT = {
    "reshape": (lambda a: a.reshape(4, 3) * np.arange(12.0).reshape(4, 3), (3, 4)),
    "reshape_0d": (lambda a: a.reshape(()), (1,)),
    "view_flatten": (lambda a: a.flatten(1).exp(), (2, 3, 2)),
    "unsqueeze_squeeze": (lambda a: a.unsqueeze(1).squeeze(1).unsqueeze(-1).tanh(), (3, 4)),
    "transpose": (lambda a: a.transpose(0, 1).tanh(), (3, 4)),
    "T": (lambda a: a.T.exp(), (3, 4)),
    "permute": (lambda a: a.permute(2, 0, 1).tanh(), (2, 3, 4)),
    "slice": (lambda a: a[1:, :3], (3, 4)),
    "slice_steps": (lambda a: a[::2, 1:4:2], (5, 6)),
    "slice_steps_3d": (lambda a: a[1, ..., ::3] * a[0, ..., 1::3], (2, 3, 8)),
    "int_index": (lambda a: a[1], (3, 4)),
    "int_index_negative": (lambda a: a[-1, 2], (3, 4)),
    "int_index_column": (lambda a: a[:, 1] * a[:, 3], (3, 4)),
    "none_index": (lambda a: a[None, :, None].exp(), (3,)),
    "overlapping_slices": (lambda a: a[:3] * a[1:], (4, 2)),
    "expand": (lambda a: a.expand(3, 4), (3, 1)),
    "expand_new_dims": (lambda a: a.expand(2, 3, 4), (4,)),
    "expand_minus_one": (lambda a: a.expand(-1, 5), (3, 1)),
    "expand_middle": (lambda a: a.expand(4, 3, 5), (1, 3, 1)),
}


@pytest.mark.parametrize("case", list(LAYOUT))
def test_layout(case, rng):
    fn, shape = LAYOUT[case]
    check_gradients(case, fn, [normal(rng, shape)], rng)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(dim, rng):
    shapes = {0: [(1, 3), (2, 3), (3, 3)], 1: [(3, 1), (3, 2), (3, 3)],
              -1: [(3, 1), (3, 2), (3, 3)]}[dim]
    args = [normal(rng, s) for s in shapes]
    check_gradients(f"cat(dim={dim})", lambda a, b, c: tilefuse.cat([a, b, c], dim), args, rng)


def test_cat_same_input_twice(rng):
    """Both copies contribute: the gradient is the sum of two slices of W."""
    args = [normal(rng, (2, 3)), normal(rng, (1, 3))]
    check_gradients("cat([a, b, a])", lambda a, b: tilefuse.cat([a, b, a * a], 0), args, rng)


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_stack(dim, rng):
    args = [normal(rng, (2, 3)) for _ in range(3)]
    check_gradients(f"stack(dim={dim})", lambda a, b, c: tilefuse.stack([a, b, c], dim),
                    args, rng)


# ---------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------

REDUCE_CASES = [
    ((3, 4), None, False),
    ((3, 4), None, True),
    ((3, 4), 0, False),
    ((3, 4), 1, True),
    ((3, 4), -1, False),
    ((2, 3, 4), (0, 2), False),
    ((2, 3, 4), (2, 0), True),
    ((2, 3, 4), -2, True),
    ((5,), 0, False),
]


@pytest.mark.parametrize("case", REDUCE_CASES, ids=lambda c: f"{c[0]}-dim{c[1]}-keep{c[2]}")
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_reduce(op, case, rng):
    shape, dim, keep = case
    x = distinct(rng, shape)  # no ties for max/min
    # tanh afterwards: the cotangent reaching the reduction is not constant
    method = {"max": "amax", "min": "amin"}.get(op, op)  # values only, as PyTorch
    fn = lambda t: getattr(t, method)(dim, keep).tanh()  # noqa: E731
    check_gradients(f"{op}(dim={dim}, keepdim={keep})", fn, [x], rng)


# ---------------------------------------------------------------------------
# Matmul
# ---------------------------------------------------------------------------

MATMUL_CASES = {
    "2d": (lambda a, b: a @ b, [(3, 4), (4, 5)]),
    "batched": (lambda a, b: a @ b, [(2, 3, 4), (2, 4, 5)]),
    "broadcast_batch": (lambda a, b: a @ b, [(2, 1, 3, 4), (3, 4, 2)]),
    "batch_against_2d": (lambda a, b: a @ b, [(2, 3, 4), (4, 5)]),
    "dot_1d": (lambda a, b: a @ b, [(4,), (4,)]),
    "vec_mat": (lambda a, b: a @ b, [(4,), (4, 5)]),
    "mat_vec": (lambda a, b: a @ b, [(3, 4), (4,)]),
    "vec_batched": (lambda a, b: a @ b, [(4,), (2, 4, 3)]),
    "batched_vec": (lambda a, b: a @ b, [(2, 3, 4), (4,)]),
    "lhs_T": (lambda a, b: a.T @ b, [(4, 3), (4, 5)]),
    "rhs_T": (lambda a, b: a @ b.T, [(3, 4), (5, 4)]),
    "both_T": (lambda a, b: a.T @ b.T, [(4, 3), (5, 4)]),
    "batched_transpose": (lambda a, b: a @ b.transpose(-2, -1), [(2, 3, 4), (2, 5, 4)]),
    "self_gram": (lambda a: a @ a.T, [(3, 4)]),
    "numpy_rhs": (lambda a: a @ np.arange(8.0).reshape(4, 2), [(3, 4)]),
}


@pytest.mark.parametrize("case", list(MATMUL_CASES))
def test_matmul(case, rng):
    fn, shapes = MATMUL_CASES[case]
    check_gradients(f"matmul/{case}", fn, [normal(rng, s) for s in shapes], rng)


# ---------------------------------------------------------------------------
# Embedding / gather
# ---------------------------------------------------------------------------

def _ids(rng, rows, shape):
    ids = rng.integers(0, rows, shape)
    ids.flat[0] = ids.flat[1] = ids.flat[-1] = 2  # a row used three times
    return ids.astype(np.int64)


@pytest.mark.parametrize("case", ["embedding", "getitem", "3d_table", "int32_ids"])
def test_embedding_repeated_ids(case, rng):
    """Rows used several times accumulate (scatter-add); unused rows get 0."""
    if case == "3d_table":
        table, ids = normal(rng, (6, 2, 3)), _ids(rng, 4, (5,))
    else:
        table, ids = normal(rng, (7, 3)), _ids(rng, 5, (2, 4))
    if case == "int32_ids":
        ids = ids.astype(np.int32)
    fn = (lambda t, i: t[i]) if case == "getitem" else (lambda t, i: F.embedding(i, t))
    (g,), W = check_gradients(f"embedding/{case}", fn, [table, ids], rng, wrt=[0])
    want = np.zeros_like(table)
    np.add.at(want, ids, W)
    np.testing.assert_allclose(g, want, rtol=1e-14, atol=1e-15)
    assert not g[5:].any(), "rows no id refers to must get an exact zero gradient"


# ---------------------------------------------------------------------------
# Composite ops
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dim", [-1, 0, 1])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax(op, dim, rng):
    x = normal(rng, (2, 3, 4), 2.0)
    fn = (lambda t: F.softmax(t, dim)) if op == "softmax" else (lambda t: F.log_softmax(t, dim))
    check_gradients(f"{op}(dim={dim})", fn, [x], rng)


def test_softmax_causal_mask(rng):
    """Attention style: where(causal, scores, -1e9) then softmax; masked
    scores get exactly zero gradient."""
    x = normal(rng, (2, 4, 4), 2.0)
    causal = np.tril(np.ones((4, 4), bool))
    (g,), _ = check_gradients("masked softmax",
                              lambda t: F.softmax(tilefuse.where(causal, t, -1e9), -1), [x], rng)
    assert not g[:, ~causal].any()


@pytest.mark.parametrize("nshape", [(5,), (3, 5)], ids=["1d", "2d"])
def test_layer_norm(nshape, rng):
    x = normal(rng, (2, 3, 5), 2.0) + 0.5
    w, b = normal(rng, nshape) + 1.0, normal(rng, nshape)
    check_gradients(f"layer_norm{nshape}", lambda t, ww, bb: F.layer_norm(t, nshape, ww, bb),
                    [x, w, b], rng)


@pytest.mark.parametrize("case", ["2d_bias", "3d_bias", "3d_no_bias", "1d_bias"])
def test_linear(case, rng):
    xs = {"2d_bias": (3, 4), "3d_bias": (2, 3, 4), "3d_no_bias": (2, 3, 4), "1d_bias": (4,)}[case]
    x, w = normal(rng, xs), normal(rng, (5, 4))
    if case.endswith("no_bias"):
        check_gradients(f"linear/{case}", lambda t, ww: F.linear(t, ww), [x, w], rng)
    else:
        b = normal(rng, (5,))
        check_gradients(f"linear/{case}", lambda t, ww, bb: F.linear(t, ww, bb), [x, w, b], rng)


# ---------------------------------------------------------------------------
# Losses
# ---------------------------------------------------------------------------

def _targets(rng, shape, classes, ignore_index):
    t = rng.integers(0, classes, shape)
    flat = t.reshape(-1)
    flat[1] = flat[-1] = ignore_index
    return t.astype(np.int64)


@pytest.mark.parametrize("ignore_index", [-100, 2], ids=["ignore-100", "ignore_class2"])
@pytest.mark.parametrize("op", ["cross_entropy", "nll_loss"])
def test_class_losses(op, ignore_index, rng):
    """Mean over the non-ignored entries; ignored rows get exactly zero
    gradient (the count of valid entries is part of the gradient too)."""
    x = normal(rng, (2, 3, 5), 2.0)
    t = _targets(rng, (2, 3), 5, ignore_index)
    loss = getattr(F, op)
    (g,), W = check_gradients(f"{op}(ignore_index={ignore_index})",
                              lambda a, b: loss(a.reshape(-1, 5), b.reshape(-1),
                                                ignore_index=ignore_index), [x, t], rng,
                              wrt=[0])
    ignored = t == ignore_index
    assert ignored.sum() >= 2
    assert not g[ignored].any(), "ignored entries must get exactly zero gradient"
    # analytic: d(nll)/dx = -onehot / count, d(ce)/dx = (softmax - onehot) / count
    count = (~ignored).sum()
    onehot = np.zeros_like(x)
    np.put_along_axis(onehot, np.where(ignored, 0, t)[..., None], 1.0, -1)
    onehot[ignored] = 0.0
    if op == "nll_loss":
        want = -onehot / count
    else:
        e = np.exp(x - x.max(-1, keepdims=True))
        want = np.where(ignored[..., None], 0.0, e / e.sum(-1, keepdims=True) - onehot) / count
    np.testing.assert_allclose(g, want * float(W), rtol=1e-12, atol=1e-15)


def test_mse_loss(rng):
    check_gradients("mse_loss", lambda a, b: F.mse_loss(a, b),
                    [normal(rng, (3, 4)), normal(rng, (3, 4))], rng)


def test_binary_cross_entropy(rng):
    p = rng.uniform(0.25, 0.75, (3, 4))  # the stencil's error grows as 1/p^5
    t = rng.uniform(0.0, 1.0, (3, 4))
    t.flat[:2] = [0.0, 1.0]
    check_gradients("binary_cross_entropy", lambda a, b: F.binary_cross_entropy(a, b),
                    [p, t], rng)


def test_binary_cross_entropy_of_sigmoid(rng):
    z = normal(rng, (6,), 2.0)
    y = (rng.random(6) < 0.5).astype(np.float64)
    check_gradients("bce(sigmoid)", lambda a, b: F.binary_cross_entropy(F.sigmoid(a), b),
                    [z, y], rng, wrt=[0])


# ---------------------------------------------------------------------------
# Dropout
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_gradient_is_the_forward_mask(p, rng):
    """With a fixed seed dropout is linear: the gradient is mask * 1/(1-p) * W,
    with the same mask as the forward pass (stream 0 of that seed)."""
    seed = np.int64(-0x0123456789ABCDEF)
    x = normal(rng, (4, 13))
    fn = lambda t, s: F.dropout(t, p, True, seed=s)  # noqa: E731
    (g,), W = check_gradients(f"dropout(p={p})", fn, [x, seed], rng, wrt=[0])
    keep = R.random_uniform(seed, 0, x.shape, np.float64) >= p
    assert 0 < keep.sum() < keep.size
    out = tilefuse.trace(fn, x, seed).interpret(x, seed)
    np.testing.assert_array_equal(out != 0, keep)  # the forward mask
    np.testing.assert_allclose(g, np.where(keep, W / (1.0 - p), 0.0), rtol=1e-15, atol=0)


def test_dropout_two_streams(rng):
    seed = np.int64(7)
    x = normal(rng, (3, 9))
    fn = lambda t, s: F.dropout(F.dropout(t, 0.5, True, seed=s).tanh(), 0.3, True, seed=s)  # noqa
    check_gradients("dropout twice", fn, [x, seed], rng, wrt=[0])


# ---------------------------------------------------------------------------
# Kinks and ties: the documented rules, at exactly the tie
# ---------------------------------------------------------------------------

def test_relu_at_zero_is_zero_as_in_pytorch(rng):
    """relu'(0) = 0 (PyTorch's and JAX's convention; an average of the
    one-sided slopes would make zero-padded rows and zero biases train
    differently), and a NaN input passes its cotangent as in PyTorch."""
    x = np.array([[-1.0, 0.0, 2.0], [0.0, -0.0, 0.5]])
    W = rng.standard_normal(x.shape)
    g = tilefuse.trace(lambda t, w: (F.relu(t) * w).sum(), x, W).value_and_grad(wrt=(0,))
    for name, run in [("interpreter", g.interpret), ("compiled", g.compile("cpu"))]:
        _, got = run(x, W)
        np.testing.assert_array_equal(got, np.where(x > 0, 1.0, 0.0) * W, err_msg=name)
    xn = np.array([np.nan, 1.0, -1.0])
    gn = tilefuse.trace(lambda t: F.relu(t).sum(), xn).value_and_grad(wrt=(0,))
    for name, run in [("interpreter", gn.interpret), ("compiled", gn.compile("cpu"))]:
        value, got = run(xn)
        assert np.isnan(value), name
        np.testing.assert_array_equal(got, [1.0, 1.0, 0.0], err_msg=name)


def test_maximum_minimum_with_equal_values(rng):
    a = np.array([1.0, -2.0, 3.0, 0.0])
    b = np.array([1.0, -2.0, 2.0, 1.0])  # ties at 0 and 1
    for name, fn, a_wins in [("maximum", lambda x, y: x.maximum(y), a > b),
                             ("minimum", lambda x, y: x.minimum(y), a < b)]:
        (ga, gb), W = check_gradients(name, fn, [a, b], rng)
        tie = a == b
        share_a = np.where(tie, 0.5, np.where(a_wins, 1.0, 0.0))
        np.testing.assert_allclose(ga, share_a * W, rtol=1e-15, atol=0, err_msg=name)
        np.testing.assert_allclose(gb, (1.0 - share_a) * W, rtol=1e-15, atol=0, err_msg=name)


def test_maximum_same_tensor_twice(rng):
    """max(x, x) = x: both halves of the split reach x, the gradient is W."""
    x = normal(rng, (5,))
    (g,), W = check_gradients("maximum(x, x)", lambda t: t.maximum(t), [x], rng)
    np.testing.assert_allclose(g, W, rtol=1e-15, atol=0)


@pytest.mark.parametrize("op", ["max", "min"])
def test_reduce_two_way_tie(op, rng):
    x = np.array([[3.0, 3.0, -1.0, -1.0], [2.0, -4.0, 2.0, -4.0], [0.0, 1.0, -1.0, 0.5]])
    (g,), W = check_gradients(f"{op} with ties", lambda t: getattr(t, "a" + op)(1), [x], rng)
    ext = getattr(x, op)(1, keepdims=True)
    hits = x == ext
    want = hits / hits.sum(1, keepdims=True) * W[:, None]
    np.testing.assert_allclose(g, want, rtol=1e-15, atol=0)
    assert hits.sum() == x.shape[0] + 2  # rows 0 and 1 each have one 2-way tie


def test_reduce_max_four_way_tie_splits_evenly(rng):
    """A 4-way tie: each element gets W/4 (the documented even split). Not
    compared with finite differences: at an n-way tie the symmetric stencil
    gives 1/2 for every element whatever n, which agrees with the rule only
    for n = 2 (covered above)."""
    x = np.array([[1.5, 1.5, 1.5, 1.5], [-2.0, -2.0, -2.0, -2.0]])
    W = rng.standard_normal(2)
    g = tilefuse.trace(lambda t: (t.amax(-1) * W).sum(), x)
    _, (gx,) = value_and_grad(g, [x], [0])
    np.testing.assert_allclose(gx, np.repeat(W[:, None] / 4, 4, 1), rtol=1e-15, atol=0)
    g = tilefuse.trace(lambda t: (t.amin(0) * W[0]).sum(), x)
    _, (gx,) = value_and_grad(g, [x], [0])
    np.testing.assert_allclose(gx, np.array([[0.0] * 4, [W[0]] * 4]), rtol=1e-15, atol=0)


def test_abs_at_zero_is_zero(rng):
    x = np.array([-1.5, 0.0, -0.0, 2.0])
    (g,), W = check_gradients("abs at 0", lambda t: abs(t), [x], rng)
    np.testing.assert_allclose(g, np.sign(x) * W, rtol=1e-15, atol=0)
    assert g[1] == 0 and g[2] == 0


# ---------------------------------------------------------------------------
# Extremes: the backward pass must stay finite where the forward is
# ---------------------------------------------------------------------------

def _sigmoid64(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


SATURATING = {
    "sigmoid": (lambda t: t.sigmoid(), lambda x: _sigmoid64(x) * _sigmoid64(-x)),
    "silu": (F.silu, lambda x: _sigmoid64(x) * (1.0 + x * _sigmoid64(-x))),
    "tanh": (lambda t: t.tanh(), lambda x: 1.0 - np.tanh(x) ** 2),
    "gelu_erf": (F.gelu, lambda x: 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
                 + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)),
    "gelu_tanh": (lambda t: F.gelu(t, approximate="tanh"), None),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("op", list(SATURATING))
def test_saturated_activation_gradients(op, dtype):
    """At |x| up to 100 the derivative is finite and (to the dtype's
    precision, absolutely) the analytic one; 0 * inf must not appear."""
    fn, deriv = SATURATING[op]
    x = np.array([-100.0, -60.0, -20.0, -5.0, 0.0, 5.0, 20.0, 60.0, 100.0])
    g = tilefuse.trace(lambda t: fn(t).sum(), x.astype(dtype))
    _, gx = g.value_and_grad(wrt=(0,)).interpret(x.astype(dtype))
    assert np.isfinite(gx).all(), f"{op}: non-finite gradient {gx} at {x}"
    if deriv is not None:
        tol = 1e-6 if dtype == np.float32 else 1e-13
        np.testing.assert_allclose(gx.astype(np.float64), deriv(x), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_softmax_and_cross_entropy_gradients_with_huge_logits(dtype):
    """Logits of +-500 (exp overflows even in float64 without the max shift)."""
    z = np.array([[500.0, 0.0, -500.0], [100.0, 99.0, 0.0], [-3.0, 88.0, 89.0]])
    w = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [-1.0, 0.5, 2.0]])
    y = np.array([2, 0, 1])
    e = np.exp(z - z.max(-1, keepdims=True))
    sm = e / e.sum(-1, keepdims=True)
    onehot = np.eye(3)[y]
    want = {
        "softmax": sm * (w - (sm * w).sum(-1, keepdims=True)),
        "log_softmax": w - sm * w.sum(-1, keepdims=True),
        "cross_entropy": (sm - onehot) / 3,
    }
    fns = {
        "softmax": lambda t: (F.softmax(t, -1) * w.astype(dtype)).sum(),
        "log_softmax": lambda t: (F.log_softmax(t, -1) * w.astype(dtype)).sum(),
        "cross_entropy": lambda t: F.cross_entropy(t, y),
    }
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for name, fn in fns.items():
        g = tilefuse.trace(fn, z.astype(dtype))
        _, gz = g.value_and_grad(wrt=(0,)).interpret(z.astype(dtype))
        assert np.isfinite(gz).all(), f"{name}: non-finite gradient {gz}"
        np.testing.assert_allclose(gz.astype(np.float64), want[name], rtol=tol, atol=tol,
                                   err_msg=name)


def test_softmax_masked_with_minus_inf(rng):
    """masked_fill(-inf) before softmax (causal attention): finite gradient,
    exactly 0 at the masked scores, and the finite differences elsewhere."""
    x = normal(rng, (2, 4, 4), 2.0)
    future = np.triu(np.ones((4, 4), bool), k=1)
    fn = lambda t: F.softmax(t.masked_fill(future, float("-inf")), -1)  # noqa: E731
    (g,), _ = check_gradients("softmax after masked_fill(-inf)", fn, [x], rng)
    assert np.isfinite(g).all() and not g[:, future].any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_bce_of_saturated_sigmoid_has_finite_gradient(dtype):
    """DeepFM's head: BCE(sigmoid(z)). Where sigmoid rounds to exactly 0 or
    1 (|z| > ~17 in float32, > ~37 / 745 in float64) the forward is finite
    (the logs are clamped at -100); the gradient w.r.t. z must be finite
    too, and for a correctly classified example it is (sigmoid(z) - t) / n
    ~ 0 (PyTorch gives the same: its BCE backward divides by
    max(p (1 - p), 1e-12))."""
    z = np.array([-200.0, 200.0, -40.0, 40.0, 0.0, 3.0])
    t = np.array([0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    g = tilefuse.trace(lambda a, b: F.binary_cross_entropy(F.sigmoid(a), b),
                       z.astype(dtype), t.astype(dtype))
    loss, gz = g.value_and_grad(wrt=(0,)).interpret(z.astype(dtype), t.astype(dtype))
    assert np.isfinite(loss)
    assert np.isfinite(gz).all(), f"non-finite gradient {gz} for z={z}, t={t}"
    want = (_sigmoid64(z) - t) / z.size
    tol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(gz.astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_bce_gradient_finite_at_probability_zero_and_one(dtype):
    """p exactly 0 or 1 (the clamp at -100 is active): finite gradients."""
    p = np.array([0.0, 1.0, 0.0, 1.0, 0.5], dtype)
    t = np.array([0.0, 1.0, 1.0, 0.0, 1.0], dtype)
    g = tilefuse.trace(lambda a, b: F.binary_cross_entropy(a, b), p, t)
    loss, gp, gt = g.value_and_grad(wrt=(0, 1)).interpret(p, t)
    assert np.isfinite(loss)
    assert np.isfinite(gp).all(), f"d/dp non-finite: {gp} for p={p}, t={t}"
    assert np.isfinite(gt).all(), f"d/dt non-finite: {gt}"
    assert gp[4] == np.asarray(-1.0 / 0.5 / 5, dtype)


# ---------------------------------------------------------------------------
# Compositions: fan-out, reuse, a small network
# ---------------------------------------------------------------------------

def test_fan_out_accumulates(rng):
    x = normal(rng, (3, 4))
    check_gradients("fan-out", lambda t: t.exp() * t + t.tanh() * t - t, [x], rng)


def test_two_layer_network(rng):
    x, w1, b1 = normal(rng, (5, 4)), normal(rng, (6, 4)), normal(rng, (6,))
    w2, b2 = normal(rng, (3, 6)), normal(rng, (3,))
    t = np.array([0, 2, 1, 1, 0])

    def net(x, w1, b1, w2, b2, t):
        h = F.gelu(F.linear(x, w1, b1), approximate="tanh")
        h = F.layer_norm(h, 6, np.ones(6), np.zeros(6))
        return F.cross_entropy(F.linear(h, w2, b2), t)

    check_gradients("two-layer net", net, [x, w1, b1, w2, b2, t], rng)


# ---------------------------------------------------------------------------
# The API: structure, wrt, errors
# ---------------------------------------------------------------------------

def test_unused_input_gets_zeros():
    x, unused = np.arange(6.0).reshape(2, 3), np.ones((4, 1, 2))
    g = tilefuse.trace(lambda a, u: (a * a).sum(), x, unused)
    loss, gx, gu = g.value_and_grad(wrt=(0, 1)).interpret(x, unused)
    assert float(loss) == 55.0
    np.testing.assert_array_equal(gx, 2 * x)
    assert gu.shape == (4, 1, 2) and gu.dtype == np.float64
    np.testing.assert_array_equal(gu, np.zeros((4, 1, 2)))


def test_input_used_only_through_a_comparison_gets_zeros():
    x, y = np.array([1.0, -2.0, 3.0]), np.array([0.5, 0.5, 0.5])
    g = tilefuse.trace(lambda a, b: tilefuse.where(b > 0, a, 0.0).sum(), x, y)
    _, gx, gy = g.value_and_grad(wrt=(0, 1)).interpret(x, y)
    np.testing.assert_array_equal(gx, np.ones(3))
    np.testing.assert_array_equal(gy, np.zeros(3))


def test_wrt_order_and_subset(rng):
    a, b, c = normal(rng, (2, 3)), normal(rng, (3,)), normal(rng, (2, 3))
    fn = lambda x, y, z: ((x * y).exp() * z).sum()  # noqa: E731
    g = tilefuse.trace(fn, a, b, c)
    loss, ga, gb, gc = g.value_and_grad(wrt=(0, 1, 2)).interpret(a, b, c)
    loss2, gc2, ga2 = g.value_and_grad(wrt=(2, 0)).interpret(a, b, c)
    loss3, gb3 = g.value_and_grad(wrt=(1,)).interpret(a, b, c)
    assert float(loss) == float(loss2) == float(loss3)
    np.testing.assert_array_equal(gc2, gc)
    np.testing.assert_array_equal(ga2, ga)
    np.testing.assert_array_equal(gb3, gb)
    e = np.exp(a * b)
    np.testing.assert_allclose(ga, e * b * c, rtol=1e-14)
    np.testing.assert_allclose(gb, (e * a * c).sum(0), rtol=1e-14)
    np.testing.assert_allclose(gc, e, rtol=1e-14)


def test_dict_arguments_flatten_in_sorted_key_order(rng):
    """wrt indexes the flat argument list: dict keys sorted, then the next argument."""
    params = {"w": normal(rng, (3,)), "b": normal(rng, (3,))}  # flat: b, w, then x
    x = normal(rng, (3,))
    g = tilefuse.trace(lambda p, t: ((p["w"] * t + p["b"]) ** 2).sum(), params, x)
    loss, gb, gw, gx = g.value_and_grad(wrt=(0, 1, 2)).interpret(params, x)
    r = params["w"] * x + params["b"]
    np.testing.assert_allclose(gb, 2 * r, rtol=1e-14)
    np.testing.assert_allclose(gw, 2 * r * x, rtol=1e-14)
    np.testing.assert_allclose(gx, 2 * r * params["w"], rtol=1e-14)


def test_extra_outputs_come_before_the_gradients(rng):
    x = normal(rng, (2, 3))
    g = tilefuse.trace(lambda t: ((t * t).sum(), t.exp(), t.sum(1)), x)
    loss, e, s, gx = g.value_and_grad(wrt=(0,)).interpret(x)
    np.testing.assert_allclose(loss, (x * x).sum(), rtol=1e-14)
    np.testing.assert_allclose(e, np.exp(x), rtol=1e-14)
    np.testing.assert_allclose(s, x.sum(1), rtol=1e-14)
    np.testing.assert_allclose(gx, 2 * x, rtol=1e-14)


def test_float32_gradients_are_float32(rng):
    x = normal(rng, (3, 4)).astype(np.float32)
    w = normal(rng, (4,)).astype(np.float32)
    g = tilefuse.trace(lambda a, b: (F.relu(a) * b).sum(), x, w)
    loss, gx, gw = g.value_and_grad(wrt=(0, 1)).interpret(x, w)
    assert loss.dtype == gx.dtype == gw.dtype == np.float32
    np.testing.assert_allclose(gx, (x > 0) * w, rtol=1e-6)
    np.testing.assert_allclose(gw, np.maximum(x, 0).sum(0), rtol=1e-5)


def test_wrt_integer_input_raises():
    x, k = np.ones((2, 3)), np.arange(6).reshape(2, 3)
    g = tilefuse.trace(lambda a, b: (a * b.to(tilefuse.float64)).sum(), x, k)
    with pytest.raises(tilefuse.CompileError):
        g.value_and_grad(wrt=(1,)).interpret(x, k)
    with pytest.raises(tilefuse.CompileError):
        g.value_and_grad(wrt=(0, 1)).interpret(x, k)


def test_wrt_bool_input_raises():
    x, m = np.ones((2, 3)), np.ones((2, 3), bool)
    g = tilefuse.trace(lambda a, b: tilefuse.where(b, a, 0.0).sum(), x, m)
    with pytest.raises(tilefuse.CompileError):
        g.value_and_grad(wrt=(1,)).interpret(x, m)


# Not spelled out by the API description; the project's convention is that
# every user mistake is a CompileError.
def test_wrt_out_of_range_raises():
    x = np.ones(3)
    g = tilefuse.trace(lambda a: (a * a).sum(), x)
    with pytest.raises(tilefuse.CompileError):
        g.value_and_grad(wrt=(1,)).interpret(x)


def test_non_scalar_loss_raises():
    x = np.ones(3)
    g = tilefuse.trace(lambda a: a * a, x)
    with pytest.raises(tilefuse.CompileError):
        g.value_and_grad(wrt=(0,)).interpret(x)
