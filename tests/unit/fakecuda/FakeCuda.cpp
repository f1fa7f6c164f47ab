//===- FakeCuda.cpp - a CUDA driver and cuBLAS that run on the CPU ---------===//
//
// A test double for runtime/CudaExecutor.cpp on machines without a GPU. It
// exports the driver, cuBLAS and cuBLASLt entry points the executor loads
// (with the toolkit headers' prototypes, so a signature mismatch does not
// compile), keeps "device" memory in host memory, and runs "kernels" that
// the test registers as CPU functions under the names the executor looks
// up. Stream capture records work instead of running it; a graph launch
// replays the recording. GEMMs are column-major reference loops with
// cuBLAS's operand conventions, so the executor's row-major mapping is
// checked, not assumed.
//
// The same library is installed as libcuda.so.1, libcublas.so.13,
// libcublasLt.so.13, libnccl.so.2 and libcudnn.so.9 in one folder (tests/CMakeLists.txt);
// the test runs with that folder on LD_LIBRARY_PATH. Its NCCL joins the
// ranks of one process (executors in threads): the k-th collective of
// every rank of a communicator meets the others' k-th.
//
// Emulated kernels: a module image "emu:<path>" is a host shared library
// built from the emitted CUDA C with tests/cuda_emu/CudaEmu.h; its kernels
// run on the CPU under the CUDA execution model, and a launch the emulator
// finds wrong fails the next synchronisation (CUDA_ERROR_LAUNCH_FAILED,
// its report on stderr and in cuGetErrorString).
//
//===----------------------------------------------------------------------===//
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda.h>

#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <dlfcn.h>

namespace {

using KernelFn = void (*)(const uint64_t *params, unsigned grid, unsigned threads);
/// An emulated kernel's entry (TF_EMU_ENTRY): runs it, writes its errors.
using EmuLaunch = int (*)(unsigned grid, unsigned threads, unsigned sharedBytes, void **params,
                          char *errors, int size);
/// Dynamic shared memory per block without an opt-in, and the most a
/// kernel may opt into (an H100's or H200's unless a test sets another:
/// tf_fake_set_shared_opt_in).
constexpr unsigned kDefaultSharedBytes = 48 << 10;
unsigned optInSharedBytes = 227 << 10;
struct Kernel {
  std::string name;
  int params = 0;
  KernelFn fn = nullptr;
  EmuLaunch emu = nullptr;
  /// An emulated kernel's parameter sizes (a struct by value is more
  /// than 8 bytes); registered kernels take 8-byte parameters only.
  std::vector<int> paramBytes;
  /// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
  unsigned maxDynamicShared = kDefaultSharedBytes;
};
struct EmuModule {
  void *library = nullptr;
  std::map<std::string, Kernel> kernels;
};
struct Graph {
  std::vector<std::function<void()>> work;
};

struct Fake {
  std::map<std::string, Kernel> registered;
  bool capturing = false;
  std::vector<std::function<void()>> recorded;
  int64_t launches = 0, instantiated = 0, graphLaunches = 0;
  int64_t cudnnConvolutions = 0; ///< convolutions enqueued through cuDNN
  int64_t cudnnWorkspaceConvolutions = 0; ///< of those, by the algorithm with a workspace
  int64_t liveStreams = 0; ///< created and not yet destroyed
  int64_t contextRefs = 0; ///< primary context retains not yet released
  /// The operand alignment the last cuBLASLt matmul's algorithm was chosen
  /// for (the fake's "algorithm" records the preference it was found with).
  uint32_t preferredAlignment = 0, lastMatmulAlignment = 0;
  std::map<uintptr_t, size_t> allocations; ///< device memory: base -> bytes
  std::set<CUmodule> emuModules;
  std::string launchFailure; ///< an emulated launch's errors, until reported
  // Descriptor state of cuBLASLt.
  struct Desc {
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr; ///< of the output's type
  };
  struct Layout {
    cudaDataType type = CUDA_R_32F;
    uint64_t rows = 0, cols = 0;
    int64_t ld = 0, stride = 0;
    int32_t batch = 1;
  };
};
Fake &fake() {
  static Fake f;
  return f;
}

/// Runs `w` now, or records it while the stream is being captured.
void submit(std::function<void()> w) {
  if (fake().capturing)
    fake().recorded.push_back(std::move(w));
  else
    w();
}

float *at(uint64_t p) { return reinterpret_cast<float *>(p); }

/// Whether [p, p + bytes) lies inside one device allocation.
bool inAllocation(const void *p, size_t bytes) {
  auto &all = fake().allocations;
  auto it = all.upper_bound(reinterpret_cast<uintptr_t>(p));
  if (it == all.begin())
    return false;
  --it;
  uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  return begin >= it->first && begin + bytes <= it->first + it->second;
}

double halfToDouble(uint16_t h) {
  int exponent = (h >> 10) & 31, mantissa = h & 1023;
  double v = exponent == 0    ? std::ldexp(mantissa, -24)
             : exponent == 31 ? (mantissa ? std::nan("") : INFINITY)
                              : std::ldexp(mantissa + 1024, exponent - 25);
  return h >> 15 ? -v : v;
}
/// Round to nearest even: scaling by a power of two is exact in double, so
/// nearbyint (the default rounding mode) rounds the value itself.
uint16_t doubleToHalf(double v) {
  uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  double x = std::fabs(v);
  if (std::isnan(v))
    return 0x7e00;
  if (x < std::ldexp(1.0, -14))
    return uint16_t(sign | uint16_t(std::nearbyint(std::ldexp(x, 24))));
  int e;
  std::frexp(x, &e); // x = m 2^e, m in [0.5, 1)
  int exponent = e - 1;
  double q = std::nearbyint(std::ldexp(x, 10 - exponent));
  if (q == 2048)
    q = 1024, ++exponent;
  if (exponent + 15 >= 31)
    return sign | 0x7c00;
  return uint16_t(sign | ((exponent + 15) << 10) | (uint16_t(q) - 1024));
}
uint16_t floatToBfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f))
    return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return uint16_t(bits >> 16);
}

/// Element i of a matrix of cuBLAS type t, as a double.
double element(const void *p, cudaDataType t, int64_t i) {
  switch (t) {
  case CUDA_R_32F: return static_cast<const float *>(p)[i];
  case CUDA_R_64F: return static_cast<const double *>(p)[i];
  case CUDA_R_16F: return halfToDouble(static_cast<const uint16_t *>(p)[i]);
  case CUDA_R_16BF: {
    uint32_t bits = uint32_t(static_cast<const uint16_t *>(p)[i]) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  default: return std::nan("");
  }
}
void setElement(void *p, cudaDataType t, int64_t i, double v) {
  switch (t) {
  case CUDA_R_32F: static_cast<float *>(p)[i] = float(v); break;
  case CUDA_R_64F: static_cast<double *>(p)[i] = v; break;
  // cuBLAS accumulates half types in f32 and rounds the f32 result once.
  case CUDA_R_16F: static_cast<uint16_t *>(p)[i] = doubleToHalf(double(float(v))); break;
  case CUDA_R_16BF: static_cast<uint16_t *>(p)[i] = floatToBfloat16(float(v)); break;
  default: break;
  }
}
bool gemmType(cudaDataType t) {
  return t == CUDA_R_32F || t == CUDA_R_64F || t == CUDA_R_16F || t == CUDA_R_16BF;
}

double element(const void *p, cudaDataType t, int64_t i);
void setElement(void *p, cudaDataType t, int64_t i, double v);

/// Column-major C[m x n] = op(A) op(B), batched, all of type t,
/// accumulated in double.
void gemm(cudaDataType t, bool ta, bool tb, int m, int n, int k, const void *A, int lda,
          int64_t sa, const void *B, int ldb, int64_t sb, void *C, int ldc, int64_t sc, int batch,
          const std::function<double(int row, double)> &epilogue) {
  for (int q = 0; q < batch; ++q)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double acc = 0;
        for (int l = 0; l < k; ++l) {
          double a = element(A, t, ta ? q * sa + l + i * int64_t(lda) : q * sa + i + l * int64_t(lda));
          double b = element(B, t, tb ? q * sb + j + l * int64_t(ldb) : q * sb + l + j * int64_t(ldb));
          acc += a * b;
        }
        setElement(C, t, q * sc + i + j * int64_t(ldc), epilogue(i, acc));
      }
}

} // namespace

extern "C" {

// --- test hooks --------------------------------------------------------------
void tf_fake_register_kernel(const char *name, int params, KernelFn fn) {
  fake().registered[name] = Kernel{name, params, fn};
}
int64_t tf_fake_live_streams() { return fake().liveStreams; }
/// The device's CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN.
void tf_fake_set_shared_opt_in(unsigned bytes) { optInSharedBytes = bytes; }
/// Each kernel's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, by name.
int tf_fake_dynamic_shared_limit(const char *name) {
  auto it = fake().registered.find(name);
  return it == fake().registered.end() ? -1 : int(it->second.maxDynamicShared);
}
int64_t tf_fake_context_refs() { return fake().contextRefs; }
uint32_t tf_fake_last_matmul_alignment() { return fake().lastMatmulAlignment; }
void tf_fake_counters(int64_t *launches, int64_t *instantiated, int64_t *graphLaunches) {
  *launches = fake().launches;
  *instantiated = fake().instantiated;
  *graphLaunches = fake().graphLaunches;
}

// --- driver ------------------------------------------------------------------
CUresult CUDAAPI cuInit(unsigned int) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuDeviceGetCount(int *n) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGet(CUdevice *d, int ordinal) {
  if (ordinal != 0)
    return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice) {
  *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR           ? 9
       : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR         ? 0
       : a == CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN ? int(optInSharedBytes)
                                                                   : 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice) {
  std::strncpy(name, "Fake GPU", size_t(len));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice) {
  *c = reinterpret_cast<CUcontext>(&fake());
  ++fake().contextRefs;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice) {
  if (fake().contextRefs == 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  --fake().contextRefs;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuStreamCreate(CUstream *s, unsigned int) {
  *s = reinterpret_cast<CUstream>(new int(0));
  ++fake().liveStreams;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamDestroy(CUstream s) {
  delete reinterpret_cast<int *>(s);
  --fake().liveStreams;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamSynchronize(CUstream) {
  if (fake().capturing)
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  // A failed launch is reported at the next synchronisation, as on a GPU.
  return fake().launchFailure.empty() ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
}
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *p, size_t bytes) {
  void *q = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!q)
    return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(q, 0xCD, bytes); // garbage, as fresh device memory is
  *p = reinterpret_cast<CUdeviceptr>(q);
  fake().allocations[uintptr_t(q)] = bytes;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr p) {
  fake().allocations.erase(uintptr_t(p));
  std::free(reinterpret_cast<void *>(p));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr d, const void *h, size_t n, CUstream) {
  if (fake().capturing)
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; // pageable host memory
  std::memcpy(reinterpret_cast<void *>(d), h, n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoHAsync(void *h, CUdeviceptr d, size_t n, CUstream) {
  if (fake().capturing)
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  std::memcpy(h, reinterpret_cast<void *>(d), n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream) {
  submit([=] { std::memmove(reinterpret_cast<void *>(d), reinterpret_cast<void *>(s), n); });
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream) {
  submit([=] { std::memset(reinterpret_cast<void *>(d), v, n); });
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleLoadData(CUmodule *m, const void *image) {
  const char *text = static_cast<const char *>(image);
  if (std::strncmp(text, "emu:", 4) == 0) {
    void *library = dlopen(text + 4, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      std::fprintf(stderr, "fake driver: %s\n", dlerror());
      return CUDA_ERROR_INVALID_IMAGE;
    }
    auto setCheck = reinterpret_cast<void (*)(bool (*)(const void *, size_t))>(
        dlsym(library, "tf_emu_set_allocation_check"));
    if (!setCheck)
      return CUDA_ERROR_INVALID_IMAGE;
    setCheck(&inAllocation);
    auto *module = new EmuModule{library, {}};
    *m = reinterpret_cast<CUmodule>(module);
    fake().emuModules.insert(*m);
    return CUDA_SUCCESS;
  }
  // "Cubins" of the tests are text: refuse anything else, as the driver
  // refuses a cubin for another architecture.
  if (std::strncmp(text, "fake", 4) != 0)
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  *m = reinterpret_cast<CUmodule>(new int(0));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleUnload(CUmodule m) {
  if (fake().emuModules.erase(m)) {
    // The library stays loaded: a captured graph may still launch it.
    delete reinterpret_cast<EmuModule *>(m);
    return CUDA_SUCCESS;
  }
  delete reinterpret_cast<int *>(m);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  if (fake().emuModules.count(m)) {
    auto *module = reinterpret_cast<EmuModule *>(m);
    auto launch = reinterpret_cast<EmuLaunch>(
        dlsym(module->library, (std::string("tf_emu_launch_") + name).c_str()));
    auto arity = reinterpret_cast<int (*)()>(
        dlsym(module->library, (std::string("tf_emu_arity_") + name).c_str()));
    auto bytes = reinterpret_cast<int (*)(int)>(
        dlsym(module->library, (std::string("tf_emu_param_bytes_") + name).c_str()));
    if (!launch || !arity || !bytes)
      return CUDA_ERROR_NOT_FOUND;
    Kernel &k = module->kernels[name];
    k = Kernel{name, arity(), nullptr, launch, {}, kDefaultSharedBytes};
    for (int i = 0; i < k.params; ++i)
      k.paramBytes.push_back(bytes(i));
    *f = reinterpret_cast<CUfunction>(&k);
    return CUDA_SUCCESS;
  }
  auto it = fake().registered.find(name);
  if (it == fake().registered.end())
    return CUDA_ERROR_NOT_FOUND;
  *f = reinterpret_cast<CUfunction>(&it->second);
  return CUDA_SUCCESS;
}
// As the driver: more than 48 KiB only after the kernel opted in, and never
// past the device's opt-in limit.
CUresult CUDAAPI cuFuncSetAttribute(CUfunction f, CUfunction_attribute attribute, int value) {
  if (attribute != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (value < 0 || unsigned(value) > optInSharedBytes)
    return CUDA_ERROR_INVALID_VALUE;
  reinterpret_cast<Kernel *>(f)->maxDynamicShared = unsigned(value);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                unsigned by, unsigned bz, unsigned sharedBytes, CUstream,
                                void **params, void **) {
  auto *k = reinterpret_cast<Kernel *>(f);
  if (gy != 1 || gz != 1 || by != 1 || bz != 1 || bx == 0 || bx > 1024 || gx == 0 ||
      sharedBytes > k->maxDynamicShared)
    return CUDA_ERROR_INVALID_VALUE;
  // Parameters are copied at launch (or capture), as the driver does.
  std::vector<uint64_t> values;
  for (int i = 0; i < k->params; ++i)
    values.push_back(*static_cast<uint64_t *>(params[i]));
  if (k->emu) {
    // Each parameter whole, in 8-byte words (aligned for any field).
    std::vector<std::vector<uint64_t>> words;
    for (int i = 0; i < k->params; ++i) {
      words.emplace_back((size_t(k->paramBytes[size_t(i)]) + 7) / 8);
      std::memcpy(words.back().data(), params[i], size_t(k->paramBytes[size_t(i)]));
    }
    // Kernels are referenced after their module is unloaded only through
    // graphs, which copy this launch.
    Kernel kernel = *k;
    submit([=] {
      ++fake().launches;
      std::vector<std::vector<uint64_t>> copy = words;
      std::vector<void *> pointers;
      for (std::vector<uint64_t> &w : copy)
        pointers.push_back(w.data());
      char errors[4096] = {};
      if (kernel.emu(gx, bx, sharedBytes, pointers.data(), errors, int(sizeof errors)) > 0 &&
          fake().launchFailure.empty()) {
        fake().launchFailure = "emulated kernel " + kernel.name + " (grid " +
                               std::to_string(gx) + ", " + std::to_string(bx) + " threads, " +
                               std::to_string(sharedBytes) + " bytes of shared memory): " +
                               errors;
        std::fprintf(stderr, "%s", fake().launchFailure.c_str());
      }
    });
    return CUDA_SUCCESS;
  }
  submit([=] {
    ++fake().launches;
    k->fn(values.data(), gx, bx);
  });
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamBeginCapture(CUstream, CUstreamCaptureMode) {
  if (fake().capturing)
    return CUDA_ERROR_ILLEGAL_STATE;
  fake().capturing = true;
  fake().recorded.clear();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamEndCapture(CUstream, CUgraph *g) {
  if (!fake().capturing)
    return CUDA_ERROR_ILLEGAL_STATE;
  fake().capturing = false;
  *g = reinterpret_cast<CUgraph>(new Graph{std::move(fake().recorded)});
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long) {
  ++fake().instantiated;
  *e = reinterpret_cast<CUgraphExec>(new Graph(*reinterpret_cast<Graph *>(g)));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphLaunch(CUgraphExec e, CUstream) {
  ++fake().graphLaunches;
  for (auto &w : reinterpret_cast<Graph *>(e)->work)
    w();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec e) {
  delete reinterpret_cast<Graph *>(e);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphDestroy(CUgraph g) {
  delete reinterpret_cast<Graph *>(g);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventCreate(CUevent *e, unsigned int) {
  *e = reinterpret_cast<CUevent>(new int(0));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventDestroy_v2(CUevent e) {
  delete reinterpret_cast<int *>(e);
  return CUDA_SUCCESS;
}
// Work runs when it is submitted (or replays in submission order): events
// order nothing more.
CUresult CUDAAPI cuEventRecord(CUevent, CUstream) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuStreamWaitEvent(CUstream, CUevent, unsigned int) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuGetErrorString(CUresult r, const char **s) {
  *s = r == CUDA_ERROR_LAUNCH_FAILED && !fake().launchFailure.empty()
           ? fake().launchFailure.c_str()
           : "fake driver error";
  return CUDA_SUCCESS;
}

// --- cuBLAS ------------------------------------------------------------------
cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t *h) {
  *h = reinterpret_cast<cublasHandle_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t h) {
  delete reinterpret_cast<int *>(h);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t, cudaStream_t) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t, void *, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType at, int lda, long long sa, const void *B,
    cudaDataType bt, int ldb, long long sb, const void *beta, void *C, cudaDataType ct, int ldc,
    long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
  // cuBLAS's rules: f64 data with 64F compute and double scalars; f32, f16
  // and bf16 data with 32F compute (or TF32) and float scalars.
  bool f64 = at == CUDA_R_64F;
  if (at != bt || at != ct || !gemmType(at) || f64 != (compute == CUBLAS_COMPUTE_64F))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  double one = f64 ? *static_cast<const double *>(alpha) : *static_cast<const float *>(alpha);
  double zero = f64 ? *static_cast<const double *>(beta) : *static_cast<const float *>(beta);
  if (one != 1.0 || zero != 0.0)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  submit([=] {
    gemm(at, ta == CUBLAS_OP_T, tb == CUBLAS_OP_T, m, n, k, A, lda, sa, B, ldb, sb, C, ldc, sc,
         batch, [](int, double v) { return v; });
  });
  return CUBLAS_STATUS_SUCCESS;
}

// --- cuBLASLt ------------------------------------------------------------------
cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t *h) {
  *h = reinterpret_cast<cublasLtHandle_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t h) {
  delete reinterpret_cast<int *>(h);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d,
                                                     cublasComputeType_t, cudaDataType_t) {
  *d = reinterpret_cast<cublasLtMatmulDesc_t>(new Fake::Desc);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete reinterpret_cast<Fake::Desc *>(d);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                                           cublasLtMatmulDescAttributes_t a,
                                                           const void *buf, size_t size) {
  auto *desc = reinterpret_cast<Fake::Desc *>(d);
  switch (a) {
  case CUBLASLT_MATMUL_DESC_TRANSA: std::memcpy(&desc->ta, buf, size); break;
  case CUBLASLT_MATMUL_DESC_TRANSB: std::memcpy(&desc->tb, buf, size); break;
  case CUBLASLT_MATMUL_DESC_EPILOGUE: std::memcpy(&desc->epilogue, buf, size); break;
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER: std::memcpy(&desc->bias, buf, size); break;
  default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  if (!gemmType(t))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  auto *layout = new Fake::Layout;
  layout->type = t, layout->rows = rows, layout->cols = cols, layout->ld = ld;
  *l = reinterpret_cast<cublasLtMatrixLayout_t>(layout);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete reinterpret_cast<Fake::Layout *>(l);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                             cublasLtMatrixLayoutAttribute_t a,
                                                             const void *buf, size_t size) {
  auto *layout = reinterpret_cast<Fake::Layout *>(l);
  if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT)
    std::memcpy(&layout->batch, buf, size);
  else if (a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET)
    std::memcpy(&layout->stride, buf, size);
  else
    return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  *p = reinterpret_cast<cublasLtMatmulPreference_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete reinterpret_cast<int *>(p);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t a, const void *buf,
    size_t size) {
  if (a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && size == sizeof(uint32_t))
    std::memcpy(&fake().preferredAlignment, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
    cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int requested,
    cublasLtMatmulHeuristicResult_t *results, int *count) {
  if (requested < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  std::memset(results, 0, sizeof(*results));
  // Without a preference cuBLASLt assumes 256-byte aligned operands.
  results->algo.data[0] = fake().preferredAlignment ? fake().preferredAlignment : 256;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d,
                                           const void *alpha, const void *A,
                                           cublasLtMatrixLayout_t al, const void *B,
                                           cublasLtMatrixLayout_t bl, const void *beta,
                                           const void *C, cublasLtMatrixLayout_t,
                                           void *D, cublasLtMatrixLayout_t dl,
                                           const cublasLtMatmulAlgo_t *algo, void *, size_t,
                                           cudaStream_t) {
  fake().lastMatmulAlignment = algo ? uint32_t(algo->data[0]) : 0;
  // Like cuBLASLt, an operand below the algorithm's alignment is an error.
  for (const void *p : {A, B, C, static_cast<const void *>(D)})
    if (fake().lastMatmulAlignment && uintptr_t(p) % fake().lastMatmulAlignment != 0)
      return CUBLAS_STATUS_INVALID_VALUE;
  auto desc = *reinterpret_cast<Fake::Desc *>(d); // the attributes as of this call
  auto a = *reinterpret_cast<Fake::Layout *>(al), b = *reinterpret_cast<Fake::Layout *>(bl),
       o = *reinterpret_cast<Fake::Layout *>(dl);
  if (*static_cast<const float *>(alpha) != 1.0f || *static_cast<const float *>(beta) != 0.0f ||
      C != D || a.type != o.type || b.type != o.type)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  // cuBLASLt fuses no epilogue into f64 GEMMs.
  if (o.type == CUDA_R_64F && desc.epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  bool ta = desc.ta == CUBLAS_OP_T, tb = desc.tb == CUBLAS_OP_T;
  int m = int(o.rows), n = int(o.cols), k = int(ta ? a.rows : a.cols);
  if (int(ta ? a.cols : a.rows) != m || int(tb ? b.rows : b.cols) != n ||
      int(tb ? b.cols : b.rows) != k || a.batch != o.batch || b.batch != o.batch)
    return CUBLAS_STATUS_INVALID_VALUE;
  bool bias = desc.epilogue == CUBLASLT_EPILOGUE_BIAS || desc.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  bool relu = desc.epilogue == CUBLASLT_EPILOGUE_RELU || desc.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  if (bias && !desc.bias)
    return CUBLAS_STATUS_INVALID_VALUE;
  const void *biasPtr = desc.bias;
  cudaDataType type = o.type;
  submit([=] {
    gemm(type, ta, tb, m, n, k, A, int(a.ld), a.stride, B, int(b.ld), b.stride, D,
         int(o.ld), o.stride, o.batch, [=](int row, double v) {
           if (bias)
             v += element(biasPtr, type, row);
           // cuBLASLt's ReLU: NaN becomes 0 (unlike graph.maximum).
           return relu && !(v > 0) ? 0.0 : v;
         });
  });
  return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"

// --- NCCL (its stable ABI, declared here as Nccl.cpp declares it) -----------

namespace {

struct FakeNcclId {
  char internal[128];
};

/// The ranks of one communicator and their collectives in flight.
struct FakeNcclGroup {
  struct Post {
    const void *send = nullptr;
    void *recv = nullptr;
    size_t count = 0;
  };
  struct Round {
    std::vector<Post> posts;
    int posted = 0, read = 0;
  };
  int size = 0;
  std::mutex m;
  std::condition_variable cv;
  std::map<int64_t, Round> rounds;
};

struct FakeNcclComm {
  std::shared_ptr<FakeNcclGroup> group;
  int rank = 0;
  int64_t issued = 0;
};

std::mutex &ncclGroupsMutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, std::shared_ptr<FakeNcclGroup>> &ncclGroups() {
  static std::map<std::string, std::shared_ptr<FakeNcclGroup>> groups;
  return groups;
}

cudaDataType ncclToCuda(int t) {
  switch (t) {
  case 4: return CUDA_R_64I;
  case 6: return CUDA_R_16F;
  case 7: return CUDA_R_32F;
  case 8: return CUDA_R_64F;
  case 9: return CUDA_R_16BF;
  default: return CUDA_R_32I;
  }
}

/// One rank's part of a collective: posts its buffers, waits for every
/// rank's, computes its output from their inputs, and returns once every
/// rank has read them (so no input changes while another rank reads it).
/// kind: 0 all-reduce, 1 broadcast, 2 reduce-scatter, 3 all-gather.
int fakeCollective(FakeNcclComm *c, int kind, const void *send, void *recv, size_t count,
                   int type, int op, int root) {
  FakeNcclGroup &g = *c->group;
  cudaDataType t = ncclToCuda(type);
  std::unique_lock<std::mutex> lock(g.m);
  int64_t k = c->issued++;
  FakeNcclGroup::Round &r = g.rounds[k];
  r.posts.resize(size_t(g.size));
  r.posts[size_t(c->rank)] = {send, recv, count};
  ++r.posted;
  g.cv.notify_all();
  g.cv.wait(lock, [&] { return r.posted == g.size; });
  size_t outCount = kind == 3 ? count * size_t(g.size) : count;
  std::vector<double> out(outCount, 0.0);
  for (size_t i = 0; i < outCount; ++i) {
    if (kind == 1) {
      out[i] = element(r.posts[size_t(root)].send, t, int64_t(i));
    } else if (kind == 3) {
      out[i] = element(r.posts[i / count].send, t, int64_t(i % count));
    } else {
      size_t at = kind == 2 ? size_t(c->rank) * count + i : i;
      for (int from = 0; from < g.size; ++from) {
        double v = element(r.posts[size_t(from)].send, t, int64_t(at));
        out[i] = from == 0 ? v : op == 2 ? std::max(out[i], v) : op == 3 ? std::min(out[i], v)
                                                                      : out[i] + v;
      }
    }
  }
  ++r.read;
  g.cv.notify_all();
  g.cv.wait(lock, [&] { return r.read == g.size; });
  for (size_t i = 0; i < outCount; ++i)
    setElement(recv, t, int64_t(i), out[i]);
  return 0;
}

int submitCollective(void *comm, int kind, const void *send, void *recv, size_t count, int type,
                     int op, int root) {
  auto *c = static_cast<FakeNcclComm *>(comm);
  submit([=] { fakeCollective(c, kind, send, recv, count, type, op, root); });
  return 0;
}

} // namespace

extern "C" {
int ncclGetUniqueId(FakeNcclId *id) {
  static int next = 0;
  std::memset(id->internal, 0, sizeof(id->internal));
  std::snprintf(id->internal, sizeof(id->internal), "fake-nccl-%d", next++);
  return 0;
}
int ncclCommInitRank(void **comm, int nranks, FakeNcclId id, int rank) {
  std::lock_guard<std::mutex> lock(ncclGroupsMutex());
  std::shared_ptr<FakeNcclGroup> &g = ncclGroups()[std::string(id.internal)];
  if (!g) {
    g = std::make_shared<FakeNcclGroup>();
    g->size = nranks;
  }
  if (g->size != nranks || rank < 0 || rank >= nranks)
    return 4; // ncclInvalidArgument
  *comm = new FakeNcclComm{g, rank, 0};
  return 0;
}
int ncclCommDestroy(void *comm) {
  delete static_cast<FakeNcclComm *>(comm);
  return 0;
}
int ncclAllReduce(const void *send, void *recv, size_t count, int type, int op, void *comm,
                  void *) {
  return submitCollective(comm, 0, send, recv, count, type, op, 0);
}
int ncclBroadcast(const void *send, void *recv, size_t count, int type, int root, void *comm,
                  void *) {
  return submitCollective(comm, 1, send, recv, count, type, 0, root);
}
int ncclReduceScatter(const void *send, void *recv, size_t count, int type, int op, void *comm,
                      void *) {
  return submitCollective(comm, 2, send, recv, count, type, op, 0);
}
int ncclAllGather(const void *send, void *recv, size_t count, int type, void *comm, void *) {
  return submitCollective(comm, 3, send, recv, count, type, 0, 0);
}
const char *ncclGetErrorString(int) { return "fake NCCL error"; }
}

// --- cuDNN (runtime/CudnnAbi.h's declarations) --------------------------------
//
// Descriptors are checked as cuDNN checks them (at least 4-d, one type,
// contiguous NCHW, channels and groups consistent, the output's size the
// forward relation's), so the executor's mapping of ConvParams is tested,
// not assumed. The heuristics offer a non-deterministic algorithm first
// (1, no workspace) and a deterministic one second (0, 512 bytes of
// workspace); only algorithm 0 runs, and only with its workspace in device
// memory. Convolutions are runtime/Conv.h's reference loops in double.

#include "runtime/Conv.h"
#include "runtime/CudnnAbi.h"

namespace {
namespace abi = tilefuse::cudnn_abi;

struct FakeTensorDesc {
  int type = -1;
  std::vector<int> sizes, strides;
};
struct FakeFilterDesc {
  int type = -1, format = -1;
  std::vector<int> sizes;
};
struct FakeConvDesc {
  std::vector<int> pad, stride, dilation;
  int mode = -1, compute = -1, groups = 1, math = 0;
};
constexpr abi::Status kBadParam = 3; // CUDNN_STATUS_BAD_PARAM
constexpr size_t kFakeWorkspace = 512;

cudaDataType fromCudnn(int t) {
  switch (t) {
  case abi::kFloat: return CUDA_R_32F;
  case abi::kDouble: return CUDA_R_64F;
  case abi::kHalf: return CUDA_R_16F;
  case abi::kBfloat16: return CUDA_R_16BF;
  default: return CUDA_R_8I;
  }
}

/// The convolution the descriptors describe, or kBadParam.
abi::Status describe(void *xp, void *wp, void *cp, void *yp, tilefuse::ConvParams &p) {
  auto &x = *static_cast<FakeTensorDesc *>(xp), &y = *static_cast<FakeTensorDesc *>(yp);
  auto &w = *static_cast<FakeFilterDesc *>(wp);
  auto &c = *static_cast<FakeConvDesc *>(cp);
  size_t dims = x.sizes.size();
  if (dims < 4 || dims > 5 || y.sizes.size() != dims || w.sizes.size() != dims ||
      c.pad.size() != dims - 2 || x.type != y.type || x.type != w.type ||
      w.format != abi::kTensorNchw || c.mode != abi::kCrossCorrelation ||
      (c.compute == abi::kDouble) != (x.type == abi::kDouble) || c.groups < 1)
    return kBadParam;
  for (const FakeTensorDesc *t : {&x, &y}) {
    int64_t stride = 1;
    for (size_t i = dims; i-- > 0;) {
      if (t->strides[i] != stride)
        return kBadParam;
      stride *= t->sizes[i];
    }
  }
  if (x.sizes[0] != y.sizes[0] || x.sizes[1] != w.sizes[1] * c.groups ||
      w.sizes[0] % c.groups || y.sizes[1] != w.sizes[0])
    return kBadParam;
  p = tilefuse::ConvParams{};
  p.spatial = int32_t(dims - 2);
  p.batch = x.sizes[0], p.channels = x.sizes[1], p.outChannels = w.sizes[0];
  p.groups = c.groups;
  for (size_t i = 0; i + 2 < dims; ++i) {
    p.input[i] = x.sizes[i + 2], p.kernel[i] = w.sizes[i + 2], p.output[i] = y.sizes[i + 2];
    p.stride[i] = c.stride[i], p.padLow[i] = p.padHigh[i] = c.pad[i];
    p.dilation[i] = c.dilation[i];
    int64_t span = p.input[i] + 2 * p.padLow[i] - p.dilation[i] * (p.kernel[i] - 1) - 1;
    if (p.stride[i] < 1 || span < 0 || span / p.stride[i] + 1 != p.output[i])
      return kBadParam;
  }
  return 0;
}

abi::Status algorithms(void *d0, void *d1, void *cp, void *d2, tilefuse::ConvDirection dir,
                       int requested, int *returned, abi::AlgoPerf *perf) {
  tilefuse::ConvParams p;
  // The descriptors in the order each direction's functions take them.
  abi::Status rc = dir == tilefuse::ConvDirection::Forward     ? describe(d0, d1, cp, d2, p)
                   : dir == tilefuse::ConvDirection::GradInput ? describe(d2, d0, cp, d1, p)
                                                                : describe(d0, d2, cp, d1, p);
  if (rc)
    return rc;
  abi::AlgoPerf offered[2] = {{1, 0, 1.0f, 0, 0, 0, {}}, {0, 0, 2.0f, kFakeWorkspace,
                                                          abi::kDeterministic, 0, {}}};
  *returned = std::min(requested, 2);
  for (int i = 0; i < *returned; ++i)
    perf[i] = offered[i];
  return 0;
}

/// out = the convolution of (a, b) in direction `dir`, checked first.
abi::Status convolve(tilefuse::ConvDirection dir, const void *alpha, void *da, const void *a,
                     void *db, const void *b, void *cp, int algo, void *ws, size_t wsBytes,
                     const void *beta, void *dout, void *out) {
  tilefuse::ConvParams p;
  abi::Status rc = dir == tilefuse::ConvDirection::Forward ? describe(da, db, cp, dout, p)
                   : dir == tilefuse::ConvDirection::GradInput ? describe(dout, da, cp, db, p)
                                                               : describe(da, dout, cp, db, p);
  if (rc)
    return rc;
  int type = static_cast<FakeTensorDesc *>(dir == tilefuse::ConvDirection::GradInput ? db : da)
                 ->type;
  bool f64 = type == abi::kDouble;
  double one = f64 ? *static_cast<const double *>(alpha) : *static_cast<const float *>(alpha);
  double zero = f64 ? *static_cast<const double *>(beta) : *static_cast<const float *>(beta);
  // Algorithm 0 needs kFakeWorkspace bytes of workspace inside one device
  // allocation (the program's planned buffer); algorithm 1 none.
  if ((algo != 0 && algo != 1) || one != 1.0 || zero != 0.0)
    return abi::kStatusNotSupported;
  if (algo == 0 && (wsBytes < kFakeWorkspace || !inAllocation(ws, wsBytes)))
    return kBadParam;
  if (algo == 0)
    ++fake().cudnnWorkspaceConvolutions;
  cudaDataType t = fromCudnn(type);
  // Operand element counts by direction: (input, weight) -> output,
  // (dOutput, weight) -> dInput, (input, dOutput) -> dWeight.
  int64_t in = p.inputElements(), w = p.weightElements(), o = p.outputElements();
  int64_t na = dir == tilefuse::ConvDirection::GradInput ? o : in;
  int64_t nb = dir == tilefuse::ConvDirection::GradWeight ? o : w;
  int64_t nout = dir == tilefuse::ConvDirection::Forward     ? o
                 : dir == tilefuse::ConvDirection::GradInput ? in
                                                             : w;
  // The executor's operand pointers: cuDNN's backward data takes (w, dy),
  // the executor's step (dy, w).
  const void *first = dir == tilefuse::ConvDirection::GradInput ? b : a;
  const void *second = dir == tilefuse::ConvDirection::GradInput ? a : b;
  submit([=] {
    std::vector<double> va(static_cast<size_t>(na)), vb(static_cast<size_t>(nb)),
        vo(static_cast<size_t>(nout));
    for (int64_t i = 0; i < na; ++i)
      va[size_t(i)] = element(first, t, i);
    for (int64_t i = 0; i < nb; ++i)
      vb[size_t(i)] = element(second, t, i);
    tilefuse::convReference<double>(dir, p, va.data(), vb.data(), vo.data());
    for (int64_t i = 0; i < nout; ++i)
      setElement(out, t, i, vo[size_t(i)]);
  });
  ++fake().cudnnConvolutions;
  return 0;
}

} // namespace

extern "C" {
int64_t tf_fake_cudnn_convolutions() { return fake().cudnnConvolutions; }
int64_t tf_fake_cudnn_workspace_convolutions() { return fake().cudnnWorkspaceConvolutions; }
abi::Status cudnnCreate(abi::Handle *h) {
  *h = new int(0);
  return 0;
}
abi::Status cudnnDestroy(abi::Handle h) {
  delete static_cast<int *>(h);
  return 0;
}
abi::Status cudnnSetStream(abi::Handle, void *) { return 0; }
const char *cudnnGetErrorString(abi::Status) { return "fake cuDNN error"; }
abi::Status cudnnCreateTensorDescriptor(void **d) {
  *d = new FakeTensorDesc;
  return 0;
}
abi::Status cudnnDestroyTensorDescriptor(void *d) {
  delete static_cast<FakeTensorDesc *>(d);
  return 0;
}
abi::Status cudnnCreateFilterDescriptor(void **d) {
  *d = new FakeFilterDesc;
  return 0;
}
abi::Status cudnnDestroyFilterDescriptor(void *d) {
  delete static_cast<FakeFilterDesc *>(d);
  return 0;
}
abi::Status cudnnCreateConvolutionDescriptor(void **d) {
  *d = new FakeConvDesc;
  return 0;
}
abi::Status cudnnDestroyConvolutionDescriptor(void *d) {
  delete static_cast<FakeConvDesc *>(d);
  return 0;
}
abi::Status cudnnSetTensorNdDescriptor(void *d, int type, int dims, const int *sizes,
                                       const int *strides) {
  auto *t = static_cast<FakeTensorDesc *>(d);
  t->type = type;
  t->sizes.assign(sizes, sizes + dims);
  t->strides.assign(strides, strides + dims);
  return 0;
}
abi::Status cudnnSetFilterNdDescriptor(void *d, int type, int format, int dims,
                                       const int *sizes) {
  auto *f = static_cast<FakeFilterDesc *>(d);
  f->type = type, f->format = format;
  f->sizes.assign(sizes, sizes + dims);
  return 0;
}
abi::Status cudnnSetConvolutionNdDescriptor(void *d, int n, const int *pad, const int *stride,
                                            const int *dilation, int mode, int compute) {
  auto *c = static_cast<FakeConvDesc *>(d);
  c->pad.assign(pad, pad + n), c->stride.assign(stride, stride + n);
  c->dilation.assign(dilation, dilation + n);
  c->mode = mode, c->compute = compute;
  return 0;
}
abi::Status cudnnSetConvolutionGroupCount(void *d, int groups) {
  static_cast<FakeConvDesc *>(d)->groups = groups;
  return 0;
}
abi::Status cudnnSetConvolutionMathType(void *d, int math) {
  static_cast<FakeConvDesc *>(d)->math = math;
  return 0;
}
abi::Status cudnnGetConvolutionForwardAlgorithm_v7(abi::Handle, void *x, void *w, void *c,
                                                   void *y, int n, int *got,
                                                   abi::AlgoPerf *perf) {
  return algorithms(x, w, c, y, tilefuse::ConvDirection::Forward, n, got, perf);
}
abi::Status cudnnGetConvolutionBackwardDataAlgorithm_v7(abi::Handle, void *w, void *dy, void *c,
                                                        void *dx, int n, int *got,
                                                        abi::AlgoPerf *perf) {
  return algorithms(w, dy, c, dx, tilefuse::ConvDirection::GradInput, n, got, perf);
}
abi::Status cudnnGetConvolutionBackwardFilterAlgorithm_v7(abi::Handle, void *x, void *dy,
                                                          void *c, void *dw, int n, int *got,
                                                          abi::AlgoPerf *perf) {
  return algorithms(x, dy, c, dw, tilefuse::ConvDirection::GradWeight, n, got, perf);
}
abi::Status cudnnGetConvolutionForwardWorkspaceSize(abi::Handle, void *, void *, void *, void *,
                                                    int algo, size_t *bytes) {
  *bytes = algo == 0 ? kFakeWorkspace : 0;
  return 0;
}
abi::Status cudnnGetConvolutionBackwardDataWorkspaceSize(abi::Handle, void *, void *, void *,
                                                         void *, int algo, size_t *bytes) {
  *bytes = algo == 0 ? kFakeWorkspace : 0;
  return 0;
}
abi::Status cudnnGetConvolutionBackwardFilterWorkspaceSize(abi::Handle, void *, void *, void *,
                                                           void *, int algo, size_t *bytes) {
  *bytes = algo == 0 ? kFakeWorkspace : 0;
  return 0;
}
abi::Status cudnnConvolutionForward(abi::Handle, const void *alpha, void *xd, const void *x,
                                    void *wd, const void *w, void *c, int algo, void *ws,
                                    size_t bytes, const void *beta, void *yd, void *y) {
  return convolve(tilefuse::ConvDirection::Forward, alpha, xd, x, wd, w, c, algo, ws, bytes,
                  beta, yd, y);
}
abi::Status cudnnConvolutionBackwardData(abi::Handle, const void *alpha, void *wd, const void *w,
                                         void *dyd, const void *dy, void *c, int algo, void *ws,
                                         size_t bytes, const void *beta, void *dxd, void *dx) {
  return convolve(tilefuse::ConvDirection::GradInput, alpha, wd, w, dyd, dy, c, algo, ws,
                  bytes, beta, dxd, dx);
}
abi::Status cudnnConvolutionBackwardFilter(abi::Handle, const void *alpha, void *xd,
                                           const void *x, void *dyd, const void *dy, void *c,
                                           int algo, void *ws, size_t bytes, const void *beta,
                                           void *dwd, void *dw) {
  return convolve(tilefuse::ConvDirection::GradWeight, alpha, xd, x, dyd, dy, c, algo, ws,
                  bytes, beta, dwd, dw);
}
}
