"""The on-disk cache of CUDA artifacts (frontend/DiskCache.cpp): an artifact
for a CUDA target that a process of this build wrote before is read back
whole from <TILEFUSE_CACHE_DIR>/cuda-artifacts, with no MLIR pass, no CUDA
rendering and no NVRTC.

Each case runs fresh Python processes (the test's tmp_path as
TILEFUSE_CACHE_DIR). A warm run is recognised by NVRTC's own cubin cache:
emptied between the runs, it stays empty when the artifact came from disk.
NVRTC compiles here without a GPU; without NVRTC in the build the cases are
skipped.
"""
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest

import tilefuse

pytestmark = pytest.mark.skipif(
    not hasattr(tilefuse._core, "cuda_library_source"),
    reason="this build of tilefuse has no NVRTC (CUDA toolkit not found when it was built)")

_SCRIPT = textwrap.dedent(r'''
    import sys
    import numpy as np
    import tilefuse
    import tilefuse.functional as F
    out, metadata = sys.argv[1], sys.argv[2]
    x = np.ones((64, 256), np.float32)
    w = np.ones((256, 256), np.float32)
    g = tilefuse.trace(lambda x, w: F.softmax(F.gelu(x @ w), -1).sum(), x, w)
    with open(out, "wb") as f:
        f.write(g._graph.compile_artifact("cuda:sm_90", metadata))
''')


def _run(tmp_path, name, metadata="{}", **env):
    out = tmp_path / f"{name}.tfa"
    e = dict(os.environ, TILEFUSE_CACHE_DIR=str(tmp_path / "cache"), **env)
    r = subprocess.run([sys.executable, "-c", _SCRIPT, str(out), metadata], env=e,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return out.read_bytes()


def _cubins(tmp_path):
    d = tmp_path / "cache" / "cubin"
    return sorted(os.listdir(d)) if d.exists() else []


def _entries(tmp_path):
    d = tmp_path / "cache" / "cuda-artifacts"
    return sorted(p for p in os.listdir(d) if p.endswith(".tfa")) if d.exists() else []


def test_warm_artifact_comes_from_disk_byte_for_byte(tmp_path):
    cold = _run(tmp_path, "cold")
    assert _cubins(tmp_path), "the cold run compiled no cubin"
    assert len(_entries(tmp_path)) == 1
    shutil.rmtree(tmp_path / "cache" / "cubin")
    warm = _run(tmp_path, "warm")
    assert warm == cold
    assert _cubins(tmp_path) == [], "the warm run ran NVRTC: the artifact was not read from disk"
    # Other metadata is another artifact (the metadata is in its bytes).
    other = _run(tmp_path, "other", metadata='{"run": 2}')
    assert other != cold and b'{"run": 2}' in other
    assert len(_entries(tmp_path)) == 2


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_damaged_entry_is_recompiled_and_replaced(tmp_path, damage):
    cold = _run(tmp_path, "cold")
    (entry,) = _entries(tmp_path)
    path = tmp_path / "cache" / "cuda-artifacts" / entry
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "flip":
        data[len(data) // 2] ^= 0xFF
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    shutil.rmtree(tmp_path / "cache" / "cubin")
    again = _run(tmp_path, "again")
    assert again == cold
    assert _cubins(tmp_path), "a damaged entry was used instead of compiling"
    assert path.read_bytes() != bytes(data), "the damaged entry was not replaced"


def test_switched_off_or_writable_by_others_is_not_used(tmp_path):
    _run(tmp_path, "off", TILEFUSE_DISK_CACHE="0")
    assert _entries(tmp_path) == []
    cold = _run(tmp_path, "cold")
    (entry,) = _entries(tmp_path)
    path = tmp_path / "cache" / "cuda-artifacts" / entry
    os.chmod(path, os.stat(path).st_mode | stat.S_IWOTH)
    shutil.rmtree(tmp_path / "cache" / "cubin")
    assert _run(tmp_path, "again") == cold
    assert _cubins(tmp_path), "an entry others could write was used"
