"""Long compiles say what they are doing on stderr (stage, kernels done /
total) -- when stderr is a terminal, or when TILEFUSE_PROGRESS asks -- and
are silent otherwise."""
import os
import subprocess
import sys
import tempfile

SCRIPT = """
import numpy as np, tilefuse, tilefuse.functional as F
x = np.ones((16, 16), np.float32)
def f(x):
    y = x
    for _ in range(6):
        y = F.softmax(y @ x, -1) + y.amax(0)
    return y
tilefuse.compile(f, x, device="cpu")(x)
"""


def _compile(progress):
    # A cold compile: an empty cache folder (a warm one loads the machine
    # code from disk and has nothing to count).
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path),
               TILEFUSE_CACHE_DIR=tempfile.mkdtemp(prefix="tilefuse-progress-"))
    env.pop("TILEFUSE_PROGRESS", None)
    if progress is not None:
        env["TILEFUSE_PROGRESS"] = progress
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return [line for line in out.stderr.splitlines() if line.startswith("tilefuse: compil")]


def test_progress_when_asked():
    lines = _compile("always")
    assert any("compiling @f for cpu: fusing" in line for line in lines), lines
    counted = [line for line in lines if "kernels)" in line]
    assert counted and "machine code (0/" in counted[0], lines
    total = counted[0].split("/")[1].split(" ")[0]
    assert f"({total}/{total} kernels)" in counted[-1], lines
    assert lines[-1].startswith("tilefuse: compiled @f for cpu in "), lines


def test_silent_when_not_a_terminal_or_fast():
    assert _compile(None) == []  # stderr is a pipe here
    assert _compile("0") == []
    # Asked: nothing during the first two seconds (this compile normally
    # takes well under them; on a slow machine the later updates may show).
    for line in _compile("1"):
        if line.startswith("tilefuse: compiling"):
            assert float(line.rsplit(", ", 1)[1].split(" ")[0]) >= 2.0, line
