"""The CUDA backend proven without a GPU: every program below is compiled
for sm_90 (NVRTC builds its cubins), then its emitted CUDA C runs on the
CPU under the CUDA execution model (tests/cuda_emu/CudaEmu.h) through the
real CudaExecutor and the CPU double of the driver, and each result is
compared with the reference interpreter. The emulator fails a launch on a
divergent barrier or warp, a shuffle mask that is not the warp's live
threads, more threads than __launch_bounds__, and tf_load/tf_store
accesses outside device memory or misaligned vector accesses."""
import os
import sys

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_emulation import (EmulationFailure, _leaves, build_library,  # noqa: E402
                            check_emulated, emulate, unavailable_reason)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(unavailable_reason() is not None,
                                reason=str(unavailable_reason()))


def _gpu_check_corpus():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
    import prepare
    return prepare.corpus()


@pytest.fixture(scope="module")
def corpus():
    return {name: (g, args, rtol, atol) for name, g, args, rtol, atol in _gpu_check_corpus()}


CORPUS = ["op_mix", "f16_ops", "mul_kernel_fwd_bwd", "softmax_rows", "column_sums",
          "linear_relu", "gpt2_mini_forward_dropout", "deepfm_grads", "attention_d64_causal_gqa",
          "attention_d128_masked", "attention_d256_bf16", "attention_f16_gqa"]


@pytest.mark.parametrize("name", CORPUS)
def test_gpu_check_corpus_matches_the_interpreter(name, corpus, tmp_path):
    """Each case passes the GPU check's own comparison (bench/gpu/verify.py,
    the case's tolerances) against the reference interpreter."""
    import verify  # bench/gpu, on the path since _gpu_check_corpus
    g, args, rtol, atol = corpus[name]
    got = emulate(g, args, str(tmp_path))
    want = [np.asarray(w) for w in g._graph.interpret([np.asarray(a) for a in _leaves(args)])]
    assert len(got) == len(want), (name, len(got), len(want))
    for i, (x, w) in enumerate(zip(got, want)):
        ok, ratio = verify.compare(x, w, {"rtol": rtol, "atol": atol})
        assert ok, f"{name}: result {i} {w.dtype}{list(w.shape)} off by {ratio:.3g}x the allowed"


@pytest.mark.parametrize("table_dtype", [np.int32, np.int64])
def test_integer_scatter_add(table_dtype, tmp_path):
    """Integer tables used the f32 atomic kernel (i32 values added as float
    bits; i64 tables walked with a 4-byte stride)."""
    rng = np.random.default_rng(3)
    table = rng.integers(-50, 50, (10, 4)).astype(table_dtype)
    ids = rng.integers(0, 10, (40,)).astype(np.int64)
    upd = rng.integers(-9, 9, (40, 4)).astype(table_dtype)
    t = {np.int32: "i32", np.int64: "i64"}[table_dtype]
    g = tilefuse.parse(f"""
func.func @f(%b: tensor<10x4x{t}>, %i: tensor<40xi64>, %u: tensor<40x4x{t}>) -> tensor<10x4x{t}> {{
  %0 = graph.scatter_add %b, %i, %u : (tensor<10x4x{t}>, tensor<40xi64>, tensor<40x4x{t}>) -> tensor<10x4x{t}>
  return %0 : tensor<10x4x{t}>
}}""")
    check_emulated(g, (table, ids, upd), str(tmp_path), 0, 0, name="scatter_add")


def _gpt2_mini_step(precision):
    """A one-layer gpt2_mini AdamW step graph of `precision` and its
    arguments: parameters, optimizer state as after some steps (m, then
    v >= 0), the batch, seed, step, lr. Its attention runs fused on CUDA."""
    from tilefuse import _pytree
    from tilefuse import workloads as W
    cfg = W.gpt2_mini_config(n_layer=1, d_model=32, n_head=2, seq=16, vocab=64, batch=2)
    params, batch = W.gpt2_mini_init(cfg, seed=0), W.gpt2_mini_batch(cfg, seed=1)
    loss = lambda p, b, s: W.gpt2_mini_loss(p, b, s, cfg, True)  # noqa: E731
    g = tilefuse.train_step_graph(loss, params, batch,
                                  tilefuse.optim.AdamW(lr=1e-3, weight_decay=0.01),
                                  precision=precision)
    names = [r["name"] for r in g.fuse("cuda:sm_90").report()]
    assert names.count("attention") == 1 and names.count("attention_grad") == 1, names
    p = [np.asarray(x) for x in _pytree.flatten(params)[0]]
    b = [np.asarray(x) for x in _pytree.flatten(batch)[0]]
    rng = np.random.default_rng(5)
    state = [rng.standard_normal(x.shape).astype(x.dtype) * 1e-2 for x in p]
    state += [np.abs(rng.standard_normal(x.shape)).astype(x.dtype) * 1e-4 for x in p]
    args = p + state + b + [np.int64(3), np.int64(7), np.float64(1e-3)]
    assert [(str(a.dtype).replace("float", "f").replace("int", "i"), a.shape) for a in args] == \
        [(d, tuple(s)) for d, s in g.inputs]
    return g, args


def test_a_gpt2_mini_adamw_step_eager_captured_and_replayed(tmp_path):
    """A whole training step (forward, backward with the embedding's
    scatter-add, the causal attention with dropout in the fused attention
    kernels, AdamW): without CUDA graphs, and captured then replayed."""
    g, args = _gpt2_mini_step("fp32")
    check_emulated(g, args, str(tmp_path / "eager"), 1e-4, 1e-5, graphs=False, name="eager")
    check_emulated(g, args, str(tmp_path / "graphs"), 1e-4, 1e-5, repeat=3, name="replayed")


def test_a_bf16_gpt2_mini_step_runs_the_16bit_attention_kernels(tmp_path):
    """precision="bf16" on CUDA: attention (dropout included) runs in the
    bf16 kernels, not widened, between cuBLASLt's bf16 GEMMs; the step's
    loss, parameters and optimizer state pass the GPU check's 16-bit
    comparison (bench/gpu/verify.py, 1e-2) against the interpreter's
    autocast step."""
    sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
    import verify
    g, args = _gpt2_mini_step("bf16")
    attention = [line for line in g.fuse("cuda:sm_90").mlir().splitlines()
                 if "= graph.attention " in line or "= graph.attention_grad " in line]
    assert attention and all("xbf16>" in line for line in attention), attention
    got = emulate(g, args, str(tmp_path))
    want = [np.asarray(w) for w in g._graph.interpret(args)]
    assert len(got) == len(want)
    for i, (x, w) in enumerate(zip(got, want)):
        ok, ratio = verify.compare(x, w, {"rtol": 1e-2, "atol": 1e-2})
        assert ok, f"result {i} {w.dtype}{list(w.shape)} off by {ratio:.3g}x the allowed"


@pytest.mark.parametrize("mode", ["ddp", "zero3"])
def test_data_parallel_steps_of_one_rank_run_their_collectives_on_the_gpu(tmp_path, mode):
    """A data-parallel training step compiled for CUDA with a group of one
    (the collectives' program steps, no NCCL: copies on the device), against
    the interpreter, eager and captured: what each rank runs, the NCCL calls
    aside (tests/unit/CudaExecutorFakeTest.cpp exchanges through them)."""
    rng = np.random.default_rng(3)
    params = {"w1": rng.standard_normal((8, 16)).astype(np.float32) * 0.3,
              "b1": np.zeros(16, np.float32),
              "w2": rng.standard_normal((16, 4)).astype(np.float32) * 0.3}
    batch = {"x": rng.standard_normal((6, 8)).astype(np.float32), "y": rng.integers(0, 4, 6)}

    def loss(p, b):
        return F.cross_entropy(F.gelu(b["x"] @ p["w1"] + p["b1"]) @ p["w2"], b["y"])
    g = tilefuse.train_step_graph(loss, params, batch, tilefuse.optim.AdamW(lr=1e-2),
                                  parallel=mode, world_size=1, bucket_bytes=256)
    names = [r["name"] for r in g.fuse("cuda:sm_90").report()]
    assert any(n.endswith("_start") for n in names), names
    # Parameters (or shards), m and v as after some steps (v >= 0: no NaN
    # from its square root to hide a wrong answer).
    kept = [np.abs(rng.standard_normal(shape)).astype(np.float32) * 0.1
            for dtype, shape in g.inputs[:-4]]
    args = kept + [batch["x"], batch["y"], np.int64(2), np.float64(1e-2)]
    assert [tuple(a.shape) for a in args] == [tuple(s) for _, s in g.inputs]
    check_emulated(g, args, str(tmp_path / "eager"), 1e-4, 1e-5, graphs=False, name=mode)
    check_emulated(g, args, str(tmp_path / "graphs"), 1e-4, 1e-5, repeat=3, name=mode)


def _launch(so, kernel, grid, threads, *buffers, shared_bytes=0):
    """Runs an emulated kernel directly (no driver) with `shared_bytes` of
    dynamic shared memory: its errors."""
    import ctypes
    lib = ctypes.CDLL(so)
    arrays = [np.ascontiguousarray(b) for b in buffers]
    pointers = [ctypes.c_void_p(a.ctypes.data) for a in arrays]
    params = (ctypes.c_void_p * len(pointers))(*[ctypes.addressof(p) for p in pointers])
    errors = ctypes.create_string_buffer(4096)
    launch = getattr(lib, "tf_emu_launch_" + kernel)
    launch.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p,
                       ctypes.c_char_p, ctypes.c_int]
    n = launch(grid, threads, shared_bytes, params, errors, len(errors))
    return errors.value.decode() if n else "", arrays


BAD_KERNELS = r"""
extern "C" __global__ void __launch_bounds__(64) divergent_barrier(float *x) {
  if (threadIdx.x < 16) __syncthreads();
  x[threadIdx.x] = 1;
}
extern "C" __global__ void __launch_bounds__(64) partial_warp_shuffle(float *x) {
  x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1);
}
extern "C" __global__ void __launch_bounds__(64) good_shuffle(float *x) {
  x[threadIdx.x] += __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1);
}
extern "C" __global__ void __launch_bounds__(64) vector_access(float *x) {
  TF_CHECK_ACCESS(x + 1, 16, 16);
}
struct TwoRows {
  float a[32], b[32];
};
extern "C" __global__ void __launch_bounds__(64) dynamic_layout(float *x) {
  TF_DYNAMIC_SHARED(smem, sizeof(TwoRows));
  TwoRows &t = *reinterpret_cast<TwoRows *>(smem);
  if (threadIdx.x < 32)
    t.a[threadIdx.x] = x[threadIdx.x], t.b[threadIdx.x] = 2 * x[threadIdx.x];
  __syncthreads();
  if (threadIdx.x < 32)
    x[threadIdx.x] = t.a[31 - threadIdx.x] + t.b[threadIdx.x];
}
// One warp: C (16 x 16, f32) = A B for f16 A and B given as f32, through
// shared memory; `lane_dependent` adds a wmma call only some lanes make,
// `unwritten` reads a column of B's tile that no thread wrote.
struct MatrixTiles {
  __half a[16][16], b[16][16];
  float c[16][16];
};
template <int MODE> __device__ void matrix_product(float *x) {
  TF_DYNAMIC_SHARED(smem, sizeof(MatrixTiles));
  MatrixTiles &t = *reinterpret_cast<MatrixTiles *>(smem);
  for (int e = threadIdx.x; e < 256; e += 32) {
    t.a[e / 16][e % 16] = __float2half(x[e]);
    if (MODE != 2 || e % 16 != 3)
      t.b[e / 16][e % 16] = __float2half(x[256 + e]);
  }
  __syncthreads();
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, nvcuda::wmma::row_major> fa;
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __half, nvcuda::wmma::row_major> fb;
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc;
  nvcuda::wmma::fill_fragment(acc, 0.0f);
  nvcuda::wmma::load_matrix_sync(fa, &t.a[0][0], 16);
  nvcuda::wmma::load_matrix_sync(fb, &t.b[0][0], 16);
  nvcuda::wmma::mma_sync(acc, fa, fb, acc);
  if (MODE == 1 && threadIdx.x < 8)
    nvcuda::wmma::mma_sync(acc, fa, fb, acc);
  nvcuda::wmma::store_matrix_sync(&t.c[0][0], acc, 16, nvcuda::wmma::mem_row_major);
  __syncthreads();
  for (int e = threadIdx.x; e < 256; e += 32)
    x[512 + e] = t.c[e / 16][e % 16];
}
extern "C" __global__ void __launch_bounds__(32) matrix_good(float *x) { matrix_product<0>(x); }
extern "C" __global__ void __launch_bounds__(32) matrix_lane_dependent(float *x) {
  matrix_product<1>(x);
}
extern "C" __global__ void __launch_bounds__(32) matrix_unwritten(float *x) {
  matrix_product<2>(x);
}
extern "C" __global__ void __launch_bounds__(64) shared_overrun(float *x) {
  __shared__ float partial[32];
  partial[threadIdx.x] = x[threadIdx.x];  // 64 threads, 32 slots
  __syncthreads();
  x[threadIdx.x] = partial[threadIdx.x % 32];
}
"""


@pytest.fixture(scope="module")
def bad_kernels(tmp_path_factory):
    return build_library(BAD_KERNELS, str(tmp_path_factory.mktemp("emu") / "bad.so"))


def test_dynamic_shared_memory_is_the_blocks_and_must_fit_the_layout(bad_kernels):
    """A layout in dynamic shared memory is shared by the block's threads;
    a launch that gives less than the layout takes is reported (on a GPU
    the kernels trap)."""
    x = np.arange(64, dtype=np.float32)
    errors, (y,) = _launch(bad_kernels, "dynamic_layout", 1, 64, x.copy(), shared_bytes=256)
    assert errors == ""
    np.testing.assert_array_equal(y[:32], x[31::-1] + 2 * x[:32])
    errors, _ = _launch(bad_kernels, "dynamic_layout", 1, 64, x.copy(), shared_bytes=128)
    assert "dynamic shared memory layout takes 256 bytes; the launch gave 128" in errors, errors


def test_the_emulator_reports_a_divergent_barrier(bad_kernels):
    errors, _ = _launch(bad_kernels, "divergent_barrier", 1, 64, np.zeros(64, np.float32))
    assert "divergent barrier" in errors, errors


def test_the_emulator_reports_a_full_mask_shuffle_in_a_partial_warp(bad_kernels):
    errors, _ = _launch(bad_kernels, "partial_warp_shuffle", 1, 48, np.zeros(64, np.float32))
    assert "__shfl_xor_sync with mask 4294967295 in a warp whose live threads are 65535" in errors
    errors, (x,) = _launch(bad_kernels, "good_shuffle", 1, 64, np.arange(64, dtype=np.float32))
    assert errors == ""
    np.testing.assert_array_equal(x, np.arange(64) + (np.arange(64) ^ 1))


def test_the_emulator_reports_launch_bounds_and_misaligned_vectors(bad_kernels):
    errors, _ = _launch(bad_kernels, "good_shuffle", 1, 128, np.zeros(128, np.float32))
    assert "launched with 128 threads per block; the kernel allows at most 64" in errors
    errors, _ = _launch(bad_kernels, "vector_access", 1, 32, np.zeros(64, np.float32))
    assert "16-byte vector access at an address not aligned to 16" in errors


def test_warp_matrix_operations_and_their_misuse(bad_kernels):
    """The emulation's nvcuda::wmma multiplies 16 x 16 tiles as the GPU does
    (f16 operands, f32 sums); a wmma call some lanes of a warp skip is
    reported, and a product that reads shared memory no thread wrote comes
    out NaN (shared memory starts each block all ones), not 0."""
    rng = np.random.default_rng(0)
    x = np.zeros(768, np.float32)
    x[:512] = rng.standard_normal(512).astype(np.float16)   # exact in f16
    bytes_ = 2 * 256 * 2 + 256 * 4
    errors, (y,) = _launch(bad_kernels, "matrix_good", 1, 32, x.copy(), shared_bytes=bytes_)
    assert errors == ""
    a, b = x[:256].reshape(16, 16).astype(np.float64), x[256:512].reshape(16, 16)
    np.testing.assert_allclose(y[512:].reshape(16, 16), a @ b, rtol=1e-6, atol=1e-6)
    errors, _ = _launch(bad_kernels, "matrix_lane_dependent", 1, 32, x.copy(),
                        shared_bytes=bytes_)
    assert "made other warp matrix operations than thread 0 of its warp" in errors, errors
    errors, (y,) = _launch(bad_kernels, "matrix_unwritten", 1, 32, x.copy(), shared_bytes=bytes_)
    assert errors == ""
    c = y[512:].reshape(16, 16)
    assert np.isnan(c[:, 3]).all() and not np.isnan(np.delete(c, 3, axis=1)).any()


def test_the_gpu_check_corpus_covers_every_step_kind():
    sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
    import prepare
    seen = set()
    for _, g, _, _, _ in prepare.corpus():
        seen |= prepare.step_kinds(g, "cuda:sm_90")
    assert prepare.REQUIRED_STEPS <= seen, prepare.REQUIRED_STEPS - seen


# The fuzzer's graphs fused for CUDA, first few of seed 0 (or
# TILEFUSE_EMU_FUZZ_SEED / TILEFUSE_EMU_FUZZ_GRAPHS for a longer run).
def _fuzz_cases():
    import test_fusion_fuzz as T
    seed = int(os.environ.get("TILEFUSE_EMU_FUZZ_SEED", "0"))
    wanted = int(os.environ.get("TILEFUSE_EMU_FUZZ_GRAPHS", "12"))
    found, i = [], 0
    while len(found) < wanted and i < 100 * wanted:
        if T.Case(seed, i).target.startswith("cuda"):
            found.append((seed, i))
        i += 1
    return found


@pytest.mark.parametrize("seed,index", _fuzz_cases())
def test_fuzz_graphs_match_the_interpreter(seed, index, tmp_path):
    import test_fusion_fuzz as T
    from fusion_checks import assert_compiled_close
    case = T.Case(seed, index)
    g, args = T._build(case, case.args)
    want = g.interpret(*args)
    from cuda_emulation import emulate
    got = emulate(g, args, str(tmp_path))
    try:
        assert_compiled_close(got, [np.asarray(w) for w in T.flat(want)],
                              f"emulated CUDA, graph {index} of seed {seed}")
    except AssertionError:
        # An ill-conditioned graph: as close to float64 as the interpreter.
        if not T._compiled_error_is_rounding(got, want, case):
            raise


def test_dlpack_tensors_on_another_gpu_are_refused_and_results_name_their_gpu(tmp_path):
    """Imported CUDA tensors must be on the executor's GPU; exported results
    say which GPU they are on. (Runtime-only process: NVRTC never meets the
    driver double.)"""
    import subprocess
    from cuda_emulation import emulated_export, emulation_env
    x = np.arange(64, dtype=np.float32)
    art = emulated_export(tilefuse.trace(lambda t: t * 2, x), str(tmp_path))
    code = r'''
import sys
sys.modules["tilefuse._core"] = None  # the runtime alone
import numpy as np, tilefuse
fn = tilefuse.load(sys.argv[1])
class OnGpu1:
    def __dlpack_device__(self):
        return (2, 1)
    def __dlpack__(self, stream=None):
        raise AssertionError("the device is checked first")
try:
    fn(OnGpu1())
    print("accepted")
except tilefuse.CompileError as e:
    print("refused:", e)
(result,) = fn.run([np.arange(64, dtype=np.float32)], out="dlpack")
print("device:", result.__dlpack_device__())
'''
    r = subprocess.run([sys.executable, "-c", code, art], capture_output=True, text=True,
                       env=emulation_env(), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "refused: argument 0 is on cuda:1; this function runs on cuda:0" in r.stdout, r.stdout
    assert "device: (2, 0)" in r.stdout, r.stdout


SHORT_ROWS = {
    "softmax": lambda x, b: F.softmax(x, -1),
    "sum": lambda x, b: x.sum(1),
    "pointwise_with_a_broadcast": lambda x, b: x * 2 + b,
    "layer_norm_fwd_bwd": lambda x, b: (F.layer_norm(x, (x.shape[-1],), b, b) * x).sum(),
}


@pytest.mark.parametrize("name", sorted(SHORT_ROWS))
@pytest.mark.parametrize("shape", [(4099, 3), (1000, 2), (33, 1)])
def test_short_rows_run_one_lane_per_row(name, shape, tmp_path):
    """Rows much shorter than a block: lanes run across rows (one block of
    1024 lanes covers 341 rows of 3) instead of one 32-thread block per row
    with 3 threads working."""
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape[-1:]).astype(np.float32)
    g = tilefuse.trace(SHORT_ROWS[name], x, b)
    if name == "layer_norm_fwd_bwd":
        g = g.value_and_grad(wrt=(0, 1))
    src = g._graph.cuda_source("cuda:sm_90")
    grids = [int(line.split(" grid ")[1].split(" ")[0]) for line in src.splitlines()
             if line.startswith("// ") and " grid " in line]
    assert max(grids) <= -(-shape[0] * shape[1] // 32), grids  # not a block per row
    check_emulated(g, (x, b), str(tmp_path), 1e-5, 1e-5, name=name)
    compiled = g.compile("cpu")
    for got, want in zip(compiled._exe.run([x, b]), g._graph.interpret([x, b])):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_emulator_stops_at_an_index_past_a_shared_array(bad_kernels):
    """Run in a child: the bounds check ends the process, naming the array."""
    import subprocess
    code = f"""
import sys, numpy as np
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from test_cuda_emulation import _launch
_launch({bad_kernels!r}, "shared_overrun", 1, 64, np.zeros(64, np.float32))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "out of bounds for type 'float [32]'" in r.stderr, r.stderr[-2000:]


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_repeated_kernels_share_code_and_a_broken_share_is_refused(tmp_path):
    """Kernels repeated layer after layer compile once: their artifact blobs
    name the kernel whose code they share, and the executor resolves them
    (here under emulation, three identical layers against the interpreter).
    A blob naming a kernel that does not exist is refused by name."""
    import struct
    import subprocess
    from cuda_emulation import _blobs, _fnv, emulated_export, emulation_env, fake_driver_dir

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    ws = [rng.standard_normal((64, 64)).astype(np.float32) * 0.2 for _ in range(3)]

    def deep(x, *ws):
        for w in ws:
            x = (x @ w).tanh() * 2.0 + x
        return x
    g = tilefuse.trace(deep, x, *ws)
    check_emulated(g, (x, *ws), str(tmp_path / "ok"), 1e-5, 1e-5, name="3 repeated layers")
    emu = emulated_export(g, str(tmp_path / "broken"))
    data = bytearray(open(emu, "rb").read())
    shared = [(name, start, end) for name, start, end in _blobs(bytes(data))
              if bytes(data[start:end]).startswith(b"tilefuse-alias:")]
    assert shared, "three identical layers compiled no shared kernel"
    name, start, end = shared[0]
    prefix = len(b"tilefuse-alias:")
    data[start + prefix:end] = b"x" * (end - start - prefix)
    struct.pack_into("<Q", data, end, _fnv(bytes(data[start:end])))
    payload = bytes(data[28:])
    struct.pack_into("<QQ", data, 12, len(payload), _fnv(payload))
    bad = tmp_path / "broken.tfa"
    bad.write_bytes(bytes(data))
    r = subprocess.run(["tilefuse-run", str(bad), "--repeat=1"], capture_output=True, text=True,
                       env=emulation_env(), timeout=300)
    assert r.returncode != 0 and f"kernel {name} shares the code of" in r.stderr, (
        f"$ LD_LIBRARY_PATH={fake_driver_dir()} tilefuse-run {bad}\n{r.stderr[-3000:]}")


@pytest.mark.parametrize("shape", [(300, 1025), (4099, 3)])
def test_a_total_beside_column_sums(shape, tmp_path):
    """A sum over the whole domain folded by the column kernel beside column
    sums: block 0 of the combine kernel sums the total's column partials."""
    rng = np.random.default_rng(shape[0])
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.standard_normal(shape).astype(np.float32)
    g = tilefuse.trace(lambda x, y: ((x * y).sum(0), x.sum()), x, y)
    src = g._graph.cuda_source("cuda:sm_90")
    assert "_combine" in src, "expected the column sums and the total split into partial + combine"
    check_emulated(g, (x, y), str(tmp_path), 1e-5, 1e-5, name="total_beside_columns")


def test_a_concat_of_whole_blocks_reads_only_its_own_input(tmp_path):
    """Attention's qkv gradient: dq, dk, dv in [B, H, T, D] transposed back
    to [B, T, H*D] and concatenated. With H*D a multiple of the CUDA block
    (512 lanes) every block lies in one input, whose loads are masked off
    (limit 0) outside its blocks; with H*D = 128 blocks span inputs and
    every input is clamped and gathered."""
    rng = np.random.default_rng(7)
    for heads, dim in ((8, 64), (4, 32)):
        q, k, v = (rng.standard_normal((2, heads, 16, dim)).astype(np.float32)
                   for _ in range(3))

        def qkv(q, k, v):
            merge = lambda t: t.transpose(1, 2).reshape(2, 16, heads * dim)  # noqa: E731
            return tilefuse.cat([merge(q), merge(k) * 2.0, merge(v)], 2)

        g = tilefuse.trace(qkv, q, k, v)
        check_emulated(g, (q, k, v), str(tmp_path / f"h{heads}"), 0, 0,
                       name=f"concat of {heads * dim}-wide inputs")


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_over_channels_and_its_gradient_in_one_kernel(log, tmp_path):
    """A softmax over the classes of [N, C, H, W] (a reduction over a middle
    dim whose kept elements stream: test_row_kernels.py) is one CUDA kernel
    whose threads each fold their position's classes, then walk them again
    for the results; with its gradient, against the interpreter."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((8, 5, 32, 128)) * 4).astype(np.float32)
    t = rng.standard_normal(x.shape).astype(np.float32)
    op = F.log_softmax if log else F.softmax
    g = tilefuse.trace(lambda x, t: (op(x, 1) * t).sum(), x, t).value_and_grad(wrt=(0,))
    src = g._graph.cuda_source("cuda:sm_90")
    assert src.count("__global__") <= 3, src[:2000]
    check_emulated(g, (x, t), str(tmp_path), 1e-5, 1e-5, name="channel softmax")


def test_products_returned_reshaped_are_their_gemms_buffers(tmp_path):
    """A language model's logits: a product returned as [B, T, V] is the
    GEMM's own buffer under the returned shape (no copy step); returned
    twice in two shapes, one of them is copied. Values as the interpreter's,
    on the CPU and on the emulated GPU."""
    rng = np.random.default_rng(11)
    h = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((40, 16)).astype(np.float32)
    once = tilefuse.trace(lambda h, w: (h @ w.T).reshape(2, 4, 40), h, w)
    twice = tilefuse.trace(lambda h, w: ((h @ w.T).reshape(2, 4, 40),
                                         (h @ w.T).reshape(4, 2, 40)), h, w)
    for name, g, steps in (("once", once, ["library"]), ("twice", twice, ["library", "copy"])):
        compiled = g.compile("cpu")
        got = compiled(h, w)
        want = g.interpret(h, w)
        for a, b in zip(got if isinstance(got, tuple) else [got],
                        want if isinstance(want, tuple) else [want]):
            assert a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-5), name
        assert sorted(r.get("kind") for r in compiled.report()) == sorted(steps), name
        check_emulated(g, (h, w), str(tmp_path / name), 1e-5, 1e-5, name=f"logits {name}")


def test_column_sums_beside_a_reshaped_full_size_result(tmp_path):
    """A layer norm's dgamma/dbeta over [2, T, d] beside its widened
    gradient returned as [2T, d]: one split column kernel whose partial
    kernel stores the reshaped result, as the interpreter computes it."""
    rng = np.random.default_rng(12)
    x2 = rng.standard_normal((300, 130)).astype(np.float32)
    y = rng.standard_normal((2, 150, 130)).astype(np.float32)

    def f(x2, y):
        xf = x2 * 3.0
        x = xf.reshape(2, 150, 130)
        return x.sum((0, 1)), (x * y).sum((0, 1)), xf
    g = tilefuse.trace(f, x2, y)
    check_emulated(g, (x2, y), str(tmp_path), 1e-5, 1e-5, name="column sums beside [2T, d]")
