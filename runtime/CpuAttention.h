//===- CpuAttention.h - fused attention on the CPU ----------------*- C++ -*-===//
//
// graph.attention and graph.attention_grad as library steps of the CPU
// executor: FlashAttention-2's algorithm over tilefuse's thread pool. The
// forward walks blocks of keys for a block of query rows with an online
// softmax (running max and sum) and stores the output and each row's
// log-sum-exp; the backward recomputes the probabilities from the saved
// log-sum-exp. No buffer of queries x keys is ever made: the memory is the
// inputs, the outputs and a few blocks per thread.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_CPUATTENTION_H
#define TILEFUSE_RUNTIME_CPUATTENTION_H

#include "runtime/HostTensor.h"

#include <cstdint>

namespace tilefuse::cpu {

/// How the scores are masked besides causality.
enum class AttentionMask : int32_t {
  None,     ///< no mask operand
  Bool,     ///< one byte per score: 0 masks the score out (-inf), else kept
  Additive, ///< f32 added to the scaled score (-inf masks it out)
};

/// One attention call. Row-major, contiguous:
///   q   [batch, heads,   queries, headDim]
///   k   [batch, kvHeads, keys,    headDim]
///   v   [batch, kvHeads, keys,    valueDim]
///   out [batch, heads,   queries, valueDim]
///   lse [batch, heads,   queries]           (f32)
/// Query head h reads key/value head h / (heads / kvHeads) (grouped-query
/// attention; kvHeads divides heads). The mask's element for (b, h, i, j)
/// is at b * maskBatchStride + h * maskHeadStride + i * keys + j (a stride
/// of 0 broadcasts the mask over that dimension).
///
/// score(i, j) = scale * q_i . k_j, then the mask (Additive: + mask; Bool:
/// -inf where the mask byte is 0), then -inf where causal and j > i
/// (PyTorch's is_causal: the diagonal aligned top-left). A query row whose
/// scores are all -inf gets output 0 and log-sum-exp 0, as PyTorch's CPU
/// flash attention does, and passes no gradient.
struct AttentionShape {
  int64_t batch = 1, heads = 1, kvHeads = 1;
  int64_t queries = 0, keys = 0, headDim = 0, valueDim = 0;
  bool causal = false;
  double scale = 1.0;
  AttentionMask mask = AttentionMask::None;
  int64_t maskBatchStride = 0, maskHeadStride = 0;
  /// Dropout of the probabilities: P(b, h, i, j) is kept, times
  /// 1 / (1 - dropoutP), where the graph.random_uniform f32 value of element
  /// ((b heads + h) queries + i) keys + j (Philox 4x32-10, `seed`,
  /// `stream`) is >= dropoutP, else 0; the log-sum-exp is that of the
  /// scores before dropout. 0: no dropout.
  double dropoutP = 0;
  uint64_t seed = 0;
  int64_t stream = 0;
};

/// out = softmax(scores) v; lse[i] = log(sum_j exp(score(i, j))).
void attentionForward(const AttentionShape &s, const float *q, const float *k, const float *v,
                      const void *mask, float *out, float *lse);

/// The gradients of attentionForward's `out` given dOut, from the saved out
/// and lse: P = exp(score - lse), dV = P^T dOut, dP = dOut V^T,
/// dS = P * (dP - rowsum(dOut * out)), dQ = scale dS K, dK = scale dS^T Q;
/// dK and dV of a key/value head sum over the query heads that read it.
/// dq, dk, dv are written whole (not accumulated into).
void attentionBackward(const AttentionShape &s, const float *q, const float *k,
                       const float *v, const void *mask, const float *out, const float *lse,
                       const float *dOut, float *dq, float *dk, float *dv);

/// attentionForward and attentionBackward on buffers of `dtype` (f32 or
/// bf16: q, k, v, out, dOut, dq, dk, dv, an additive mask; lse is f32
/// either way). bf16 operands are widened to f32 for the f32 kernels and
/// the results rounded once.
void attentionForward(const AttentionShape &s, DType dtype, const void *q, const void *k,
                      const void *v, const void *mask, void *out, float *lse);
void attentionBackward(const AttentionShape &s, DType dtype, const void *q, const void *k,
                       const void *v, const void *mask, const void *out, const float *lse,
                       const void *dOut, void *dq, void *dk, void *dv);

/// Refuses (CompileError) an element type these kernels do not take (f16:
/// fusion for the CPU widens it); the executor asks at load.
void checkAttentionType(DType dtype);

} // namespace tilefuse::cpu

#endif // TILEFUSE_RUNTIME_CPUATTENTION_H
