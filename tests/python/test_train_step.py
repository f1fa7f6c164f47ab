"""Gradients of the WORKLOADS.md models and whole training steps
(tilefuse.compile_train_step + tilefuse.optim) against independent
references: the JAX models of jax_reference.py (jax.grad, float64) with the
same dropout masks, and the numpy PyTorch-semantics optimizers there.

Error measure, per tensor: max |got - ref| / max |ref| (a max-norm relative
error; single elements of a gradient can be ~0, so elementwise relative
errors are meaningless). For optimizer steps it is applied to the parameter
CHANGE since initialisation (p_t - p_0), so that an error in the update is
not hidden by the size of the parameters. Tolerances (never loosened to
make a test pass):
* float64 graphs: 1e-9 (observed: ~1e-15, rounding only);
* float32 graphs: 1e-4 against the float64 reference evaluated on the same
  float32 parameters (observed: <= 1e-6);
* losses: 1e-12 relative in float64, 1e-5 in float32; the 20-step gpt2_mini
  AdamW trajectory in float32: 1e-4 relative at every step (observed 3e-8).
"""
import math
import time

import numpy as np
import pytest

import tilefuse
from tilefuse import optim
from tilefuse import workloads as W

import jax_reference as J
import numpy_reference as R

SEED = np.int64(-0x0123456789ABCDEF)  # both 32-bit halves of the Philox key matter
GRAD_TOL = {np.float32: 1e-4, np.float64: 1e-9}
LOSS_TOL = {np.float32: 1e-5, np.float64: 1e-12}
GPT2_SMALL = dict(n_layer=2, d_model=32, n_head=4, seq=16, vocab=64, batch=2)


def _jitter(params, seed):
    """Noise on every 1-d parameter (biases, LayerNorm scales are 0/1 at init)."""
    rng = np.random.default_rng(seed)
    return {k: v + rng.normal(0.0, 0.05, v.shape).astype(v.dtype) if v.ndim == 1 else v
            for k, v in params.items()}


def max_rel_err(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = np.abs(ref).max()
    err = np.abs(got - ref).max()
    return err / scale if scale > 0 else err


def assert_tensors_close(what, got, ref, tol):
    assert set(got) == set(ref), f"{what}: keys {sorted(got)} vs {sorted(ref)}"
    errs = {k: max_rel_err(got[k], ref[k]) for k in ref}
    bad = {k: e for k, e in errs.items() if not e <= tol}
    assert not bad, (f"{what}: max|diff|/max|ref| above {tol:g} for "
                     + ", ".join(f"{k}: {e:.3g}" for k, e in sorted(bad.items(), key=lambda kv: -kv[1])))
    return max(errs.values())


def assert_loss_close(what, got, ref, tol):
    rel = abs(float(got) - ref) / abs(ref)
    assert rel <= tol, f"{what}: loss {float(got)!r} vs reference {ref!r} (relative {rel:.3g})"


# ---------------------------------------------------------------------------
# The JAX references themselves (independent of the new API)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_jax_reference_matches_numpy_reference(dtype, training):
    """jax_reference and numpy_reference are two independent writings of the
    same models: they agree to rounding (with the same dropout masks)."""
    cfg = W.gpt2_mini_config(**GPT2_SMALL)
    p, b = _jitter(W.gpt2_mini_init(cfg, dtype=dtype), 1), W.gpt2_mini_batch(cfg, 2)
    want, _ = R.gpt2_mini(p, b["tokens"], SEED, cfg, training, mask_dtype=dtype)
    assert_loss_close("gpt2_mini", J.loss_value("gpt2_mini", p, b, SEED, cfg, training), want, 1e-13)
    cfg = W.mlp_mnist_config()
    p, b = W.mlp_mnist_init(cfg, dtype=dtype), W.mlp_mnist_batch(cfg, 4, dtype=dtype)
    want = R.mlp_mnist(p, b["x"], b["y"], SEED, cfg, training, mask_dtype=dtype)
    assert_loss_close("mlp_mnist", J.loss_value("mlp_mnist", p, b, SEED, cfg, training), want, 1e-13)
    cfg = W.deepfm_config()
    p, b = _jitter(W.deepfm_init(cfg, dtype=dtype), 6), W.deepfm_batch(cfg, 7, dtype=dtype)
    want = R.deepfm(p, b["user"], b["movie"], b["label"], cfg)
    assert_loss_close("deepfm", J.loss_value("deepfm", p, b, SEED, cfg, False), want, 1e-13)


def test_reference_optimizers_by_hand():
    """The numpy optimizers against hand-computed PyTorch updates."""
    p, g = {"w": np.array([1.0, -2.0])}, {"w": np.array([0.5, 0.25])}
    sgd = J.SGD(0.1, momentum=0.9, nesterov=True, weight_decay=0.1)
    p1 = sgd.step(p, g)["w"]
    g1 = np.array([0.5 + 0.1, 0.25 - 0.2])  # + wd * p; buf = g1; nesterov: g1 + 0.9 g1
    np.testing.assert_allclose(p1, p["w"] - 0.1 * 1.9 * g1, rtol=1e-15)
    adam = J.Adam(0.01)
    np.testing.assert_allclose(adam.step(p, g)["w"], p["w"] - 0.01 * np.sign(g["w"]) /
                               (1 + 1e-8 / np.abs(g["w"])), rtol=1e-12)
    adamw = J.AdamW(0.01, weight_decay=0.5)
    np.testing.assert_allclose(adamw.step(p, g)["w"], p["w"] * (1 - 0.005) - 0.01 *
                               np.sign(g["w"]) / (1 + 1e-8 / np.abs(g["w"])), rtol=1e-12)
    clipped = J.SGD(1.0, clip_grad_norm=0.5).step({"w": np.zeros(2)}, {"w": np.array([3.0, 4.0])})
    np.testing.assert_allclose(clipped["w"], -np.array([0.3, 0.4]) * 5 / (5 + 1e-6), rtol=1e-15)


# ---------------------------------------------------------------------------
# (a) value_and_grad of the workloads vs jax.grad
# ---------------------------------------------------------------------------

def _workload(name, dtype, small):
    """(config, params, batch, loss_fn(p, b, s)) for one workload."""
    if name == "gpt2_mini":
        cfg = W.gpt2_mini_config(**(GPT2_SMALL if small else {}))
        params = _jitter(W.gpt2_mini_init(cfg, seed=0, dtype=dtype), 1)
        batch = W.gpt2_mini_batch(cfg, seed=2)
        return cfg, params, batch, lambda p, b, s: W.gpt2_mini_loss(p, b, s, cfg)
    if name == "mlp_mnist":
        cfg = W.mlp_mnist_config()
        params = _jitter(W.mlp_mnist_init(cfg, seed=3, dtype=dtype), 4)
        batch = W.mlp_mnist_batch(cfg, seed=4, dtype=dtype)
        return cfg, params, batch, lambda p, b, s: W.mlp_mnist_loss(p, b, s, cfg)
    cfg = W.deepfm_config()
    params = _jitter(W.deepfm_init(cfg, seed=5, dtype=dtype), 6)
    batch = W.deepfm_batch(cfg, seed=7, dtype=dtype)
    return cfg, params, batch, lambda p, b, s: W.deepfm_loss(p, b, s, cfg)


GRAD_CASES = [
    ("mlp_mnist", np.float64, False), ("mlp_mnist", np.float32, False),
    ("deepfm", np.float64, False), ("deepfm", np.float32, False),
    ("gpt2_mini", np.float64, True), ("gpt2_mini", np.float32, True),
    ("gpt2_mini", np.float32, False),  # WORKLOADS.md CPU sizes
]


@pytest.mark.parametrize("name,dtype,small", GRAD_CASES,
                         ids=[f"{n}-{np.dtype(d).name}{'-small' if s else ''}"
                              for n, d, s in GRAD_CASES])
def test_workload_gradients_match_jax(name, dtype, small):
    cfg, params, batch, loss_fn = _workload(name, dtype, small)
    graph = tilefuse.trace(loss_fn, params, batch, SEED)
    names = sorted(params)  # the flat argument list starts with the sorted params
    out = graph.value_and_grad(wrt=tuple(range(len(names)))).interpret(params, batch, SEED)
    assert len(out) == 1 + len(names)
    loss, grads = out[0], dict(zip(names, out[1:]))
    for k in names:
        assert grads[k].shape == params[k].shape and grads[k].dtype == dtype, k
    ref_loss, ref_grads = J.loss_and_grad(name, params, batch, SEED, cfg, training=True,
                                          mask_dtype=dtype)
    assert_loss_close(name, loss, ref_loss, LOSS_TOL[dtype])
    assert_tensors_close(f"{name} {np.dtype(dtype).name} gradients", grads, ref_grads,
                         GRAD_TOL[dtype])


def test_gradient_check_has_teeth():
    """The reference gradients with other dropout masks are far outside the
    float64 tolerance: the masks are really shared."""
    cfg, params, batch, _ = _workload("mlp_mnist", np.float64, False)
    _, g1 = J.loss_and_grad("mlp_mnist", params, batch, SEED, cfg)
    _, g2 = J.loss_and_grad("mlp_mnist", params, batch, SEED + 1, cfg)
    assert max(max_rel_err(g2[k], g1[k]) for k in g1) > 1e3 * GRAD_TOL[np.float64]


# ---------------------------------------------------------------------------
# (b) optimizers: 3 steps of a small model vs numpy optimizers on JAX gradients
# ---------------------------------------------------------------------------

SMALL_MLP = dict(batch=6, image=(1, 4, 4), hidden=8, classes=5, dropout=0.2)


def _small_mlp(dtype=np.float64):
    cfg = W.mlp_mnist_config(**SMALL_MLP)
    params = _jitter(W.mlp_mnist_init(cfg, seed=11, dtype=dtype), 12)
    batches = [W.mlp_mnist_batch(cfg, seed=20 + t, dtype=dtype) for t in range(4)]
    return cfg, params, batches


def _initial_grad_norm(cfg, params, batch, seed):
    _, g = J.loss_and_grad("mlp_mnist", params, batch, seed, cfg)
    return math.sqrt(sum(float((v ** 2).sum()) for v in g.values()))


OPTIMIZERS = {
    "sgd": lambda c: (optim.SGD(0.1, clip_grad_norm=c), J.SGD(0.1, clip_grad_norm=c)),
    "sgd_momentum": lambda c: (optim.SGD(0.1, momentum=0.9, clip_grad_norm=c),
                               J.SGD(0.1, momentum=0.9, clip_grad_norm=c)),
    "sgd_nesterov": lambda c: (optim.SGD(0.1, momentum=0.9, nesterov=True, clip_grad_norm=c),
                               J.SGD(0.1, momentum=0.9, nesterov=True, clip_grad_norm=c)),
    "sgd_weight_decay": lambda c: (optim.SGD(0.1, weight_decay=0.05, clip_grad_norm=c),
                                   J.SGD(0.1, weight_decay=0.05, clip_grad_norm=c)),
    "sgd_all": lambda c: (
        optim.SGD(0.1, momentum=0.8, nesterov=True, weight_decay=0.05, clip_grad_norm=c),
        J.SGD(0.1, momentum=0.8, nesterov=True, weight_decay=0.05, clip_grad_norm=c)),
    "adam": lambda c: (optim.Adam(0.01, clip_grad_norm=c), J.Adam(0.01, clip_grad_norm=c)),
    "adam_l2": lambda c: (optim.Adam(0.01, weight_decay=0.05, clip_grad_norm=c),
                          J.Adam(0.01, weight_decay=0.05, clip_grad_norm=c)),
    "adam_betas_eps": lambda c: (
        optim.Adam(0.01, betas=(0.8, 0.95), eps=1e-3, clip_grad_norm=c),
        J.Adam(0.01, betas=(0.8, 0.95), eps=1e-3, clip_grad_norm=c)),
    "adamw_default_wd": lambda c: (optim.AdamW(0.01, clip_grad_norm=c),
                                   J.AdamW(0.01, clip_grad_norm=c)),
    "adamw": lambda c: (optim.AdamW(0.02, betas=(0.85, 0.99), weight_decay=0.3,
                                    clip_grad_norm=c),
                        J.AdamW(0.02, betas=(0.85, 0.99), weight_decay=0.3, clip_grad_norm=c)),
}


def _run_reference(cfg, params, batches, seed, opt, steps, lrs=None):
    """[(loss before step t, params after step t)] with JAX gradients."""
    p, out = dict(params), []
    for t in range(1, steps + 1):
        if lrs is not None:
            opt.lr = lrs[t - 1]
        loss, g = J.loss_and_grad("mlp_mnist", p, batches[t - 1], seed + t - 1, cfg,
                                  mask_dtype=next(iter(params.values())).dtype)
        p = opt.step(p, g)
        out.append((loss, p))
    return out


def _check_trajectory(what, step, batches, params0, ref, dtype):
    tol = GRAD_TOL[dtype]
    for t, (ref_loss, ref_params) in enumerate(ref, start=1):
        loss = step(batches[t - 1])
        assert isinstance(loss, float), f"step() returned {type(loss).__name__}"
        assert_loss_close(f"{what} step {t}", loss, ref_loss, LOSS_TOL[dtype])
        got = step.params()
        for k in params0:
            assert got[k].dtype == params0[k].dtype and got[k].shape == params0[k].shape, k
        assert_tensors_close(
            f"{what}: change of the parameters after step {t}",
            {k: got[k].astype(np.float64) - params0[k] for k in params0},
            {k: ref_params[k].astype(np.float64) - params0[k] for k in params0}, tol)


@pytest.mark.parametrize("clip", [False, True], ids=["noclip", "clip"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_three_steps(name, clip):
    cfg, params, batches = _small_mlp()
    seed = np.int64(1234)
    c = 0.5 * _initial_grad_norm(cfg, params, batches[0], seed) if clip else None
    tf_opt, ref_opt = OPTIMIZERS[name](c)
    ref = _run_reference(cfg, params, batches, seed, ref_opt, 3)
    if clip:  # the clip really is active at every step
        p = params
        for t in range(3):
            assert _initial_grad_norm(cfg, p, batches[t], seed + t) > c
            p = ref[t][1]
    step = tilefuse.compile_train_step(lambda p, b, s: W.mlp_mnist_loss(p, b, s, cfg),
                                       params, batches[0], optimizer=tf_opt, device="cpu",
                                       seed=int(seed))
    _check_trajectory(f"{name} clip={clip}", step, batches, params, ref, np.float64)


def test_optimizer_float32_adamw_with_clipping():
    cfg, params, batches = _small_mlp(np.float32)
    seed = np.int64(77)
    c = 0.5 * _initial_grad_norm(cfg, params, batches[0], seed)
    ref = _run_reference(cfg, params, batches, seed, J.AdamW(0.01, weight_decay=0.1,
                                                             clip_grad_norm=c), 3)
    step = tilefuse.compile_train_step(lambda p, b, s: W.mlp_mnist_loss(p, b, s, cfg),
                                       params, batches[0],
                                       optimizer=optim.AdamW(0.01, weight_decay=0.1,
                                                             clip_grad_norm=c),
                                       device="cpu", seed=int(seed))
    _check_trajectory("float32 AdamW", step, batches, params, ref, np.float32)


def test_seed_is_seed_plus_step_minus_one_including_large_seeds():
    """At step t the loss function sees seed + t - 1 (here past 2^32: both
    halves of the Philox key change)."""
    cfg, params, batches = _small_mlp()
    seed = 2 ** 32 - 2  # steps use 2^32 - 2, 2^32 - 1, 2^32
    ref = _run_reference(cfg, params, batches, np.int64(seed), J.SGD(0.05), 3)
    step = tilefuse.compile_train_step(lambda p, b, s: W.mlp_mnist_loss(p, b, s, cfg),
                                       params, batches[0], optimizer=optim.SGD(0.05),
                                       device="cpu", seed=seed)
    _check_trajectory("seed 2^32 - 2", step, batches, params, ref, np.float64)


def test_two_argument_loss_function_deepfm():
    """loss_fn(params, batch) (no seed): DeepFM with AdamW, 3 steps."""
    cfg = W.deepfm_config(batch=16, n_users=7, n_movies=11, embed_dim=4, hidden=(6, 5))
    params = _jitter(W.deepfm_init(cfg, seed=1, dtype=np.float64), 2)
    batches = [W.deepfm_batch(cfg, seed=30 + t, dtype=np.float64) for t in range(3)]
    ref_opt, p, ref = J.AdamW(0.01, weight_decay=0.01), dict(params), []
    for b in batches:
        loss, g = J.loss_and_grad("deepfm", p, b, 0, cfg, training=False)
        p = ref_opt.step(p, g)
        ref.append((loss, p))
    step = tilefuse.compile_train_step(lambda p, b: W.deepfm_loss(p, b, None, cfg), params,
                                       batches[0], optimizer=optim.AdamW(0.01), device="cpu")
    for t, (ref_loss, ref_params) in enumerate(ref, start=1):
        assert_loss_close(f"deepfm step {t}", step(batches[t - 1]), ref_loss, 1e-12)
        got = step.params()
        assert_tensors_close(f"deepfm params after step {t}",
                             {k: got[k] - params[k] for k in params},
                             {k: ref_params[k] - params[k] for k in params}, 1e-9)
    # rows of the shared table no id touched: untouched by Adam, only decayed
    used = np.zeros(cfg["n_users"] + cfg["n_movies"], bool)
    for b in batches:
        used[b["user"]] = used[b["movie"] + cfg["n_users"]] = True
    decay = (1 - 0.01 * 0.01) ** 3
    np.testing.assert_allclose(step.params()["emb"][~used], params["emb"][~used] * decay,
                               rtol=1e-14)


def test_params_returns_copies():
    cfg, params, batches = _small_mlp()
    step = tilefuse.compile_train_step(lambda p, b, s: W.mlp_mnist_loss(p, b, s, cfg),
                                       params, batches[0], optimizer=optim.SGD(0.1),
                                       device="cpu")
    before = {k: v.copy() for k, v in params.items()}
    step(batches[0])
    for k in params:  # the caller's arrays are not updated in place
        np.testing.assert_array_equal(params[k], before[k])
    got = step.params()
    got["fc1.w"][...] = 123.0
    assert not np.any(step.params()["fc1.w"] == 123.0)


# ---------------------------------------------------------------------------
# (d) changing step.lr between steps: takes effect, no recompilation
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sgd_all", "adamw"])
def test_changing_lr_takes_effect_without_recompiling(name):
    cfg, params, batches = _small_mlp()
    seed = np.int64(5)
    calls = []

    def loss_fn(p, b, s):
        calls.append(1)
        return W.mlp_mnist_loss(p, b, s, cfg)

    tf_opt, ref_opt = OPTIMIZERS[name](None)
    lrs = [tf_opt.lr, 0.5 * tf_opt.lr, 0.0, 3.0 * tf_opt.lr]
    ref = _run_reference(cfg, params, batches, seed, ref_opt, 4, lrs=lrs)
    step = tilefuse.compile_train_step(loss_fn, params, batches[0], optimizer=tf_opt,
                                       device="cpu", seed=int(seed))
    traced = len(calls)
    assert traced >= 1

    class Scheduled:
        def __call__(self, batch):
            step.lr = lrs[self.t]
            self.t += 1
            return step(batch)

        def params(self):
            return step.params()

    sched = Scheduled()
    sched.t = 0
    _check_trajectory(f"{name} with lr schedule {lrs}", sched, batches, params, ref, np.float64)
    assert len(calls) == traced, "changing step.lr re-traced the loss function"
    # lr = 0 at step 3: nothing moved (AdamW's decay is lr * wd too)
    np.testing.assert_array_equal(ref[2][1]["fc1.w"], ref[1][1]["fc1.w"])


# ---------------------------------------------------------------------------
# (c) gpt2_mini at WORKLOADS.md sizes: 20 AdamW steps in float32, dropout on
# ---------------------------------------------------------------------------

def test_gpt2_mini_adamw_20_steps_follows_reference():
    cfg = W.gpt2_mini_config()
    assert (cfg["n_layer"], cfg["d_model"], cfg["n_head"], cfg["seq"], cfg["vocab"],
            cfg["batch"], cfg["dropout"]) == (2, 128, 4, 128, 1024, 4, 0.1)
    params = W.gpt2_mini_init(cfg, seed=0, dtype=np.float32)
    batches = [W.gpt2_mini_batch(cfg, seed=100 + t) for t in range(20)]
    seed = 4242
    step = tilefuse.compile_train_step(lambda p, b, s: W.gpt2_mini_loss(p, b, s, cfg),
                                       params, batches[0],
                                       optimizer=optim.AdamW(1e-3, weight_decay=0.01),
                                       device="cpu", seed=seed)
    ref_opt = J.AdamW(1e-3, weight_decay=0.01)
    ref_params = dict(params)
    got, want, t_step = [], [], []
    for t in range(1, 21):
        start = time.perf_counter()
        got.append(step(batches[t - 1]))
        t_step.append(time.perf_counter() - start)
        loss, g = J.loss_and_grad("gpt2_mini", ref_params, batches[t - 1], seed + t - 1, cfg,
                                  mask_dtype=np.float32)
        want.append(loss)
        ref_params = ref_opt.step(ref_params, g)  # kept in float32, as tilefuse does
    rel = [abs(a - b) / abs(b) for a, b in zip(got, want)]
    # teeth: the last loss is far (vs the tolerance) from the untrained model's
    untrained = J.loss_value("gpt2_mini", params, batches[-1], seed + 19, cfg,
                             mask_dtype=np.float32)
    print(f"\ngpt2_mini AdamW: tilefuse step {np.mean(t_step):.2f} s on average; "
          f"losses {got[0]:.5f} -> {got[-1]:.5f} (untrained on the last batch {untrained:.5f}); "
          f"worst relative error {max(rel):.2e}")
    bad = [(t + 1, a, b, r) for t, (a, b, r) in enumerate(zip(got, want, rel)) if not r <= 1e-4]
    assert not bad, f"(step, tilefuse loss, reference loss, relative error): {bad}"
    assert abs(want[-1] - untrained) > 10 * 1e-4 * untrained


def test_model_state_is_kept_and_updated_by_the_forward_pass():
    """compile_train_step(state=): loss_fn(params, state, batch) returns
    (loss, new state); the step carries the state between calls (a running
    mean and an i64 counter here, as batch norm keeps) and state_dict()
    holds it under state/<name>. Checked against the same loop in float64."""
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((4, 3)).astype(np.float32)}
    state = {"mean": np.zeros(3, np.float32), "count": np.zeros((), np.int64)}
    batch = {"x": rng.standard_normal((8, 4)).astype(np.float32)}

    def loss(p, s, b):
        y = b["x"] @ p["w"]
        return (y ** 2).mean(), {"mean": s["mean"] * 0.9 + y.mean(0) * 0.1,
                                 "count": s["count"] + 1}

    step = tilefuse.compile_train_step(loss, params, batch, tilefuse.optim.SGD(lr=0.1),
                                       device="cpu", state=state)
    w, mean = params["w"].astype(np.float64), np.zeros(3)
    for t in range(3):
        got = step(batch)
        y = batch["x"] @ w
        want = (y ** 2).mean()
        assert abs(got - want) <= 1e-5 * abs(want), (t, got, want)
        mean = mean * 0.9 + y.mean(0) * 0.1
        w = w - 0.1 * batch["x"].T @ (2 * y / y.size)
    saved = step.state_dict()
    assert int(saved["state/count"]) == 3
    np.testing.assert_allclose(saved["state/mean"], mean, rtol=1e-5, atol=1e-7)


def test_model_state_errors_say_what_to_do():
    params = {"w": np.ones((2, 2), np.float32)}
    state = {"mean": np.zeros(2, np.float32)}
    batch = np.ones((3, 2), np.float32)
    with pytest.raises(tilefuse.CompileError, match=r"returns \(loss, new state\)"):
        tilefuse.compile_train_step(lambda p, s, b: (b @ p["w"]).sum(), params, batch,
                                    tilefuse.optim.SGD(lr=0.1), device="cpu", state=state)
    with pytest.raises(tilefuse.CompileError, match="does not have the structure"):
        tilefuse.compile_train_step(lambda p, s, b: ((b @ p["w"]).sum(), {"other": s["mean"]}),
                                    params, batch, tilefuse.optim.SGD(lr=0.1), device="cpu",
                                    state=state)
    with pytest.raises(tilefuse.CompileError, match="model state 0 comes in as"):
        tilefuse.compile_train_step(lambda p, s, b: ((b @ p["w"]).sum(), {"mean": s["mean"][0]}),
                                    params, batch, tilefuse.optim.SGD(lr=0.1), device="cpu",
                                    state=state)
    with pytest.raises(tilefuse.CompileError, match="accumulate=k with state="):
        tilefuse.compile_train_step(lambda p, s, b: ((b @ p["w"]).sum(), s), params,
                                    np.stack([batch] * 2), tilefuse.optim.SGD(lr=0.1),
                                    device="cpu", state=state, accumulate=2)
