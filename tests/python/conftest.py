"""Shared pytest setup for the tilefuse Python tests.

* `import tilefuse` works from the build tree: if TILEFUSE_BUILD_DIR is set,
  $TILEFUSE_BUILD_DIR/python goes first on sys.path; otherwise an installed
  tilefuse is used, falling back to <repo>/build/python.
* TILEFUSE_CACHE_DIR points at a folder of this session (removed at exit).
* `seed` / `rng`: a per-test seed (stable across runs, different for every
  test id; TILEFUSE_TEST_SEED shifts all of them) and a numpy Generator
  seeded with it. Failure messages print the seed.
* Every test starts with CPU grids on tilefuse's own threads (the
  torch.compile backend moves them to OpenMP's, process-wide; unless
  TILEFUSE_THREAD_POOL fixes the team), so what a test runs on does not
  depend on the tests before it.
"""
import atexit
import importlib.util
import os
import shutil
import tempfile
import sys
import zlib

import numpy as np
import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _setup_path():
    build = os.environ.get("TILEFUSE_BUILD_DIR")
    if build:
        sys.path.insert(0, os.path.join(os.path.abspath(build), "python"))
        return
    if importlib.util.find_spec("tilefuse") is not None:
        return
    fallback = os.path.join(_REPO, "build", "python")
    if os.path.isdir(os.path.join(fallback, "tilefuse")):
        sys.path.insert(0, fallback)


_setup_path()


def _private_cache():
    """Compiled code (cubins, CPU compiles) goes to a folder of this test
    session: tests see cold compiles unless they ask otherwise, and the
    user's cache is left alone."""
    folder = tempfile.mkdtemp(prefix="tilefuse-test-cache-")
    os.environ["TILEFUSE_CACHE_DIR"] = folder
    atexit.register(shutil.rmtree, folder, True)


_private_cache()


@pytest.fixture
def seed(request):
    base = int(os.environ.get("TILEFUSE_TEST_SEED", "0"))
    return (zlib.crc32(request.node.nodeid.encode()) + base) % (2**32)


@pytest.fixture
def rng(seed):
    return np.random.default_rng(seed)


@pytest.fixture(autouse=True)
def own_cpu_threads():
    import tilefuse
    modules = [tilefuse._runtime] + ([tilefuse._core] if tilefuse.HAVE_COMPILER else [])
    for module in modules:
        module.cpu_thread_team("own")
    yield


@pytest.fixture
def fresh_torch_backend():
    """Empty torch.compile backend stats and no Dynamo caches before and
    after the test (modules of PyTorch tests use it for every test:
    `pytestmark = pytest.mark.usefixtures("fresh_torch_backend")`)."""
    import torch
    from tilefuse.torch_integration import stats
    torch._dynamo.reset()
    stats.reset()
    yield
    torch._dynamo.reset()
    stats.reset()


@pytest.fixture
def compiled_graphs(monkeypatch):
    """Every tilefuse Graph compiled while the test runs (the torch.compile
    backend's graphs included), in order: to read their reports."""
    from tilefuse import _tracing
    graphs = []
    compile_graph = _tracing.Graph.compile

    def keep(self, *args, **kwargs):
        graphs.append(self)
        return compile_graph(self, *args, **kwargs)
    monkeypatch.setattr(_tracing.Graph, "compile", keep)
    return graphs
