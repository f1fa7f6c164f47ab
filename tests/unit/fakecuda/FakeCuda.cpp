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
// The same library is installed as libcuda.so.1, libcublas.so.13 and
// libcublasLt.so.13 in one folder (tests/CMakeLists.txt); the test runs
// with that folder on LD_LIBRARY_PATH.
//
//===----------------------------------------------------------------------===//
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace {

using KernelFn = void (*)(const uint64_t *params, unsigned grid, unsigned threads);
struct Kernel {
  std::string name;
  int params = 0;
  KernelFn fn = nullptr;
};
struct Graph {
  std::vector<std::function<void()>> work;
};

struct Fake {
  std::map<std::string, Kernel> registered;
  bool capturing = false;
  std::vector<std::function<void()>> recorded;
  int64_t launches = 0, instantiated = 0, graphLaunches = 0;
  int64_t liveStreams = 0; ///< created and not yet destroyed
  // Descriptor state of cuBLASLt.
  struct Desc {
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const float *bias = nullptr;
  };
  struct Layout {
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

/// Column-major C[m x n] = op(A) op(B), batched, f32 only.
void gemm(bool ta, bool tb, int m, int n, int k, const float *A, int lda, int64_t sa,
          const float *B, int ldb, int64_t sb, float *C, int ldc, int64_t sc, int batch,
          const std::function<float(int row, float)> &epilogue) {
  for (int q = 0; q < batch; ++q)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double acc = 0;
        for (int l = 0; l < k; ++l) {
          float a = ta ? A[q * sa + l + i * int64_t(lda)] : A[q * sa + i + l * int64_t(lda)];
          float b = tb ? B[q * sb + j + l * int64_t(ldb)] : B[q * sb + l + j * int64_t(ldb)];
          acc += double(a) * b;
        }
        C[q * sc + i + j * int64_t(ldc)] = epilogue(i, float(acc));
      }
}

} // namespace

extern "C" {

// --- test hooks --------------------------------------------------------------
void tf_fake_register_kernel(const char *name, int params, KernelFn fn) {
  fake().registered[name] = Kernel{name, params, fn};
}
int64_t tf_fake_live_streams() { return fake().liveStreams; }
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
  *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9
       : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? 0
                                                           : 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice) {
  std::strncpy(name, "Fake GPU", size_t(len));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice) {
  *c = reinterpret_cast<CUcontext>(&fake());
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
  return fake().capturing ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *p, size_t bytes) {
  void *q = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!q)
    return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(q, 0xCD, bytes); // garbage, as fresh device memory is
  *p = reinterpret_cast<CUdeviceptr>(q);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr p) {
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
  // "Cubins" of the tests are text: refuse anything else, as the driver
  // refuses a cubin for another architecture.
  if (std::strncmp(static_cast<const char *>(image), "fake", 4) != 0)
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  *m = reinterpret_cast<CUmodule>(new int(0));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleUnload(CUmodule m) {
  delete reinterpret_cast<int *>(m);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleGetFunction(CUfunction *f, CUmodule, const char *name) {
  auto it = fake().registered.find(name);
  if (it == fake().registered.end())
    return CUDA_ERROR_NOT_FOUND;
  *f = reinterpret_cast<CUfunction>(&it->second);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                unsigned by, unsigned bz, unsigned, CUstream, void **params,
                                void **) {
  auto *k = reinterpret_cast<Kernel *>(f);
  if (gy != 1 || gz != 1 || by != 1 || bz != 1 || bx == 0 || bx > 1024 || gx == 0)
    return CUDA_ERROR_INVALID_VALUE;
  // Parameters are copied at launch (or capture), as the driver does.
  std::vector<uint64_t> values;
  for (int i = 0; i < k->params; ++i)
    values.push_back(*static_cast<uint64_t *>(params[i]));
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
CUresult CUDAAPI cuGetErrorString(CUresult, const char **s) {
  *s = "fake driver error";
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
    long long sc, int batch, cublasComputeType_t, cublasGemmAlgo_t) {
  if (at != CUDA_R_32F || bt != CUDA_R_32F || ct != CUDA_R_32F ||
      *static_cast<const float *>(alpha) != 1.0f || *static_cast<const float *>(beta) != 0.0f)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  submit([=] {
    gemm(ta == CUBLAS_OP_T, tb == CUBLAS_OP_T, m, n, k, static_cast<const float *>(A), lda, sa,
         static_cast<const float *>(B), ldb, sb, static_cast<float *>(C), ldc, sc, batch,
         [](int, float v) { return v; });
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
  if (t != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  auto *layout = new Fake::Layout;
  layout->rows = rows, layout->cols = cols, layout->ld = ld;
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
    cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void *, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
    cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int requested,
    cublasLtMatmulHeuristicResult_t *results, int *count) {
  if (requested < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  std::memset(results, 0, sizeof(*results));
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d,
                                           const void *alpha, const void *A,
                                           cublasLtMatrixLayout_t al, const void *B,
                                           cublasLtMatrixLayout_t bl, const void *beta,
                                           const void *C, cublasLtMatrixLayout_t,
                                           void *D, cublasLtMatrixLayout_t dl,
                                           const cublasLtMatmulAlgo_t *, void *, size_t,
                                           cudaStream_t) {
  auto desc = *reinterpret_cast<Fake::Desc *>(d); // the attributes as of this call
  auto a = *reinterpret_cast<Fake::Layout *>(al), b = *reinterpret_cast<Fake::Layout *>(bl),
       o = *reinterpret_cast<Fake::Layout *>(dl);
  if (*static_cast<const float *>(alpha) != 1.0f || *static_cast<const float *>(beta) != 0.0f ||
      C != D)
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
  const float *biasPtr = desc.bias;
  submit([=] {
    gemm(ta, tb, m, n, k, static_cast<const float *>(A), int(a.ld), a.stride,
         static_cast<const float *>(B), int(b.ld), b.stride, static_cast<float *>(D), int(o.ld),
         o.stride, o.batch, [=](int row, float v) {
           if (bias)
             v += biasPtr[row];
           return relu && v < 0 ? 0.0f : v;
         });
  });
  return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
