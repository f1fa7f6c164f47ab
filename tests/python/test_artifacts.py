"""Ahead-of-time artifacts (.tfa): compile -> file -> load -> run on the CPU
target equals the interpreter; training-step artifacts keep their state on
the device between calls; CUDA artifacts run against the interpreter where
a GPU is, and are refused with the reason where none is; bad files are
refused with the reason; the tilefuse-compile and tilefuse-run tools."""
import os
import shutil
import subprocess

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F
from tilefuse import workloads as W

from fusion_checks import assert_compiled_close


def _graph(rng):
    x = rng.standard_normal((8, 32)).astype(np.float32)
    w = rng.standard_normal((32, 16)).astype(np.float32)
    ids = np.array([1, 0, 3], np.int64)
    g = tilefuse.trace(lambda x, w, i: (F.softmax(F.gelu(x @ w), -1).sum(0),
                                        F.embedding(i, x).amax(1)), x, w, ids)
    return g, (x, w, ids)


def test_cpu_artifact_round_trip(rng, tmp_path):
    g, args = _graph(rng)
    path = tmp_path / "m.tfa"
    g.export(path)
    f = tilefuse.load(path)
    assert f.target == "cpu" and "func.func" in f.graph_text
    assert_compiled_close(f(*args), g.interpret(*args), "loaded artifact")


def test_training_step_artifact_matches_the_interpreted_step(tmp_path):
    cfg = W.mlp_mnist_config()
    params, batch = W.mlp_mnist_init(cfg, seed=0), W.mlp_mnist_batch(cfg, seed=1)
    # SGD with momentum rather than Adam: Adam divides each gradient by its
    # own magnitude, so on its first steps a gradient element near zero
    # (float32 cancellation, ~1e-8) moves its weight by ~lr either way, and
    # an elementwise comparison of weights would measure that noise.
    step = tilefuse.compile_train_step(lambda p, b, s: W.mlp_mnist_loss(p, b, s, cfg, True),
                                       params, batch, tilefuse.optim.SGD(lr=1e-2, momentum=0.9))
    path = tmp_path / "step.tfa"
    step.graph.export(path)
    names = sorted(params)
    p = [params[k] for k in names]
    kept = p + [np.zeros_like(x) for x in p]
    loaded = tilefuse.load(path)
    assert isinstance(loaded, tilefuse.LoadedTrainStep)
    assert loaded.state_arguments == list(range(len(kept)))
    with pytest.raises(tilefuse.CompileError, match="call set_state"):
        loaded(batch["x"], batch["y"], np.int64(5), np.int64(1), np.float64(1e-2))
    loaded.set_state(kept)
    # Two steps: the second starts from the state the first left behind.
    for t in (1, 2):
        rest = [batch["x"], batch["y"], np.int64(5), np.int64(t), np.float64(1e-2)]
        want = step.graph.interpret(*(kept + rest))
        loss = loaded(*rest)  # a float, as TrainStep's; the step computes it in f32
        assert type(loss) is float
        got = [np.float32(loss)] + loaded.state()
        assert_compiled_close(got, want, f"step {t}")
        kept = list(want[1:])


def test_cuda_artifact_runs_on_a_gpu_or_is_refused_with_the_reason(rng, tmp_path):
    g, args = _graph(rng)
    path = tmp_path / "m90.tfa"
    try:
        g.export(path, "cuda:sm_90")
    except tilefuse.CompileError as e:
        assert "no NVRTC" in str(e)
        pytest.skip("this build has no NVRTC (CUDA toolkit not found): no CUDA artifact")
    gpus, why = tilefuse._runtime.cuda_devices()
    if not gpus:
        # This machine: the refusal names the missing piece.
        with pytest.raises(tilefuse.CompileError, match="targets cuda:sm_90, but CUDA is not "
                                                         "available: " + why.split(" (")[0]):
            tilefuse.load(path)
        return
    try:
        f = tilefuse.load(path)
    except tilefuse.CompileError as e:
        assert "this GPU is" in str(e)  # another architecture: refused with both named
        return
    assert f.target == "cuda:sm_90" and f.device.startswith("cuda:0")
    for how in ("eager", "captured", "replayed"):
        assert_compiled_close(f(*args), g.interpret(*args), f"CUDA artifact, {how}")
    assert f.graph_stats == (1, 1)


def test_unknown_targets_are_refused(rng, tmp_path):
    g, _ = _graph(rng)
    with pytest.raises(tilefuse.CompileError, match="unknown target 'tpu'"):
        g.export(tmp_path / "x.tfa", "tpu")


def test_bad_artifacts_are_refused(rng, tmp_path):
    g, _ = _graph(rng)
    good = tmp_path / "good.tfa"
    g.export(good)
    data = good.read_bytes()
    cases = {
        "missing": (None, "cannot open artifact"),
        "magic": (b"XXXX" + data[4:], "not a tilefuse artifact"),
        "truncated": (data[:-7], "truncated artifact"),
        "header only": (data[:14], "truncated artifact"),
        "flipped": (data[:200] + bytes([data[200] ^ 0x10]) + data[201:], "checksum does not match"),
        "version": (data[:8] + bytes([9]) + data[9:], "format version 9 is not supported"),
    }
    for name, (content, reason) in cases.items():
        path = tmp_path / f"{name}.tfa"
        if content is not None:
            path.write_bytes(content)
        with pytest.raises(tilefuse.CompileError, match=reason):
            tilefuse.load(path)


@pytest.mark.skipif(shutil.which("tilefuse-compile") is None, reason="tools not on PATH")
def test_compile_and_run_tools(tmp_path):
    src = tmp_path / "loss.mlir"
    src.write_text("""
func.func @loss(%w: tensor<16x8xf32>, %x: tensor<4x16xf32>) -> tensor<f32> {
  %0 = graph.matmul %x, %w : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %1 = graph.tanh %0 : tensor<4x8xf32>
  %2 = graph.reduce_sum %1 {dims = array<i64: 0, 1>} : (tensor<4x8xf32>) -> tensor<f32>
  return %2 : tensor<f32>
}""")
    fwd, step = tmp_path / "fwd.tfa", tmp_path / "step.tfa"
    subprocess.run(["tilefuse-compile", str(src), "--target=cpu", "-o", str(fwd)], check=True)
    subprocess.run(["tilefuse-compile", str(src), "--target=cpu", "-o", str(step), "--train",
                    "--num-params=1", "--optimizer=sgd"], check=True)
    for path, results in [(fwd, 1), (step, 2)]:
        out = subprocess.run(["tilefuse-run", str(path), "--repeat=3"], check=True,
                             capture_output=True, text=True).stdout
        assert out.startswith("cpu on cpu: ") and out.count("result ") == results, out
    bad = subprocess.run(["tilefuse-run", str(src)], capture_output=True, text=True)
    assert bad.returncode == 1 and "not a tilefuse artifact" in bad.stderr
    usage = subprocess.run(["tilefuse-compile", str(src)], capture_output=True, text=True)
    assert usage.returncode == 2 and "-o OUTPUT are required" in usage.stderr


@pytest.mark.skipif(shutil.which("tilefuse-run") is None, reason="tools not on PATH")
def test_run_tool_takes_npy_inputs_and_saves_npy_results(rng, tmp_path):
    g, args = _graph(rng)
    path = tmp_path / "m.tfa"
    g.export(path)
    files = []
    for i, a in enumerate(args):
        files.append(str(tmp_path / f"in{i}.npy"))
        np.save(files[-1], a)
    out = subprocess.run(["tilefuse-run", str(path), "--inputs=" + ",".join(files),
                          f"--save={tmp_path}"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    got = [np.load(tmp_path / f"result{i}.npy") for i in range(2)]
    assert_compiled_close(got, g.interpret(*args), "tilefuse-run --inputs")
    # Wrong inputs are refused with the reason.
    np.save(tmp_path / "wrong.npy", args[0].astype(np.float64))
    np.save(tmp_path / "fortran.npy", np.asfortranarray(args[1]))
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    cases = {
        ",".join(files[:2]): "takes 3 arguments, --inputs gives 2",
        ",".join([str(tmp_path / "wrong.npy")] + files[1:]): "argument 0 is f64",
        ",".join([files[0], str(tmp_path / "fortran.npy"), files[2]]): "Fortran order",
        ",".join([str(tmp_path / "junk.npy")] + files[1:]): "not a .npy file",
    }
    for inputs, reason in cases.items():
        bad = subprocess.run(["tilefuse-run", str(path), "--inputs=" + inputs],
                             capture_output=True, text=True)
        assert bad.returncode == 1 and reason in bad.stderr, (reason, bad.stderr)


def test_loaded_functions_take_and_return_the_traced_structure(rng, tmp_path):
    """An exported artifact records the traced arguments' structure and
    names: the loaded function takes the same dicts and returns the same
    structure; another structure is refused with what was expected."""
    params = {"w": rng.standard_normal((4, 3)).astype(np.float32),
              "b": rng.standard_normal(3).astype(np.float32)}
    x = rng.standard_normal((5, 4)).astype(np.float32)

    def f(p, x):
        y = x @ p["w"] + p["b"]
        return {"y": y, "sum": y.sum()}

    g = tilefuse.trace(f, params, x)
    path = tmp_path / "f.tfa"
    g.export(path)
    loaded = tilefuse.load(path)
    got, want = loaded(params, x), g.interpret(params, x)
    assert set(got) == {"y", "sum"}
    for k in got:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
    assert [a[0] for a in loaded.arguments] == ["0.b", "0.w", "1"]
    with pytest.raises(tilefuse.CompileError, match=r"expected \[\{'b': \*, 'w': \*\}, \*\]"):
        loaded({"w": params["w"]}, x)
    with pytest.raises(tilefuse.CompileError, match="takes 2 arguments, got 1"):
        loaded(params)


def test_a_training_step_artifact_resumes_a_compiled_steps_state(rng, tmp_path):
    """The artifact of a training step names its kept arguments as
    TrainStep.state_dict() does, so a state saved from a compiled step loads
    into the artifact and both continue identically."""
    params = {"l1": {"w": rng.standard_normal((6, 4)).astype(np.float32)},
              "b": np.zeros(4, np.float32)}
    batch = {"x": rng.standard_normal((8, 6)).astype(np.float32),
             "y": rng.standard_normal((8, 4)).astype(np.float32)}

    def loss_fn(p, b):
        return F.mse_loss(b["x"] @ p["l1"]["w"] + p["b"], b["y"])

    opt = tilefuse.optim.AdamW(lr=1e-2)
    step = tilefuse.compile_train_step(loss_fn, params, batch, optimizer=opt, device="cpu")
    for _ in range(2):
        step(batch)
    saved = step.state_dict()
    path = tmp_path / "step.tfa"
    tilefuse.train_step_graph(loss_fn, params, batch, opt).export(path)
    loaded = tilefuse.load(path)
    kept = {k: v for k, v in saved.items() if "/" in k}
    assert sorted(kept) == sorted(n for n, _, _ in (loaded.arguments[a]
                                                     for a in loaded.state_arguments))
    loaded.load_state_dict(kept)
    t = saved["step"] + 1
    want = step(batch)
    got = loaded(batch, np.int64(t), np.float64(saved["lr"]))  # the batch as traced
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(tilefuse.CompileError, match="structure the step was traced with"):
        loaded({"x": batch["x"]}, np.int64(t + 1), np.float64(saved["lr"]))
    after = loaded.state_dict()
    for k, v in step.state_dict().items():
        if "/" in k:
            np.testing.assert_allclose(after[k], v, rtol=1e-6, atol=1e-7, err_msg=k)
