"""The runtime builds alone (TILEFUSE_RUNTIME_ONLY): no LLVM/MLIR found,
included or linked, and what it builds (tilefuse-run, the runtime-only
Python module) runs artifacts the full build wrote, with the same results.
This is the build a GPU machine without LLVM/MLIR makes (bench/gpu_check.sh)."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def runtime_build(tmp_path_factory):
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed")
    build = tmp_path_factory.mktemp("runtime-only")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    # MLIR and LLVM cannot be found: any find_package of them would fail the
    # configure, and their prefix is off the search path.
    configure = ["cmake", "-S", ROOT, "-B", str(build), *gen, "-DTILEFUSE_RUNTIME_ONLY=ON",
                 "-DTILEFUSE_BUILD_TESTS=OFF", "-DCMAKE_BUILD_TYPE=Release",
                 "-DCMAKE_DISABLE_FIND_PACKAGE_MLIR=ON", "-DCMAKE_DISABLE_FIND_PACKAGE_LLVM=ON",
                 "-DCMAKE_IGNORE_PREFIX_PATH=/usr/lib/llvm-19",
                 f"-DPython3_EXECUTABLE={sys.executable}"]
    env = dict(os.environ, PATH=os.pathsep.join(
        p for p in os.environ["PATH"].split(os.pathsep) if "llvm" not in p))
    for cmd in (configure, ["cmake", "--build", str(build), "-j", "2"]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return build


def test_nothing_of_llvm_or_mlir_is_included_or_linked(runtime_build):
    with open(runtime_build / "compile_commands.json") as f:
        commands = json.load(f)
    assert commands
    for c in commands:
        assert "llvm" not in c["command"] and "mlir" not in c["command"].lower(), c["command"]
    lib = next((runtime_build / "python" / "tilefuse").glob("_runtime*.so"))
    for binary in (runtime_build / "bin" / "tilefuse-run", lib):
        ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
        assert "libMLIR" not in ldd and "libLLVM" not in ldd, ldd
        assert "libcuda" not in ldd and "libcublas" not in ldd, ldd  # loaded at run time
        assert "libgomp" not in ldd, ldd  # its threads are its own
    assert not list((runtime_build / "python" / "tilefuse").glob("_core*.so"))


def test_runtime_only_python_and_tools_run_artifacts(runtime_build, rng, tmp_path):
    x = rng.standard_normal((16, 40)).astype(np.float32)
    ids = np.array([3, 0, 15, 7], np.int64)
    g = tilefuse.trace(lambda x, i: (F.softmax(x, -1) * 2, F.embedding(i, x).sum(1)), x, ids)
    path = tmp_path / "m.tfa"
    g.export(path)
    want = g.interpret(x, ids)
    np.savez(tmp_path / "in.npz", x=x, ids=ids)
    code = (
        "import numpy as np, tilefuse, sys\n"
        "assert not tilefuse.HAVE_COMPILER and not hasattr(tilefuse, 'trace')\n"
        "from tilefuse.workload_data import gpt2_mini_config, gpt2_mini_init\n"
        "assert len(gpt2_mini_init(gpt2_mini_config(n_layer=1))) == 16\n"
        f"d = np.load({str(tmp_path / 'in.npz')!r})\n"
        f"f = tilefuse.load({str(path)!r})\n"
        "a, b = f(d['x'], d['ids'])\n"
        f"np.savez({str(tmp_path / 'out.npz')!r}, a=a, b=b)\n"
        "try:\n"
        "    f(d['x'])\n"
        "except tilefuse.CompileError as e:\n"
        "    print('refused:', e)\n")
    env = dict(os.environ, PYTHONPATH=str(runtime_build / "python"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "refused: the compiled function takes 2 arguments, got 1" in r.stdout
    got = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(got["a"], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["b"], want[1], rtol=1e-5, atol=1e-6)
    out = subprocess.run([str(runtime_build / "bin" / "tilefuse-run"), str(path)],
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.count("result ") == 2, out.stdout + out.stderr
