"""Checkpoints of training steps: TrainStep.state_dict() / load_state_dict(),
tilefuse.runtime.save / load_state_dict (an .npz file), and the same for
training-step artifacts (LoadedTrainStep).

The property: k steps, save, load into a FRESH compiled step, n more steps
gives bitwise the parameters, optimizer state and losses of k + n
uninterrupted steps (the step count, lr and dropout seed come back too)."""
import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F
from tilefuse import optim, runtime

K, N = 3, 3


def _model(dtype=np.float32):
    rng = np.random.default_rng(11)
    params = {
        "hidden": {"w": (rng.standard_normal((12, 16)) * 0.3).astype(dtype),
                   "b": (rng.standard_normal(16) * 0.1).astype(dtype)},
        "out": {"w": (rng.standard_normal((16, 5)) * 0.3).astype(dtype),
                "b": np.zeros(5, dtype)},
    }
    batches = [{"x": rng.standard_normal((6, 12)).astype(dtype),
                "y": rng.integers(0, 5, 6).astype(np.int64)} for _ in range(K + N)]
    return params, batches


def _loss(p, b, seed):
    h = F.relu(b["x"] @ p["hidden"]["w"] + p["hidden"]["b"])
    h = F.dropout(h, 0.25, training=True, seed=seed)
    return F.cross_entropy(h @ p["out"]["w"] + p["out"]["b"], b["y"])


def _compile(opt, params, batch, seed):
    return tilefuse.compile_train_step(_loss, params, batch, optimizer=opt, device="cpu",
                                       seed=seed)


OPTIMIZERS = {
    "sgd_momentum": lambda: optim.SGD(0.1, momentum=0.9),
    "sgd_nesterov_wd": lambda: optim.SGD(0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    "adam": lambda: optim.Adam(0.01, weight_decay=0.01),
    "adamw": lambda: optim.AdamW(0.01, weight_decay=0.1, clip_grad_norm=1.0),
}


def _run(step, batches, first_t):
    """Steps first_t, first_t + 1, ... on `batches`; lr halves before step 2
    (a schedule: the saved lr matters)."""
    losses = []
    for t, b in enumerate(batches, start=first_t):
        if t == 2:
            step.lr = step.lr * 0.5
        losses.append(step(b))
    return losses


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_resume_equals_uninterrupted_run(name, tmp_path):
    params, batches = _model()
    opt = OPTIMIZERS[name]()
    whole = _compile(opt, params, batches[0], seed=7)
    losses = _run(whole, batches, 1)

    first = _compile(opt, params, batches[0], seed=7)
    before = _run(first, batches[:K], 1)
    assert before == losses[:K]
    path = tmp_path / "ckpt.npz"
    runtime.save(first.state_dict(), path)

    # A fresh step, compiled with another seed: the saved seed must win.
    resumed = _compile(opt, params, batches[0], seed=0)
    resumed.load_state_dict(runtime.load_state_dict(path))
    assert resumed.step_count == K and resumed.lr == first.lr
    after = _run(resumed, batches[K:], K + 1)

    assert after == losses[K:], (after, losses[K:])
    got, want = resumed.state_dict(), whole.state_dict()
    assert list(got) == list(want)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
        assert np.asarray(got[key]).dtype == np.asarray(want[key]).dtype, key
    for key, value in resumed.params().items():
        for leaf in value:
            assert np.array_equal(value[leaf], whole.params()[key][leaf])

    # Teeth: without the checkpoint the fresh step does not follow the run.
    fresh = _compile(opt, params, batches[0], seed=0)
    fresh.lr = first.lr
    assert [fresh(b) for b in batches[K:]] != losses[K:]


def test_state_dict_contents_and_copies():
    params, batches = _model(np.float64)
    step = _compile(optim.Adam(0.01), params, batches[0], seed=3)
    step(batches[0])
    step.lr = 0.004
    sd = step.state_dict()
    sections = ["params", "exp_avg", "exp_avg_sq"]
    names = ["hidden.b", "hidden.w", "out.b", "out.w"]
    assert list(sd) == [f"{s}/{n}" for s in sections for n in names] + \
        ["step", "lr", "seed", "optimizer"]
    assert sd["step"] == 1 and sd["lr"] == 0.004 and sd["seed"] == 3 and sd["optimizer"] == "adam"
    np.testing.assert_array_equal(sd["params/hidden.w"], step.params()["hidden"]["w"])
    np.testing.assert_array_equal(sd["exp_avg_sq/out.b"], step.state()["exp_avg_sq"]["out"]["b"])
    assert np.any(sd["exp_avg/hidden.w"] != 0)
    sd["params/hidden.w"][...] = 123.0  # a copy, not the step's buffer
    assert not np.any(step.params()["hidden"]["w"] == 123.0)


def _fresh_sgd_state():
    params, batches = _model()
    step = _compile(optim.SGD(0.1, momentum=0.9), params, batches[0], seed=0)
    step(batches[0])
    return step, step.state_dict()


def test_load_state_dict_errors_name_the_key_and_shapes():
    step, sd = _fresh_sgd_state()
    before = step.state_dict()

    missing = dict(sd)
    del missing["momentum/out.w"]
    with pytest.raises(tilefuse.CompileError, match=r"missing 'momentum/out\.w'"):
        step.load_state_dict(missing)

    extra = dict(sd, **{"params/extra": np.zeros(3, np.float32)})
    with pytest.raises(tilefuse.CompileError, match=r"unexpected 'params/extra'"):
        step.load_state_dict(extra)

    wrong_shape = dict(sd, **{"params/hidden.w": np.zeros((16, 12), np.float32)})
    with pytest.raises(tilefuse.CompileError,
                       match=r"'params/hidden\.w' is float32\(16, 12\), the step holds "
                             r"float32\(12, 16\)"):
        step.load_state_dict(wrong_shape)

    wrong_dtype = dict(sd, **{"momentum/out.b": np.zeros(5, np.float64)})
    with pytest.raises(tilefuse.CompileError,
                       match=r"'momentum/out\.b' is float64\(5,\), the step holds float32\(5,\)"):
        step.load_state_dict(wrong_dtype)

    with pytest.raises(tilefuse.CompileError, match="'step' must be an integer"):
        step.load_state_dict(dict(sd, step=np.float64(2.5)))
    with pytest.raises(tilefuse.CompileError, match="'optimizer' must be a string"):
        step.load_state_dict(dict(sd, optimizer=np.int64(1)))
    with pytest.raises(tilefuse.CompileError, match="a dict of arrays"):
        step.load_state_dict([1, 2])
    with pytest.raises(tilefuse.CompileError, match=r"runtime\.load_state_dict\(path\)"):
        step.load_state_dict("ckpt.npz")

    # Nothing was half-applied: the step still holds its own state.
    got = step.state_dict()
    for key in before:
        np.testing.assert_array_equal(got[key], before[key], err_msg=key)


def test_load_state_dict_refuses_another_optimizer():
    params, batches = _model()
    adam = _compile(optim.Adam(0.01), params, batches[0], seed=0)
    adamw = _compile(optim.AdamW(0.01), params, batches[0], seed=0)
    with pytest.raises(tilefuse.CompileError, match="'adam' optimizer, this step was compiled "
                                                    "with 'adamw'"):
        adamw.load_state_dict(adam.state_dict())
    sgd = _compile(optim.SGD(0.1, momentum=0.9), params, batches[0], seed=0)
    with pytest.raises(tilefuse.CompileError, match="missing 'momentum/hidden.b'.*unexpected "
                                                    "'exp_avg/hidden.b'"):
        sgd.load_state_dict(adam.state_dict())


def test_save_and_load_files(tmp_path):
    _, sd = _fresh_sgd_state()
    path = tmp_path / "state"  # no extension: written as named, not state.npz
    runtime.save(sd, path)
    assert path.exists() and not (tmp_path / "state.npz").exists()
    back = runtime.load_state_dict(path)
    assert list(back) == list(sd)
    for key in sd:
        np.testing.assert_array_equal(back[key], sd[key])
        assert back[key].dtype == np.asarray(sd[key]).dtype
    with np.load(path, allow_pickle=False) as z:  # plain numpy reads it
        np.testing.assert_array_equal(z["params/out.w"], sd["params/out.w"])

    with pytest.raises(tilefuse.CompileError, match="'bad' is not a numeric array"):
        runtime.save({"bad": np.array([object()])}, tmp_path / "bad.npz")
    assert not (tmp_path / "bad.npz").exists()
    np.save(tmp_path / "one.npy", np.zeros(3))
    with pytest.raises(tilefuse.CompileError, match="holds one array, not a state dict"):
        runtime.load_state_dict(tmp_path / "one.npy")
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(tilefuse.CompileError, match="cannot read"):
        runtime.load_state_dict(tmp_path / "junk.npz")


def test_parameter_names_that_clash_are_refused():
    rng = np.random.default_rng(0)
    params = {"a.b": rng.standard_normal((3, 2)).astype(np.float32),
              "a": {"b": rng.standard_normal((2, 1)).astype(np.float32)}}
    batch = {"x": rng.standard_normal((4, 3)).astype(np.float32)}
    step = tilefuse.compile_train_step(
        lambda p, b: ((b["x"] @ p["a.b"]) @ p["a"]["b"]).mean(), params, batch,
        optimizer=optim.SGD(0.1), device="cpu")
    with pytest.raises(tilefuse.CompileError, match=r"\['a\.b'\] stand for more than one"):
        step.state_dict()


def test_loaded_train_step_artifact_resumes_exactly(tmp_path):
    params, batches = _model()
    step = _compile(optim.AdamW(0.01), params, batches[0], seed=5)
    path = tmp_path / "step.tfa"
    step.graph.export(path)
    leaves = [params[a][b] for a in ("hidden", "out") for b in ("b", "w")]
    kept = leaves + [np.zeros_like(p) for _ in range(2) for p in leaves]

    def rest(t):  # batch leaves (x, y), seed, step, lr
        b = batches[t - 1]
        return [b["x"], b["y"], np.int64(5 + t - 1), np.int64(t), np.float64(0.01)]

    whole = tilefuse.load(path)
    whole.set_state(kept)
    losses = [whole(*rest(t)) for t in range(1, K + N + 1)]
    assert losses == [step(b) for b in batches]  # the artifact is the compiled step

    first = tilefuse.load(path)
    with pytest.raises(tilefuse.CompileError, match="call set_state"):
        first.state_dict()
    first.set_state(kept)
    assert [first(*rest(t)) for t in range(1, K + 1)] == losses[:K]
    sd = first.state_dict()
    names = [whole.arguments[a][0] for a in whole.state_arguments]
    assert list(sd) == names
    runtime.save(sd, tmp_path / "ckpt.npz")

    resumed = tilefuse.load(path)
    resumed.load_state_dict(runtime.load_state_dict(tmp_path / "ckpt.npz"))
    assert [resumed(*rest(t)) for t in range(K + 1, K + N + 1)] == losses[K:]
    for got, want in zip(resumed.state(), whole.state()):
        np.testing.assert_array_equal(got, want)

    bad = dict(sd)
    bad[names[0]] = np.zeros((2, 2), np.float32)
    with pytest.raises(tilefuse.CompileError,
                       match=f"'{names[0]}' is float32\\(2, 2\\), the step holds float32\\(16,\\)"):
        resumed.load_state_dict(bad)
    del bad[names[0]]
    with pytest.raises(tilefuse.CompileError, match=f"missing '{names[0]}'"):
        resumed.load_state_dict(bad)
