"""tilefuse.compile and compiled training steps on the CPU backend: results
against the reference interpreter, the kernel cache, report(), the tile IR,
and the errors a user can hit.

Tolerances (compiled vs interpreted): float32 results within
fusion_checks.COMPILED_TOLERANCES (1e-4 relative to max(1, max |want|) plus
1e-4 relative); integers and booleans identical.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F
from tilefuse import workloads as W

from backend_checks import bf16
from fusion_checks import assert_compiled_close


def _mlp(x, w1, b1, w2, b2):
    return F.relu(x @ w1 + b1) @ w2 + b2


def _mlp_args(rng, batch=8):
    return (rng.standard_normal((batch, 32)).astype(np.float32),
            rng.standard_normal((32, 64)).astype(np.float32) * 0.1,
            rng.standard_normal((64,)).astype(np.float32),
            rng.standard_normal((64, 10)).astype(np.float32) * 0.1,
            rng.standard_normal((10,)).astype(np.float32))


def test_compile_matches_interpreter(rng):
    args = _mlp_args(rng)
    fn = tilefuse.compile(_mlp, *args, device="cpu")
    assert fn.device == "cpu"
    assert_compiled_close(fn(*args), fn.graph.interpret(*args), "mlp")


def test_auto_is_cuda_with_a_gpu_else_cpu(rng):
    args = _mlp_args(rng)
    gpus, _ = tilefuse._core.cuda_devices()
    fn = tilefuse.compile(_mlp, *args, device="auto")
    assert fn.device == ("cuda" if gpus else "cpu")
    assert_compiled_close(fn(*args), fn.graph.interpret(*args), f"mlp on {fn.device}")


def test_structured_outputs_and_integer_results(rng):
    x = rng.standard_normal((5, 7)).astype(np.float32)

    def f(x):
        return {"max": x.amax(1), "arg": x.argmax(1), "pos": x > 0, "soft": F.softmax(x, -1)}
    fn = tilefuse.compile(f, x)
    got, want = fn(x), fn.graph.interpret(x)
    assert set(got) == {"max", "arg", "pos", "soft"}
    assert got["arg"].dtype == np.int64 and np.array_equal(got["arg"], want["arg"])
    assert got["pos"].dtype == np.bool_ and np.array_equal(got["pos"], want["pos"])
    assert_compiled_close([got["max"], got["soft"]], [want["max"], want["soft"]], "dict")


@pytest.mark.parametrize("dtype,rtol", [(np.float16, 2e-3), (np.float64, 1e-12)])
def test_other_float_dtypes(dtype, rtol, rng):
    """float16 storage computes in float32 inside a kernel (one rounding per
    kernel result, the interpreter rounds per op): within 2 half ulps."""
    x = rng.uniform(-2, 2, (64, 33)).astype(dtype)
    y = rng.uniform(-2, 2, (64, 33)).astype(dtype)

    def f(x, y):
        return (x * y).tanh() + F.softmax(x, -1)
    fn = tilefuse.compile(f, x, y)
    got, want = fn(x, y), fn.graph.interpret(x, y)
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol=rtol, atol=rtol)


@pytest.mark.parametrize("model", ["gpt2_mini", "mlp_mnist", "deepfm"])
def test_workload_forward_compiled(model):
    cfg = getattr(W, f"{model}_config")(**({"n_layer": 1} if model == "gpt2_mini" else {}))
    params = getattr(W, f"{model}_init")(cfg, seed=0)
    batch = getattr(W, f"{model}_batch")(cfg, seed=1)
    loss = getattr(W, f"{model}_loss")
    if model == "deepfm":
        def f(p, b):
            return loss(p, b, cfg)
        args = (params, batch)
    else:
        def f(p, b, s):
            return loss(p, b, s, cfg, True)
        args = (params, batch, np.int64(3))
    fn = tilefuse.compile(f, *args)
    assert_compiled_close(fn(*args), fn.graph.interpret(*args), model)


def test_compiled_train_step_follows_the_interpreted_one():
    """Three AdamW steps of gpt2_mini (1 layer), compiled, against the same
    step graph interpreted: loss and every parameter."""
    cfg = W.gpt2_mini_config(n_layer=1)
    params = W.gpt2_mini_init(cfg, seed=0)
    batch = W.gpt2_mini_batch(cfg, seed=1)

    def loss_fn(p, b, s):
        return W.gpt2_mini_loss(p, b, s, cfg, True)
    step = tilefuse.compile_train_step(loss_fn, params, batch,
                                       tilefuse.optim.AdamW(lr=1e-3, weight_decay=0.01))
    names = sorted(params)
    p = [params[k] for k in names]
    state = [np.zeros_like(x) for _ in range(2) for x in p]
    for t in range(1, 4):
        args = p + state + [batch["tokens"], np.int64(t - 1), np.int64(t), np.float64(1e-3)]
        want = step.graph.interpret(*args)
        got_loss = step(batch)
        n = len(p)
        p, state = list(want[1:1 + n]), list(want[1 + n:])
        assert abs(got_loss - float(want[0])) <= 1e-4 * max(1.0, abs(float(want[0]))), (
            f"step {t}: loss {got_loss} vs interpreted {float(want[0])}")
        now = step.params()
        assert_compiled_close([now[k] for k in names], p, f"parameters after step {t}")
        # Continue both from the compiled parameters, so errors cannot grow.
        p = [now[k] for k in names]
        s = step.state()
        state = [s[slot][k] for slot in ("exp_avg", "exp_avg_sq") for k in names]


def test_kernel_cache_and_compile_stages(rng):
    """The same graph traced again is served from the in-process cache: the
    second compile reports the hit and shares the first one's artifacts (it
    repeats the stage timings the first compile recorded, to the bit; a
    compile of its own, or one loaded from the disk cache, would record its
    own). Another shape is a new compile."""
    args = _mlp_args(rng, batch=3)
    g = tilefuse.trace(_mlp, *args)
    first = g.compile("cpu")
    second = tilefuse.trace(_mlp, *args).compile("cpu")
    stages = [name for name, _ in first.compile_stages]
    assert stages == ["primitives", "fuse", "tile", "machine code"], first.compile_stages
    assert second.cache_hit
    assert second.compile_stages == first.compile_stages, (
        f"a cache hit with stages of its own: {second.compile_stages}, the first compile's "
        f"{first.compile_stages}")
    assert second._exe.cold_compile_seconds == first._exe.cold_compile_seconds
    assert isinstance(second.compile_seconds, float) and second.compile_seconds >= 0
    other = tilefuse.trace(_mlp, *_mlp_args(rng, batch=4)).compile("cpu")
    assert not other.cache_hit
    assert [name for name, _ in other.compile_stages] == stages, other.compile_stages
    # Same kernels, separate buffers: one call does not disturb the other.
    a = first(*args)
    b = second(*[x + 1 for x in args])
    assert np.array_equal(first(*args), a) and not np.array_equal(a, b)


def test_report_and_stages_are_inspectable(rng):
    args = _mlp_args(rng)
    fn = tilefuse.compile(_mlp, *args)
    rows = fn.report()
    kinds = [r["kind"] for r in rows]
    assert kinds == ["library", "pointwise", "library", "pointwise"], rows
    kernel = rows[1]
    assert kernel["grid"] >= 1 and kernel["block"] >= 1
    # relu is x <= 0 ? 0 : x (graph.le + graph.select), fused with the bias add.
    assert {"graph.le", "graph.select", "graph.add"} <= set(kernel["ops"]) and kernel["bytes"] > 0
    assert "graph.fusion" in fn.fused_ir
    assert "tile.program_id" in fn.tile_ir and "tile.store" in fn.tile_ir
    fn.profile(True)
    fn(*args)
    fn(*args)
    timed = fn.report(profile=True)
    assert all(r["seconds"] >= 0 for r in timed)


def test_same_results_on_one_thread(rng, tmp_path):
    """The thread pool's split of the programs does not change results."""
    x = rng.standard_normal((300, 257)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code = (
        "import numpy as np, tilefuse, tilefuse.functional as F, sys\n"
        f"x = np.load({str(tmp_path / 'x.npy')!r})\n"
        "f = lambda x: (F.softmax(x, -1) * x).sum(0)\n"
        "np.save(sys.argv[1], tilefuse.compile(f, x)(x))\n")
    outs = []
    for threads in ("1", "2"):
        out = tmp_path / f"out{threads}.npy"
        env = dict(os.environ, TILEFUSE_NUM_THREADS=threads)
        subprocess.run([sys.executable, "-c", code, str(out)], env=env, check=True)
        outs.append(np.load(out))
    assert np.array_equal(outs[0], outs[1])


def _team_pinned():
    return os.environ.get("TILEFUSE_THREAD_POOL") in ("own", "openmp")


def _openmp_team_here():
    """Whether grids can move to OpenMP's threads in this process (a build
    with OpenMP, one OpenMP runtime loaded, no TILEFUSE_THREAD_POOL)."""
    if _team_pinned():
        return False
    core = tilefuse._core
    try:
        return core.cpu_thread_team("openmp") == "openmp"
    finally:
        core.cpu_thread_team("own")


_NO_OPENMP_TEAM = "no OpenMP team here (a build without OpenMP, several OpenMP runtimes " \
                  "loaded, or TILEFUSE_THREAD_POOL fixes the team)"


@pytest.mark.skipif(not _openmp_team_here(), reason=_NO_OPENMP_TEAM)
def test_same_results_on_openmp_threads(rng):
    """Grids on the process's OpenMP threads (what the torch.compile backend
    chooses) compute what they compute on tilefuse's own, bit for bit: a
    GEMM's slabs and a kernel's programs do not depend on the team."""
    x = rng.standard_normal((300, 257)).astype(np.float32)
    w = rng.standard_normal((257, 129)).astype(np.float32)
    fn = tilefuse.compile(lambda x, w: (F.softmax(x @ w, -1) * 2.0).sum(0), x, w, device="cpu")
    core = tilefuse._core
    try:
        outs = []
        for team in ("own", "openmp", "own"):
            assert core.cpu_thread_team(team) == team
            outs.append(fn(x, w))
    finally:
        core.cpu_thread_team("own")
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
    assert_compiled_close(outs[1], fn.graph.interpret(x, w), "softmax(x @ w) on OpenMP threads")


def test_programs_with_bf16_gemms_run_their_grids_on_onednns_openmp_threads():
    """oneDNN runs bf16 GEMMs on the process's OpenMP threads, which spin
    after each: loading a program with one moves tilefuse's CPU grids onto
    those threads (where the process can: one OpenMP runtime, no
    TILEFUSE_THREAD_POOL), as for convolutions; an f32 GEMM (slabs on
    tilefuse's own threads) leaves the team as it is. A fresh process: the
    team is process-wide."""
    code = textwrap.dedent("""
        import os, numpy as np, tilefuse, tilefuse.functional as F
        core = tilefuse._core
        possible = core.cpu_thread_team("openmp") == "openmp" and \\
            "TILEFUSE_THREAD_POOL" not in os.environ
        core.cpu_thread_team("own")
        x = np.ones((64, 96), np.float32)
        w = np.ones((96, 32), np.float32)
        f32 = tilefuse.compile(lambda x, w: F.softmax(x @ w, -1), x, w, device="cpu")(x, w)
        after_f32 = core.cpu_thread_team()
        bf16 = tilefuse.compile(lambda x, w: F.softmax(x @ w, -1), x, w, device="cpu",
                                precision="bf16")(x, w)
        assert np.allclose(f32, 1 / 32) and np.allclose(bf16, 1 / 32)
        print(possible and core.onednn_status() == "loaded", after_f32, core.cpu_thread_team())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    can, after_f32, after_bf16 = r.stdout.split()[-3:]
    assert after_f32 == "own", r.stdout
    if can != "True":
        pytest.skip("no OpenMP team or no oneDNN in this process: the team stays tilefuse's own")
    assert after_bf16 == "openmp", r.stdout


@pytest.mark.skipif(not _openmp_team_here(), reason=_NO_OPENMP_TEAM)
def test_forked_child_runs_grids_after_the_parent_ran_openmp_teams():
    """libgomp cannot start a team in a child forked after the parent ran
    one: the child's grids (f32 and bf16 GEMMs, kernels) run on its calling
    thread, with the same results. A hung child is killed by its alarm."""
    code = textwrap.dedent("""
        import os, signal, sys, numpy as np, tilefuse, tilefuse.functional as F
        x = np.random.default_rng(0).standard_normal((600, 513)).astype(np.float32)
        w = np.random.default_rng(1).standard_normal((513, 257)).astype(np.float32)
        fns = [tilefuse.compile(lambda x, w: F.softmax(x @ w, -1), x, w, device="cpu",
                                precision=p) for p in ("fp32", "bf16")]
        assert tilefuse._core.cpu_thread_team("openmp") == "openmp"
        want = [fn(x, w) for fn in fns]
        pid = os.fork()
        if pid == 0:
            code = 4
            try:
                signal.alarm(60)
                got = [fn(x, w) for fn in fns]
                code = 0 if np.array_equal(got[0], want[0]) else 3
                # bf16 GEMMs take the f32 path in the child: within bf16's rounding.
                code = code or (0 if np.allclose(got[1], want[1], atol=2e-2) else 5)
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
        """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, (run.returncode, run.stderr)


@pytest.mark.skipif(_team_pinned(), reason="TILEFUSE_THREAD_POOL fixes the team")
def test_cpu_thread_team_is_chosen_by_name():
    for module in (tilefuse._core, tilefuse._runtime):
        assert module.cpu_thread_team("own") == "own"
        assert module.cpu_thread_team("openmp") in (("openmp", "own") if module.cpu_openmp
                                                    else ("own",))
        with pytest.raises(tilefuse.CompileError, match=r"'own' or 'openmp', not 'omp'"):
            module.cpu_thread_team("omp")
        assert module.cpu_thread_team("own") == "own"


def test_thread_pool_environment_value_it_does_not_know_is_said():
    code = ("import numpy as np, tilefuse\nx = np.ones(4, np.float32)\n"
            "assert (tilefuse.compile(lambda x: x * 2, x, device='cpu')(x) == 2).all()")
    env = dict(os.environ, TILEFUSE_THREAD_POOL="omp")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "TILEFUSE_THREAD_POOL=omp ignored: it takes 'own' or 'openmp'" in run.stderr, run.stderr


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------

def test_cuda_device_runs_on_a_gpu_or_is_refused_with_the_reason(rng):
    gpus, why = tilefuse._core.cuda_devices()
    args = _mlp_args(rng)
    if gpus:
        fn = tilefuse.compile(_mlp, *args, device="cuda")
        assert fn.device == "cuda"
        for _ in range(3):  # eager, captured, replayed
            assert_compiled_close(fn(*args), fn.graph.interpret(*args), "mlp on cuda")
        kernels = [r for r in fn.report() if r["kind"] in ("pointwise", "reduction")]
        assert kernels and all(r["registers"] > 0 and r["spill_stores"] == 0 for r in kernels)
    else:
        assert why, "no GPU but no reason given"
        with pytest.raises(tilefuse.CompileError, match="device='cuda' is not available") as e:
            tilefuse.compile(_mlp, *args, device="cuda")
        assert why in str(e.value), str(e.value)
    with pytest.raises(tilefuse.CompileError, match="unknown device 'tpu'"):
        tilefuse.compile(_mlp, *args, device="tpu")


class _FakeCudaTensor:
    """Says it lives in GPU memory (DLPack device 2), as a torch CUDA tensor does."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("a CPU function must not take GPU memory")


def test_gpu_tensors_are_refused_by_a_cpu_function(rng):
    args = list(_mlp_args(rng))
    fn = tilefuse.compile(_mlp, *args, device="cpu")
    args[0] = _FakeCudaTensor()
    with pytest.raises(tilefuse.CompileError, match="argument 0 is in GPU memory; this "
                                                     "function runs on the CPU"):
        fn(*args)


def test_dlpack_output_on_the_cpu_is_numpy(rng):
    args = _mlp_args(rng)
    fn = tilefuse.compile(_mlp, *args, device="cpu")
    out = fn(*args, out="dlpack")
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, fn(*args))
    np.testing.assert_array_equal(fn(*args, out="view"), out)
    with pytest.raises(tilefuse.CompileError, match="out must be 'numpy', 'dlpack', 'view' or 'bits'"):
        fn(*args, out="torch")


def test_wrong_arguments_are_refused(rng):
    args = _mlp_args(rng)
    fn = tilefuse.compile(_mlp, *args)
    with pytest.raises(tilefuse.CompileError, match=r"argument 0 must be f32\[8, 32\]"):
        fn(np.zeros((9, 32), np.float32), *args[1:])
    with pytest.raises(tilefuse.CompileError, match="argument 1 must be f32"):
        fn(args[0], args[1].astype(np.float64), *args[2:])
    with pytest.raises(tilefuse.CompileError, match="takes 5 arguments, got 4"):
        fn(*args[:4])
    g = tilefuse.compile(lambda d: d["a"] * 2, {"a": args[0]})
    with pytest.raises(tilefuse.CompileError, match="structure"):
        g({"b": args[0]})


def test_strided_and_noncontiguous_arguments(rng):
    """Views are copied into place, not misread."""
    x = rng.standard_normal((16, 8)).astype(np.float32)
    fn = tilefuse.compile(lambda t: t * 2, x)
    view = np.asfortranarray(x)
    assert np.array_equal(fn(view), x * 2)
    big = rng.standard_normal((32, 8)).astype(np.float32)
    assert np.array_equal(fn(big[::2]), big[::2] * 2)


def test_gather_index_out_of_range_at_run_time(rng):
    table = rng.standard_normal((10, 4)).astype(np.float32)
    ids = np.array([1, 2, 3], np.int64)
    fn = tilefuse.compile(lambda t, i: F.embedding(i, t), table, ids)
    with pytest.raises(tilefuse.CompileError, match="index 12 is out of range for a table of 10 rows"):
        fn(table, np.array([1, 12, 3], np.int64))
    assert np.array_equal(fn(table, ids), table[ids])


def test_unsupported_graph_is_a_clear_compile_error():
    text = """
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      %0 = graph.exp %x : tensor<4xf32>
      return %0 : tensor<4xf32>
    }
    func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {
      return %x : tensor<4xf32>
    }"""
    g = tilefuse.parse(text, "g")
    x = np.arange(4, dtype=np.float32)
    out = g.compile("cpu")(x)
    assert np.array_equal(out, x)
    out[0] = 42  # the result is a copy, never the caller's array
    assert x[0] == 0


# ---------------------------------------------------------------------------
# The two WORKLOADS.md models without a tilefuse.workloads builder
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2 ** 20, 1999 * 1999 + 1], ids=["2^20", "1999^2+1"])
def test_mul_kernel_forward_and_both_gradients(n, rng):
    """The book's Triton example: elementwise multiply and both gradients,
    at a power of two and at a size no block divides."""
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    g = tilefuse.trace(lambda x, y, w: ((x * y) * w).sum(), x, y, w).value_and_grad([0, 1])
    loss, dx, dy = g.compile("cpu")(x, y, w)
    np.testing.assert_array_equal(dx, y * w)  # one rounding each side: exact
    np.testing.assert_array_equal(dy, x * w)
    exact = float(np.sum(x.astype(np.float64) * y * w))
    magnitude = float(np.sum(np.abs(x.astype(np.float64) * y * w)))
    assert abs(float(loss) - exact) <= 1e-5 * magnitude


@pytest.mark.parametrize("batch", [1, 64])
def test_black_patch_sgd_steps(batch, rng):
    """81 -> 56 -> ReLU -> 1 -> Sigmoid, BCE, SGD lr 1e-3: three compiled
    steps against the interpreted step graph."""
    params = {"w1": (rng.standard_normal((56, 81)) * 0.1).astype(np.float32),
              "b1": np.zeros(56, np.float32),
              "w2": (rng.standard_normal((1, 56)) * 0.1).astype(np.float32),
              "b2": np.zeros(1, np.float32)}
    batch_data = {"x": rng.standard_normal((batch, 81)).astype(np.float32),
                  "y": (rng.uniform(size=(batch, 1)) > 0.5).astype(np.float32)}

    def loss(p, b):
        h = F.relu(F.linear(b["x"], p["w1"], p["b1"]))
        return F.binary_cross_entropy(F.sigmoid(F.linear(h, p["w2"], p["b2"])), b["y"])
    step = tilefuse.compile_train_step(loss, params, batch_data, tilefuse.optim.SGD(lr=1e-3))
    names = sorted(params)
    p = [params[k] for k in names]
    for t in range(1, 4):
        args = p + [batch_data["x"], batch_data["y"], np.int64(t), np.float64(1e-3)]
        want = step.graph.interpret(*args)
        got = step(batch_data)
        assert abs(got - float(want[0])) <= 1e-4 * max(1.0, abs(float(want[0])))
        now = step.params()
        assert_compiled_close([now[k] for k in names], list(want[1:]), f"step {t}")
        p = [now[k] for k in names]


def test_threads_calling_one_compiled_function(rng):
    """Calls from several Python threads take turns on the shared buffers:
    each gets its own inputs' results."""
    import threading
    x = rng.standard_normal((64, 300)).astype(np.float32)
    fn = tilefuse.compile(lambda t: F.softmax(t, -1) * t, x)
    inputs = [x + i for i in range(4)]
    want = [fn(v) for v in inputs]
    errors = []

    def worker(i):
        for _ in range(25):
            if not np.array_equal(fn(inputs[i]), want[i]):
                errors.append(i)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, f"threads {sorted(set(errors))} saw another thread's results"


def test_bfloat16_inside_a_kernel(rng):
    """bf16 values inside a kernel (rounded to bf16 at the explicit cast,
    then computed in f32) against the interpreter, which rounds every op's
    bf16 result. With u = 2^-8 (half a bf16 ulp, one rounding's relative
    error), elementwise:

    * softmax(h * 2) + tanh(h): the interpreter rounds the softmax, the tanh
      and their sum, each within u of its own value, the kernel keeps them
      in f32: within 3u (p + |t|) of each other, p and t the softmax and
      tanh of the bf16 inputs in float64 (the sum may cancel, so relative
      to its terms, not to itself), plus second-order and f32 rounding
      terms, under 0.01u (p + |t|).
    * h.sum(1): each rounds its sum once, accumulated in f32 or wider from
      the same bf16 terms: within 2u |sum| plus twice f32 accumulation's
      error bound, (n - 1) 2^-24 sum |h|."""
    x = rng.uniform(-3, 3, (16, 70)).astype(np.float32)

    def f(x):
        h = x.to("bf16")
        return (F.softmax(h * 2, -1) + h.tanh()).to("f32"), h.sum(1)
    fn = tilefuse.compile(f, x)
    (a, b), (wa, wb) = fn(x), fn.graph.interpret(x)
    h = bf16(x).astype(np.float64)
    e = np.exp(2 * h - (2 * h).max(1, keepdims=True))
    terms = e / e.sum(1, keepdims=True) + np.abs(np.tanh(h))
    u, n = 2.0 ** -8, x.shape[1]
    err = np.abs(a.astype(np.float64) - wa)
    bound = 3.01 * u * terms
    assert (err <= bound).all(), (
        f"softmax(h * 2) + tanh(h), bf16 {x.shape}: {int((err > bound).sum())} elements "
        f"beyond 3u (p + |t|); worst error {(err / bound).max():.3g} x the bound")
    err = np.abs(b.astype(np.float64) - wb)
    bound = 2 * u * np.abs(wb.astype(np.float64)) + 2 * (n - 1) * 2.0 ** -24 * np.abs(h).sum(1)
    assert (err <= bound).all(), (
        f"h.sum(1), bf16 {x.shape}: got {b[err > bound]}, interpreted {wb[err > bound]}, "
        f"bound {bound[err > bound]}")


@pytest.mark.parametrize("shape", [(300007,), (8, 65537), (1024, 300)],
                         ids=["1d", "few-rows", "many-rows"])
def test_large_full_reductions_split_across_programs(shape, rng):
    """Full reductions of 2^18 elements or more run as a partial kernel over
    32 slices plus a combine kernel; their epilogue (mean, a mix of several
    reductions) follows the combine."""
    x = rng.standard_normal(shape).astype(np.float32)
    h = (x * 1e-3).astype(np.float16)  # the f16 sum stays far from overflow
    ids = rng.integers(-5, 5, shape).astype(np.int64)

    def f(x, h, i):
        return x.sum(), x.max() - x.min(), (x * x).mean(), h.sum(), i.sum(), x.sum(keepdim=True)
    fn = tilefuse.compile(f, x, h, ids)
    kernels = [r["name"] for r in fn.report()]
    assert any(k.endswith("_partial") for k in kernels), kernels
    assert any(k.endswith("_combine") for k in kernels), kernels
    got, want = fn(x, h, ids), fn.graph.interpret(x, h, ids)
    n = x.size
    for k, (a, b) in enumerate(zip(got, want)):
        if a.dtype.kind == "i":
            assert np.array_equal(a, b), f"result {k}"
            continue
        a, b = float(np.ravel(a)[0]), float(np.ravel(b)[0])
        tol = 1e-5 * np.sqrt(n) * (np.abs(x).mean() * 3 + 1)
        if k == 3:  # float16: one rounding of the f32 sum, within an f16 ulp
            tol = 2 ** -10 * abs(b) + 1e-3
        assert abs(a - b) <= tol, f"result {k}: {a} vs {b} (tolerance {tol})"


@pytest.mark.parametrize("case", ["sum_max_min", "3d", "f16", "i32", "layer_norm_grads"])
def test_split_column_reductions_match_the_interpreter(rng, case):
    # Column reductions over many rows with few blocks of columns become a
    # partial kernel over row slices and a combine kernel.
    x = rng.standard_normal((4096, 96)).astype(np.float32)
    w = rng.standard_normal((96,)).astype(np.float32)
    cases = {
        "sum_max_min": (lambda x, w: (x.exp().sum(0) * w, x.amax(0), x.amin(0)), (x, w)),
        "3d": (lambda y: y.sum((0, 1)) + y.amax(0).amax(0),
               (rng.standard_normal((64, 129, 40)).astype(np.float32),)),
        "f16": (lambda h: h.sum(0), (rng.standard_normal((5000, 33)).astype(np.float16),)),
        "i32": (lambda a: a.sum(0), (rng.integers(-5, 5, (3000, 17)).astype(np.int32),)),
    }
    if case == "layer_norm_grads":
        xl = rng.standard_normal((4099, 33)).astype(np.float32)
        g = rng.standard_normal((33,)).astype(np.float32)
        graph = tilefuse.trace(lambda x, a, b: (F.layer_norm(x, (33,), a, b) * x).sum(),
                               xl, g, g).value_and_grad(wrt=(0, 1, 2))
        args = (xl, g, g)
    else:
        fn, args = cases[case]
        graph = tilefuse.trace(fn, *args)
    fn = graph.compile("cpu")
    assert any(r["name"].endswith("_partial") for r in fn.report()), fn.report()
    assert_compiled_close(fn(*args), graph.interpret(*args), f"split column reduction {case}")


def test_split_column_reduction_with_more_results_than_reductions(rng):
    """A split column reduction whose fusion has more results than reductions
    (s, s * 2, exp(s)): the partial kernel has one slot per reduction and no
    outputs (binding one output per result read past its arguments)."""
    x = rng.standard_normal((4096, 8)).astype(np.float32)
    fn = lambda t: (lambda s: (s, s * 2, s.exp()))(t.sum(0))  # noqa: E731
    got = tilefuse.compile(fn, x, device="cpu")(x)
    want = tilefuse.trace(fn, x).interpret(x)
    assert any(r["name"].endswith("_partial") for r in tilefuse.compile(fn, x).report())
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _weight_gradient_gemm_in_a_process(coretype):
    """(BLAS name, whether its kernels are narrower than the CPU's, f32
    GEMMs oneDNN ran, worst error) of one large weight-gradient GEMM
    (x^T dy, 3.6 GFLOP: the BLAS's by shape when its kernels are as wide as
    the CPU's) in a fresh process whose OPENBLAS_CORETYPE is `coretype`
    (None: unset, tilefuse picks)."""
    code = textwrap.dedent("""
        import json, numpy as np, tilefuse
        core = tilefuse._core
        rng = np.random.default_rng(0)
        x = rng.standard_normal((1024, 768), dtype=np.float32)
        dy = rng.standard_normal((1024, 2304), dtype=np.float32)
        fn = tilefuse.compile(lambda x, dy: x.T @ dy, x, dy, device="cpu")
        before = core.onednn_f32_gemms()
        got = fn(x, dy)
        want = x.astype(np.float64).T @ dy.astype(np.float64)
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        print(json.dumps([core.blas_name(), core.blas_narrower_than_cpu(),
                          core.onednn_f32_gemms() - before, err]))
    """)
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "TILEFUSE_DNNL_F32")}
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_f32_gemms_leave_a_blas_whose_kernels_are_narrower_than_the_cpu():
    """OpenBLAS told to run AVX2 kernels (OPENBLAS_CORETYPE=Haswell, as some
    environments set) on a CPU with AVX-512 runs f32 GEMMs at half oneDNN's
    speed: tilefuse keeps the user's core type, names it, and sends every
    f32 GEMM to oneDNN, large weight gradients included, which OpenBLAS
    with its AVX-512 kernels (the core type tilefuse picks when none is
    set) keeps. The results match float64 either way."""
    import tilefuse
    if tilefuse._core.onednn_status() != "loaded":
        pytest.skip(f"oneDNN is not used here: {tilefuse._core.onednn_status()}")
    if "openblas" not in tilefuse._core.blas_name():
        pytest.skip(f"the BLAS here is {tilefuse._core.blas_name()}, not OpenBLAS")
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")),
                     [])
    avx512 = all(f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq"))

    name, narrower, dnnl_gemms, err = _weight_gradient_gemm_in_a_process("Haswell")
    assert "Haswell" in name, name
    assert narrower == avx512, (name, flags)
    assert (dnnl_gemms > 0) == avx512, (name, dnnl_gemms)
    assert err < 1e-5, err

    name, narrower, dnnl_gemms, err = _weight_gradient_gemm_in_a_process(None)
    assert not narrower, name
    assert dnnl_gemms == 0, (name, dnnl_gemms)
    assert err < 1e-5, err
