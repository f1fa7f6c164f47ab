"""Hostile inputs and failures leave nothing broken behind: a failed export
keeps the previous artifact, the compile cache stays bounded, huge
dimensions neither hang nor wrap."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tilefuse


def test_a_failed_export_keeps_the_previous_artifact(tmp_path):
    x = np.ones((4, 3), np.float32)
    g = tilefuse.trace(lambda t: t * 2, x)
    path = tmp_path / "m.tfa"
    g.export(path)
    good = path.read_bytes()
    with pytest.raises(tilefuse.CompileError):
        g.export(path, target="cuda:sm_1")  # not a CUDA architecture
    assert path.read_bytes() == good
    assert sorted(os.listdir(tmp_path)) == ["m.tfa"]  # no temporary left behind
    np.testing.assert_array_equal(tilefuse.load(path)(x), x * 2)


@pytest.mark.skipif(shutil.which("tilefuse-compile") is None, reason="tools not on PATH")
def test_compile_tool_never_leaves_a_partial_file(tmp_path):
    good_src, bad_src = tmp_path / "good.mlir", tmp_path / "bad.mlir"
    good_src.write_text("""
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.neg %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}""")
    bad_src.write_text("func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32>\n")
    out = tmp_path / "f.tfa"
    assert subprocess.run(["tilefuse-compile", str(good_src), "-o", str(out)]).returncode == 0
    good = out.read_bytes()
    r = subprocess.run(["tilefuse-compile", str(bad_src), "-o", str(out)], capture_output=True,
                       text=True)
    assert r.returncode == 1 and out.read_bytes() == good, r.stderr
    r = subprocess.run(["tilefuse-compile", str(good_src), "-o", str(tmp_path / "no" / "x.tfa")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "cannot write" in r.stderr and "usage" not in r.stderr


def test_the_compile_cache_is_bounded_and_can_be_cleared():
    code = """
import numpy as np, tilefuse
x = np.ones(8, np.float32)
tilefuse.clear_cache()
for k in range(12):
    tilefuse.compile(lambda t, k=k: t * float(k), x, device="cpu")
print(tilefuse.clear_cache(), tilefuse.clear_cache())
"""
    env = dict(os.environ, TILEFUSE_COMPILE_CACHE="5", PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["5", "0"], out.stdout  # 12 compiled, the 5 latest kept


def test_huge_dimensions_of_narrow_types_are_compiled_or_refused_without_hanging():
    """A bool dimension above 2^62 fits in 63-bit sizes; choosing its block
    size once doubled past 2^62 forever."""
    code = """
import numpy as np, tilefuse
x = np.zeros(1, bool)
try:
    g = tilefuse.trace(lambda t: t.reshape(1, 1).expand(2**62 + 1, 1), x)
    g.fuse("cpu")
    print("fused")
except tilefuse.CompileError as e:
    print("refused", e)
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(("fused", "refused")), out.stdout


@pytest.mark.parametrize("bad", [3, -1, 10**6])
@pytest.mark.parametrize("kwargs", [{}, {"reduction": "sum"}, {"weight": np.ones(3, np.float32)},
                                    {"label_smoothing": 0.1}])
def test_class_targets_outside_the_classes_are_an_error_not_a_zero_loss(bad, kwargs):
    """PyTorch raises for a target outside [0, C); counting the row as a zero
    loss (kept in the mean) was a silently wrong loss. ignore_index rows are
    still skipped."""
    import tilefuse.functional as F
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    good = np.array([0, 2, 1, -100])
    fn = lambda a, t: F.cross_entropy(a, t, **kwargs)  # noqa: E731
    ok = tilefuse.compile(fn, x, good, device="cpu")(x, good)
    assert np.isfinite(ok)
    t = good.copy()
    t[1] = bad
    for run in (lambda: tilefuse.trace(fn, x, t).interpret(x, t),
                lambda: tilefuse.compile(fn, x, t, device="cpu")(x, t)):
        with pytest.raises(tilefuse.CompileError, match=f"index {bad} is out of range"):
            run()
    nll = lambda a, tt: F.nll_loss(a, tt)  # noqa: E731
    with pytest.raises(tilefuse.CompileError, match=r"graph.nll: a class target: index"):
        tilefuse.compile(nll, x, t, device="cpu")(x, t)


def test_a_long_chain_compiles_in_bounded_kernels():
    """4,000 chained elementwise ops: one kernel of them overflowed the code
    generator's stack (at about 3,600) and took LLVM superlinear time; kernels
    now stop at 256 ops (FuseOps.cpp, kMaxKernelOps)."""
    x = np.linspace(-1, 1, 64).astype(np.float32)

    def f(t):
        for i in range(4000):
            t = t * 1.0001 + 0.5 if i % 2 else (t - 0.25).tanh()
        return t

    g = tilefuse.trace(f, x)
    fn = g.compile("cpu")
    rows = fn.report()
    assert len(rows) >= 4000 // 256, len(rows)
    np.testing.assert_allclose(fn(x), g.interpret(x), rtol=1e-5, atol=1e-6)


def test_a_long_chain_of_cheap_ops_of_arguments_is_not_recomputed_whole():
    """`t = t * w` of arguments is cheap to recompute, so every op of the
    chain used to be cloned into one kernel: 8,000 of them overflowed the
    fusion pass's stack and the code generator's. Recomputed chains now stop
    at 16 ops (kMaxRecomputeDepth); the rest is fused into bounded kernels."""
    x = np.linspace(-1, 1, 64).astype(np.float32)
    w = np.full(64, 1.0001, np.float32)

    def f(t, s):
        for _ in range(2000):
            t = t * s
        return t

    g = tilefuse.trace(f, x, w)
    fn = g.compile("cpu")
    assert len(fn.report()) >= 2000 // 256
    np.testing.assert_allclose(fn(x, w), g.interpret(x, w), rtol=1e-5, atol=1e-6)


def _chain_module(n, fused):
    """A 64-element chain of n neg/tanh ops, as a graph function or as one
    hand-written fused kernel."""
    lines = ["func.func @f(%x: tensor<64xf32>) -> tensor<64xf32> {"]
    prev = "%x"
    if fused:
        lines += ['  %r = graph.fusion "kernel0"(%x) {domain = array<i64: 64>, kind = "pointwise", '
                  'reduced = array<i64>} : (tensor<64xf32>) -> tensor<64xf32> {',
                  "  ^bb0(%a: tensor<64xf32>):"]
        prev = "%a"
    for i in range(n):
        lines.append(f"    %v{i} = graph.{'tanh' if i % 2 else 'neg'} {prev} : tensor<64xf32>")
        prev = f"%v{i}"
    if fused:
        lines += [f"    graph.yield {prev} : tensor<64xf32>", "  }"]
        prev = "%r"
    lines += [f"  return {prev} : tensor<64xf32>", "}"]
    return "\n".join(lines) + "\n"


@pytest.mark.skipif(shutil.which("tilefuse-opt") is None, reason="tools not on PATH")
def test_a_20000_op_kernel_is_lowered_without_recursion(tmp_path):
    """The tile emitter computed a kernel's values by recursion along the op
    chain (a 3,687-op kernel overflowed the stack). A hand-written fused
    kernel has no size cap, so the emitter itself must not recurse along it."""
    src = tmp_path / "chain.mlir"
    src.write_text(_chain_module(20000, fused=True))
    r = subprocess.run(["tilefuse-opt", "--tilefuse-lower-to-tile", str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("math.tanh") == 10000


@pytest.mark.skipif(shutil.which("tilefuse-opt") is None, reason="tools not on PATH")
def test_a_100000_op_graph_is_fused(tmp_path):
    """At 10^5 ops the fusion pass overflowed its stack; it now fuses the
    chain into kernels of at most 256 ops."""
    src = tmp_path / "chain.mlir"
    src.write_text(_chain_module(100000, fused=False))
    r = subprocess.run(["tilefuse-opt", "--tilefuse-fused", str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("graph.fusion") == -(-100000 // 256)
