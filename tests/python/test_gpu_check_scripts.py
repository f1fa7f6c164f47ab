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


def test_gpu_check_without_pybind11_still_checks_and_prints_its_table(tmp_path):
    """A GPU machine may lack pybind11: the runtime-only build then skips
    the Python module, builds tilefuse-run, checks the corpus through it and
    still ends with the table (here with the CPU as the device)."""
    import shutil
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed")
    out = tmp_path / "prepared"
    r = subprocess.run([sys.executable, PREPARE, str(out), "--target", "cpu", "--no-gpt2-small"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    env = dict(os.environ, RESULTS_DIR=str(tmp_path / "results"),
               TILEFUSE_GPU_BUILD=str(tmp_path / "build"),
               TILEFUSE_GPU_CMAKE_ARGS="-Dpybind11_DIR=/nonexistent")
    r = subprocess.run(["bash", os.path.join(ROOT, "bench", "gpu_check.sh"), str(out)],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    table = (tmp_path / "results" / "gpu_check.md").read_text()
    assert "Python module: no" in table, table
    manifest = json.loads((out / "manifest.json").read_text())
    assert table.count("| pass |") == len(manifest["corpus"]), table
    assert not list((tmp_path / "build").glob("python/tilefuse/_runtime*"))
