"""Dynamic loss scaling compiled into the training step
(tilefuse.optim.LossScale, `loss_scale=` of compile_train_step and
train_step_graph, LoadedTrainStep.set_state defaults, tilefuse-compile
--loss-scale / --growth-interval), with torch.amp.GradScaler's semantics:

* a step whose gradients are not all finite is skipped: parameters and
  optimizer state bitwise unchanged, scale *= backoff_factor, growth tracker
  0, applied_steps unchanged, and the returned loss is the unscaled forward
  loss;
* a finite step counts in the growth tracker; growth_interval of them in a
  row multiply the scale by growth_factor (unless that is not a finite f32)
  and reset the tracker;
* gradients are unscaled before clipping; Adam's bias correction counts
  applied updates, as torch.optim does when GradScaler skips
  optimizer.step().

Checked against hand-computed f16 overflow points, against PyTorch's
GradScaler + AdamW in f32 (scales, skipped steps, losses, parameters), for
the state dict round trip, the exported artifact and the command line.

Tolerances (never loosened to make a test pass):
* scales, growth trackers, applied-step counts and skip decisions: exact;
* state-dict round trips and skipped steps: bitwise;
* tilefuse vs PyTorch f32 (different summation orders only): losses 1e-5
  relative, parameters and Adam moments 1e-5 relative to their max-norm
  (observed ~3e-7), parameter changes since the start 1e-4 relative to the
  change's max-norm (observed ~7e-6);
* an exported artifact vs the compiled step: 1e-6 relative (as
  test_artifacts.py).
"""
import shutil
import subprocess

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F
from tilefuse.optim import LossScale

# PyTorch is part of the setup (tools/dev.sh): its absence is a failure.
import torch  # noqa: E402
from test_train_step import max_rel_err  # noqa: E402


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

def _kept(step):
    """The parameters, optimizer state and scaler state (state_dict()'s
    "<section>/<name>" keys), as copies."""
    return {k: np.array(v) for k, v in step.state_dict().items() if "/" in k}


def _scaler(step):
    """(scale, growth tracker, applied steps) read from state_dict()."""
    sd = step.state_dict()
    return (float(sd["scaler/scale"]), int(sd["scaler/growth_tracker"]),
            int(sd["scaler/applied_steps"]))


def _diff(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    bad = a.tobytes() != b.tobytes()
    if not bad:
        return None
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    differing = int(np.count_nonzero(a != b)) if a.ndim else 1
    return f"{differing} of {max(a.size, 1)} elements differ, max |diff| {np.nanmax(d):.6g}"


def assert_bitwise(what, got, want):
    """Two dicts of arrays have the same keys and bitwise the same values."""
    assert sorted(got) == sorted(want), f"{what}: keys {sorted(got)} vs {sorted(want)}"
    bad = {k: _diff(got[k], want[k]) for k in want}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"{what}: not bitwise equal: " + "; ".join(f"{k}: {v}"
                                                               for k, v in sorted(bad.items()))




# The forced f16 overflow: w = 0 (8x4), x = ones(16, 8), y = ones(16, 4),
# loss = sum((x @ w - y)^2) with the matmul in f16 (precision="fp16"; the
# subtraction, square and sum follow the f32 target and run in f32).
# The residual is r = -1 everywhere and the forward loss 16 * 4 = 64.
# Backward, seeded with the scale s:
#   d loss / d (x @ w) = 2 * s * r = -2s, cast to f16 for the f16 matmul's
#       backward: finite only for 2s <= 65504, i.e. s <= 16384 (2 * 32768 =
#       65536 rounds to inf in f16);
#   d loss / d w = x^T @ (-2s) = -32s per element (16 rows of ones), an f16
#       matmul result: finite only for 32s <= 65504, i.e. s <= 1024
#       (32 * 2048 = 65536 rounds to inf).
# From 65536 the scale halves on every skipped step: 65536, 32768, 16384,
# 8192, 4096 and 2048 overflow (6 skips); the 7th step runs at 1024, where
# the scaled gradient is exactly -32768, and unscales to -32 exactly.
OVERFLOW_SKIPS = 6
OVERFLOW_FIRST_GOOD_SCALE = 1024.0
OVERFLOW_LOSS = 64.0
OVERFLOW_GRAD = -32.0


def _overflow_problem():
    params = {"w": np.zeros((8, 4), np.float32)}
    batch = {"x": np.ones((16, 8), np.float32), "y": np.ones((16, 4), np.float32)}

    def loss_fn(p, b):
        r = b["x"] @ p["w"] - b["y"]
        return (r * r).sum()
    return loss_fn, params, batch


def _overflow_step(optimizer=None, loss_scale="auto"):
    loss_fn, params, batch = _overflow_problem()
    step = tilefuse.compile_train_step(loss_fn, params, batch,
                                       optimizer or tilefuse.optim.Adam(lr=0.01),
                                       precision="fp16", loss_scale=loss_scale, device="cpu")
    return step, batch


def _small_regression(seed=0, noise=0.01):
    """A well-behaved f32 regression: targets near the model's own output,
    so gradients are small (|g| < 1e-2)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((8, 4)) * 0.1).astype(np.float32)
    x = rng.uniform(0.5, 1.5, (16, 8)).astype(np.float32)
    y = (x @ w + rng.standard_normal((16, 4)) * noise).astype(np.float32)

    def loss_fn(p, b):
        return F.mse_loss(b["x"] @ p["w"], b["y"])
    return loss_fn, {"w": w}, {"x": x, "y": y}


# ---------------------------------------------------------------------------
# 1. Forced overflow in fp16
# ---------------------------------------------------------------------------

def test_fp16_overflow_skips_halve_the_scale_until_gradients_fit():
    lr = 0.01
    step, batch = _overflow_step(tilefuse.optim.Adam(lr=lr))
    assert step.loss_scale == 65536.0, f"fp16 default initial scale {step.loss_scale}"

    # The skipped steps: nothing changes but the scale (and step_count).
    for t in range(1, OVERFLOW_SKIPS + 1):
        before = _kept(step)
        loss = step(batch)
        after = _kept(step)
        want_scale = 65536.0 / 2 ** t
        assert loss == OVERFLOW_LOSS, (f"step {t} (skipped): returned loss {loss}, want the "
                                       f"unscaled forward loss {OVERFLOW_LOSS}")
        assert_bitwise(f"params and optimizer state across skipped step {t}",
                       {k: v for k, v in after.items() if not k.startswith("scaler/")},
                       {k: v for k, v in before.items() if not k.startswith("scaler/")})
        assert (step.loss_scale, step.applied_steps, step.step_count) == (want_scale, 0, t), (
            f"after skipped step {t}: (loss_scale, applied_steps, step_count) = "
            f"{(step.loss_scale, step.applied_steps, step.step_count)}, want "
            f"{(want_scale, 0, t)}")
        assert _scaler(step) == (want_scale, 0, 0), (
            f"after skipped step {t}: scaler state {_scaler(step)}, want {(want_scale, 0, 0)}")
    assert step.loss_scale == OVERFLOW_FIRST_GOOD_SCALE

    # The first applied step, at scale 1024: the gradient unscales to -32
    # exactly, Adam's moments are (1 - beta) * g and (1 - beta2) * g^2, and
    # with bias correction counting applied updates (1, not step_count 7)
    # the update is lr * g / (|g| + eps): w moves by +lr. (Counting 7 would
    # give an update of lr * 0.506.)
    before = _kept(step)
    loss = step(batch)
    after = _kept(step)
    t = OVERFLOW_SKIPS + 1
    assert loss == OVERFLOW_LOSS, f"first applied step: loss {loss}, want {OVERFLOW_LOSS}"
    assert (step.loss_scale, step.applied_steps, step.step_count) == \
        (OVERFLOW_FIRST_GOOD_SCALE, 1, t), (
            f"after the first applied step: (loss_scale, applied_steps, step_count) = "
            f"{(step.loss_scale, step.applied_steps, step.step_count)}, want "
            f"{(OVERFLOW_FIRST_GOOD_SCALE, 1, t)}")
    assert _scaler(step) == (OVERFLOW_FIRST_GOOD_SCALE, 1, 1), _scaler(step)
    assert not np.array_equal(after["params/w"], before["params/w"]), \
        "the first step with finite gradients left the parameters unchanged"
    g = OVERFLOW_GRAD
    checks = {"exp_avg/w": 0.1 * g, "exp_avg_sq/w": 0.001 * g * g,
              "params/w": lr * -g / (abs(g) + 1e-8)}
    for key, want in checks.items():
        err = np.abs(after[key].astype(np.float64) - want).max() / abs(want)
        assert err <= 1e-6, (f"first applied step: {key} is {np.unique(after[key])}, want "
                             f"{want} everywhere (relative error {err:.3g}); unscaled "
                             f"gradient {g}, Adam bias correction at applied step 1")

    # Training continues: 10 more applied steps, the loss decreasing every
    # step (the optimum, sum_i w_ij = 1, is ~1 away at lr 0.01 per weight).
    losses = [loss]
    for k in range(1, 11):
        losses.append(step(batch))
        assert step.applied_steps == 1 + k, (
            f"after {1 + k} steps with finite gradients applied_steps is "
            f"{step.applied_steps}")
        assert step.loss_scale == OVERFLOW_FIRST_GOOD_SCALE, (
            f"scale changed to {step.loss_scale} on a finite step before growth_interval")
    drops = np.diff(losses)
    assert (drops < 0).all(), (f"the loss does not decrease at every step after the skips: "
                               f"{losses} (increase at step {t + 1 + int(np.argmax(drops >= 0))})")
    assert losses[-1] < 0.25 * losses[0], f"losses {losses}: less than a 4x drop in 10 steps"
    assert all(np.isfinite(v).all() for v in step.params().values())


# ---------------------------------------------------------------------------
# 2. f32 against torch.amp.GradScaler + torch.optim.AdamW
# ---------------------------------------------------------------------------

# A regression whose f32 gradients overflow at 2**120: targets ~700 far
# above the predictions (|x @ w| < 0.4), all residuals negative and x > 0,
# so every partial sum of the backward has one sign and the largest scaled
# value is the largest gradient, max |g| = 366 (the weights'; the bias's
# 353): 366 * 2**120 ~ 1.43 * 2**128 > f32 max overflows, 366 * 2**119 ~
# 0.71 * 2**128 does not. Both margins stay > 25% over 12 small AdamW steps
# (the gradients change by < 0.01%). With
# growth_interval=3 the scale cycles: skip at 2**120 (back to 2**119),
# 3 finite steps at 2**119, growth to 2**120, skip, ...
TORCH_SKIPPED = [1, 5, 9]
TORCH_STEPS = 12


def _torch_problem():
    rng = np.random.default_rng(20240611)
    params = {"w": (rng.standard_normal((8, 4)) * 0.1).astype(np.float32),
              "b": np.zeros(4, np.float32)}
    batch = {"x": rng.uniform(0.5, 1.5, (16, 8)).astype(np.float32),
             "y": rng.uniform(650.0, 750.0, (16, 4)).astype(np.float32)}

    def loss_fn(p, b):
        return F.mse_loss(b["x"] @ p["w"] + p["b"], b["y"])
    return loss_fn, params, batch


def _torch_run(params, batch, steps, scaler_kw, lr, weight_decay, clip):
    """The PyTorch f32 reference: per step (loss, scale after update,
    growth tracker, optimizer.step() applied), final params and moments."""
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    order = sorted(tp)
    opt = torch.optim.AdamW([tp[k] for k in order], lr=lr, weight_decay=weight_decay)
    scaler = torch.amp.GradScaler("cpu", **scaler_kw)
    x, y = torch.tensor(batch["x"]), torch.tensor(batch["y"])
    rows = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(x @ tp["w"] + tp["b"], y)
        before = int(opt.state[tp["w"]]["step"]) if tp["w"] in opt.state else 0
        scaler.scale(loss).backward()
        if clip:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_([tp[k] for k in order], clip)
        scaler.step(opt)
        scaler.update()
        after = int(opt.state[tp["w"]]["step"]) if tp["w"] in opt.state else 0
        rows.append((float(loss.detach()), float(scaler.get_scale()),
                     int(scaler._get_growth_tracker()), after == before + 1))
    final = {f"params/{k}": tp[k].detach().numpy().copy() for k in order}
    for k in order:
        final[f"exp_avg/{k}"] = opt.state[tp[k]]["exp_avg"].numpy().copy()
        final[f"exp_avg_sq/{k}"] = opt.state[tp[k]]["exp_avg_sq"].numpy().copy()
    return rows, final, int(opt.state[tp["w"]]["step"])


def _compare_with_torch(scaler_kw, steps, clip=None, expect_skipped=None):
    lr, wd = 1e-3, 0.01
    loss_fn, params, batch = _torch_problem()
    ls = LossScale(**scaler_kw)
    step = tilefuse.compile_train_step(
        loss_fn, params, batch,
        tilefuse.optim.AdamW(lr=lr, weight_decay=wd, clip_grad_norm=clip),
        precision="fp32", loss_scale=ls, device="cpu")
    torch_kw = dict(init_scale=ls.init_scale, growth_factor=ls.growth_factor,
                    backoff_factor=ls.backoff_factor, growth_interval=ls.growth_interval)
    want_rows, want_final, want_count = _torch_run(params, batch, steps, torch_kw, lr, wd, clip)
    torch_skipped = [t for t, row in enumerate(want_rows, 1) if not row[3]]
    if expect_skipped is not None:
        # If this fails, PyTorch's GradScaler did not do what the analysis
        # above (and its documentation) says: the reference is in question.
        assert torch_skipped == expect_skipped, (
            f"PyTorch's GradScaler skipped steps {torch_skipped}, the analysis expects "
            f"{expect_skipped}; scales {[r[1] for r in want_rows]}")

    got_rows = []
    for t in range(1, steps + 1):
        before = _kept(step)
        applied = step.applied_steps
        loss = step(batch)
        scale, tracker, _ = _scaler(step)
        did = step.applied_steps == applied + 1
        assert step.applied_steps in (applied, applied + 1), (step.applied_steps, applied)
        got_rows.append((loss, scale, tracker, did))
        if not did:
            after = _kept(step)
            assert_bitwise(f"params and optimizer state across skipped step {t}",
                           {k: v for k, v in after.items() if not k.startswith("scaler/")},
                           {k: v for k, v in before.items() if not k.startswith("scaler/")})

    got_skipped = [t for t, row in enumerate(got_rows, 1) if not row[3]]
    assert got_skipped == torch_skipped, (
        f"skipped steps: tilefuse {got_skipped}, PyTorch GradScaler {torch_skipped}")
    got_scales = [r[1] for r in got_rows]
    want_scales = [r[1] for r in want_rows]
    assert got_scales == want_scales, (
        "scale after each step differs from scaler.get_scale(): " + "; ".join(
            f"step {t}: {g!r} vs {w!r} (log2 {np.log2(g):.6f} vs {np.log2(w):.6f})"
            for t, (g, w) in enumerate(zip(got_scales, want_scales), 1) if g != w))
    got_trackers = [r[2] for r in got_rows]
    want_trackers = [r[2] for r in want_rows]
    assert got_trackers == want_trackers, (
        f"growth tracker after each step: tilefuse {got_trackers}, PyTorch {want_trackers}")
    for t, (g, w) in enumerate(zip(got_rows, want_rows), 1):
        rel = abs(g[0] - w[0]) / abs(w[0])
        assert rel <= 1e-5, f"step {t}: loss {g[0]!r}, PyTorch {w[0]!r} (relative {rel:.3g})"
    assert step.applied_steps == want_count == steps - len(torch_skipped), (
        f"applied_steps {step.applied_steps}, PyTorch AdamW state step {want_count}, "
        f"{steps} steps less {len(torch_skipped)} skipped")

    got_final = {k: v for k, v in _kept(step).items() if not k.startswith("scaler/")}
    assert sorted(got_final) == sorted(want_final), (sorted(got_final), sorted(want_final))
    errs = {k: max_rel_err(got_final[k], want_final[k]) for k in want_final}
    bad = {k: e for k, e in errs.items() if not e <= 1e-5}
    assert not bad, ("final state vs PyTorch, max|diff|/max|ref| above 1e-5: " +
                     ", ".join(f"{k}: {e:.3g}" for k, e in sorted(bad.items())))
    for k, p0 in params.items():
        got_change = got_final[f"params/{k}"] - p0
        want_change = want_final[f"params/{k}"] - p0
        err = max_rel_err(got_change, want_change)
        assert err <= 1e-4, (f"params/{k}: change since the start differs from PyTorch's by "
                             f"{err:.3g} of its max-norm {np.abs(want_change).max():.3g}")
    return got_rows


@pytest.mark.parametrize("clip", [None, 1.0], ids=["noclip", "clip1"])
def test_f32_matches_torch_gradscaler_with_adamw(clip):
    """Scales, skipped steps, growth trackers, losses, final parameters and
    Adam moments against GradScaler("cpu", init_scale=2**120,
    growth_interval=3) + AdamW(weight_decay=0.01). With clipping, PyTorch
    unscales (scaler.unscale_) before clip_grad_norm_, as tilefuse does."""
    rows = _compare_with_torch(dict(init_scale=2.0 ** 120, growth_interval=3), TORCH_STEPS,
                               clip=clip, expect_skipped=TORCH_SKIPPED)
    assert [r[1] for r in rows] == [2.0 ** 119, 2.0 ** 119, 2.0 ** 119, 2.0 ** 120] * 3


def test_f32_custom_factors_match_torch_gradscaler():
    """growth_factor 3 and backoff_factor 1/4 (exact in f32), interval 1:
    scales that are not powers of two, so the unscaling by the f32
    reciprocal is inexact and must round as PyTorch's does."""
    rows = _compare_with_torch(dict(init_scale=2.0 ** 120, growth_factor=3.0,
                                    backoff_factor=0.25, growth_interval=1), 10)
    assert len({r[3] for r in rows}) == 2, f"want both skipped and applied steps: {rows}"


def test_inexact_growth_factor_rounds_like_torch():
    loss_fn, params, batch = _small_regression()
    step = tilefuse.compile_train_step(
        loss_fn, params, batch, tilefuse.optim.SGD(lr=0.0), device="cpu",
        loss_scale=LossScale(init_scale=3.0, growth_factor=1.1, growth_interval=1))
    step(batch)
    want = float(np.float32(np.float64(np.float32(3.0)) * 1.1))  # torch: f32(f32 * double)
    assert step.loss_scale == want, f"scale after growth {step.loss_scale!r}, PyTorch {want!r}"


# ---------------------------------------------------------------------------
# 3. Growth
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_scale_doubles_every_growth_interval_finite_steps(precision):
    loss_fn, params, batch = _small_regression()
    step = tilefuse.compile_train_step(loss_fn, params, batch, tilefuse.optim.SGD(lr=0.05),
                                       precision=precision, device="cpu",
                                       loss_scale=LossScale(init_scale=1.0, growth_interval=2))
    got = []
    for _ in range(10):
        step(batch)
        got.append(_scaler(step))
    # After step t: scale 2**(t // 2), tracker t % 2, t applied.
    want = [(2.0 ** (t // 2), t % 2, t) for t in range(1, 11)]
    assert got == want, ("(scale, growth_tracker, applied_steps) after each step: "
                         + "; ".join(f"step {t}: {g} want {w}"
                                     for t, (g, w) in enumerate(zip(got, want), 1) if g != w))


def test_growth_stops_below_f32_overflow_like_torch():
    """2**127 * 2 is inf in f32: the scale stays 2**127 (and the tracker
    resets), as _amp_update_scale_ does."""
    loss_fn, params, batch = _small_regression()
    kw = dict(init_scale=2.0 ** 126, growth_interval=1)
    step = tilefuse.compile_train_step(loss_fn, params, batch, tilefuse.optim.SGD(lr=0.1),
                                       loss_scale=LossScale(**kw), device="cpu")
    tw = torch.tensor(params["w"], requires_grad=True)
    opt = torch.optim.SGD([tw], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", **kw)
    x, y = torch.tensor(batch["x"]), torch.tensor(batch["y"])
    got, want = [], []
    for _ in range(4):
        step(batch)
        got.append(_scaler(step))
        opt.zero_grad()
        scaler.scale(torch.nn.functional.mse_loss(x @ tw, y)).backward()
        scaler.step(opt)
        scaler.update()
        want.append((float(scaler.get_scale()), int(scaler._get_growth_tracker()),
                     len(want) + 1))
    assert want == [(2.0 ** 127, 0, t) for t in range(1, 5)], f"PyTorch: {want}"
    assert got == want, f"(scale, tracker, applied) per step: tilefuse {got}, PyTorch {want}"


# ---------------------------------------------------------------------------
# 4. state_dict round trip
# ---------------------------------------------------------------------------

def test_state_dict_round_trip_continues_bitwise(tmp_path):
    ls = LossScale(growth_interval=3)
    step, batch = _overflow_step(loss_scale=ls)
    for _ in range(OVERFLOW_SKIPS + 2):  # 6 skipped steps, then 2 applied
        step(batch)
    sd = step.state_dict()
    want = {"scaler/scale": (np.float32, OVERFLOW_FIRST_GOOD_SCALE),
            "scaler/growth_tracker": (np.int64, 2), "scaler/applied_steps": (np.int64, 2)}
    for key, (dtype, value) in want.items():
        assert key in sd, f"state_dict() has no {key!r}: {sorted(sd)}"
        a = np.asarray(sd[key])
        assert a.dtype == dtype and a.shape == (), (
            f"{key}: {a.dtype}{a.shape}, want {np.dtype(dtype)}()")
        assert a.item() == value, f"{key}: {a.item()}, want {value}"
    assert int(sd["step"]) == OVERFLOW_SKIPS + 2
    assert [k for k in sd if k.startswith("scaler/")] == list(want), \
        f"scaler keys in order: {[k for k in sd if k.startswith('scaler/')]}"
    # state_dict() returns copies.
    sd["scaler/scale"][...] = 7.0
    assert step.loss_scale == OVERFLOW_FIRST_GOOD_SCALE, "state_dict() aliases the scale"
    sd = step.state_dict()

    path = tmp_path / "state.npz"
    tilefuse.runtime.save(sd, path)
    restored = []
    for source in (sd, tilefuse.runtime.load_state_dict(path)):
        fresh, _ = _overflow_step(loss_scale=ls)
        assert fresh.loss_scale == 65536.0  # the load below is what makes it continue
        fresh.load_state_dict(source)
        assert (fresh.loss_scale, fresh.applied_steps, fresh.step_count) == \
            (step.loss_scale, step.applied_steps, step.step_count)
        assert_bitwise("state after load_state_dict", _kept(fresh), _kept(step))
        restored.append(fresh)

    scales = []
    for t in range(OVERFLOW_SKIPS + 3, OVERFLOW_SKIPS + 6):
        want_loss = step(batch)
        scales.append(step.loss_scale)
        for name, other in zip(("dict", "npz file"), restored):
            got_loss = other(batch)
            assert np.float64(got_loss).tobytes() == np.float64(want_loss).tobytes(), (
                f"step {t} after a round trip via {name}: loss {got_loss!r}, the original "
                f"step's {want_loss!r}")
            assert_bitwise(f"state at step {t} after a round trip via {name}",
                           _kept(other), _kept(step))
            assert other.step_count == step.step_count
    # The tracker mattered: restored at 2, the first step after the load is
    # the 3rd finite one in a row and grows the scale 1024 -> 2048 (then the
    # gradient, 32 * 2048 * |residual| with |residual| < 0.8, still fits).
    assert scales[0] == 2 * OVERFLOW_FIRST_GOOD_SCALE, (
        f"scales after the load {scales}: the restored growth tracker (2 of 3) did not "
        f"grow the scale on the next finite step")


def test_load_state_dict_checks_the_scaler_keys():
    step, batch = _overflow_step()
    step(batch)
    sd = step.state_dict()
    bad = dict(sd, **{"scaler/scale": np.float64(sd["scaler/scale"])})
    with pytest.raises(tilefuse.CompileError, match="'scaler/scale' is float64"):
        step.load_state_dict(bad)
    missing = {k: v for k, v in sd.items() if k != "scaler/growth_tracker"}
    with pytest.raises(tilefuse.CompileError, match="missing 'scaler/growth_tracker'"):
        step.load_state_dict(missing)
    unscaled, _ = _overflow_step(loss_scale=None)
    with pytest.raises(tilefuse.CompileError, match="unexpected 'scaler/scale'"):
        unscaled.load_state_dict(sd)
    assert step.loss_scale == 32768.0, "a refused load_state_dict changed the scale"


# ---------------------------------------------------------------------------
# 5. Exported artifact
# ---------------------------------------------------------------------------

def test_exported_fp16_step_fills_scaler_defaults_and_keeps_them(tmp_path):
    loss_fn, params, batch = _overflow_problem()
    opt = tilefuse.optim.Adam(lr=0.01)
    path = tmp_path / "step.tfa"
    tilefuse.train_step_graph(loss_fn, params, batch, opt, precision="fp16").export(path)
    loaded = tilefuse.load(path)
    assert isinstance(loaded, tilefuse.LoadedTrainStep)
    names = [loaded.arguments[a][0] for a in loaded.state_arguments]
    want_names = ["params/w", "exp_avg/w", "exp_avg_sq/w", "scaler/scale",
                  "scaler/growth_tracker", "scaler/applied_steps"]
    assert names == want_names, f"kept arguments {names}, want {want_names}"

    w = params["w"]
    loaded.set_state([w, np.zeros_like(w), np.zeros_like(w)])  # no scaler state given
    sd = loaded.state_dict()
    assert list(sd) == want_names, list(sd)
    for key, dtype, value in (("scaler/scale", np.float32, 65536.0),
                              ("scaler/growth_tracker", np.int64, 0),
                              ("scaler/applied_steps", np.int64, 0)):
        a = np.asarray(sd[key])
        assert (a.dtype, a.shape, a.item()) == (np.dtype(dtype), (), value), (
            f"after set_state with params + optimizer state: {key} = {a.dtype}{a.shape} "
            f"{a.item()}, want {np.dtype(dtype)}() {value}")

    # The compiled step as the reference for the calls.
    step = tilefuse.compile_train_step(loss_fn, params, batch, opt, precision="fp16",
                                       device="cpu")
    for t in range(1, OVERFLOW_SKIPS + 3):
        got = float(loaded(batch, np.int64(t), np.float64(opt.lr)))
        want = step(batch)
        assert abs(got - want) <= 1e-6 * abs(want), f"call {t}: loss {got}, compiled {want}"
        sd = loaded.state_dict()
        got_scaler = (float(sd["scaler/scale"]), int(sd["scaler/growth_tracker"]),
                      int(sd["scaler/applied_steps"]))
        assert got_scaler == _scaler(step), (
            f"after call {t}: artifact's (scale, tracker, applied) {got_scaler}, the compiled "
            f"step's {_scaler(step)}")
        if t == 1:
            assert got_scaler == (32768.0, 0, 0), f"first call (overflow): {got_scaler}"
            assert_bitwise("artifact params after a skipped call",
                           {"w": sd["params/w"]}, {"w": w})
        for k, v in _kept(step).items():
            if not k.startswith("scaler/"):
                np.testing.assert_allclose(sd[k], v, rtol=1e-6, atol=1e-7,
                                           err_msg=f"after call {t}: {k}")
    assert int(loaded.state_dict()["scaler/applied_steps"]) == 2


def test_exported_step_state_dict_round_trip(tmp_path):
    """LoadedTrainStep.load_state_dict takes its own state_dict() back,
    0-d scaler entries included, and a compiled step's state (same keys)."""
    loss_fn, params, batch = _overflow_problem()
    opt = tilefuse.optim.Adam(lr=0.01)
    path = tmp_path / "step.tfa"
    tilefuse.train_step_graph(loss_fn, params, batch, opt, precision="fp16").export(path)
    loaded = tilefuse.load(path)
    w = params["w"]
    loaded.set_state([w, np.zeros_like(w), np.zeros_like(w)])
    loaded(batch, np.int64(1), np.float64(opt.lr))
    saved = loaded.state_dict()
    loaded.load_state_dict(saved)
    assert_bitwise("artifact state after loading its own state_dict()", loaded.state_dict(),
                   saved)
    step = tilefuse.compile_train_step(loss_fn, params, batch, opt, precision="fp16",
                                       device="cpu")
    for _ in range(3):
        step(batch)
    loaded.load_state_dict(_kept(step))
    assert_bitwise("artifact state after loading a compiled step's state",
                   loaded.state_dict(), _kept(step))


# ---------------------------------------------------------------------------
# 6. Errors
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("loss_scale,names", [
    (LossScale(growth_factor=1.0), ["growth_factor", "growth_factor=1.0"]),
    (LossScale(backoff_factor=1.5), ["backoff_factor", "backoff_factor=1.5"]),
    (LossScale(growth_interval=0), ["growth_interval", "0"]),
    (LossScale(init_scale=0), ["init_scale", "0"]),
    # Positive, but 0 once rounded to f32: every step would be skipped.
    (LossScale(init_scale=1e-50), ["init_scale", "1e-50"]),
    (LossScale(init_scale=1e39), ["init_scale", "1e+39"]),
    ("bogus", ["loss_scale", "'bogus'"]),
], ids=["growth_factor", "backoff_factor", "growth_interval", "init_scale",
        "init_scale_underflows_f32", "init_scale_overflows_f32", "bogus"])
def test_bad_loss_scale_is_a_compile_error_naming_the_field(loss_scale, names):
    loss_fn, params, batch = _small_regression()
    opt = tilefuse.optim.SGD(lr=0.1)
    for what, build in (
            ("compile_train_step", lambda: tilefuse.compile_train_step(
                loss_fn, params, batch, opt, precision="fp16", loss_scale=loss_scale,
                device="cpu")),
            ("train_step_graph", lambda: tilefuse.train_step_graph(
                loss_fn, params, batch, opt, precision="fp32", loss_scale=loss_scale))):
        with pytest.raises(tilefuse.CompileError) as info:
            build()
        msg = str(info.value)
        missing = [n for n in names if n not in msg]
        assert not missing, f"{what}: the error does not name {missing}: {msg!r}"


def test_huge_growth_interval_is_a_compile_error():
    loss_fn, params, batch = _small_regression()
    with pytest.raises(tilefuse.CompileError, match="growth_interval"):
        tilefuse.compile_train_step(loss_fn, params, batch, tilefuse.optim.SGD(lr=0.1),
                                    loss_scale=LossScale(growth_interval=2 ** 63),
                                    device="cpu")


# ---------------------------------------------------------------------------
# 7. Defaults
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("precision,loss_scale,want", [
    ("bf16", "auto", None), ("fp32", "auto", None), ("fp16", "auto", 65536.0),
    ("bf16", "dynamic", 65536.0), ("fp16", None, None),
])
def test_default_loss_scale_by_precision(precision, loss_scale, want):
    loss_fn, params, batch = _small_regression()
    step = tilefuse.compile_train_step(loss_fn, params, batch, tilefuse.optim.SGD(lr=0.1),
                                       precision=precision, loss_scale=loss_scale,
                                       device="cpu")
    assert step.loss_scale == want, (f"precision={precision!r}, loss_scale={loss_scale!r}: "
                                     f"step.loss_scale {step.loss_scale!r}, want {want!r}")
    step(batch)
    keys = [k for k in step.state_dict() if k.startswith("scaler/")]
    if want is None:
        assert keys == [], f"state_dict() of a step without loss scaling has {keys}"
        assert step.applied_steps == step.step_count == 1
    else:
        assert keys == ["scaler/scale", "scaler/growth_tracker", "scaler/applied_steps"], keys
        assert _scaler(step) == (want, 1, 1), _scaler(step)


# ---------------------------------------------------------------------------
# 8. tilefuse-compile --loss-scale
# ---------------------------------------------------------------------------

needs_tools = pytest.mark.skipif(shutil.which("tilefuse-compile") is None,
                                 reason="tools not on PATH")

# The forced-overflow loss of _overflow_problem, as graph-dialect text.
_CLI_LOSS = """
func.func @loss(%w: tensor<8x4xf32>, %x: tensor<16x8xf32>, %y: tensor<16x4xf32>) -> tensor<f32> {
  %0 = graph.matmul %x, %w : (tensor<16x8xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>
  %1 = graph.sub %0, %y : tensor<16x4xf32>
  %2 = graph.mul %1, %1 : tensor<16x4xf32>
  %3 = graph.reduce_sum %2 {dims = array<i64: 0, 1>} : (tensor<16x4xf32>) -> tensor<f32>
  return %3 : tensor<f32>
}
"""


def _cli(*args):
    return subprocess.run(["tilefuse-compile", *map(str, args)], capture_output=True,
                          text=True)


@pytest.fixture
def cli_loss(tmp_path):
    src = tmp_path / "loss.mlir"
    src.write_text(_CLI_LOSS)
    return src


def _assert_refused(done, reason, out):
    lines = done.stderr.splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert lines and lines[0] == f"tilefuse-compile: {reason}", done.stderr
    # The reason is one line; what follows is the usage line.
    assert all(line.startswith("usage:") for line in lines[1:]), done.stderr
    assert not out.exists(), "a refused command wrote its output"


@needs_tools
def test_cli_refuses_an_unknown_loss_scale(cli_loss, tmp_path):
    out = tmp_path / "s.tfa"
    _assert_refused(_cli(cli_loss, "--train", "--num-params=1", "--loss-scale=bogus",
                         "-o", out),
                    "--loss-scale must be dynamic or none, got 'bogus'", out)


@needs_tools
@pytest.mark.parametrize("flag", ["--loss-scale=dynamic", "--loss-scale=none",
                                  "--growth-interval=5"])
def test_cli_refuses_loss_scale_without_train(cli_loss, tmp_path, flag):
    out = tmp_path / "s.tfa"
    _assert_refused(_cli(cli_loss, flag, "-o", out),
                    "--loss-scale and --growth-interval apply to training steps: add --train", out)


@needs_tools
def test_cli_refuses_a_zero_growth_interval(cli_loss, tmp_path):
    out = tmp_path / "s.tfa"
    _assert_refused(_cli(cli_loss, "--train", "--num-params=1", "--growth-interval=0",
                         "-o", out),
                    "--growth-interval needs a whole number >= 1, got '0'", out)


@needs_tools
@pytest.mark.parametrize("optimizer,slots", [("sgd", 0), ("adamw", 2)])
def test_cli_fp16_train_step_keeps_the_scaler_state(cli_loss, tmp_path, optimizer, slots):
    steps = {}
    for mode in ("default", "none"):
        out = tmp_path / f"step_{mode}.tfa"
        flags = [] if mode == "default" else ["--loss-scale=none"]
        done = _cli(cli_loss, "--train", "--num-params=1", "--precision=fp16",
                    f"--optimizer={optimizer}", *flags, "-o", out)
        assert done.returncode == 0, done.stderr
        steps[mode] = tilefuse.load(out)
        assert isinstance(steps[mode], tilefuse.LoadedTrainStep)
    n_plain = len(steps["none"].state_arguments)
    n_scaled = len(steps["default"].state_arguments)
    assert n_plain == 1 + slots, steps["none"].arguments
    assert n_scaled == n_plain + 3, (
        f"--precision=fp16 keeps {n_scaled} arguments, --loss-scale=none {n_plain}: want 3 "
        f"more (scale, growth tracker, applied steps)")
    scaler_args = [steps["default"].arguments[a] for a in steps["default"].state_arguments[-3:]]
    assert [(d, s) for _, d, s in scaler_args] == [("f32", ()), ("i64", ()), ("i64", ())], \
        scaler_args

    w = np.zeros((8, 4), np.float32)
    x, y = np.ones((16, 8), np.float32), np.ones((16, 4), np.float32)
    lr = np.float64(0.01)
    zeros = [np.zeros_like(w)] * slots
    step = steps["default"]
    step.set_state([w, *zeros, np.array(65536.0, np.float32), np.array(0, np.int64),
                    np.array(0, np.int64)])
    for t in range(1, OVERFLOW_SKIPS + 2):
        loss = float(step(x, y, np.int64(t), lr))
        assert loss == OVERFLOW_LOSS, f"call {t}: loss {loss}"
        state = step.state()
        got = (float(state[-3]), int(state[-2]), int(state[-1]))
        skipped = t <= OVERFLOW_SKIPS
        want = ((65536.0 / 2 ** t, 0, 0) if skipped else (OVERFLOW_FIRST_GOOD_SCALE, 1, 1))
        assert got == want, f"after call {t}: (scale, tracker, applied) {got}, want {want}"
        assert np.array_equal(state[0], w) == skipped, (
            f"after call {t}: params {'changed' if skipped else 'unchanged'}")
    # Without loss scaling the same f16 gradient (-32) fits: the first call
    # applies. Both then hold the same first update.
    plain = steps["none"]
    plain.set_state([w, *zeros])
    assert float(plain(x, y, np.int64(1), lr)) == OVERFLOW_LOSS
    np.testing.assert_allclose(step.state()[0], plain.state()[0], rtol=1e-6,
                               err_msg="first applied update, scaled vs unscaled step")


@needs_tools
def test_cli_growth_interval_reaches_the_step(cli_loss, tmp_path):
    out = tmp_path / "step.tfa"
    done = _cli(cli_loss, "--train", "--num-params=1", "--optimizer=sgd",
                "--loss-scale=dynamic", "--growth-interval=1", "-o", out)
    assert done.returncode == 0, done.stderr
    step = tilefuse.load(out)
    w = np.zeros((8, 4), np.float32)
    step.set_state([w, np.array(1.0, np.float32), np.array(0, np.int64),
                    np.array(0, np.int64)])
    x, y = np.ones((16, 8), np.float32), np.ones((16, 4), np.float32)
    scales = []
    for t in range(1, 4):
        step(x, y, np.int64(t), np.float64(1e-3))
        scales.append(float(step.state()[1]))
    assert scales == [2.0, 4.0, 8.0], f"f32 step with --growth-interval=1: scales {scales}"
