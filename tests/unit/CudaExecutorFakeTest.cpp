//===- CudaExecutorFakeTest.cpp - the CUDA executor against a CPU double ---===//
//
// runtime/CudaExecutor.cpp drives a GPU; this machine may have none. These
// tests run it against tests/unit/fakecuda (a driver, cuBLAS and cuBLASLt
// that keep "device" memory in host memory and run registered CPU
// functions as kernels), which checks everything but the GPU itself: the
// arena, argument and result copies, persistent arguments and carries,
// graph capture and replay, the GEMM mappings onto cuBLAS and cuBLASLt
// (row-major onto column-major, transposes, batches, bias and ReLU
// epilogues), the convolutions' mapping onto cuDNN, the library kernels'
// arguments, the error word. Results are
// compared with the CPU executor running the same Program.
//
//===----------------------------------------------------------------------===//
#include "runtime/Artifact.h"
#include "runtime/CpuExecutor.h"
#include "runtime/CudaAttentionKernels.h"
#include "runtime/CudaExecutor.h"
#include "runtime/MemoryPlan.h"
#include "runtime/Nccl.h"
#include "tests/unit/CollectivePrograms.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <thread>

using namespace tilefuse;

namespace {

using FakeKernelFn = void (*)(const uint64_t *params, unsigned grid, unsigned threads);

template <typename T> T *ptr(uint64_t p) { return reinterpret_cast<T *>(p); }

/// out[i] = 2 * in[i] for the grid * threads elements (one per thread).
void scaleKernelGpu(const uint64_t *p, unsigned grid, unsigned threads) {
  for (unsigned i = 0; i < grid * threads; ++i)
    ptr<float>(p[1])[i] = 2 * ptr<float>(p[0])[i];
}
/// The same kernel with the CPU ABI (32 elements per program).
void scaleKernelCpu(void **b, int64_t first, int64_t end) {
  for (int64_t i = first * 32; i < end * 32; ++i)
    static_cast<float *>(b[1])[i] = 2 * static_cast<const float *>(b[0])[i];
}

/// tf_gather_i64(table, idx, out, n, rows, rowBytes, err): one block per row.
void gatherI64(const uint64_t *p, unsigned grid, unsigned) {
  auto *idx = ptr<int64_t>(p[1]);
  for (unsigned q = 0; q < grid; ++q) {
    int64_t r = idx[q];
    if (r < 0 || r >= int64_t(p[4])) {
      auto *err = ptr<uint64_t>(p[6]);
      if (!err[0])
        err[0] = 1, err[1] = uint64_t(r);
      continue;
    }
    std::memcpy(ptr<char>(p[2]) + q * p[5], ptr<char>(p[0]) + r * p[5], p[5]);
  }
}
/// tf_scatter_add_f32_i64(acc, idx, upd, n, rows, rowSize, err).
void scatterAddF32I64(const uint64_t *p, unsigned grid, unsigned) {
  auto *idx = ptr<int64_t>(p[1]);
  for (unsigned q = 0; q < grid; ++q)
    for (uint64_t c = 0; c < p[5]; ++c)
      ptr<float>(p[0])[idx[q] * p[5] + c] += ptr<float>(p[2])[q * p[5] + c];
}
void unused(const uint64_t *, unsigned, unsigned) { std::abort(); }

/// The fake driver's kernel registry (set by the fixture).
void (*registerFakeKernel)(const char *, int, FakeKernelFn) = nullptr;

/// Loads the fake driver (found through LD_LIBRARY_PATH, like the real
/// one) and registers the library kernels these tests use; program kernels
/// are registered under their symbols by fakeCubins.
class FakeCuda : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib, nullptr) << "the fake driver is not on LD_LIBRARY_PATH";
    auto reg = reinterpret_cast<void (*)(const char *, int, FakeKernelFn)>(
        dlsym(lib, "tf_fake_register_kernel"));
    ASSERT_NE(reg, nullptr) << "libcuda.so.1 here is not the test's fake driver";
    counters = reinterpret_cast<void (*)(int64_t *, int64_t *, int64_t *)>(
        dlsym(lib, "tf_fake_counters"));
    liveStreams = reinterpret_cast<int64_t (*)()>(dlsym(lib, "tf_fake_live_streams"));
    contextRefs = reinterpret_cast<int64_t (*)()>(dlsym(lib, "tf_fake_context_refs"));
    registerFakeKernel = reg;
    for (const char *name : kCudaLibraryKernels)
      reg(name, 7, &unused);
    reg("tf_gather_i64", 7, &gatherI64);
    reg("tf_scatter_add_f32_i64", 7, &scatterAddF32I64);
  }
  static inline int64_t (*liveStreams)() = nullptr;
  static inline int64_t (*contextRefs)() = nullptr;
  struct Counts {
    int64_t launches, instantiated, graphLaunches;
  };
  static Counts count() {
    Counts c{};
    counters(&c.launches, &c.instantiated, &c.graphLaunches);
    return c;
  }
  static inline void (*counters)(int64_t *, int64_t *, int64_t *) = nullptr;
};

HostTensor random(DType t, const Shape &s, uint64_t seed) {
  HostTensor h(t, s);
  for (int64_t i = 0; i < h.size(); ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    h.setDouble(i, double(seed >> 11) / double(1ull << 53) * 2 - 1);
  }
  return h;
}

int buffer(Program &p, const std::string &name, Shape shape,
           BufferInfo::Role role = BufferInfo::Role::Intermediate, DType t = DType::F32) {
  BufferInfo b;
  b.name = name, b.dtype = t, b.shape = std::move(shape), b.role = role;
  p.buffers.push_back(b);
  return int(p.buffers.size() - 1);
}

Step gemmStep(std::vector<int> bufs, int64_t batch, int64_t m, int64_t n, int64_t k, bool ta,
              bool tb) {
  Step s;
  s.kind = Step::Kind::Gemm;
  s.buffers = std::move(bufs);
  s.batch = batch, s.m = m, s.n = n, s.k = k, s.transposeA = ta, s.transposeB = tb;
  s.source = "graph.matmul";
  return s;
}

/// y = scale(x): one argument of `n` elements, one kernel of `grid`
/// programs of 32 threads.
Program scaleProgram(int64_t n, int64_t grid) {
  Program p;
  int x = buffer(p, "x", {n}, BufferInfo::Role::Argument);
  int y = buffer(p, "y", {n});
  ProgramKernel k;
  k.name = "scale", k.kind = "pointwise", k.grid = grid, k.block = 32, k.threads = 32;
  p.kernels.push_back(k);
  Step ks;
  ks.kind = Step::Kind::Kernel, ks.kernel = 0, ks.buffers = {x, y}, ks.source = "scale";
  p.steps.push_back(ks);
  p.arguments = {x};
  p.results = {y};
  return p;
}

/// A fake cubin per kernel, under its symbol; every kernel is `scale`.
std::vector<std::pair<std::string, std::string>> fakeCubins(const Program &p) {
  std::vector<std::pair<std::string, std::string>> blobs;
  for (const std::string &symbol : kernelSymbols(p)) {
    registerFakeKernel(symbol.c_str(), 2, &scaleKernelGpu);
    blobs.emplace_back(symbol, "fake cubin");
  }
  blobs.emplace_back(kCudaLibraryBlob, "fake cubin");
  return blobs;
}

void expectNear(const HostTensor &got, const HostTensor &want, double tol, const char *what) {
  ASSERT_EQ(got.shape, want.shape) << what;
  for (int64_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got.getDouble(i), want.getDouble(i), tol) << what << " element " << i;
}

} // namespace

TEST_F(FakeCuda, KernelsGemmsGatherScatterAndCopiesMatchTheCpuExecutor) {
  // a[2,3,5] x b[2,5,4] batched, every transpose combination, a kernel,
  // a gather, a scatter-add and a copy, against the CPU executor.
  Program p;
  int a = buffer(p, "a", {2, 3, 5}, BufferInfo::Role::Argument);
  int b = buffer(p, "b", {2, 5, 4}, BufferInfo::Role::Argument);
  int at = buffer(p, "at", {2, 5, 3}, BufferInfo::Role::Argument);
  int bt = buffer(p, "bt", {2, 4, 5}, BufferInfo::Role::Argument);
  int ids = buffer(p, "ids", {4}, BufferInfo::Role::Argument, DType::I64);
  int table = buffer(p, "table", {6, 32}, BufferInfo::Role::Argument);
  std::vector<int> cs;
  for (int i = 0; i < 4; ++i)
    cs.push_back(buffer(p, "c" + std::to_string(i), {2, 3, 4}));
  p.steps.push_back(gemmStep({a, b, cs[0]}, 2, 3, 4, 5, false, false));
  p.steps.push_back(gemmStep({at, b, cs[1]}, 2, 3, 4, 5, true, false));
  p.steps.push_back(gemmStep({a, bt, cs[2]}, 2, 3, 4, 5, false, true));
  p.steps.push_back(gemmStep({at, bt, cs[3]}, 2, 3, 4, 5, true, true));
  int rows = buffer(p, "rows", {4, 32});
  Step g;
  g.kind = Step::Kind::Gather, g.buffers = {table, ids, rows}, g.source = "graph.gather";
  p.steps.push_back(g);
  int scaled = buffer(p, "scaled", {4, 32});
  ProgramKernel k;
  k.name = "scale", k.kind = "pointwise", k.grid = 4, k.block = 32, k.threads = 32;
  k.elementsPerProgram = 32;
  p.kernels.push_back(k);
  Step ks;
  ks.kind = Step::Kind::Kernel, ks.kernel = 0, ks.buffers = {rows, scaled}, ks.source = "scale";
  p.steps.push_back(ks);
  int summed = buffer(p, "summed", {6, 32});
  Step sa;
  sa.kind = Step::Kind::ScatterAdd, sa.buffers = {table, ids, scaled, summed};
  sa.source = "graph.scatter_add";
  p.steps.push_back(sa);
  int copy = buffer(p, "copy", {6, 32});
  Step cp;
  cp.kind = Step::Kind::Copy, cp.buffers = {summed, copy}, cp.source = "return";
  p.steps.push_back(cp);
  p.arguments = {a, b, at, bt, ids, table};
  p.results = {cs[0], cs[1], cs[2], cs[3], rows, scaled, copy};

  std::vector<HostTensor> args = {random(DType::F32, {2, 3, 5}, 1), random(DType::F32, {2, 5, 4}, 2),
                                  HostTensor(DType::F32, {2, 5, 3}), HostTensor(DType::F32, {2, 4, 5}),
                                  HostTensor(DType::I64, {4}), random(DType::F32, {6, 32}, 3)};
  // at, bt: the transposes of a and b, so every GEMM computes a x b.
  for (int q = 0; q < 2; ++q)
    for (int i = 0; i < 3; ++i)
      for (int l = 0; l < 5; ++l)
        args[2].setDouble((q * 5 + l) * 3 + i, args[0].getDouble((q * 3 + i) * 5 + l));
  for (int q = 0; q < 2; ++q)
    for (int l = 0; l < 5; ++l)
      for (int j = 0; j < 4; ++j)
        args[3].setDouble((q * 4 + j) * 5 + l, args[1].getDouble((q * 5 + l) * 4 + j));
  int64_t chosen[] = {5, 0, 5, 2}; // a repeated row: the scatter-add must add both
  for (int i = 0; i < 4; ++i)
    args[4].setInt(i, chosen[i]);

  CpuExecutor cpu(p, {&scaleKernelCpu}, nullptr);
  std::vector<HostTensor> want = cpu.run(args);
  CudaExecutor gpu(p, fakeCubins(p));
  EXPECT_EQ(gpu.device(), "cuda:0 (Fake GPU)");
  // Eager, captured, replayed: the same results each time.
  for (int call = 0; call < 3; ++call) {
    std::vector<HostTensor> got = gpu.run(args);
    for (size_t r = 0; r < got.size(); ++r)
      expectNear(got[r], want[r], 1e-5, p.buffers[p.results[r]].name.c_str());
    for (int i = 1; i < 4; ++i) // every transpose combination computes a x b
      expectNear(got[i], got[0], 1e-5, "transposed GEMM");
  }
  EXPECT_EQ(gpu.graphsCaptured(), 1);
  EXPECT_EQ(gpu.graphReplays(), 1);
}

/// x[3,5] @ w[5,4] with `epilogue` (bias[4] first) as one GEMM step.
static Program epilogueGemm(std::vector<std::string> epilogue) {
  Program p;
  int x = buffer(p, "x", {3, 5}, BufferInfo::Role::Argument);
  int w = buffer(p, "w", {5, 4}, BufferInfo::Role::Argument);
  int bias = buffer(p, "bias", {4}, BufferInfo::Role::Argument);
  int y = buffer(p, "y", {3, 4});
  Step s = gemmStep({x, w, y, bias}, 1, 3, 4, 5, false, false);
  s.epilogue = std::move(epilogue);
  p.steps.push_back(s);
  p.arguments = {x, w, bias};
  p.results = {y};
  return p;
}

TEST_F(FakeCuda, GemmEpiloguesGoToCublasLt) {
  // relu(x[3,5] @ w[5,4] + bias[4]) as one step.
  Program p = epilogueGemm({"bias", "relu"});
  HostTensor hx = random(DType::F32, {3, 5}, 4), hw = random(DType::F32, {5, 4}, 5),
             hb = random(DType::F32, {4}, 6);
  CudaExecutor gpu(p, fakeCubins(p));
  HostTensor got = gpu.run({hx, hw, hb})[0];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      double acc = hb.getDouble(j);
      for (int l = 0; l < 5; ++l)
        acc += hx.getDouble(i * 5 + l) * hw.getDouble(l * 4 + j);
      EXPECT_NEAR(got.getDouble(i * 4 + j), std::max(acc, 0.0), 1e-5) << i << "," << j;
    }
  // An epilogue in another order is not a Program anyone may run.
  p.steps[0].epilogue = {"relu", "bias"};
  EXPECT_THROW(CudaExecutor(p, fakeCubins(p)), CompileError);
}

TEST_F(FakeCuda, PersistentArgumentsCarryAndTwoGraphsAlternate) {
  // x <- 2 x each call: the result swaps with the kept argument, so calls
  // alternate between two sets of addresses: each runs eagerly once, is
  // captured once, then replays.
  Program p = scaleProgram(64, 2);
  p.aliases = {{0, 0}};
  CudaExecutor gpu(p, fakeCubins(p));
  HostTensor start = random(DType::F32, {64}, 7);
  gpu.makePersistent(0, start.bytes.data());
  gpu.carry(0, 0);
  Counts before = count();
  for (int call = 1; call <= 7; ++call) {
    gpu.run(std::vector<ArgRef>{ArgRef{}});
    auto *now = static_cast<const float *>(gpu.persistent(0));
    auto *result = static_cast<const float *>(gpu.result(0));
    for (int i = 0; i < 64; ++i) {
      float want = float(start.getDouble(i) * std::pow(2.0, call));
      ASSERT_EQ(now[i], want) << "call " << call << " element " << i;
      ASSERT_EQ(result[i], want) << "call " << call << " element " << i;
    }
  }
  Counts after = count();
  EXPECT_EQ(gpu.graphsCaptured(), 2);
  EXPECT_EQ(gpu.graphReplays(), 3);
  EXPECT_EQ(after.instantiated - before.instantiated, 2);
  EXPECT_EQ(after.graphLaunches - before.graphLaunches, 5);
  EXPECT_EQ(after.launches - before.launches, 7); // captured work is not run twice
  // Profiling runs step by step, without graphs, and times each step.
  gpu.setProfiling(true);
  gpu.run(std::vector<ArgRef>{ArgRef{}});
  EXPECT_EQ(gpu.profiledCalls(), 1);
  EXPECT_EQ(gpu.graphsCaptured(), 2);
  EXPECT_GE(gpu.stepSeconds()[0], 0.0);
}

TEST_F(FakeCuda, DeviceArgumentsAreReadInPlace) {
  Program p = scaleProgram(32, 1);
  CudaExecutor gpu(p, fakeCubins(p));
  // "Device" memory of the fake is host memory: any pointer will do.
  std::vector<float> onDevice(32, 1.5f);
  gpu.run({ArgRef{onDevice.data(), true}});
  EXPECT_EQ(static_cast<const float *>(gpu.result(0))[31], 3.0f);
  std::shared_ptr<void> copy = gpu.copyResult(0);
  EXPECT_NE(copy.get(), gpu.deviceResult(0));
  EXPECT_EQ(static_cast<const float *>(copy.get())[0], 3.0f);
}

TEST_F(FakeCuda, InPlaceCarriesUpdateTheKeptValueAndNeverTheCallersTensor) {
  // x <- 2x written over x itself: one set of addresses, so one graph.
  Program p = scaleProgram(64, 2);
  p.steps[0].buffers = {0, 0};
  p.results = {0};
  p.aliases = {{0, 0}};
  p.buffers.pop_back(); // y is gone
  CudaExecutor gpu(p, fakeCubins(p));
  HostTensor start = random(DType::F32, {64}, 11);
  gpu.makePersistent(0, start.bytes.data());
  gpu.carry(0, 0);
  for (int call = 1; call <= 4; ++call) {
    gpu.run(std::vector<ArgRef>{ArgRef{}});
    auto *now = static_cast<const float *>(gpu.persistent(0));
    for (int i = 0; i < 64; ++i)
      ASSERT_EQ(now[i], float(start.getDouble(i) * std::pow(2.0, call))) << call << " " << i;
  }
  EXPECT_EQ(gpu.graphsCaptured(), 1);
  // A caller's device tensor is copied before the kernel writes over it.
  CudaExecutor other(p, fakeCubins(p));
  std::vector<float> onDevice(64, 1.5f);
  other.run({ArgRef{onDevice.data(), true}});
  EXPECT_EQ(static_cast<const float *>(other.result(0))[63], 3.0f);
  EXPECT_EQ(onDevice[63], 1.5f);
}

TEST_F(FakeCuda, OutOfRangeGatherIndicesAreReported) {
  Program p;
  int table = buffer(p, "table", {6, 4}, BufferInfo::Role::Argument);
  int ids = buffer(p, "ids", {2}, BufferInfo::Role::Argument, DType::I64);
  int out = buffer(p, "out", {2, 4});
  Step g;
  g.kind = Step::Kind::Gather, g.buffers = {table, ids, out}, g.source = "graph.gather";
  p.steps.push_back(g);
  p.arguments = {table, ids};
  p.results = {out};
  CudaExecutor gpu(p, fakeCubins(p));
  HostTensor t = random(DType::F32, {6, 4}, 8), good(DType::I64, {2}), bad(DType::I64, {2});
  good.setInt(0, 5), good.setInt(1, 0), bad.setInt(0, 1), bad.setInt(1, 9);
  try {
    gpu.run({t, bad});
    FAIL() << "an index of 9 into 6 rows was not reported";
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find("graph.gather: index 9 is out of range"),
              std::string::npos)
        << e.what();
  }
  // The error word is cleared by the next call.
  HostTensor r = gpu.run({t, good})[0];
  EXPECT_EQ(r.getDouble(0), t.getDouble(5 * 4));
}

/// A program of one attention step with heads of `headDim`.
static Program attentionProgram(int64_t headDim) {
  Program p;
  int q = buffer(p, "q", {1, 2, 3, headDim}, BufferInfo::Role::Argument);
  int out = buffer(p, "out", {1, 2, 3, headDim});
  int lse = buffer(p, "lse", {1, 2, 3});
  Step a;
  a.kind = Step::Kind::Attention, a.source = "graph.attention", a.batch = 1, a.outputs = 2;
  a.attention.heads = 2, a.attention.kvHeads = 2, a.attention.queries = 3, a.attention.keys = 3;
  a.attention.headDim = headDim, a.attention.valueDim = headDim;
  a.buffers = {q, q, q, out, lse};
  p.steps.push_back(a);
  p.arguments = {q};
  p.results = {out};
  return p;
}

TEST_F(FakeCuda, AttentionStepsTheKernelsCannotRunAreRefusedAtLoadWithTheReason) {
  // The compiler writes attention with heads past the kernels' out for
  // CUDA; a program that still has one (hand-built, or from a CPU
  // artifact) is refused, saying why. So is one without the kernels' cubin.
  auto refusal = [](const Program &p) -> std::string {
    try {
      CudaExecutor gpu(p, fakeCubins(p));
    } catch (const CompileError &e) {
      return e.what();
    }
    return "(loaded)";
  };
  std::string wide = refusal(attentionProgram(264));
  EXPECT_NE(wide.find("graph.attention: head dimension 264 and value dimension 264: the CUDA "
                      "attention kernels take at most 256"),
            std::string::npos)
      << wide;
  std::string missing = refusal(attentionProgram(64));
  EXPECT_NE(missing.find("has attention steps but no tf_attention cubin"), std::string::npos)
      << missing;
}

TEST_F(FakeCuda, WideAttentionTilesOptIntoSharedMemoryOrAreRefusedWhereTheGpuHasTooLittle) {
  // Heads of up to 256: the gradient kernels' tiles take more than the
  // 48 KiB a kernel gets without opting in; the forward's too. The
  // executor opts each launched kernel in to exactly its bytes, and
  // refuses at load, naming the kernel and the way out, where the device
  // allows less (an sm_75's 64 KiB).
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto setOptIn = reinterpret_cast<void (*)(unsigned)>(dlsym(lib, "tf_fake_set_shared_opt_in"));
  auto limitOf = reinterpret_cast<int (*)(const char *)>(
      dlsym(lib, "tf_fake_dynamic_shared_limit"));
  ASSERT_TRUE(setOptIn && limitOf);
  Program p = attentionProgram(200);
  const CudaAttentionVariant v = cudaAttentionVariant(p, p.steps[0]);
  ASSERT_EQ(v.tiles->maxDim, 256);
  std::string forward = cudaAttentionKernel("forward", v);
  registerFakeKernel(forward.c_str(), 1, &unused);
  std::vector<std::pair<std::string, std::string>> blobs = fakeCubins(p);
  blobs.emplace_back(kCudaAttentionBlob, "fake cubin");
  {
    CudaExecutor gpu(p, blobs);
    EXPECT_EQ(limitOf(forward.c_str()), cudaAttentionSharedBytes("forward", *v.tiles));
  }
  setOptIn(64 << 10);
  EXPECT_NO_THROW(CudaExecutor(p, blobs)) << "the forward's 51456 bytes fit 64 KiB";
  Program grad = p;
  grad.steps[0].kind = Step::Kind::AttentionGrad; // only what it launches is checked
  for (const char *k : {"key_grads", "query_grads"})
    registerFakeKernel(cudaAttentionKernel(k, v).c_str(), 1, &unused);
  int lse = grad.steps[0].buffers[4], out = grad.steps[0].buffers[3];
  int dq = buffer(grad, "dq", grad.buffers[size_t(out)].shape);
  int dk = buffer(grad, "dk", grad.buffers[size_t(out)].shape);
  int dv = buffer(grad, "dv", grad.buffers[size_t(out)].shape);
  grad.steps[0].buffers = {0, 0, 0, out, lse, 0, dq, dk, dv};
  grad.steps[0].outputs = 3;
  grad.results = {dq};
  try {
    CudaExecutor gpu(grad, blobs);
    ADD_FAILURE() << "loaded";
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find("attention kernel tf_attention_key_grads_f32_d256 "
                                         "needs 68096 bytes of shared memory per block; "),
              std::string::npos)
        << e.what();
  }
  setOptIn(227 << 10);
  EXPECT_NO_THROW(CudaExecutor(grad, blobs));
}

TEST_F(FakeCuda, ArtifactsForAnotherArchitectureOrWithoutCubinsAreRefused) {
  Program p = scaleProgram(32, 1);
  Artifact a;
  a.target = "cuda:sm_80";
  a.program = p;
  a.blobs = fakeCubins(p);
  auto refused = [&](const std::string &reason) {
    try {
      loadArtifact(readArtifact(writeArtifact(a)));
      ADD_FAILURE() << "loaded; expected: " << reason;
    } catch (const CompileError &e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  };
  refused("the artifact's kernels are for sm_80, this GPU is sm_90");
  a.target = "cuda:sm_90";
  EXPECT_EQ(loadArtifact(readArtifact(writeArtifact(a)))->device(), "cuda:0 (Fake GPU)");
  a.blobs = {{kernelSymbol(p, p.steps[0]), "not a cubin"}};
  refused("loading the cubin of scale");
  a.blobs = {};
  refused("no cubin for kernel scale");
  a.blobs = fakeCubins(p);
  a.program.kernels[0].threads = 0;
  refused("0 threads per block");
  // Refused executors give back what they took (the stream, modules).
  int64_t before = liveStreams();
  for (int i = 0; i < 3; ++i)
    refused("0 threads per block");
  a.blobs = {};
  a.program.kernels[0].threads = 32;
  refused("no cubin for kernel scale");
  EXPECT_EQ(liveStreams(), before);
  // A launch changed after compilation names code that does not exist.
  a.blobs = fakeCubins(p);
  a.program.kernels[0].grid = 2;
  refused("the step that launches it does not match the compiled code");
}

TEST_F(FakeCuda, SplatConstantsAreFilledOnTheDevice) {
  // zeros (one repeated byte: a memset) and 2.5 (expanded on the host).
  Program p;
  int zeros = buffer(p, "zeros", {300}, BufferInfo::Role::Constant);
  int fill = buffer(p, "fill", {300}, BufferInfo::Role::Constant);
  float zero = 0.0f, v = 2.5f;
  p.buffers[zeros].data.assign(reinterpret_cast<uint8_t *>(&zero),
                               reinterpret_cast<uint8_t *>(&zero) + 4);
  p.buffers[fill].data.assign(reinterpret_cast<uint8_t *>(&v), reinterpret_cast<uint8_t *>(&v) + 4);
  p.buffers[zeros].splat = p.buffers[fill].splat = true;
  int a = buffer(p, "a", {300}), b = buffer(p, "b", {300});
  for (auto [from, to] : {std::pair{zeros, a}, std::pair{fill, b}}) {
    Step c;
    c.kind = Step::Kind::Copy, c.buffers = {from, to}, c.source = "return";
    p.steps.push_back(c);
  }
  p.results = {a, b};
  CudaExecutor gpu(p, fakeCubins(p));
  std::vector<HostTensor> out = gpu.run(std::vector<HostTensor>{});
  for (int64_t i = 0; i < 300; ++i) {
    ASSERT_EQ(out[0].getDouble(i), 0.0) << i; // fresh fake memory is 0xCD garbage
    ASSERT_EQ(out[1].getDouble(i), 2.5) << i;
  }
}

TEST_F(FakeCuda, ExecutorsAndResultCopiesReleaseThePrimaryContext) {
  int64_t before = contextRefs();
  Program p = scaleProgram(64, 2);
  std::shared_ptr<void> copy;
  {
    CudaExecutor gpu(p, fakeCubins(p));
    EXPECT_EQ(contextRefs(), before + 1);
    std::vector<HostTensor> args = {random(DType::F32, {64}, 4)};
    gpu.run(args);
    copy = gpu.copyResult(0); // outlives the executor
    EXPECT_EQ(contextRefs(), before + 2);
  }
  EXPECT_EQ(contextRefs(), before + 1);
  copy.reset();
  EXPECT_EQ(contextRefs(), before);
  // A refused executor releases what it retained.
  Program bad = p;
  bad.kernels[0].threads = 0;
  EXPECT_THROW(CudaExecutor(bad, fakeCubins(bad)), CompileError);
  EXPECT_EQ(contextRefs(), before);
}

TEST_F(FakeCuda, GemmEpiloguesTakeOperandsAtAnyAlignedAddress) {
  // A caller's tensor view at an offset is only element-aligned: the
  // algorithm chosen for 256-byte aligned operands must not see it.
  Program p = epilogueGemm({"bias"});
  auto lastAlignment = reinterpret_cast<uint32_t (*)()>(
      dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), "tf_fake_last_matmul_alignment"));
  ASSERT_NE(lastAlignment, nullptr);
  CudaExecutor gpu(p, fakeCubins(p), CudaOptions{0, /*graphs=*/false});
  HostTensor hx = random(DType::F32, {3, 5}, 4), hw = random(DType::F32, {5, 4}, 5),
             hb = random(DType::F32, {4}, 6);
  HostTensor want = gpu.run({hx, hw, hb})[0];
  EXPECT_EQ(lastAlignment(), 256u);
  // x at an address 4 bytes past a 256-byte boundary.
  alignas(256) float storage[64 + 15];
  float *shifted = storage + 1;
  std::memcpy(shifted, hx.bytes.data(), hx.bytes.size());
  gpu.run({ArgRef{shifted, true}, ArgRef{hw.bytes.data(), false},
           ArgRef{hb.bytes.data(), false}});
  EXPECT_EQ(lastAlignment(), 4u);
  for (int64_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(static_cast<const float *>(gpu.result(0))[i], want.getDouble(i)) << i;
}

TEST_F(FakeCuda, AGroupOfOneRunsWithoutNcclAndIsCapturedInTheGraph) {
  using namespace tilefuse::testing;
  CudaExecutor exe(exchangeProgram(1), {});
  for (int call = 0; call < 3; ++call) { // eager, captured, replayed
    std::vector<HostTensor> out = exe.run({f32({1, 2, 3, 4})});
    EXPECT_EQ(values(out[0]), (std::vector<float>{1, 2, 3, 4}));
    EXPECT_EQ(values(out[1]), (std::vector<float>{1, 2, 3, 4}));
  }
  EXPECT_EQ(exe.graphsCaptured(), 1);
}

TEST_F(FakeCuda, TwoRanksExchangeThroughNccl) {
  using namespace tilefuse::testing;
  // Both executors load before the ranks run (the fake driver's state is
  // one process's); each rank then runs in a thread of its own, its
  // collectives on the executor's second stream.
  std::string id = nccl::uniqueId();
  CudaOptions eager;
  eager.graphs = false;
  std::vector<std::unique_ptr<CudaExecutor>> ranks;
  for (int64_t r = 0; r < 2; ++r) {
    ranks.push_back(std::make_unique<CudaExecutor>(
        exchangeProgram(2), std::vector<std::pair<std::string, std::string>>{}, eager));
    ranks.back()->setNcclCommunicator("dp", id, r, 2);
  }
  std::vector<std::vector<HostTensor>> out(2);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      float base = float(10 * r);
      out[size_t(r)] = ranks[size_t(r)]->run({f32({base + 1, base + 2, base + 3, base + 4})});
    });
  for (std::thread &t : threads)
    t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(values(out[size_t(r)][0]), (std::vector<float>{12, 14, 16, 18}));
    EXPECT_EQ(values(out[size_t(r)][1]), (std::vector<float>{12, 14, 16, 18, 12, 14, 16, 18}));
  }
}

TEST_F(FakeCuda, CollectivesWithoutACommunicatorAreRefusedByName) {
  using namespace tilefuse::testing;
  CudaExecutor exe(exchangeProgram(2), {});
  auto refused = [&](const std::function<void()> &f, const std::string &reason) {
    try {
      f();
      ADD_FAILURE() << "accepted; expected: " << reason;
    } catch (const CompileError &e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  };
  refused([&] { exe.run({f32({1, 2, 3, 4})}); },
          "process group 'dp' (2 ranks) has no NCCL communicator");
  refused([&] { exe.setNcclCommunicator("dp", nccl::uniqueId(), 0, 4); },
          "has 4 ranks; the program was compiled for 2");
  refused([&] { exe.setNcclCommunicator("tp", nccl::uniqueId(), 0, 2); },
          "no process group 'tp'");
  refused([&] { exe.setCommunicator("dp", nullptr); }, "run on NCCL");
}

/// A convolution's forward, input gradient and weight gradient as three
/// library steps over arguments x [N, C, *in], w [O, C / groups, *k] and dy
/// [N, O, *out], with `params` (padding alike on both sides), each with a
/// planned workspace of `workspace` bytes (none for 0).
static Program convolutionProgram(const ConvParams &c, DType t, int64_t workspace = 4096) {
  Program p;
  auto shape = [&](int64_t a, int64_t b, const std::array<int64_t, 3> &spatial) {
    Shape s = {a, b};
    for (int i = 0; i < c.spatial; ++i)
      s.push_back(spatial[size_t(i)]);
    return s;
  };
  int x = buffer(p, "x", shape(c.batch, c.channels, c.input), BufferInfo::Role::Argument, t);
  int w = buffer(p, "w", shape(c.outChannels, c.channels / c.groups, c.kernel),
                 BufferInfo::Role::Argument, t);
  int dy = buffer(p, "dy", shape(c.batch, c.outChannels, c.output), BufferInfo::Role::Argument, t);
  int y = buffer(p, "y", p.buffers[dy].shape, BufferInfo::Role::Intermediate, t);
  int dx = buffer(p, "dx", p.buffers[x].shape, BufferInfo::Role::Intermediate, t);
  int dw = buffer(p, "dw", p.buffers[w].shape, BufferInfo::Role::Intermediate, t);
  auto step = [&](Step::Kind kind, std::vector<int> bufs, const char *source) {
    Step s;
    s.kind = kind, s.conv = c, s.buffers = std::move(bufs), s.source = source;
    if (workspace > 0)
      s.buffers.push_back(buffer(p, std::string(source) + "_workspace", {workspace},
                                 BufferInfo::Role::Intermediate, DType::I1));
    p.steps.push_back(s);
  };
  step(Step::Kind::Conv, {x, w, y}, "graph.conv");
  step(Step::Kind::ConvGradInput, {dy, w, dx}, "graph.conv_grad_input");
  step(Step::Kind::ConvGradWeight, {x, dy, dw}, "graph.conv_grad_weight");
  p.arguments = {x, w, dy};
  p.results = {y, dx, dw};
  return p;
}

/// Random values for every argument of `p`, of type `t`.
static std::vector<HostTensor> randomArguments(const Program &p, DType t, uint64_t seed) {
  std::vector<HostTensor> args;
  for (int b : p.arguments)
    args.push_back(random(t, p.buffers[size_t(b)].shape, seed++));
  return args;
}

static ConvParams convParams(int spatial, std::array<int64_t, 3> in, std::array<int64_t, 3> k,
                             int64_t stride, int64_t pad, int64_t dilation, int64_t groups) {
  ConvParams c;
  c.spatial = spatial, c.batch = 2, c.channels = 4, c.outChannels = 6, c.groups = groups;
  c.input = in, c.kernel = k;
  for (size_t i = 0; i < size_t(spatial); ++i) {
    c.stride[i] = stride, c.padLow[i] = c.padHigh[i] = pad, c.dilation[i] = dilation;
    c.output[i] = (in[i] + 2 * pad - dilation * (k[i] - 1) - 1) / stride + 1;
  }
  return c;
}

/// A counter of the driver double's cuDNN.
static int64_t fakeCudnnCount(const char *counter) {
  auto f = reinterpret_cast<int64_t (*)()>(
      dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), counter));
  return f ? f() : -1;
}

TEST_F(FakeCuda, ConvolutionsRunThroughCudnnAndMatchTheCpuExecutor) {
  // cuDNN's descriptors, directions, operand order and workspace (the
  // driver double checks each; its deterministic algorithm, offered
  // second, needs a workspace, which must be the step's planned buffer)
  // against the CPU executor's oneDNN, for 2-d (groups, stride, dilation)
  // and 1-d (as 2-d over a height of 1) convolutions; eager, captured and
  // replayed.
  auto cudnnConvolutions = [] { return fakeCudnnCount("tf_fake_cudnn_convolutions"); };
  ASSERT_GE(cudnnConvolutions(), 0);
  for (const ConvParams &c : {convParams(2, {7, 6, 0}, {3, 3, 0}, 2, 1, 1, 2),
                              convParams(2, {9, 8, 0}, {3, 2, 0}, 1, 2, 2, 1),
                              convParams(1, {11, 0, 0}, {4, 0, 0}, 3, 1, 1, 2)}) {
    Program p = convolutionProgram(c, DType::F32);
    std::vector<HostTensor> args = randomArguments(p, DType::F32, 11);
    CpuExecutor cpu(p, {}, nullptr);
    std::vector<HostTensor> want = cpu.run(args);
    CudaExecutor gpu(p, {});
    int64_t before = cudnnConvolutions();
    for (int call = 0; call < 3; ++call) {
      std::vector<HostTensor> got = gpu.run(args);
      for (size_t r = 0; r < got.size(); ++r)
        expectNear(got[r], want[r], 1e-5, p.buffers[p.results[r]].name.c_str());
    }
    EXPECT_EQ(cudnnConvolutions() - before, 6) << "two eager calls' and one capture's 3 steps";
    EXPECT_EQ(gpu.graphsCaptured(), 1);
  }
}

TEST_F(FakeCuda, ConvolutionWorkspacesAreTheMemoryPlansBuffers) {
  // The workspace of each convolution step is a buffer of the plan (live
  // during its step only, so the three share memory) and bounds the
  // algorithm: with room the deterministic algorithm runs in the planned
  // buffer; without a planned workspace, one that needs none.
  ConvParams c = convParams(2, {7, 6, 0}, {3, 3, 0}, 2, 1, 1, 2);
  for (int64_t workspace : {int64_t(4096), int64_t(0)}) {
    Program p = convolutionProgram(c, DType::F32, workspace);
    if (workspace > 0) {
      MemoryPlan plan = planMemory(p, 256);
      std::vector<uint64_t> offsets;
      for (const Step &st : p.steps) {
        int slot = convWorkspaceSlot(st);
        ASSERT_GE(slot, 0);
        offsets.push_back(plan.offsets[size_t(st.buffers[size_t(slot)])]);
      }
      EXPECT_TRUE(offsets[0] == offsets[1] || offsets[1] == offsets[2] ||
                  offsets[0] == offsets[2])
          << "workspaces live one step each share the arena";
    }
    std::vector<HostTensor> args = randomArguments(p, DType::F32, 5);
    std::vector<HostTensor> want = CpuExecutor(p, {}, nullptr).run(args);
    CudaExecutor gpu(p, {});
    int64_t before = fakeCudnnCount("tf_fake_cudnn_workspace_convolutions");
    std::vector<HostTensor> got = gpu.run(args);
    for (size_t r = 0; r < got.size(); ++r)
      expectNear(got[r], want[r], 1e-5, p.buffers[p.results[r]].name.c_str());
    EXPECT_EQ(fakeCudnnCount("tf_fake_cudnn_workspace_convolutions") - before,
              workspace > 0 ? 3 : 0);
  }
  // A workspace buffer that is not i1 bytes is a corrupt program.
  Program bad = convolutionProgram(c, DType::F32);
  bad.buffers[size_t(bad.steps[0].buffers[3])].dtype = DType::F32;
  EXPECT_THROW(bad.validate(), CompileError);
}

TEST_F(FakeCuda, HalfConvolutionsRunThroughCudnn) {
  ConvParams c = convParams(2, {6, 5, 0}, {3, 3, 0}, 1, 1, 1, 1);
  Program p = convolutionProgram(c, DType::BF16);
  std::vector<HostTensor> args = randomArguments(p, DType::BF16, 21);
  CpuExecutor cpu(p, {}, nullptr);
  std::vector<HostTensor> want = cpu.run(args);
  CudaExecutor gpu(p, {});
  std::vector<HostTensor> got = gpu.run(args);
  // Both accumulate in f32 or better and round once to bf16: within one
  // bf16 rounding step of values up to ~10.
  for (size_t r = 0; r < got.size(); ++r)
    expectNear(got[r], want[r], 0.07, p.buffers[p.results[r]].name.c_str());
}

TEST_F(FakeCuda, ConvolutionsCudnnCannotRunAreRefusedAtLoadWithTheReason) {
  ConvParams c = convParams(2, {7, 6, 0}, {2, 2, 0}, 1, 0, 1, 1);
  c.padHigh[0] = c.padHigh[1] = 1; // PyTorch's 'same' for an even kernel
  c.output[0] = 7, c.output[1] = 6;
  Program p = convolutionProgram(c, DType::F32);
  int64_t streams = liveStreams();
  try {
    CudaExecutor gpu(p, {});
    FAIL() << "loaded";
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find("graph.conv: pads dimension 0 by 0 before and 1 after, "
                                         "which cuDNN cannot"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(liveStreams(), streams) << "a refused executor gives back its stream";
}
