"""A loaded training-step artifact takes the state_dict() of the TrainStep
that exported it whole (as the README shows): the kept arguments are
restored, the step count, lr and seed are kept in `resumed` for the caller
(who passes them at every call), a state dict of another optimizer or with
only some of those entries is refused, and calls return the loss as a
float, as TrainStep does.

Tolerance: the loaded step's loss against the TrainStep's next loss,
relative 1e-6 (the same kernels; f32)."""
import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F


def _setup(rng):
    params = {"w": rng.standard_normal((6, 4)).astype(np.float32),
              "b": np.zeros(4, np.float32)}
    batch = {"x": rng.standard_normal((8, 6)).astype(np.float32),
             "y": rng.standard_normal((8, 4)).astype(np.float32)}

    def loss_fn(p, b):
        return F.mse_loss(b["x"] @ p["w"] + p["b"], b["y"])
    return loss_fn, params, batch


def test_a_loaded_step_takes_the_train_steps_state_dict(tmp_path, rng):
    loss_fn, params, batch = _setup(rng)
    opt = tilefuse.optim.AdamW(lr=1e-2)
    step = tilefuse.compile_train_step(loss_fn, params, batch, optimizer=opt, device="cpu")
    for _ in range(3):
        step(batch)
    path = tmp_path / "step.tfa"
    tilefuse.train_step_graph(loss_fn, params, batch, opt).export(path)
    loaded = tilefuse.load(path)
    assert loaded.resumed is None
    loaded.load_state_dict(step.state_dict())
    assert loaded.resumed == {"step": 3, "lr": pytest.approx(1e-2), "seed": 0}
    want = step(batch)
    got = loaded(batch, np.int64(loaded.resumed["step"] + 1), np.float64(loaded.resumed["lr"]))
    assert isinstance(got, float) and isinstance(want, float)
    assert abs(got - want) <= 1e-6 * abs(want), (got, want)


def test_a_state_dict_of_another_optimizer_or_half_of_one_is_refused(tmp_path, rng):
    loss_fn, params, batch = _setup(rng)
    adamw = tilefuse.optim.AdamW(lr=1e-2)
    path = tmp_path / "step.tfa"
    tilefuse.train_step_graph(loss_fn, params, batch, adamw).export(path)
    loaded = tilefuse.load(path)
    state = tilefuse.compile_train_step(loss_fn, params, batch, adamw,
                                        device="cpu").state_dict()
    with pytest.raises(tilefuse.CompileError, match="'optimizer'.*not.*'step'|but not"):
        loaded.load_state_dict({k: v for k, v in state.items() if k != "step"})
    state["optimizer"] = np.str_("adam")
    with pytest.raises(tilefuse.CompileError, match="'adam' optimizer.*'adamw'"):
        loaded.load_state_dict(state)
