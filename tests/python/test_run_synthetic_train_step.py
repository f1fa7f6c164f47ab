"""tilefuse-run on a training-step artifact with synthetic inputs runs a
step from a start a fresh optimizer could have (random parameters, zero
optimizer state, loss scale 65536, step 1, lr 1e-3): every result is finite
(random optimizer state made Adam's second moment negative and step 0 made
its bias correction divide by zero: NaN parameters), and second moments
stay >= 0."""
import shutil
import subprocess

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F

pytestmark = pytest.mark.skipif(shutil.which("tilefuse-run") is None,
                                reason="tools not on PATH")

_LOSS = """
func.func @loss(%w: tensor<3x2xf32>, %b: tensor<2xf32>, %x: tensor<4x3xf32>) -> tensor<f32> {
  %0 = graph.matmul %x, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %1 = graph.broadcast_in_dim %b {dims = array<i64: 1>} : (tensor<2xf32>) -> tensor<4x2xf32>
  %2 = graph.add %0, %1 : tensor<4x2xf32>
  %3 = graph.mul %2, %2 : tensor<4x2xf32>
  %4 = graph.reduce_sum %3 {dims = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  return %4 : tensor<f32>
}"""


def _run_saved(artifact, folder):
    done = subprocess.run(["tilefuse-run", str(artifact), f"--save={folder}"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return [np.load(folder / f"result{i}.npy") for i in range(len(list(folder.iterdir())))]


def _python_step(tmp_path, optimizer, precision="fp32", groups=False):
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((6, 4)).astype(np.float32),
              "b": np.zeros(4, np.float32)}
    batch = {"x": rng.standard_normal((8, 6)).astype(np.float32),
             "y": rng.standard_normal((8, 4)).astype(np.float32)}

    def loss_fn(p, b):
        return F.mse_loss(b["x"] @ p["w"] + p["b"], b["y"])
    if groups:
        optimizer.param_groups = [{"params": ["w"], "lr": 1e-2}, {"params": ["b"]}]
    path = tmp_path / "step.tfa"
    tilefuse.train_step_graph(loss_fn, params, batch, optimizer, precision=precision).export(path)
    return path


@pytest.mark.parametrize("kind", ["adamw", "adam", "sgd-momentum", "adam-groups", "adam-fp16"])
def test_synthetic_run_of_an_exported_step_is_finite(tmp_path, kind):
    optimizer = {"adamw": lambda: tilefuse.optim.AdamW(lr=1e-3),
                 "adam": lambda: tilefuse.optim.Adam(lr=1e-3),
                 "sgd-momentum": lambda: tilefuse.optim.SGD(lr=1e-2, momentum=0.9),
                 "adam-groups": lambda: tilefuse.optim.Adam(lr=1e-3),
                 "adam-fp16": lambda: tilefuse.optim.Adam(lr=1e-3)}[kind]()
    path = _python_step(tmp_path, optimizer, precision="fp16" if kind == "adam-fp16" else "fp32",
                        groups=kind == "adam-groups")
    names = tilefuse.load(path).arguments
    results = _run_saved(path, tmp_path / "out")
    for i, r in enumerate(results):
        assert np.isfinite(r.astype(np.float64)).all(), f"{kind}: result {i} is not finite: {r}"
    # Results: loss, then the kept arguments' next values in argument order.
    for (name, _, _), r in zip(names, results[1:]):
        if name.startswith("exp_avg_sq/"):
            assert (r >= 0).all(), f"{kind}: {name} negative"
    if kind == "adam-fp16":
        kept = {n: r for (n, _, _), r in zip(names, results[1:])}
        assert kept["scaler/applied_steps"] == 1, "the synthetic fp16 step was skipped"


def test_synthetic_run_of_a_cli_step_is_finite(tmp_path):
    src = tmp_path / "loss.mlir"
    src.write_text(_LOSS)
    out = tmp_path / "step.tfa"
    for optimizer in ("adamw", "adam", "sgd"):
        done = subprocess.run(["tilefuse-compile", str(src), "--target=cpu", "-o", str(out),
                               "--train", "--num-params=2", f"--optimizer={optimizer}"],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        folder = tmp_path / optimizer
        for i, r in enumerate(_run_saved(out, folder)):
            assert np.isfinite(r).all(), f"{optimizer}: result {i} is not finite: {r}"
