//===- CudaAttentionKernels.h - what the CUDA attention kernels are -*- C++ -*-===//
//
// The contract between the CUDA attention kernels' source (codegen/cuda/
// CudaAttention.cpp, which instantiates them from this table) and the
// executor that launches them (runtime/CudaExecutor.cpp): their names, the
// tiles that size their grids and shared memory, and their one argument.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_CUDAATTENTIONKERNELS_H
#define TILEFUSE_RUNTIME_CUDAATTENTIONKERNELS_H

#include "runtime/Program.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tilefuse {

/// Name of the artifact blob holding the attention kernels.
constexpr const char *kCudaAttentionBlob = "tf_attention";
/// Threads of every attention kernel's block.
constexpr int kCudaAttentionThreads = 128;
/// Shared memory a kernel may use without opting in (every GPU since sm_30).
constexpr int64_t kCudaDefaultSharedBytes = 48 << 10;

/// One instantiation of the kernels, for head and value dimensions up to
/// `maxDim` (the accumulators of a thread are registers sized at compile
/// time). Rows x keys are the query rows and keys of one block's tile; each
/// query row (forward, dQ) or key (dK, dV) is owned by
/// kCudaAttentionThreads / rows threads of one warp. The tiles live in
/// dynamic shared memory (cudaAttentionSharedBytes): up to 128 they fit the
/// 48 KiB every kernel gets; 256 needs more, which the executor opts into.
struct CudaAttentionTiles {
  int maxDim;
  int forwardRows, forwardKeys;     ///< tf_attention_forward_*: out, lse
  int keyGradRows, keyGradKeys;     ///< tf_attention_key_grads_*: dK, dV
  int queryGradRows, queryGradKeys; ///< tf_attention_query_grads_*: dQ
};
constexpr CudaAttentionTiles kCudaAttentionTiles[] = {
    {64, 32, 64, 32, 32, 32, 32},
    {128, 32, 32, 16, 16, 16, 16},
    {256, 16, 32, 16, 16, 16, 16},
};

/// The largest head (or value) dimension the CUDA kernels take; fusion
/// writes attention with larger heads out for CUDA (and those past
/// cudaAttentionMaxDimFor's for an architecture with less shared memory).
constexpr int64_t kCudaAttentionMaxDim = 256;

/// The tiles for head dimension `headDim` and value dimension `valueDim`,
/// or null past kCudaAttentionMaxDim.
inline const CudaAttentionTiles *cudaAttentionTiles(int64_t headDim, int64_t valueDim) {
  for (const CudaAttentionTiles &t : kCudaAttentionTiles)
    if (headDim <= t.maxDim && valueDim <= t.maxDim)
      return &t;
  return nullptr;
}

/// The element types of q, k, v, the outputs and their gradients that the
/// kernels take (the log-sum-exp is f32 whatever they are); arithmetic is
/// f32 throughout.
inline bool cudaAttentionTakes(DType element) {
  return element == DType::F32 || element == DType::BF16 || element == DType::F16;
}

/// The kernels one attention step launches: its element type and tiles.
struct CudaAttentionVariant {
  DType element;
  const CudaAttentionTiles *tiles;
  bool operator==(const CudaAttentionVariant &o) const {
    return element == o.element && tiles == o.tiles;
  }
};

/// The variant of attention step `st` of `program`; tiles null where the
/// heads are wider than kCudaAttentionMaxDim.
inline CudaAttentionVariant cudaAttentionVariant(const Program &program, const Step &st) {
  return {program.buffers[size_t(st.buffers[0])].dtype,
          cudaAttentionTiles(st.attention.headDim, st.attention.valueDim)};
}

/// The variants `program`'s attention steps launch, each once, in the
/// order of first use. Only these are compiled and loaded.
inline std::vector<CudaAttentionVariant> cudaAttentionVariants(const Program &program) {
  std::vector<CudaAttentionVariant> out;
  for (const Step &st : program.steps) {
    if (st.kind != Step::Kind::Attention && st.kind != Step::Kind::AttentionGrad)
      continue;
    CudaAttentionVariant v = cudaAttentionVariant(program, st);
    if (v.tiles && cudaAttentionTakes(v.element) &&
        std::find(out.begin(), out.end(), v) == out.end())
      out.push_back(v);
  }
  return out;
}

/// "tf_attention_<kernel>_<element>_d<maxDim>", e.g.
/// tf_attention_forward_bf16_d64.
inline std::string cudaAttentionKernel(const char *kernel, const CudaAttentionVariant &v) {
  return std::string("tf_attention_") + kernel + "_" + dtypeName(v.element) + "_d" +
         std::to_string(v.tiles->maxDim);
}

/// Bytes of dynamic shared memory kernel `kernel` ("forward", "key_grads",
/// "query_grads") of tiles `t` takes for q, k, v of type `element`: its
/// layout struct in the kernels' source, which checks at run time that it
/// got at least this much. f32: f32 tiles, rows padded by one float against
/// bank conflicts. 16-bit: the larger of that layout (the kernels before
/// sm_80) and the tensor-core kernels' (*MmaShared: 16-bit operand tiles
/// with rows of maxDim + 8 elements, f32 product tiles with rows of n + 4).
inline int64_t cudaAttentionSharedBytes(const std::string &kernel, const CudaAttentionTiles &t,
                                        DType element = DType::F32) {
  const int64_t row = t.maxDim + 1;
  int64_t scalar;
  if (kernel == "forward") // q tile, k or v block, probabilities
    scalar = 4 * (t.forwardRows * row + t.forwardKeys * row +
                  int64_t(t.forwardRows) * (t.forwardKeys + 1));
  else if (kernel == "key_grads") // k, v, q, dO tiles; P^T, dS^T; lse, delta
    scalar = 4 * (2 * t.keyGradKeys * row + 2 * t.keyGradRows * row +
                  2 * int64_t(t.keyGradKeys) * (t.keyGradRows + 1) + 2 * t.keyGradRows);
  else // query_grads: q, dO, k, v tiles; dS; lse, delta
    scalar = 4 * (2 * t.queryGradRows * row + 2 * t.queryGradKeys * row +
                  int64_t(t.queryGradRows) * (t.queryGradKeys + 1) + 2 * t.queryGradRows);
  if (element != DType::BF16 && element != DType::F16)
    return scalar;
  const int64_t operandRow = 2 * (t.maxDim + 8), accRow = 4 * (t.maxDim + 4);
  auto products = [](int64_t rows, int64_t keys) { return 4 * rows * (keys + 4); };
  auto operands16 = [](int64_t rows, int64_t keys) { return 2 * rows * (keys + 8); };
  int64_t mma;
  if (kernel == "forward") // q, k or v, scores or P, output rows
    mma = (t.forwardRows + t.forwardKeys) * operandRow +
          std::max(products(t.forwardRows, t.forwardKeys),
                   operands16(t.forwardRows, t.forwardKeys)) +
          t.forwardRows * accRow;
  else if (kernel == "key_grads") // k, v; then q, dO, S, dP, P, dS, lse, delta, or dK, dV
    mma = 2 * t.keyGradKeys * operandRow +
          std::max(2 * t.keyGradRows * operandRow +
                       2 * products(t.keyGradRows, t.keyGradKeys) +
                       2 * operands16(t.keyGradRows, t.keyGradKeys) + 8 * t.keyGradRows,
                   2 * t.keyGradKeys * accRow);
  else // query_grads: q, dO; k, v or dQ; S, dP, dS, lse, delta
    mma = 2 * t.queryGradRows * operandRow +
          std::max(2 * t.queryGradKeys * operandRow, t.queryGradRows * accRow) +
          2 * products(t.queryGradRows, t.queryGradKeys) +
          operands16(t.queryGradRows, t.queryGradKeys) + 8 * t.queryGradRows;
  return std::max(scalar, mma);
}

/// The most shared memory a block may opt into on compute capability
/// `sm` (major * 10 + minor; CUDA's per-architecture limits).
inline int64_t cudaSharedOptInBytes(int64_t sm) {
  if (sm >= 90)
    return 227 << 10;
  if (sm == 80 || sm == 87)
    return 163 << 10;
  if (sm == 86 || sm == 89)
    return 99 << 10;
  if (sm == 70 || sm == 72)
    return 96 << 10;
  if (sm == 75)
    return 64 << 10;
  return kCudaDefaultSharedBytes;
}

/// The largest head dimension whose kernels (all three, every element
/// type) fit `optInBytes` of shared memory per block.
inline int64_t cudaAttentionMaxDimFor(int64_t optInBytes) {
  int64_t best = 0;
  for (const CudaAttentionTiles &t : kCudaAttentionTiles) {
    bool fits = true;
    for (const char *kernel : {"forward", "key_grads", "query_grads"})
      for (DType element : {DType::F32, DType::BF16})
        fits = fits && cudaAttentionSharedBytes(kernel, t, element) <= optInBytes;
    if (fits)
      best = std::max<int64_t>(best, t.maxDim);
  }
  return best;
}

/// The kernels' one argument, passed by value. Every field is 8 bytes, in
/// the order of TfAttentionArgs in the kernels' source (pointers there).
/// q, k, v, mask (additive), out, dOut, dq, dk, dv are of the variant's
/// element type, lse f32; `mask` is null, one byte per score (maskKind 1)
/// or additive (2); `seed` is null without dropout; the forward writes out
/// and lse, the backward reads them with dOut and writes dq, dk, dv.
struct CudaAttentionArgs {
  uint64_t q, k, v, mask, seed, out, lse, dOut, dq, dk, dv;
  int64_t batch, heads, kvHeads, queries, keys, headDim, valueDim;
  int64_t causal, maskKind, maskBatchStride, maskHeadStride, stream;
  double scale, dropoutP;
};
static_assert(sizeof(CudaAttentionArgs) == 25 * 8, "CudaAttentionArgs must have no padding");

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_CUDAATTENTIONKERNELS_H
