"""The two halves of the GPU check, run here with the CPU as the device:
bench/gpu/prepare.py writes the corpus, kernels, training steps and
manifest; bench/gpu/verify.py runs every corpus artifact against the
interpreter's expected outputs and fails on a wrong result. (On a GPU
machine bench/gpu_check.sh runs the same scripts on sm_90 artifacts.)"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREPARE = os.path.join(ROOT, "bench", "gpu", "prepare.py")
VERIFY = os.path.join(ROOT, "bench", "gpu", "verify.py")


def test_prepare_then_verify_on_the_cpu(tmp_path):
    out = tmp_path / "prepared"
    r = subprocess.run([sys.executable, PREPARE, str(out), "--target", "cpu", "--no-gpt2-small"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"] == "cpu"
    assert {k["name"] for k in manifest["kernels"]} == {
        "pointwise_chain", "softmax", "layer_norm_fwd_bwd", "cross_entropy_fwd_bwd",
        "adamw_update"}
    assert [t["name"] for t in manifest["training"]] == ["gpt2_mini"]
    assert len(manifest["corpus"]) >= 7
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    assert size < 50 * 2**20, size
    results = tmp_path / "results"
    r = subprocess.run([sys.executable, VERIFY, "--prepared", str(out), "--results-dir",
                        str(results)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    table = (results / "verify.md").read_text()
    assert table.count("| pass |") == len(manifest["corpus"]), table

    # A wrong expected output is caught.
    case = manifest["corpus"][0]
    expected = dict(np.load(out / case["expected"]))
    expected["arr_0"] = expected["arr_0"] + 1
    np.savez(out / case["expected"], **expected)
    r = subprocess.run([sys.executable, VERIFY, "--prepared", str(out)], capture_output=True,
                       text=True)
    assert r.returncode == 1 and f"| {case['name']} | FAIL |" in r.stdout, r.stdout


@pytest.mark.parametrize("torch_headers", [False, True], ids=["nothing", "torch_copy"])
def test_gpu_check_without_pybind11_still_checks_and_prints_its_table(tmp_path, torch_headers):
    """A GPU machine may lack pybind11: the runtime-only build then builds
    the Python module with the pybind11 headers torch ships, or without
    those skips it, builds tilefuse-run, checks the corpus through it and
    still ends with the table (here with the CPU as the device)."""
    import shutil
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed")
    if torch_headers:
        try:
            import torch  # noqa: F401
        except ImportError:
            pytest.skip("torch is not installed: no pybind11 headers of its to build with")
    out = tmp_path / "prepared"
    r = subprocess.run([sys.executable, PREPARE, str(out), "--target", "cpu", "--no-gpt2-small"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    cmake_args = "-Dpybind11_DIR=/nonexistent"
    if not torch_headers:
        cmake_args += " -DTILEFUSE_PYBIND11_FROM_TORCH=OFF"
    env = dict(os.environ, RESULTS_DIR=str(tmp_path / "results"),
               TILEFUSE_GPU_BUILD=str(tmp_path / "build"),
               TILEFUSE_GPU_CMAKE_ARGS=cmake_args)
    r = subprocess.run(["bash", os.path.join(ROOT, "bench", "gpu_check.sh"), str(out)],
                       capture_output=True, text=True, env=env, timeout=900)
    table = (tmp_path / "results" / "gpu_check.md").read_text()
    # With the module built, the benchmarks run too, and without a GPU they
    # can only say so (the check itself then fails, as it should).
    no_gpu_bench = torch_headers and "torch sees no CUDA device" in table
    assert r.returncode == 0 or no_gpu_bench, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"Python module: {'yes' if torch_headers else 'no'}" in table, table
    manifest = json.loads((out / "manifest.json").read_text())
    assert table.count("| pass |") == len(manifest["corpus"]), table
    built = list((tmp_path / "build").glob("python/tilefuse/_runtime*"))
    assert bool(built) == torch_headers, built
