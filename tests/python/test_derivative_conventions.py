"""PyTorch's derivative conventions at kinks, ties and NaN, written out in
float64 numpy (PyTorch's derivatives.yaml formulas), through the
interpreter and compiled for the CPU. Exact comparisons: each expected
gradient is a selection of the cotangent, or half of it."""
import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F


def grads(fn, args, wrt):
    g = tilefuse.trace(fn, *args).value_and_grad(wrt=wrt)
    return [("interpreter", g.interpret(*args)[1:]), ("compiled", g.compile("cpu")(*args)[1:])]


def test_maximum_minimum_split_ties_and_pass_nan_to_both():
    a = np.array([1.0, 2.0, 3.0, np.nan, 0.0])
    b = np.array([1.0, 5.0, 0.0, 4.0, np.nan])
    w = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    # PyTorch: grad_a = where(a == b, g/2, g).masked_fill(a < b, 0) for maximum.
    want_a = np.where(a == b, w / 2, np.where(a < b, 0.0, w))
    want_b = np.where(a == b, w / 2, np.where(b < a, 0.0, w))
    for name, (ga, gb) in grads(lambda x, y: (x.maximum(y) * w).sum(), [a, b], (0, 1)):
        np.testing.assert_array_equal(ga, want_a, err_msg=name)
        np.testing.assert_array_equal(gb, want_b, err_msg=name)
    want_a = np.where(a == b, w / 2, np.where(a > b, 0.0, w))
    want_b = np.where(a == b, w / 2, np.where(b > a, 0.0, w))
    for name, (ga, gb) in grads(lambda x, y: (x.minimum(y) * w).sum(), [a, b], (0, 1)):
        np.testing.assert_array_equal(ga, want_a, err_msg=name)
        np.testing.assert_array_equal(gb, want_b, err_msg=name)


def test_amax_splits_ties_and_gives_a_nan_row_to_its_nans():
    x = np.array([[1.0, 3.0, 3.0, 2.0], [np.nan, 1.0, np.nan, 0.0], [5.0, 1.0, 2.0, 0.0]])
    w = np.array([1.0, 2.0, 4.0])
    want = np.array([[0, 0.5, 0.5, 0], [0.5, 0, 0.5, 0], [1, 0, 0, 0]]) * w[:, None]
    for name, (g,) in grads(lambda t: (t.amax(1) * w).sum(), [x], (0,)):
        np.testing.assert_array_equal(g, want, err_msg=name)


def test_abs_at_zero_and_relu_at_zero_are_zero():
    x = np.array([-2.0, -0.0, 0.0, 3.0])
    for name, (g,) in grads(lambda t: t.abs().sum() + F.relu(t).sum(), [x], (0,)):
        np.testing.assert_array_equal(g, [-1.0, 0.0, 0.0, 2.0], err_msg=name)


def test_a_nan_batch_makes_every_weight_nan_as_in_pytorch(rng):
    """One NaN input row: the loss is NaN and, as in PyTorch (relu passes a
    NaN's cotangent), every gradient and so every AdamW-updated weight is
    NaN -- not a few, which would silently keep training on a mix."""
    params = {"w1": rng.standard_normal((6, 8)), "b1": np.zeros(8),
              "w2": rng.standard_normal((8, 3)), "b2": np.zeros(3)}
    params = {k: v.astype(np.float32) for k, v in params.items()}
    batch = {"x": rng.standard_normal((5, 6)).astype(np.float32),
             "y": rng.integers(0, 3, 5).astype(np.int64)}

    def loss_fn(p, b):
        h = F.relu(b["x"] @ p["w1"] + p["b1"])
        return F.cross_entropy(h @ p["w2"] + p["b2"], b["y"])

    step = tilefuse.compile_train_step(loss_fn, params, batch,
                                       optimizer=tilefuse.optim.AdamW(lr=1e-3), device="cpu")
    assert np.isfinite(step(batch))
    bad = dict(batch, x=batch["x"].copy())
    bad["x"][2, 4] = np.nan
    assert np.isnan(step(bad))
    after = step.params()
    for name, value in after.items():
        assert np.isnan(value).all(), f"{name}: {np.isnan(value).sum()} of {value.size} NaN"
