//===- CudaLibrary.cpp ----------------------------------------------------===//
//
// One thread block per gathered or scattered row. A bad index sets the
// error word (what failed, the index) that the executor reads after the
// call, and its row is left alone. Scatter-adds use atomics: the order of
// additions into one row varies between runs (rounding differs in the last
// bits, within the f32 tolerance); f16/bf16 accumulate in f32 and round
// once, as the reference does.
//
//===----------------------------------------------------------------------===//
#include "codegen/cuda/CudaLibrary.h"

using namespace tilefuse;

namespace {
constexpr const char *kSource = R"(#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ __forceinline__ void tf_fail(unsigned long long *err, unsigned long long what,
                                        long long index) {
  if (atomicCAS(err, 0ull, what) == 0ull) err[1] = (unsigned long long)index;
}

template <typename I>
__device__ void tf_gather(const unsigned char *__restrict__ table, const I *__restrict__ idx,
                          unsigned char *__restrict__ out, long long rows, long long rowBytes,
                          unsigned long long *err) {
  long long q = blockIdx.x;
  long long r = (long long)idx[q];
  if (r < 0 || r >= rows) {
    if (threadIdx.x == 0) tf_fail(err, 1, r);
    return;
  }
  const unsigned char *src = table + r * rowBytes;
  unsigned char *dst = out + q * rowBytes;
  if (rowBytes % 16 == 0 && (unsigned long long)src % 16 == 0 && (unsigned long long)dst % 16 == 0) {
    for (long long i = threadIdx.x; i < rowBytes / 16; i += blockDim.x)
      reinterpret_cast<uint4 *>(dst)[i] = reinterpret_cast<const uint4 *>(src)[i];
  } else if (rowBytes % 4 == 0 && (unsigned long long)src % 4 == 0 && (unsigned long long)dst % 4 == 0) {
    for (long long i = threadIdx.x; i < rowBytes / 4; i += blockDim.x)
      reinterpret_cast<unsigned int *>(dst)[i] = reinterpret_cast<const unsigned int *>(src)[i];
  } else {
    for (long long i = threadIdx.x; i < rowBytes; i += blockDim.x) dst[i] = src[i];
  }
}

template <typename A, typename U> __device__ __forceinline__ A tf_widen1(U u) { return (A)u; }
template <> __device__ __forceinline__ float tf_widen1<float, __half>(__half u) { return __half2float(u); }
template <> __device__ __forceinline__ float tf_widen1<float, __nv_bfloat16>(__nv_bfloat16 u) { return __bfloat162float(u); }

// CUDA has no signed 64-bit atomicAdd; two's complement addition is the
// same on the unsigned type.
template <typename A> __device__ __forceinline__ void tf_atomic_add(A *p, A v) { atomicAdd(p, v); }
template <> __device__ __forceinline__ void tf_atomic_add<long long>(long long *p, long long v) {
  atomicAdd(reinterpret_cast<unsigned long long *>(p), (unsigned long long)v);
}
template <typename A, typename U, typename I>
__device__ void tf_scatter_add(A *__restrict__ acc, const I *__restrict__ idx,
                               const U *__restrict__ upd, long long rows, long long rowSize,
                               unsigned long long *err) {
  long long q = blockIdx.x;
  long long r = (long long)idx[q];
  if (r < 0 || r >= rows) {
    if (threadIdx.x == 0) tf_fail(err, 2, r);
    return;
  }
  for (long long c = threadIdx.x; c < rowSize; c += blockDim.x)
    tf_atomic_add(acc + r * rowSize + c, tf_widen1<A, U>(upd[q * rowSize + c]));
}

#define TF_GATHER(I, S)                                                                         \
  extern "C" __global__ void tf_gather_##S(const unsigned char *t, const I *i, unsigned char *o, \
                                           long long n, long long rows, long long rowBytes,     \
                                           unsigned long long *err) {                           \
    tf_gather<I>(t, i, o, rows, rowBytes, err);                                                 \
  }
TF_GATHER(int, i32)
TF_GATHER(long long, i64)

#define TF_SCATTER(NAME, A, U, I)                                                               \
  extern "C" __global__ void NAME(A *acc, const I *i, const U *u, long long n, long long rows,   \
                                  long long rowSize, unsigned long long *err) {                 \
    tf_scatter_add<A, U, I>(acc, i, u, rows, rowSize, err);                                     \
  }
TF_SCATTER(tf_scatter_add_f32_i32, float, float, int)
TF_SCATTER(tf_scatter_add_f32_i64, float, float, long long)
TF_SCATTER(tf_scatter_add_f64_i32, double, double, int)
TF_SCATTER(tf_scatter_add_f64_i64, double, double, long long)
TF_SCATTER(tf_scatter_add_i32_i32, int, int, int)
TF_SCATTER(tf_scatter_add_i32_i64, int, int, long long)
TF_SCATTER(tf_scatter_add_i64_i32, long long, long long, int)
TF_SCATTER(tf_scatter_add_i64_i64, long long, long long, long long)
TF_SCATTER(tf_scatter_add_f16_into_f32_i32, float, __half, int)
TF_SCATTER(tf_scatter_add_f16_into_f32_i64, float, __half, long long)
TF_SCATTER(tf_scatter_add_bf16_into_f32_i32, float, __nv_bfloat16, int)
TF_SCATTER(tf_scatter_add_bf16_into_f32_i64, float, __nv_bfloat16, long long)

extern "C" __global__ void tf_widen_f16(const __half *in, float *out, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __half2float(in[i]);
}
extern "C" __global__ void tf_widen_bf16(const __nv_bfloat16 *in, float *out, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __bfloat162float(in[i]);
}
extern "C" __global__ void tf_narrow_f16(const float *in, __half *out, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half_rn(in[i]);
}
extern "C" __global__ void tf_narrow_bf16(const float *in, __nv_bfloat16 *out, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}
)";
} // namespace

const std::string &tilefuse::cudaLibrarySource() {
  static const std::string source = kSource;
  return source;
}
