//===- CudaAttentionKernels.h - what the CUDA attention kernels are -*- C++ -*-===//
//
// The contract between the CUDA attention kernels' source (codegen/cuda/
// CudaAttention.cpp, which instantiates them from this table) and the
// executor that launches them (runtime/CudaExecutor.cpp): their names, the
// tiles that size their grids, and their one argument.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_CUDAATTENTIONKERNELS_H
#define TILEFUSE_RUNTIME_CUDAATTENTIONKERNELS_H

#include <cstdint>
#include <string>

namespace tilefuse {

/// Name of the artifact blob holding the attention kernels.
constexpr const char *kCudaAttentionBlob = "tf_attention";
/// Threads of every attention kernel's block.
constexpr int kCudaAttentionThreads = 128;

/// One instantiation of the kernels, for head and value dimensions up to
/// `maxDim` (the accumulators of a thread are registers sized at compile
/// time). Rows x keys are the query rows and keys of one block's tile:
/// chosen so that the shared-memory tiles stay under the 48 KiB a kernel
/// gets without opting in, and each query row (forward, dQ) or key (dK, dV)
/// is owned by kCudaAttentionThreads / rows threads of one warp.
struct CudaAttentionTiles {
  int maxDim;
  int forwardRows, forwardKeys;   ///< tf_attention_forward_dN
  int keyGradRows, keyGradKeys;   ///< tf_attention_key_grads_dN: dK, dV
  int queryGradRows, queryGradKeys; ///< tf_attention_query_grads_dN: dQ
};
constexpr CudaAttentionTiles kCudaAttentionTiles[] = {
    {64, 32, 64, 32, 32, 32, 32},
    {128, 32, 32, 16, 16, 16, 16},
};

/// The largest head (or value) dimension the CUDA kernels take; fusion
/// writes attention with larger heads out for CUDA.
constexpr int64_t kCudaAttentionMaxDim = 128;

/// The tiles for head dimension `headDim` and value dimension `valueDim`,
/// or null past kCudaAttentionMaxDim.
inline const CudaAttentionTiles *cudaAttentionTiles(int64_t headDim, int64_t valueDim) {
  for (const CudaAttentionTiles &t : kCudaAttentionTiles)
    if (headDim <= t.maxDim && valueDim <= t.maxDim)
      return &t;
  return nullptr;
}

/// "tf_attention_<kernel>_d<maxDim>".
inline std::string cudaAttentionKernel(const char *kernel, const CudaAttentionTiles &t) {
  return std::string("tf_attention_") + kernel + "_d" + std::to_string(t.maxDim);
}

/// The kernels' one argument, passed by value. Every field is 8 bytes, in
/// the order of TfAttentionArgs in the kernels' source (pointers there).
/// `mask` is null, one byte per score (maskKind 1) or f32 (2); `seed` is
/// null without dropout; the forward writes out and lse, the backward
/// reads them with dOut and writes dq, dk, dv.
struct CudaAttentionArgs {
  uint64_t q, k, v, mask, seed, out, lse, dOut, dq, dk, dv;
  int64_t batch, heads, kvHeads, queries, keys, headDim, valueDim;
  int64_t causal, maskKind, maskBatchStride, maskHeadStride, stream;
  double scale, dropoutP;
};
static_assert(sizeof(CudaAttentionArgs) == 25 * 8, "CudaAttentionArgs must have no padding");

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_CUDAATTENTIONKERNELS_H
