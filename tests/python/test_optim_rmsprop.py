"""tilefuse.optim.RMSprop against torch.optim.RMSprop: several steps of a
small MLP from the same initial parameters and batches, compiled for the
CPU, in float32 and float64; every option (alpha, eps, weight_decay,
momentum, centered, parameter groups).

Error measure per tensor: max |got - ref| / max |ref|. Tolerances: float32
1e-5 (losses and parameters), float64 1e-10; the optimizer state (square
average, momentum buffer, gradient average) the same.
"""
import numpy as np
import pytest
import torch

import tilefuse
import tilefuse.functional as F
from tilefuse import optim

TOL = {np.float32: 1e-5, np.float64: 1e-10}
STEPS = 6
# tilefuse's state slot -> torch.optim.RMSprop's state key.
TORCH_SLOT = {"square_avg": "square_avg", "momentum_buffer": "momentum_buffer",
              "grad_avg": "grad_avg"}


def max_rel_err(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = np.abs(ref).max()
    err = np.abs(got - ref).max()
    return err / scale if scale > 0 else err


def loss_fn(params, batch):
    h = (batch["x"] @ params["w1"] + params["b1"]).tanh()
    return F.mse_loss(h @ params["w2"], batch["y"])


def torch_loss(params, batch):
    h = torch.tanh(batch["x"] @ params["w1"] + params["b1"])
    return torch.nn.functional.mse_loss(h @ params["w2"], batch["y"])


def make_problem(rng, dtype):
    params = {"w1": rng.standard_normal((4, 8)) * 0.5, "b1": rng.standard_normal(8) * 0.1,
              "w2": rng.standard_normal((8, 3)) * 0.5}
    batches = [{"x": rng.standard_normal((16, 4)), "y": rng.standard_normal((16, 3))}
               for _ in range(STEPS)]
    cast = lambda d: {k: v.astype(dtype) for k, v in d.items()}  # noqa: E731
    return cast(params), [cast(b) for b in batches]


def torch_run(params, batches, kwargs, groups=None):
    """Losses, final parameters and optimizer state of torch.optim.RMSprop."""
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    if groups is None:
        opt = torch.optim.RMSprop(list(tp.values()), **kwargs)
    else:
        opt = torch.optim.RMSprop([dict(g, params=[tp[n] for n in g["params"]]) for g in groups],
                                  **kwargs)
    losses = []
    for b in batches:
        opt.zero_grad()
        loss = torch_loss(tp, {k: torch.tensor(v) for k, v in b.items()})
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    state = {slot: {k: opt.state[p][key].detach().numpy() for k, p in tp.items()}
             for slot, key in TORCH_SLOT.items() if key in opt.state[tp["w1"]]}
    return losses, {k: v.detach().numpy() for k, v in tp.items()}, state


CASES = {
    "defaults": {},
    "alpha, eps": {"alpha": 0.9, "eps": 1e-6},
    "weight_decay": {"weight_decay": 0.05},
    "momentum": {"momentum": 0.9},
    "centered": {"centered": True},
    "centered, momentum, weight_decay": {"centered": True, "momentum": 0.5,
                                         "weight_decay": 0.01, "alpha": 0.95},
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", list(CASES))
def test_rmsprop_matches_torch(case, dtype, rng, seed):
    kwargs = dict(lr=3e-3, **CASES[case]) if case != "defaults" else {}
    params, batches = make_problem(rng, dtype)
    want_losses, want_params, want_state = torch_run(params, batches, kwargs)
    opt = optim.RMSprop(**kwargs)
    step = tilefuse.compile_train_step(loss_fn, params, batches[0], opt, device="cpu")
    tol = TOL[dtype]
    for t, (b, want) in enumerate(zip(batches, want_losses), 1):
        got = step(b)
        assert abs(got - want) <= tol * abs(want), (
            f"RMSprop {case} ({np.dtype(dtype).name}), step {t}, seed {seed}: loss {got!r} vs "
            f"torch {want!r}")
    for k, v in step.params().items():
        err = max_rel_err(v, want_params[k])
        assert err <= tol, (f"RMSprop {case} ({np.dtype(dtype).name}) after {STEPS} steps, "
                            f"param {k} {list(v.shape)}, seed {seed}: max error {err:.3g}")
    state = step.state()
    assert sorted(state) == sorted(want_state) == sorted(opt.state_names())
    for slot, tensors in state.items():
        for k, v in tensors.items():
            err = max_rel_err(v, want_state[slot][k])
            assert err <= tol, (f"RMSprop {case} ({np.dtype(dtype).name}): state {slot}/{k}, "
                                f"seed {seed}: max error {err:.3g}")


def test_rmsprop_parameter_groups_and_lr_changes_match_torch(rng, seed):
    params, batches = make_problem(rng, np.float32)
    groups = [{"params": ["w1", "b1"], "lr": 1e-3, "weight_decay": 0.1},
              {"params": ["w2"], "lr": 5e-3}]
    kwargs = {"momentum": 0.8, "centered": True}
    want_losses, want_params, _ = torch_run(params, batches, kwargs, groups)
    opt = optim.RMSprop(param_groups=groups, **kwargs)
    step = tilefuse.compile_train_step(loss_fn, params, batches[0], opt, device="cpu")
    for t, (b, want) in enumerate(zip(batches, want_losses), 1):
        got = step(b)
        assert abs(got - want) <= 1e-5 * abs(want), f"step {t}, seed {seed}: {got} vs {want}"
    for k, v in step.params().items():
        err = max_rel_err(v, want_params[k])
        assert err <= 1e-5, f"param {k}, seed {seed}: max error {err:.3g}"


def test_rmsprop_state_dict_round_trip(rng):
    params, batches = make_problem(rng, np.float32)
    opt = optim.RMSprop(lr=1e-3, momentum=0.9, centered=True)
    first = tilefuse.compile_train_step(loss_fn, params, batches[0], opt, device="cpu")
    for b in batches[:3]:
        first(b)
    saved = first.state_dict()
    assert str(saved["optimizer"]) == "rmsprop"
    assert {k.split("/")[0] for k in saved if "/" in k} == {
        "params", "square_avg", "momentum_buffer", "grad_avg"}
    second = tilefuse.compile_train_step(loss_fn, params, batches[0], opt, device="cpu")
    second.load_state_dict(saved)
    assert [first(b) for b in batches[3:]] == [second(b) for b in batches[3:]]


def test_rmsprop_refuses_negative_hyperparameters():
    params = {"w": np.ones((2, 2), np.float32)}
    batch = {"x": np.ones((3, 2), np.float32)}
    for bad in ({"alpha": -0.1}, {"momentum": -1.0}, {"lr": -1.0}):
        with pytest.raises(tilefuse.CompileError, match="RMSprop"):
            tilefuse.compile_train_step(lambda p, b: (b["x"] @ p["w"]).sum(), params, batch,
                                        optim.RMSprop(**bad), device="cpu")
