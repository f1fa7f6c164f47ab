"""The plain-numpy benchmark baseline (bench/numpy_train.py) against the
JAX references of jax_reference.py: losses, gradients and the parameters
after one optimizer step.

Gradients are compared too because, at step 1, Adam moves each parameter by
about lr * sign(grad): the updated parameters alone would not catch a wrong
gradient magnitude.

Tolerances (float32 baseline vs float64 JAX on the same float32 parameters):
rtol 1e-4, atol 1e-5 for losses and updated parameters; gradients 1e-4 of
max|ref| per tensor (elementwise relative errors are meaningless where a
gradient is ~0).
"""

import os
import sys

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from tilefuse import workloads as W

import jax_reference as J

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_REPO, "bench"))

import numpy_train as NT  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
GRAD_TOL = 1e-4
GPT2_SMALL = dict(n_layer=2, d_model=32, n_head=4, seq=16, vocab=64, batch=2)


def _copy(params):
    return {k: v.copy() for k, v in params.items()}


def _jitter(params, seed):
    """Noise on every 1-d parameter: at init biases are 0 and LayerNorm
    scales 1, which would leave their gradients' effect untested."""
    rng = np.random.default_rng(seed)
    return {
        k: v + rng.normal(0.0, 0.05, v.shape).astype(v.dtype) if v.ndim == 1 else v
        for k, v in params.items()
    }


def assert_loss_close(what, got, ref):
    assert np.isclose(got, ref, rtol=RTOL, atol=ATOL), (
        f"{what}: loss {got!r} vs reference {ref!r} (|diff| {abs(got - ref):.3g})"
    )


def assert_grads_close(what, got, ref):
    assert set(got) == set(ref), f"{what}: keys {sorted(got)} vs {sorted(ref)}"
    bad = []
    for k in sorted(ref):
        assert got[k].dtype == np.float32, f"{what}: {k} is {got[k].dtype}"
        err = np.abs(got[k].astype(np.float64) - ref[k]).max()
        scale = np.abs(ref[k]).max()
        if err > GRAD_TOL * scale:
            bad.append(f"{k}: max|diff| {err:.3g}, max|ref| {scale:.3g}")
    msg = f"{what}: gradients off by more than {GRAD_TOL:g} of max|ref|: "
    assert not bad, msg + "; ".join(bad)


def assert_params_close(what, got, ref):
    assert set(got) == set(ref), f"{what}: keys {sorted(got)} vs {sorted(ref)}"
    bad = []
    for k in sorted(ref):
        assert got[k].dtype == np.float32, f"{what}: {k} is {got[k].dtype}"
        g, r = got[k].astype(np.float64), np.asarray(ref[k], np.float64)
        if not np.allclose(g, r, rtol=RTOL, atol=ATOL):
            bad.append(f"{k}: max|diff| {np.abs(g - r).max():.3g}")
    msg = f"{what}: updated parameters differ (rtol {RTOL}, atol {ATOL}): "
    assert not bad, msg + "; ".join(bad)


CASES = {
    "gpt2_mini": dict(
        config=lambda: W.gpt2_mini_config(**GPT2_SMALL),
        init=W.gpt2_mini_init,
        batch=lambda cfg: W.gpt2_mini_batch(cfg, seed=1),
        grads=NT.gpt2_mini_loss_and_grads,
        step=NT.gpt2_mini_step,
        ref_opt=lambda: J.AdamW(lr=1e-3, weight_decay=0.01),
    ),
    "mlp_mnist": dict(
        config=W.mlp_mnist_config,
        init=W.mlp_mnist_init,
        batch=lambda cfg: W.mlp_mnist_batch(cfg, seed=1),
        grads=NT.mlp_mnist_loss_and_grads,
        step=NT.mlp_mnist_step,
        ref_opt=lambda: J.Adam(lr=2e-4),
    ),
}


@pytest.mark.parametrize("model", sorted(CASES))
def test_one_step_without_dropout(model):
    case = CASES[model]
    cfg = case["config"]()
    params = case["init"](cfg, seed=0)
    batch = case["batch"](cfg)

    ref_loss, ref_grads = J.loss_and_grad(model, params, batch, None, cfg, training=False)
    loss, grads = case["grads"](params, batch, cfg)
    assert_loss_close(model, loss, ref_loss)
    assert_grads_close(model, grads, ref_grads)

    new = _copy(params)
    state = NT.init_state(new)
    loss = case["step"](new, state, batch, 1, cfg)
    assert_loss_close(f"{model} step", loss, ref_loss)
    assert_params_close(f"{model} step", new, case["ref_opt"]().step(params, ref_grads))


def test_gpt2_mini_jittered_gradients():
    """Non-trivial LayerNorm scales and biases."""
    cfg = W.gpt2_mini_config(**GPT2_SMALL)
    params = _jitter(W.gpt2_mini_init(cfg, seed=0), seed=2)
    batch = W.gpt2_mini_batch(cfg, seed=3)
    ref_loss, ref_grads = J.loss_and_grad("gpt2_mini", params, batch, None, cfg, training=False)
    loss, grads = NT.gpt2_mini_loss_and_grads(params, batch, cfg)
    assert_loss_close("gpt2_mini jittered", loss, ref_loss)
    assert_grads_close("gpt2_mini jittered", grads, ref_grads)


def _dropout_shapes(model, cfg, batch):
    """Mask shapes in the order the baseline draws them (the stream order)."""
    if model == "mlp_mnist":
        return [(batch["x"].shape[0], cfg["hidden"])] * 2
    B, T = batch["tokens"].shape[0], batch["tokens"].shape[1] - 1
    d, H = cfg["d_model"], cfg["n_head"]
    return [(B, T, d)] + [(B, H, T, T), (B, T, d), (B, T, d)] * cfg["n_layer"]


@pytest.mark.parametrize("model", sorted(CASES))
def test_gradients_with_dropout(model):
    """The same Generator draws, turned into masks for the JAX model."""
    case = CASES[model]
    cfg = case["config"]()
    params = case["init"](cfg, seed=0)
    if model == "gpt2_mini":
        params = _jitter(params, seed=4)
    batch = case["batch"](cfg)

    rng = np.random.default_rng(5)
    shapes = _dropout_shapes(model, cfg, batch)
    masks = [jnp.asarray(rng.random(s) >= cfg["dropout"]) for s in shapes]
    loss_fn = J.MODELS[model][0]
    f64 = {k: jnp.asarray(np.asarray(v, np.float64)) for k, v in params.items()}
    b64 = {
        k: jnp.asarray(np.asarray(v, np.float64) if v.dtype.kind == "f" else v)
        for k, v in batch.items()
    }
    value_and_grad = jax.jit(jax.value_and_grad(lambda p, b, m: loss_fn(p, b, m, cfg)))
    ref_loss, ref_grads = value_and_grad(f64, b64, masks)
    ref_grads = {k: np.asarray(v) for k, v in ref_grads.items()}

    loss, grads = case["grads"](params, batch, cfg, dropout_rng=np.random.default_rng(5))
    assert_loss_close(f"{model} dropout", loss, float(ref_loss))
    assert_grads_close(f"{model} dropout", grads, ref_grads)
