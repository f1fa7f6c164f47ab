//===- CudaExecutor.cpp ---------------------------------------------------===//
//
// The CUDA headers are used for types and prototypes only; every function
// is looked up in libcuda / libcublas / libcublasLt at run time.
//
// Why one file of ~900 lines: it is one object's lifecycle against one set
// of driver handles (the run-time-loaded function table, then acquire,
// enqueue, launch, read back, release), and the table stays private to it:
// a split would put the dynamically loaded driver API in a header that the
// runtime's other files (which must not touch the driver) could include.
//
//===----------------------------------------------------------------------===//
#include "runtime/CudaExecutor.h"
#include "runtime/CudaAttentionKernels.h"
#include "runtime/Cudnn.h"
#include "runtime/DynamicLibrary.h"
#include "runtime/MemoryPlan.h"
#include "runtime/Nccl.h"

#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include <dlfcn.h>

using namespace tilefuse;

namespace {
/// Why attention step `source` cannot run on CUDA (a CPU program, or one
/// built by hand: the compiler writes such attention out for CUDA).
std::string cudaAttentionTooWide(const std::string &source, int64_t headDim, int64_t valueDim) {
  return source + ": head dimension " + std::to_string(headDim) + " and value dimension " +
         std::to_string(valueDim) + ": the CUDA attention kernels take at most " +
         std::to_string(kCudaAttentionMaxDim) + "; compile the function for the CUDA target " +
         "again (which writes such attention out), or run this program on the CPU";
}

/// Why collective step `source` cannot run: its group of more than one
/// rank has no NCCL communicator.
std::string cudaCollectiveUnbound(const std::string &group, int64_t size) {
  return "process group '" + group + "' (" + std::to_string(size) +
         " ranks) has no NCCL communicator: run the step in each of its processes with the "
         "group bound (tilefuse.distributed binds it), e.g. under torchrun after "
         "torch.distributed.init_process_group()";
}

#define TF_DRIVER_FUNCTIONS(X)                                                                    \
  X(cuInit, "cuInit")                                                                             \
  X(cuDeviceGetCount, "cuDeviceGetCount")                                                         \
  X(cuDeviceGet, "cuDeviceGet")                                                                   \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute")                                                 \
  X(cuDeviceGetName, "cuDeviceGetName")                                                           \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")                                         \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")                                    \
  X(cuCtxSetCurrent, "cuCtxSetCurrent")                                                           \
  X(cuStreamCreate, "cuStreamCreate")                                                             \
  X(cuStreamDestroy, "cuStreamDestroy_v2")                                                        \
  X(cuStreamSynchronize, "cuStreamSynchronize")                                                   \
  X(cuMemAlloc, "cuMemAlloc_v2")                                                                  \
  X(cuMemFree, "cuMemFree_v2")                                                                    \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")                                                    \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")                                                    \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")                                                    \
  X(cuMemsetD8Async, "cuMemsetD8Async")                                                           \
  X(cuModuleLoadData, "cuModuleLoadData")                                                         \
  X(cuModuleUnload, "cuModuleUnload")                                                             \
  X(cuModuleGetFunction, "cuModuleGetFunction")                                                   \
  X(cuLaunchKernel, "cuLaunchKernel")                                                             \
  X(cuFuncSetAttribute, "cuFuncSetAttribute")                                                     \
  X(cuStreamBeginCapture, "cuStreamBeginCapture_v2")                                              \
  X(cuStreamEndCapture, "cuStreamEndCapture")                                                     \
  X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags")                                   \
  X(cuGraphLaunch, "cuGraphLaunch")                                                               \
  X(cuGraphExecDestroy, "cuGraphExecDestroy")                                                     \
  X(cuGraphDestroy, "cuGraphDestroy")                                                             \
  X(cuEventCreate, "cuEventCreate")                                                               \
  X(cuEventDestroy, "cuEventDestroy_v2")                                                          \
  X(cuEventRecord, "cuEventRecord")                                                               \
  X(cuStreamWaitEvent, "cuStreamWaitEvent")                                                       \
  X(cuGetErrorString, "cuGetErrorString")

#define TF_CUBLAS_FUNCTIONS(X)                                                                    \
  X(cublasCreate_v2, "cublasCreate_v2")                                                           \
  X(cublasDestroy_v2, "cublasDestroy_v2")                                                         \
  X(cublasSetStream_v2, "cublasSetStream_v2")                                                     \
  X(cublasSetWorkspace_v2, "cublasSetWorkspace_v2")

#define TF_CUBLASLT_FUNCTIONS(X)                                                                  \
  X(cublasLtCreate, "cublasLtCreate")                                                             \
  X(cublasLtDestroy, "cublasLtDestroy")                                                           \
  X(cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate")                                         \
  X(cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy")                                       \
  X(cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute")                             \
  X(cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate")                                     \
  X(cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy")                                   \
  X(cublasLtMatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute")                         \
  X(cublasLtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate")                             \
  X(cublasLtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy")                           \
  X(cublasLtMatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute")                 \
  X(cublasLtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic")                             \
  X(cublasLtMatmul, "cublasLtMatmul")

/// The driver, cuBLAS and cuBLASLt entry points, loaded once per process.
struct Api {
#define TF_DECLARE(fn, symbol) decltype(&::fn) fn = nullptr;
  TF_DRIVER_FUNCTIONS(TF_DECLARE)
  TF_CUBLAS_FUNCTIONS(TF_DECLARE)
  TF_CUBLASLT_FUNCTIONS(TF_DECLARE)
#undef TF_DECLARE
  // Overloaded in C++ by the header: spelled out.
  cublasStatus_t (*cublasGemmStridedBatchedEx)(
      cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
      const void *, cudaDataType, int, long long, const void *, cudaDataType, int, long long,
      const void *, void *, cudaDataType, int, long long, int, cublasComputeType_t,
      cublasGemmAlgo_t) = nullptr;
  std::string unavailable; ///< why CUDA cannot be used, or ""

  static Api &get() {
    static Api api;
    return api;
  }

private:
  Api() { unavailable = load(); }

  std::string load() {
    void *cuda = openLibrary({"libcuda.so.1", "libcuda.so"}); // the driver: never a toolkit's
    if (!cuda)
      return "no NVIDIA driver (libcuda.so.1 cannot be loaded)";
    std::string missing;
#define TF_LOAD(lib, fn, symbol)                                                                  \
  fn = reinterpret_cast<decltype(fn)>(dlsym(lib, symbol));                                        \
  if (!fn)                                                                                        \
    missing += std::string(missing.empty() ? "" : ", ") + symbol;
#define TF_LOAD_DRIVER(fn, symbol) TF_LOAD(cuda, fn, symbol)
    TF_DRIVER_FUNCTIONS(TF_LOAD_DRIVER)
    if (!missing.empty())
      return "the NVIDIA driver is too old (libcuda.so.1 lacks " + missing + ")";
    if (CUresult rc = cuInit(0))
      return "the NVIDIA driver failed to initialise (CUDA error " + std::to_string(int(rc)) +
             ")";
    int n = 0;
    if (cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0)
      return "the NVIDIA driver sees no GPU";
    void *cublas = openLibrary({"libcublas.so.13", "libcublas.so.12", "libcublas.so"},
                               cudaLibraryFolders());
    void *cublasLt = openLibrary({"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"},
                                 cudaLibraryFolders());
    if (!cublas || !cublasLt)
      return "cuBLAS is not installed (libcublas.so / libcublasLt.so cannot be loaded; they "
             "come with the CUDA toolkit: add its lib64 folder to LD_LIBRARY_PATH)";
#define TF_LOAD_CUBLAS(fn, symbol) TF_LOAD(cublas, fn, symbol)
#define TF_LOAD_CUBLASLT(fn, symbol) TF_LOAD(cublasLt, fn, symbol)
    TF_CUBLAS_FUNCTIONS(TF_LOAD_CUBLAS)
    TF_LOAD(cublas, cublasGemmStridedBatchedEx, "cublasGemmStridedBatchedEx")
    TF_CUBLASLT_FUNCTIONS(TF_LOAD_CUBLASLT)
    if (!missing.empty())
      return "cuBLAS lacks " + missing;
    return "";
#undef TF_LOAD
#undef TF_LOAD_DRIVER
#undef TF_LOAD_CUBLAS
#undef TF_LOAD_CUBLASLT
  }
};

Api &api() {
  Api &a = Api::get();
  if (!a.unavailable.empty())
    throw CompileError("CUDA is not available: " + a.unavailable);
  return a;
}

void check(CUresult rc, const std::string &what) {
  if (rc == CUDA_SUCCESS)
    return;
  const char *text = nullptr;
  if (Api::get().cuGetErrorString)
    Api::get().cuGetErrorString(rc, &text);
  throw CompileError("CUDA: " + what + " failed: " + (text ? text : "error") + " (" +
                     std::to_string(int(rc)) + ")");
}

void check(cublasStatus_t rc, const std::string &what) {
  if (rc != CUBLAS_STATUS_SUCCESS)
    throw CompileError("cuBLAS: " + what + " failed with status " + std::to_string(int(rc)));
}

cudaDataType_t cudaType(DType t, const std::string &what) {
  switch (t) {
  case DType::F32: return CUDA_R_32F;
  case DType::F64: return CUDA_R_64F;
  case DType::F16: return CUDA_R_16F;
  case DType::BF16: return CUDA_R_16BF;
  default:
    throw CompileError(what + ": no GPU GEMM for " + dtypeName(t));
  }
}

/// f64 GEMMs accumulate in f64, the others in f32 (inputs rounded to tf32
/// only when asked).
cublasComputeType_t computeType(DType t, bool tf32) {
  if (t == DType::F64)
    return CUBLAS_COMPUTE_64F;
  return tf32 && t == DType::F32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

constexpr uint64_t kAlign = 256;
constexpr size_t kGemmWorkspace = size_t(32) << 20;

uint64_t alignUp(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

/// cuBLASLt objects of one GEMM step with an epilogue, made once.
struct LtGemm {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  /// For operands at 256-byte aligned addresses (the arena's), and for any
  /// element-aligned ones (a caller's tensor view at an offset): cuBLASLt
  /// picks algorithms assuming the alignment it is told.
  cublasLtMatmulAlgo_t algo{}, algoAnyAlignment{};
  bool hasAnyAlignment = false;
};

} // namespace

struct CudaExecutor::State {
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  CUdeviceptr arena = 0;
  uint64_t workspace = 0; ///< GEMM workspace, in the arena
  uint64_t errorWord = 0; ///< two u64: what failed, the bad index
  uint64_t scratch = 0;   ///< f32 accumulator of f16/bf16 scatter-adds
  std::vector<CUmodule> modules;
  std::vector<CUfunction> kernels; ///< per Program kernel
  std::map<std::string, CUfunction> library;
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  std::map<size_t, LtGemm> ltGemms; ///< by step index
  /// Captured graphs by the buffer addresses they were captured with.
  std::map<std::vector<uint64_t>, CUgraphExec> graphs;
  std::vector<std::vector<uint64_t>> graphOrder; ///< oldest first
  std::set<std::vector<uint64_t>> eagerOnce; ///< addresses run once, not captured yet
  std::string name;
  // Collectives run on a stream of their own, forked from and joined to
  // the main one with events at their start and wait steps (a CUDA graph
  // captures the fork and join too), so the steps between overlap them.
  CUstream commStream = nullptr;
  std::map<int32_t, std::pair<CUevent, CUevent>> events; ///< ticket -> (fork, join)
  std::vector<std::shared_ptr<nccl::Comm>> comms;        ///< by process group
  // Convolutions: cuDNN on the main stream, each step's workspace a
  // buffer of the memory plan (convWorkspaceSlot).
  std::unique_ptr<cudnn::Handle> dnn;
  std::map<size_t, std::unique_ptr<cudnn::Conv>> convs; ///< by step index
};

std::string tilefuse::cudaUnavailableReason() { return Api::get().unavailable; }

std::string tilefuse::cudaDeviceArch(int device) {
  Api &a = api();
  CUdevice d = 0;
  check(a.cuDeviceGet(&d, device), "selecting GPU " + std::to_string(device));
  int major = 0, minor = 0;
  check(a.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d),
        "reading the compute capability");
  check(a.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d),
        "reading the compute capability");
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

CudaExecutor::CudaExecutor(Program program,
                           const std::vector<std::pair<std::string, std::string>> &cubins,
                           CudaOptions opts)
    : prog(std::move(program)), options(opts), state(std::make_unique<State>()) {
  try {
    acquire(cubins);
  } catch (...) {
    // A refused executor (no cubin, a bad one, a kernel without threads)
    // gives back the stream, modules and handles it took.
    releaseResources();
    throw;
  }
}

void CudaExecutor::acquire(const std::vector<std::pair<std::string, std::string>> &cubins) {
  prog.validate();
  Api &a = api();
  State &s = *state;
  check(a.cuDeviceGet(&s.device, options.device), "selecting GPU " + std::to_string(options.device));
  char name[256] = {0};
  a.cuDeviceGetName(name, sizeof(name), s.device);
  s.name = name;
  // The primary context: the one the CUDA runtime, cuBLAS and frameworks
  // such as PyTorch use, so device pointers pass between them.
  check(a.cuDevicePrimaryCtxRetain(&s.context, s.device), "retaining the primary context");
  check(a.cuCtxSetCurrent(s.context), "making the context current");
  check(a.cuStreamCreate(&s.stream, CU_STREAM_NON_BLOCKING), "creating a stream");

  // Kernels.
  std::map<std::string, const std::string *> blobs;
  for (const auto &[n, bytes] : cubins)
    blobs[n] = &bytes;
  std::map<std::string, CUmodule> loaded; // each cubin once, however many kernels use it
  auto load = [&](const std::string &blob) {
    auto it = loaded.find(blob);
    if (it != loaded.end())
      return it->second;
    CUmodule m = nullptr;
    check(a.cuModuleLoadData(&m, blobs.at(blob)->data()),
          "loading the cubin of " + blob +
              " (a cubin built for another GPU architecture is refused here; recompile "
              "for this GPU's sm_XX)");
    s.modules.push_back(m);
    loaded[blob] = m;
    return m;
  };
  // A repeated kernel's blob names the kernel whose code it shares.
  auto resolve = [&](const std::string &symbol) {
    const std::string &bytes = *blobs.at(symbol);
    size_t n = std::strlen(kCudaAliasPrefix);
    if (bytes.compare(0, n, kCudaAliasPrefix) != 0)
      return symbol;
    std::string target = bytes.substr(n);
    if (!blobs.count(target) || blobs.at(target)->compare(0, n, kCudaAliasPrefix) == 0)
      throw CompileError("CUDA executor: kernel " + symbol + " shares the code of " + target +
                         ", which has none");
    return target;
  };
  std::vector<std::string> symbols = kernelSymbols(prog);
  for (size_t i = 0; i < prog.kernels.size(); ++i) {
    const ProgramKernel &k = prog.kernels[i];
    const std::string &symbol = symbols[i];
    if (!blobs.count(symbol))
      throw CompileError("CUDA executor: no cubin for kernel " + symbol + " (" + k.name +
                         "; the step that launches it does not match the compiled code)");
    if (k.threads <= 0 || k.threads > 1024)
      throw CompileError("CUDA executor: kernel " + k.name + " has " +
                         std::to_string(k.threads) + " threads per block (compiled for a CPU?)");
    CUfunction f = nullptr;
    std::string code = resolve(symbol);
    check(a.cuModuleGetFunction(&f, load(code), code.c_str()), "finding kernel " + symbol);
    s.kernels.push_back(f);
  }
  bool needsAttention = false;
  for (size_t i = 0; i < prog.steps.size(); ++i) {
    const Step &st = prog.steps[i];
    if (isConvolution(st)) {
      if (!s.dnn)
        s.dnn = std::make_unique<cudnn::Handle>(s.stream);
      int slot = convWorkspaceSlot(st);
      size_t limit = slot >= 0 ? prog.buffers[size_t(st.buffers[size_t(slot)])].byteSize() : 0;
      s.convs[i] =
          std::make_unique<cudnn::Conv>(*s.dnn, st, prog.buffers[st.buffers[2]].dtype, limit);
    } else if (st.kind == Step::Kind::Attention || st.kind == Step::Kind::AttentionGrad) {
      CudaAttentionVariant v = cudaAttentionVariant(prog, st);
      if (!cudaAttentionTakes(v.element))
        throw CompileError(st.source + ": the CUDA attention kernels take f32, bf16 or f16, "
                           "got " + dtypeName(v.element) + "; compile the function for the "
                           "CUDA target again");
      if (!v.tiles)
        throw CompileError(cudaAttentionTooWide(st.source, st.attention.headDim,
                                                st.attention.valueDim));
      needsAttention = true;
    }
  }
  if (needsAttention) {
    if (!blobs.count(kCudaAttentionBlob))
      throw CompileError("CUDA executor: the program has attention steps but no " +
                         std::string(kCudaAttentionBlob) + " cubin");
    CUmodule m = load(kCudaAttentionBlob);
    int optIn = 0; // the most shared memory a block may opt into
    check(a.cuDeviceGetAttribute(&optIn, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                 s.device),
          "reading the device's shared memory per block");
    // The kernels the steps launch (an inference program only forwards,
    // whose tiles are the smallest), each once.
    std::set<std::string> launched;
    for (const Step &st : prog.steps) {
      if (st.kind != Step::Kind::Attention && st.kind != Step::Kind::AttentionGrad)
        continue;
      CudaAttentionVariant v = cudaAttentionVariant(prog, st);
      std::vector<const char *> kernels = {"forward"};
      if (st.kind == Step::Kind::AttentionGrad)
        kernels = {"key_grads", "query_grads"};
      for (const char *kernel : kernels) {
        std::string fn = cudaAttentionKernel(kernel, v);
        if (!launched.insert(fn).second)
          continue;
        CUfunction f = nullptr;
        check(a.cuModuleGetFunction(&f, m, fn.c_str()), "finding attention kernel " + fn);
        // Tiles past the default 48 KiB need the kernel's opt-in (once
        // per function, before its first launch).
        int64_t bytes = cudaAttentionSharedBytes(kernel, *v.tiles, v.element);
        if (bytes > optIn)
          throw CompileError("attention kernel " + fn + " needs " + std::to_string(bytes) +
                             " bytes of shared memory per block; " + s.name + " allows " +
                             std::to_string(optIn) + ": heads of up to " +
                             std::to_string(v.tiles->maxDim) + " do not run on this GPU; "
                             "compile the function for its architecture (cuda:sm_XX, which "
                             "writes such attention out), or run it on the CPU");
        if (bytes > kCudaDefaultSharedBytes)
          check(a.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     int(bytes)),
                "letting " + fn + " use " + std::to_string(bytes) + " bytes of shared memory");
        s.library[fn] = f;
      }
    }
  }
  s.comms.assign(prog.groups.size(), nullptr);
  for (const Step &st : prog.steps)
    if (st.kind == Step::Kind::CollectiveStart) {
      if (!s.commStream)
        check(a.cuStreamCreate(&s.commStream, CU_STREAM_NON_BLOCKING),
              "creating the collectives' stream");
      auto &[fork, join] = s.events[st.collective.ticket];
      check(a.cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING), "creating an event");
      check(a.cuEventCreate(&join, CU_EVENT_DISABLE_TIMING), "creating an event");
    }
  for (const Step &st : prog.steps)
    if (st.kind == Step::Kind::Sort)
      throw CompileError("CUDA executor: " + st.source + " is a CPU library step (no CUDA sort "
                         "kernel yet); run the program on the CPU");
  for (const Step &st : prog.steps)
    if (st.kind == Step::Kind::GroupedGemm)
      // Its groups' sizes are data the host would have to read mid-step
      // (no CUDA graph could hold that): fusion for CUDA writes grouped
      // products as dense ones, so only a CPU program has this step.
      throw CompileError("CUDA executor: " + st.source +
                         " is a grouped GEMM step, which runs on the CPU only; compile the "
                         "program for the CUDA target (it writes grouped products as dense "
                         "ones)");
  for (const Step &st : prog.steps)
    if (isConvolution(st) && st.conv.channelsLast)
      // Fusion chooses channels-last activations for the CPU's library
      // only; cuDNN is given the channels-first ones.
      throw CompileError("CUDA executor: " + st.source +
                         " is a channels-last convolution, which runs on the CPU only; "
                         "compile the program for the CUDA target");
  bool needsLibrary = std::any_of(prog.steps.begin(), prog.steps.end(), [](const Step &st) {
    return st.kind == Step::Kind::Gather || st.kind == Step::Kind::ScatterAdd;
  });
  if (needsLibrary) {
    if (!blobs.count(kCudaLibraryBlob))
      throw CompileError("CUDA executor: the program gathers or scatters but has no " +
                         std::string(kCudaLibraryBlob) + " cubin");
    CUmodule m = load(kCudaLibraryBlob);
    for (const char *fn : kCudaLibraryKernels) {
      CUfunction f = nullptr;
      check(a.cuModuleGetFunction(&f, m, fn), std::string("finding library kernel ") + fn);
      s.library[fn] = f;
    }
  }

  // One allocation: the planned arena (buffers by liveness), a slot per
  // argument for host data (and a persistent argument's value, which must
  // outlive every call), the GEMM workspace, the error word, the
  // scatter-add scratch.
  if (prog.plan.empty())
    prog.plan = planMemory(prog, kAlign);
  checkMemoryPlan(prog, prog.plan, kAlign);
  if (poisonArenaRequested())
    poison = poisonSchedule(prog);
  std::vector<uint64_t> offsets = prog.plan.offsets;
  uint64_t size = prog.plan.bytes;
  for (int b : prog.arguments) {
    offsets[b] = size;
    size = alignUp(size + std::max<uint64_t>(1, prog.buffers[b].byteSize()));
  }
  uint64_t workspace = size;
  size = alignUp(size + kGemmWorkspace);
  uint64_t errorWord = size;
  size = alignUp(size + 16);
  uint64_t scratchBytes = 0;
  for (const Step &st : prog.steps)
    if (st.kind == Step::Kind::ScatterAdd) {
      DType t = prog.buffers[st.buffers[0]].dtype;
      if (t == DType::F16 || t == DType::BF16)
        scratchBytes = std::max<uint64_t>(
            scratchBytes, uint64_t(numElements(prog.buffers[st.buffers[0]].shape)) * 4);
    }
  uint64_t scratch = size;
  size = alignUp(size + scratchBytes);
  check(a.cuMemAlloc(&s.arena, size),
        "allocating " + std::to_string(size >> 20) + " MiB of GPU memory for the program");
  s.workspace = s.arena + workspace;
  s.errorWord = s.arena + errorWord;
  s.scratch = s.arena + scratch;
  pointers.resize(prog.buffers.size());
  for (size_t b = 0; b < prog.buffers.size(); ++b) {
    pointers[b] = s.arena + offsets[b];
    const BufferInfo &info = prog.buffers[b];
    if (info.role != BufferInfo::Role::Constant || info.data.empty())
      continue;
    bool oneByte = info.splat && std::all_of(info.data.begin(), info.data.end(),
                                             [&](uint8_t v) { return v == info.data[0]; });
    if (oneByte) { // zeros and other fills of one repeated byte
      check(a.cuMemsetD8Async(pointers[b], info.data[0], info.byteSize(), s.stream),
            "filling constant " + info.name);
      continue;
    }
    std::vector<uint8_t> bytes = info.expandedData();
    check(a.cuMemcpyHtoDAsync(pointers[b], bytes.data(), bytes.size(), s.stream),
          "uploading constant " + info.name);
    check(a.cuStreamSynchronize(s.stream), "uploading constant " + info.name);
  }
  kept.assign(prog.arguments.size(), 0);
  for (size_t i = 0; i < prog.arguments.size(); ++i)
    written.push_back(prog.writesArgument(i));
  for (int b : prog.arguments)
    slots.push_back(pointers[b]);
  hostResults.resize(prog.results.size());
  resultFresh.assign(prog.results.size(), false);
  hostPersistent.resize(prog.arguments.size());
  persistentFresh.assign(prog.arguments.size(), false);

  // cuBLAS on our stream with a fixed workspace (what graph capture needs).
  check(a.cublasCreate_v2(&s.blas), "creating a handle");
  check(a.cublasSetStream_v2(s.blas, reinterpret_cast<cudaStream_t>(s.stream)), "setting the stream");
  check(a.cublasSetWorkspace_v2(s.blas, reinterpret_cast<void *>(s.workspace), kGemmWorkspace),
        "setting the workspace");
  check(a.cublasLtCreate(&s.lt), "creating a cuBLASLt handle");
  for (size_t i = 0; i < prog.steps.size(); ++i) {
    const Step &st = prog.steps[i];
    if (st.kind != Step::Kind::Gemm || st.epilogue.empty())
      continue;
    // Row-major C = A B is column-major C^T = B^T A^T: cuBLASLt's "A" is
    // our B. The bias runs along our columns, cuBLASLt's rows.
    DType t = prog.buffers[st.buffers[2]].dtype;
    cudaDataType_t dt = cudaType(t, st.source);
    cublasComputeType_t compute = computeType(t, options.tf32);
    cudaDataType_t scale = t == DType::F64 ? CUDA_R_64F : CUDA_R_32F;
    LtGemm g;
    check(a.cublasLtMatmulDescCreate(&g.desc, compute, scale), "creating a matmul descriptor");
    cublasOperation_t opB = st.transposeB ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opA = st.transposeA ? CUBLAS_OP_T : CUBLAS_OP_N;
    check(a.cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opB, sizeof(opB)),
          "setting TRANSA");
    check(a.cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opA, sizeof(opA)),
          "setting TRANSB");
    bool bias = std::count(st.epilogue.begin(), st.epilogue.end(), "bias") > 0;
    bool relu = std::count(st.epilogue.begin(), st.epilogue.end(), "relu") > 0;
    cublasLtEpilogue_t epi = bias && relu ? CUBLASLT_EPILOGUE_RELU_BIAS
                             : bias       ? CUBLASLT_EPILOGUE_BIAS
                                          : CUBLASLT_EPILOGUE_RELU;
    check(a.cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
          "setting the epilogue");
    // Column-major shapes of the operands as stored.
    uint64_t rowsB = st.transposeB ? st.k : st.n, colsB = st.transposeB ? st.n : st.k;
    uint64_t rowsA = st.transposeA ? st.m : st.k, colsA = st.transposeA ? st.k : st.m;
    auto layout = [&](cublasLtMatrixLayout_t *l, uint64_t rows, uint64_t cols) {
      check(a.cublasLtMatrixLayoutCreate(l, dt, rows, cols, int64_t(rows)), "creating a layout");
      int32_t batch = int32_t(st.batch);
      int64_t stride = int64_t(rows * cols);
      check(a.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                               sizeof(batch)),
            "setting the batch");
      check(a.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                               &stride, sizeof(stride)),
            "setting the batch stride");
    };
    layout(&g.a, rowsB, colsB);
    layout(&g.b, rowsA, colsA);
    layout(&g.c, uint64_t(st.n), uint64_t(st.m));
    cublasLtMatmulPreference_t pref = nullptr;
    check(a.cublasLtMatmulPreferenceCreate(&pref), "creating a preference");
    size_t ws = kGemmWorkspace;
    check(a.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof(ws)),
          "setting the workspace limit");
    auto choose = [&](uint32_t alignment, cublasLtMatmulAlgo_t &algo) {
      for (auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                             CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                             CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                             CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        check(a.cublasLtMatmulPreferenceSetAttribute(pref, attribute, &alignment,
                                                     sizeof(alignment)),
              "setting the operands' alignment");
      cublasLtMatmulHeuristicResult_t found{};
      int count = 0;
      check(a.cublasLtMatmulAlgoGetHeuristic(s.lt, g.desc, g.a, g.b, g.c, g.c, pref, 1, &found,
                                             &count),
            "choosing an algorithm for " + st.source);
      algo = found.algo;
      return count > 0;
    };
    if (!choose(uint32_t(kAlign), g.algo))
      throw CompileError("cuBLASLt has no algorithm for " + st.source + " with epilogue");
    g.hasAnyAlignment = choose(uint32_t(dtypeSize(t)), g.algoAnyAlignment);
    a.cublasLtMatmulPreferenceDestroy(pref);
    s.ltGemms[i] = g;
  }
  seconds.assign(prog.steps.size(), 0.0);
  check(a.cuStreamSynchronize(s.stream), "uploading constants");
}

CudaExecutor::~CudaExecutor() { releaseResources(); }

void CudaExecutor::releaseResources() noexcept {
  Api &a = Api::get();
  State &s = *state;
  // Another executor (or the caller) may have made another context current
  // on this thread: everything below belongs to this one.
  if (s.context)
    a.cuCtxSetCurrent(s.context);
  if (s.stream)
    a.cuStreamSynchronize(s.stream);
  for (auto &[key, exec] : s.graphs)
    a.cuGraphExecDestroy(exec);
  for (auto &[i, g] : s.ltGemms) {
    a.cublasLtMatrixLayoutDestroy(g.a);
    a.cublasLtMatrixLayoutDestroy(g.b);
    a.cublasLtMatrixLayoutDestroy(g.c);
    a.cublasLtMatmulDescDestroy(g.desc);
  }
  if (s.lt)
    a.cublasLtDestroy(s.lt);
  s.convs.clear();
  s.dnn.reset();
  if (s.blas)
    a.cublasDestroy_v2(s.blas);
  if (s.commStream)
    a.cuStreamSynchronize(s.commStream);
  s.comms.clear();
  for (auto &[ticket, pair] : s.events) {
    if (pair.first)
      a.cuEventDestroy(pair.first);
    if (pair.second)
      a.cuEventDestroy(pair.second);
  }
  if (s.commStream)
    a.cuStreamDestroy(s.commStream);
  for (CUmodule m : s.modules)
    a.cuModuleUnload(m);
  if (s.arena)
    a.cuMemFree(s.arena);
  if (s.stream)
    a.cuStreamDestroy(s.stream);
  if (s.context) {
    a.cuCtxSetCurrent(nullptr);
    a.cuDevicePrimaryCtxRelease(s.device);
    s.context = nullptr;
  }
}

std::string CudaExecutor::device() const {
  return "cuda:" + std::to_string(options.device) + " (" + state->name + ")";
}

void *CudaExecutor::stream() const { return state->stream; }

void CudaExecutor::makePersistent(size_t argument, const void *initial) {
  std::lock_guard<std::mutex> lock(runMutex);
  if (argument >= prog.arguments.size())
    throw CompileError("no argument " + std::to_string(argument) + " to keep");
  const BufferInfo &info = prog.buffers[prog.arguments[argument]];
  Api &a = api();
  check(a.cuCtxSetCurrent(state->context), "making the context current");
  if (!kept[argument])
    kept[argument] = pointers[prog.arguments[argument]];
  check(a.cuMemcpyHtoDAsync(kept[argument], initial, info.byteSize(), state->stream),
        "copying argument " + std::to_string(argument) + " to the GPU");
  check(a.cuStreamSynchronize(state->stream), "copying a persistent argument");
  persistentFresh[argument] = false;
}

void CudaExecutor::carry(size_t result, size_t argument) {
  std::lock_guard<std::mutex> lock(runMutex);
  prog.checkCarry(result, argument);
  if (!kept[argument])
    throw CompileError("carry: result " + std::to_string(result) + " -> argument " +
                       std::to_string(argument) + " needs a persistent argument");
  carries.emplace_back(result, argument);
}

uint64_t CudaExecutor::resultPointer(size_t i) const {
  for (auto [result, argument] : carries)
    if (result == i)
      return kept[argument];
  return pointers.at(prog.results.at(i));
}

const void *CudaExecutor::result(size_t i) {
  if (i >= prog.results.size())
    throw CompileError("no result " + std::to_string(i));
  if (!resultFresh[i]) {
    const BufferInfo &info = prog.buffers[prog.results[i]];
    hostResults[i].resize(info.byteSize());
    Api &a = api();
    check(a.cuCtxSetCurrent(state->context), "making the context current");
    check(a.cuMemcpyDtoHAsync(hostResults[i].data(), resultPointer(i), info.byteSize(),
                              state->stream),
          "copying result " + std::to_string(i) + " from the GPU");
    check(a.cuStreamSynchronize(state->stream), "copying a result");
    resultFresh[i] = true;
  }
  return hostResults[i].data();
}

void *CudaExecutor::deviceResult(size_t i) {
  if (i >= prog.results.size())
    throw CompileError("no result " + std::to_string(i));
  return reinterpret_cast<void *>(resultPointer(i));
}

std::shared_ptr<void> CudaExecutor::copyResult(size_t i) {
  const BufferInfo &info = prog.buffers[prog.results.at(i)];
  Api &a = api();
  check(a.cuCtxSetCurrent(state->context), "making the context current");
  CUdeviceptr p = 0;
  check(a.cuMemAlloc(&p, std::max<size_t>(1, info.byteSize())), "allocating a result");
  check(a.cuMemcpyDtoDAsync(p, resultPointer(i), info.byteSize(), state->stream),
        "copying a result");
  check(a.cuStreamSynchronize(state->stream), "copying a result");
  // The copy may outlive this executor: it holds its own reference to the
  // primary context, and is freed on whatever thread drops the last
  // reference to it, with the context made current there first.
  CUcontext context = nullptr;
  CUdevice device = state->device;
  check(a.cuDevicePrimaryCtxRetain(&context, device), "retaining the primary context");
  return std::shared_ptr<void>(reinterpret_cast<void *>(p), [context, device](void *q) {
    Api &api = Api::get();
    api.cuCtxSetCurrent(context);
    api.cuMemFree(CUdeviceptr(q));
    api.cuCtxSetCurrent(nullptr);
    api.cuDevicePrimaryCtxRelease(device);
  });
}

const void *CudaExecutor::persistent(size_t argument) {
  if (argument >= kept.size() || !kept[argument])
    return nullptr;
  if (!persistentFresh[argument]) {
    const BufferInfo &info = prog.buffers[prog.arguments[argument]];
    hostPersistent[argument].resize(info.byteSize());
    Api &a = api();
    check(a.cuCtxSetCurrent(state->context), "making the context current");
    check(a.cuMemcpyDtoHAsync(hostPersistent[argument].data(), kept[argument], info.byteSize(),
                              state->stream),
          "copying a persistent argument from the GPU");
    check(a.cuStreamSynchronize(state->stream), "copying a persistent argument");
    persistentFresh[argument] = true;
  }
  return hostPersistent[argument].data();
}

void CudaExecutor::setCommunicator(const std::string &, std::shared_ptr<Communicator>) {
  throw CompileError("a GPU program's collectives run on NCCL: bind its group with "
                     "setNcclCommunicator (tilefuse.distributed.bind does)");
}

void CudaExecutor::setProfiling(bool on) {
  profiling = on;
  seconds.assign(prog.steps.size(), 0.0);
  calls = 0;
}

namespace {
/// Launches `f` over `grid` blocks of `threads` with the given arguments
/// and `sharedBytes` of dynamic shared memory per block.
void launch(CUfunction f, int64_t grid, int64_t threads, CUstream stream,
            std::vector<void *> &params, const std::string &what, int64_t sharedBytes = 0) {
  if (grid < 1 || grid > INT32_MAX)
    throw CompileError("CUDA executor: " + what + " needs " + std::to_string(grid) +
                       " blocks, more than a launch allows");
  check(api().cuLaunchKernel(f, unsigned(grid), 1, 1, unsigned(threads), 1, 1,
                             unsigned(sharedBytes), stream, params.data(), nullptr),
        "launching " + what);
}
} // namespace

/// graph.attention: the forward kernel over (batch x heads x query tiles);
/// graph.attention_grad: dK and dV over (batch x kv heads x key tiles),
/// then dQ over (batch x heads x query tiles). Sizes were validated at load.
void CudaExecutor::enqueueAttention(const Step &st) {
  const AttentionParams &p = st.attention;
  const CudaAttentionVariant variant = cudaAttentionVariant(prog, st);
  const CudaAttentionTiles &tiles = *variant.tiles;
  AttentionSlots slots = attentionSlots(st);
  auto at = [&](size_t slot) { return pointers[st.buffers[slot]]; };
  bool grad = st.kind == Step::Kind::AttentionGrad;
  CudaAttentionArgs args{};
  args.q = at(0), args.k = at(1), args.v = at(2);
  args.mask = slots.mask >= 0 ? at(size_t(slots.mask)) : 0;
  args.seed = slots.seed >= 0 ? at(size_t(slots.seed)) : 0;
  size_t first = slots.firstOutput;
  if (grad) {
    args.out = at(3), args.lse = at(4), args.dOut = at(5);
    args.dq = at(first), args.dk = at(first + 1), args.dv = at(first + 2);
  } else {
    args.out = at(first), args.lse = at(first + 1);
  }
  args.batch = st.batch, args.heads = p.heads, args.kvHeads = p.kvHeads;
  args.queries = p.queries, args.keys = p.keys, args.headDim = p.headDim;
  args.valueDim = p.valueDim, args.causal = p.causal, args.maskKind = p.mask;
  args.maskBatchStride = p.maskBatchStride, args.maskHeadStride = p.maskHeadStride;
  args.stream = p.stream, args.scale = p.scale, args.dropoutP = p.dropoutP;
  std::vector<void *> params = {&args};
  auto tilesOf = [](int64_t n, int rows) { return (n + rows - 1) / rows; };
  auto run = [&](const char *kernel, int64_t heads, int64_t n, int rows) {
    int64_t grid = st.batch * heads * tilesOf(n, rows);
    if (grid > 0) // nothing to compute or write for empty tensors
      launch(state->library.at(cudaAttentionKernel(kernel, variant)), grid,
             kCudaAttentionThreads, state->stream, params, st.source,
             cudaAttentionSharedBytes(kernel, tiles, variant.element));
  };
  if (!grad) {
    run("forward", p.heads, p.queries, tiles.forwardRows);
    return;
  }
  run("key_grads", p.kvHeads, p.keys, tiles.keyGradKeys);
  run("query_grads", p.heads, p.queries, tiles.queryGradRows);
}

/// A group of one: the input, copied where the output is its own buffer.
/// More ranks: NCCL on the collectives' stream between a fork from the main
/// stream (the start) and a join back into it (the wait).
void CudaExecutor::enqueueCollective(const Step &st) {
  Api &a = api();
  State &s = *state;
  const CollectiveParams &c = st.collective;
  const ProcessGroup &group = prog.groups[size_t(c.group)];
  uint64_t in = pointers[size_t(st.buffers.front())], out = pointers[size_t(st.buffers.back())];
  const BufferInfo &inInfo = prog.buffers[size_t(st.buffers.front())];
  const BufferInfo &outInfo = prog.buffers[size_t(st.buffers.back())];
  if (group.size == 1) {
    if (st.kind == Step::Kind::CollectiveStart && in != out)
      check(a.cuMemcpyDtoDAsync(out, in, outInfo.byteSize(), s.stream), st.source);
    return;
  }
  auto [fork, join] = s.events.at(c.ticket);
  if (st.kind == Step::Kind::CollectiveWait) {
    check(a.cuStreamWaitEvent(s.stream, join, 0), st.source);
    return;
  }
  nccl::Comm *comm = s.comms[size_t(c.group)].get();
  if (!comm)
    throw CompileError(cudaCollectiveUnbound(group.name, group.size));
  check(a.cuEventRecord(fork, s.stream), st.source);
  check(a.cuStreamWaitEvent(s.commStream, fork, 0), st.source);
  comm->enqueue(c, inInfo.dtype, in, out, numElements(inInfo.shape), numElements(outInfo.shape),
                s.commStream);
  check(a.cuEventRecord(join, s.commStream), st.source);
}

void CudaExecutor::setNcclCommunicator(const std::string &group, const std::string &uniqueId,
                                       int64_t rank, int64_t size) {
  std::lock_guard<std::mutex> lock(runMutex);
  for (size_t i = 0; i < prog.groups.size(); ++i) {
    if (prog.groups[i].name != group)
      continue;
    if (size != prog.groups[i].size)
      throw CompileError("process group '" + group + "' has " + std::to_string(size) +
                         " ranks; the program was compiled for " +
                         std::to_string(prog.groups[i].size) +
                         " (compile it again for this world size)");
    check(api().cuCtxSetCurrent(state->context), "making the context current");
    state->comms[i] = std::make_shared<nccl::Comm>(uniqueId, rank, size);
    // Graphs captured before hold no collectives of this communicator.
    for (auto &[key, exec] : state->graphs)
      api().cuGraphExecDestroy(exec);
    state->graphs.clear();
    state->graphOrder.clear();
    state->eagerOnce.clear();
    return;
  }
  throw CompileError("the program has no process group '" + group + "'");
}

void CudaExecutor::enqueueSteps(bool timed) {
  Api &a = api();
  State &s = *state;
  check(a.cuMemsetD8Async(s.errorWord, 0, 16, s.stream), "clearing the error word");
  auto poisonBuffers = [&](const std::vector<int> &dead) {
    for (int b : dead)
      check(a.cuMemsetD8Async(pointers[b], 0xFF, prog.buffers[b].byteSize(), s.stream),
            "poisoning " + prog.buffers[b].name);
  };
  if (!poison.empty())
    poisonBuffers(poison.back());
  std::vector<uint64_t> values;
  std::vector<void *> params;
  auto args = [&](std::initializer_list<uint64_t> v) {
    values.assign(v);
    params.clear();
    for (uint64_t &x : values)
      params.push_back(&x);
  };
  for (size_t index = 0; index < prog.steps.size(); ++index) {
    const Step &st = prog.steps[index];
    auto start = std::chrono::steady_clock::now();
    switch (st.kind) {
    case Step::Kind::Kernel: {
      const ProgramKernel &k = prog.kernels[st.kernel];
      values.clear();
      for (int b : st.buffers)
        values.push_back(pointers[b]);
      params.clear();
      for (uint64_t &x : values)
        params.push_back(&x);
      launch(s.kernels[st.kernel], k.grid, k.threads, s.stream, params, "kernel " + k.name);
      break;
    }
    case Step::Kind::Gemm: {
      DType t = prog.buffers[st.buffers[2]].dtype;
      double oneD = 1, zeroD = 0;
      float oneF = 1, zeroF = 0;
      const void *alpha = t == DType::F64 ? static_cast<const void *>(&oneD) : &oneF;
      const void *beta = t == DType::F64 ? static_cast<const void *>(&zeroD) : &zeroF;
      auto A = reinterpret_cast<const void *>(pointers[st.buffers[0]]);
      auto B = reinterpret_cast<const void *>(pointers[st.buffers[1]]);
      auto C = reinterpret_cast<void *>(pointers[st.buffers[2]]);
      auto lt = s.ltGemms.find(index);
      if (lt != s.ltGemms.end()) {
        LtGemm &g = lt->second;
        if (st.buffers.size() == 4) {
          auto bias = reinterpret_cast<void *>(pointers[st.buffers[3]]);
          check(a.cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                 sizeof(bias)),
                "setting the bias");
        }
        bool aligned = true;
        for (int b : st.buffers)
          aligned &= pointers[b] % kAlign == 0;
        if (!aligned && !g.hasAnyAlignment)
          throw CompileError(st.source + ": an operand is not at a 256-byte aligned address and "
                             "cuBLASLt has no algorithm for that; pass tensors that start at "
                             "aligned addresses (not views at an offset)");
        check(a.cublasLtMatmul(s.lt, g.desc, alpha, B, g.a, A, g.b, beta, C, g.c, C, g.c,
                               aligned ? &g.algo : &g.algoAnyAlignment,
                               reinterpret_cast<void *>(s.workspace), kGemmWorkspace,
                               reinterpret_cast<cudaStream_t>(s.stream)),
              st.source);
        break;
      }
      cudaDataType_t dt = cudaType(t, st.source);
      cublasComputeType_t compute = computeType(t, options.tf32);
      // Row-major C = A B as column-major C^T = B^T A^T.
      int ldb = int(st.transposeB ? st.k : st.n), lda = int(st.transposeA ? st.m : st.k);
      check(a.cublasGemmStridedBatchedEx(
                s.blas, st.transposeB ? CUBLAS_OP_T : CUBLAS_OP_N,
                st.transposeA ? CUBLAS_OP_T : CUBLAS_OP_N, int(st.n), int(st.m), int(st.k), alpha,
                B, dt, ldb, st.k * st.n, A, dt, lda, st.m * st.k, beta, C, dt, int(st.n),
                st.m * st.n, int(st.batch), compute, CUBLAS_GEMM_DEFAULT),
            st.source);
      break;
    }
    case Step::Kind::Gather: {
      const BufferInfo &table = prog.buffers[st.buffers[0]];
      const BufferInfo &idx = prog.buffers[st.buffers[1]];
      int64_t rows = table.shape.empty() ? 1 : table.shape[0];
      int64_t rowBytes = rows ? int64_t(table.byteSize()) / rows : 0;
      int64_t n = numElements(idx.shape);
      if (n == 0)
        break;
      args({pointers[st.buffers[0]], pointers[st.buffers[1]], pointers[st.buffers[2]],
            uint64_t(n), uint64_t(rows), uint64_t(rowBytes), s.errorWord});
      launch(s.library.at(idx.dtype == DType::I32 ? "tf_gather_i32" : "tf_gather_i64"), n, 128,
             s.stream, params, "graph.gather");
      break;
    }
    case Step::Kind::ScatterAdd: {
      const BufferInfo &base = prog.buffers[st.buffers[0]];
      const BufferInfo &idx = prog.buffers[st.buffers[1]];
      int64_t rows = base.shape.empty() ? 1 : base.shape[0];
      int64_t total = numElements(base.shape);
      int64_t rowSize = rows ? total / rows : 0;
      int64_t n = numElements(idx.shape);
      uint64_t out = pointers[st.buffers[3]];
      std::string suffix = idx.dtype == DType::I32 ? "_i32" : "_i64";
      bool half = base.dtype == DType::F16 || base.dtype == DType::BF16;
      std::string narrow = base.dtype == DType::F16 ? "f16" : "bf16";
      uint64_t acc = out;
      if (half) {
        // Accumulate in f32 and round once, as the reference does.
        acc = s.scratch;
        args({pointers[st.buffers[0]], acc, uint64_t(total)});
        launch(s.library.at("tf_widen_" + narrow), (total + 255) / 256, 256, s.stream, params,
               "graph.scatter_add");
      } else if (out != pointers[st.buffers[0]]) {
        check(a.cuMemcpyDtoDAsync(out, pointers[st.buffers[0]], base.byteSize(), s.stream),
              "graph.scatter_add copy");
      }
      if (n > 0) {
        // The table's own type: f32 atomics on an integer table would add
        // the bits as floats.
        std::string fn = std::string("tf_scatter_add_") + dtypeName(base.dtype) + suffix;
        args({acc, pointers[st.buffers[1]], pointers[st.buffers[2]], uint64_t(n), uint64_t(rows),
              uint64_t(rowSize), s.errorWord});
        if (half) // half updates added into the f32 accumulator
          fn = "tf_scatter_add_" + narrow + "_into_f32" + suffix;
        auto f = s.library.find(fn);
        if (f == s.library.end())
          throw CompileError("CUDA executor: no library kernel " + fn);
        launch(f->second, n, 128, s.stream, params, "graph.scatter_add");
      }
      if (half) {
        args({acc, out, uint64_t(total)});
        launch(s.library.at("tf_narrow_" + narrow), (total + 255) / 256, 256, s.stream, params,
               "graph.scatter_add");
      }
      break;
    }
    case Step::Kind::Copy:
      check(a.cuMemcpyDtoDAsync(pointers[st.buffers[1]], pointers[st.buffers[0]],
                                prog.buffers[st.buffers[0]].byteSize(), s.stream),
            "copy for " + st.source);
      break;
    case Step::Kind::Attention:
    case Step::Kind::AttentionGrad:
      enqueueAttention(st);
      break;
    case Step::Kind::Conv:
    case Step::Kind::ConvGradInput:
    case Step::Kind::ConvGradWeight: {
      int slot = convWorkspaceSlot(st);
      s.convs.at(index)->enqueue(pointers[st.buffers[0]], pointers[st.buffers[1]],
                                 pointers[st.buffers[2]],
                                 slot >= 0 ? pointers[st.buffers[size_t(slot)]] : 0);
      break;
    }
    case Step::Kind::CollectiveStart:
    case Step::Kind::CollectiveWait:
      enqueueCollective(st);
      break;
    case Step::Kind::Sort:        // refused at load
    case Step::Kind::GroupedGemm: // refused at load
      throw CompileError("CUDA executor: " + st.source + " is a CPU-only grouped GEMM step");
    }
    if (!poison.empty())
      poisonBuffers(poison[index]);
    if (timed) {
      check(a.cuStreamSynchronize(s.stream), st.source);
      seconds[index] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }
}

void CudaExecutor::launchAll() {
  Api &a = api();
  State &s = *state;
  if (profiling || !options.graphs || !poison.empty()) {
    enqueueSteps(profiling);
    return;
  }
  auto it = s.graphs.find(pointers);
  if (it == s.graphs.end() && !s.eagerOnce.count(pointers)) {
    // The first call with these addresses runs eagerly: libraries load
    // their kernels and choose algorithms outside any capture.
    if (s.eagerOnce.size() >= 16)
      s.eagerOnce.clear();
    s.eagerOnce.insert(pointers);
    enqueueSteps(false);
    return;
  }
  if (it == s.graphs.end()) {
    // Capture once per set of addresses (a training step alternates
    // between two as parameters and their updates swap).
    check(a.cuStreamBeginCapture(s.stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
          "starting a graph capture");
    CUgraph graph = nullptr;
    try {
      enqueueSteps(false);
    } catch (...) {
      a.cuStreamEndCapture(s.stream, &graph);
      if (graph)
        a.cuGraphDestroy(graph);
      throw;
    }
    check(a.cuStreamEndCapture(s.stream, &graph), "ending a graph capture");
    CUgraphExec exec = nullptr;
    CUresult rc = a.cuGraphInstantiateWithFlags(&exec, graph, 0);
    a.cuGraphDestroy(graph);
    check(rc, "instantiating the captured graph");
    if (s.graphs.size() >= 8) {
      a.cuGraphExecDestroy(s.graphs.at(s.graphOrder.front()));
      s.graphs.erase(s.graphOrder.front());
      s.graphOrder.erase(s.graphOrder.begin());
    }
    it = s.graphs.emplace(pointers, exec).first;
    s.graphOrder.push_back(pointers);
    ++captured;
  } else {
    ++replays;
  }
  check(a.cuGraphLaunch(it->second, s.stream), "launching the step graph");
}

void CudaExecutor::runThen(const std::vector<ArgRef> &args, const std::function<void()> &read) {
  std::lock_guard<std::mutex> lock(runMutex);
  Api &a = api();
  State &s = *state;
  if (args.size() != prog.arguments.size())
    throw CompileError("expected " + std::to_string(prog.arguments.size()) +
                       " arguments, got " + std::to_string(args.size()));
  check(a.cuCtxSetCurrent(s.context), "making the context current");
  for (size_t g = 0; g < prog.groups.size(); ++g)
    if (prog.groups[g].size > 1 && !s.comms[g])
      throw CompileError(cudaCollectiveUnbound(prog.groups[g].name, prog.groups[g].size));
  for (size_t i = 0; i < args.size(); ++i) {
    int b = prog.arguments[i];
    if (!args[i].data) {
      if (!kept[i])
        throw CompileError("argument " + std::to_string(i) + " is missing");
      pointers[b] = kept[i];
    } else if (args[i].onDevice && written[i]) {
      // A kernel writes this argument in place: never the caller's tensor.
      uint64_t slot = kept[i] ? kept[i] : slots[i];
      check(a.cuMemcpyDtoDAsync(slot, reinterpret_cast<uint64_t>(args[i].data),
                                prog.buffers[b].byteSize(), s.stream),
            "copying argument " + std::to_string(i));
      pointers[b] = slot;
    } else if (args[i].onDevice) {
      pointers[b] = reinterpret_cast<uint64_t>(args[i].data);
    } else {
      // Host data goes to the argument's own slot in the arena, or, for a
      // persistent argument, replaces its kept value.
      uint64_t slot = kept[i] ? kept[i] : slots[i];
      check(a.cuMemcpyHtoDAsync(slot, args[i].data, prog.buffers[b].byteSize(), s.stream),
            "copying argument " + std::to_string(i) + " to the GPU");
      pointers[b] = slot;
    }
  }
  launchAll();
  if (profiling)
    ++calls;
  for (auto [result, argument] : carries)
    if (prog.results[result] != prog.arguments[argument]) // in place: nothing to swap
      std::swap(pointers[prog.results[result]], kept[argument]);
  uint64_t error[2] = {0, 0};
  check(a.cuMemcpyDtoHAsync(error, s.errorWord, sizeof(error), s.stream), "reading the error word");
  check(a.cuStreamSynchronize(s.stream), "running the program");
  std::fill(resultFresh.begin(), resultFresh.end(), false);
  std::fill(persistentFresh.begin(), persistentFresh.end(), false);
  if (error[0])
    throw CompileError(std::string(error[0] == 1 ? "graph.gather" : "graph.scatter_add") +
                       ": index " + std::to_string(int64_t(error[1])) +
                       " is out of range of the table's rows; the results of this call are "
                       "not valid");
  read();
}
