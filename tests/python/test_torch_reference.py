"""tilefuse's gpt2_mini and mlp_mnist against PyTorch (torch_reference.py).

* (a) Loss and gradients: the float32 workload (dropout 0, 1-d parameters
  jittered so that biases and LayerNorm are exercised), traced and
  differentiated with value_and_grad, on the reference interpreter and on
  compiled CPU kernels, against torch.autograd in float64 from the same
  float32 parameters: loss within LOSS_RTOL relative; each parameter's
  gradient within GRAD_TOL of the largest |reference| element of that
  gradient (max |got - ref| / max |ref|, which is stricter than
  backend_checks.assert_close_to_scale(rtol=atol=GRAD_TOL) for gradients
  below 1 in magnitude, and single gradient elements can be ~0).
* (b) Training: 5 float32 AdamW steps (lr 1e-3, weight decay 0.01) of
  gpt2_mini through tilefuse.compile_train_step against torch.optim.AdamW
  (torch_reference.torch_trajectory, float32) on the same batch: every
  loss within TRAJ_RTOL relative (observed ~2e-7; the loss itself falls
  from 6.96 to 5.73, so the updates are what is compared).
* Dropout other than 0 in training mode is refused by the PyTorch reference.

Tolerances are never loosened to make a test pass.
"""
import numpy as np
import pytest

import tilefuse
from tilefuse import workloads as W

# PyTorch is part of the setup (tools/dev.sh): its absence is a failure.
import torch  # noqa: E402
import torch_reference as TR  # noqa: E402

LOSS_RTOL = 1e-5
GRAD_TOL = 1e-4
TRAJ_RTOL = 1e-4
SEED = np.int64(0)


def _jitter(params, seed):
    """Noise on every 1-d parameter (biases, LayerNorm scales are 0/1 at init)."""
    rng = np.random.default_rng(seed)
    return {k: v + rng.normal(0.0, 0.05, v.shape).astype(v.dtype) if v.ndim == 1 else v
            for k, v in params.items()}


def _workload(name):
    """(config, float32 params, batch, tilefuse loss, torch loss) with dropout 0."""
    if name == "gpt2_mini":
        cfg = W.gpt2_mini_config(dropout=0.0)
        params = _jitter(W.gpt2_mini_init(cfg, seed=0), 1)
        batch = W.gpt2_mini_batch(cfg, seed=2)
        return (cfg, params, batch, lambda p, b, s: W.gpt2_mini_loss(p, b, s, cfg, True),
                lambda p, b: TR.gpt2_mini_loss(p, b, None, cfg, True))
    cfg = W.mlp_mnist_config(dropout=0.0)
    params = _jitter(W.mlp_mnist_init(cfg, seed=3), 4)
    batch = W.mlp_mnist_batch(cfg, seed=4)
    return (cfg, params, batch, lambda p, b, s: W.mlp_mnist_loss(p, b, s, cfg, True),
            lambda p, b: TR.mlp_mnist_loss(p, b, None, cfg, True))


def _max_rel(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    scale = np.abs(ref).max()
    err = np.abs(got - ref).max()
    return err / scale if scale > 0 else err


@pytest.fixture(scope="module", params=["gpt2_mini", "mlp_mnist"])
def workload_grads(request):
    """name, torch (loss, grads) in float64, and {backend: (loss, grads)} of
    the float32 tilefuse value_and_grad."""
    name = request.param
    _, params, batch, tf_loss, torch_loss = _workload(name)
    names = sorted(params)  # tilefuse flattens the params dict in sorted key order
    vg = tilefuse.trace(tf_loss, params, batch, SEED).value_and_grad(tuple(range(len(names))))
    runs = {"interpret": vg.interpret(params, batch, SEED),
            "compiled cpu": vg.compile("cpu")(params, batch, SEED)}
    got = {}
    for backend, out in runs.items():
        assert len(out) == 1 + len(names), (name, backend, len(out))
        got[backend] = (out[0], dict(zip(names, out[1:])))
    return name, TR.loss_and_grad(torch_loss, params, batch, torch.float64), got, params


@pytest.mark.parametrize("backend", ["interpret", "compiled cpu"])
def test_loss_matches_torch(workload_grads, backend):
    name, (ref_loss, _), got, _ = workload_grads
    loss = got[backend][0]
    assert np.asarray(loss).dtype == np.float32, f"{name} [{backend}]: loss dtype"
    rel = abs(float(loss) - ref_loss) / abs(ref_loss)
    assert rel <= LOSS_RTOL, (f"{name} [{backend}]: loss {float(loss)!r} vs PyTorch float64 "
                              f"{ref_loss!r}, relative error {rel:.3g} > {LOSS_RTOL:g}")


@pytest.mark.parametrize("backend", ["interpret", "compiled cpu"])
def test_gradients_match_torch(workload_grads, backend):
    name, (_, ref_grads), got, params = workload_grads
    grads = got[backend][1]
    assert set(grads) == set(ref_grads) == set(params), name
    errs = {}
    for k in sorted(params):
        g = np.asarray(grads[k])
        assert g.shape == params[k].shape and g.dtype == np.float32, (
            f"{name} [{backend}]: gradient of {k}: {g.dtype}{list(g.shape)}, want "
            f"float32{list(params[k].shape)}")
        errs[k] = _max_rel(g, ref_grads[k])
    bad = {k: e for k, e in errs.items() if not e <= GRAD_TOL}
    assert not bad, (f"{name} [{backend}]: gradients vs PyTorch float64, max |diff| / max |ref| "
                     f"above {GRAD_TOL:g} for " + ", ".join(
                         f"{k}: {e:.3g}" for k, e in sorted(bad.items(), key=lambda kv: -kv[1])))


def test_gpt2_mini_adamw_trajectory_matches_torch():
    cfg = W.gpt2_mini_config(dropout=0.0)
    params = W.gpt2_mini_init(cfg, seed=0)
    # One batch, seen 5 times: on uniformly random tokens, distinct batches
    # leave the loss near log(vocab) (steps change it by < 1e-3 relative);
    # fitting one batch moves it by 20%, so a wrong update cannot hide.
    batches = [W.gpt2_mini_batch(cfg, seed=1)]
    steps = 5
    step = tilefuse.compile_train_step(
        lambda p, b, s: W.gpt2_mini_loss(p, b, s, cfg, True), params, batches[0],
        optimizer=tilefuse.optim.AdamW(lr=1e-3, weight_decay=0.01), device="cpu")
    got = [step(batches[t % len(batches)]) for t in range(steps)]
    want = TR.torch_trajectory(lambda p, b: TR.gpt2_mini_loss(p, b, None, cfg, True), params,
                               batches, "adamw", 1e-3, 0.01, steps)
    rel = [abs(g - w) / abs(w) for g, w in zip(got, want)]
    worst = int(np.argmax(rel))
    assert max(rel) <= TRAJ_RTOL, (
        f"gpt2_mini AdamW float32 trajectory vs PyTorch: relative loss difference "
        f"{rel[worst]:.3g} > {TRAJ_RTOL:g} at step {worst + 1} (tilefuse {got[worst]!r}, "
        f"PyTorch {want[worst]!r}); all: {[f'{r:.2g}' for r in rel]}")
    assert want[-1] < want[0] - 0.5, f"gpt2_mini: the PyTorch losses do not fall: {want}"


@pytest.mark.parametrize("name", ["gpt2_mini", "mlp_mnist"])
def test_dropout_in_training_is_refused(name):
    if name == "gpt2_mini":
        cfg = W.gpt2_mini_config(n_layer=1, d_model=8, n_head=2, seq=4, vocab=16, batch=1)
        params, batch, loss = W.gpt2_mini_init(cfg), W.gpt2_mini_batch(cfg, 1), TR.gpt2_mini_loss
    else:
        cfg = W.mlp_mnist_config(batch=2)
        params, batch, loss = W.mlp_mnist_init(cfg), W.mlp_mnist_batch(cfg, 1), TR.mlp_mnist_loss
    assert cfg["dropout"] > 0
    with pytest.raises(ValueError, match="dropout"):
        loss(TR.to_torch(params), batch, None, cfg, training=True)
    # Evaluation mode has no dropout: fine.
    assert np.isfinite(float(loss(TR.to_torch(params), batch, None, cfg, training=False).detach()))
