//===- RefAttention.cpp - graph.attention in the reference interpreter ----===//
//
// The oracle for the fused attention kernels: the scores of a whole query
// row are built and softmaxed in double, the textbook way, so nothing here
// shares an algorithm (online softmax, recomputation from the log-sum-exp)
// with the kernels it checks.
//
//===----------------------------------------------------------------------===//
#include "codegen/reference/RefKernels.h"

#include "codegen/reference/Philox.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace tilefuse;
using namespace tilefuse::ref;

namespace {

/// Sizes of one attention call, read from q [B..., H, L, E], k [B..., Hk,
/// S, E], v [B..., Hk, S, Ev] and the mask [B'..., H', L, S].
struct Sizes {
  int64_t batch = 1, heads, kvHeads, queries, keys, headDim, valueDim;
  int64_t maskBatchStride = 0, maskHeadStride = 0;

  Sizes(const RefTensor &q, const RefTensor &k, const RefTensor &v, const RefTensor *mask) {
    size_t r = q.shape.size();
    for (size_t i = 0; i + 3 < r; ++i)
      batch *= q.shape[i];
    heads = q.shape[r - 3], queries = q.shape[r - 2], headDim = q.shape[r - 1];
    kvHeads = k.shape[r - 3], keys = k.shape[r - 2], valueDim = v.shape[r - 1];
    if (mask) {
      int64_t maskBatch = 1;
      for (size_t i = 0; i + 3 < r; ++i)
        maskBatch *= mask->shape[i];
      int64_t maskHeads = mask->shape[r - 3];
      maskHeadStride = maskHeads == 1 ? 0 : queries * keys;
      maskBatchStride = maskBatch == 1 ? 0 : maskHeads * queries * keys;
    }
  }
  int64_t kvHeadOf(int64_t h) const { return h / (heads / kvHeads); }
};

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

/// The masked, scaled scores of query row (b, h, i) over all keys.
std::vector<double> scoresOf(const Sizes &z, const RefTensor &q, const RefTensor &k,
                             const RefTensor *mask, double scale, bool causal, int64_t b,
                             int64_t h, int64_t i) {
  std::vector<double> s(size_t(z.keys));
  const double *qi = &q.f[size_t(((b * z.heads + h) * z.queries + i) * z.headDim)];
  int64_t kh = z.kvHeadOf(h);
  for (int64_t j = 0; j < z.keys; ++j) {
    const double *kj = &k.f[size_t(((b * z.kvHeads + kh) * z.keys + j) * z.headDim)];
    double dot = 0;
    for (int64_t e = 0; e < z.headDim; ++e)
      dot += qi[e] * kj[e];
    double score = scale * dot;
    if (mask) {
      int64_t at = b * z.maskBatchStride + h * z.maskHeadStride + i * z.keys + j;
      if (mask->isFloat())
        score += mask->f[size_t(at)];
      else if (mask->i[size_t(at)] == 0)
        score = kMinusInf;
    }
    if (causal && j > i)
      score = kMinusInf;
    s[size_t(j)] = score;
  }
  return s;
}

/// The factor dropout leaves on probability (b, h, i, j): 0 where it drops
/// it, 1 / (1 - p) where it keeps it, compared as graph.dropout's
/// decomposition does (the uniform and p in the probabilities' type).
double keptScale(const Sizes &z, const AttentionDropout &drop, DType dtype, int64_t b,
                 int64_t h, int64_t i, int64_t j) {
  if (drop.p == 0)
    return 1;
  uint64_t index = uint64_t(((b * z.heads + h) * z.queries + i) * z.keys + j);
  int bits = dtype == DType::F64 ? 32 : 24;
  double u = uniformFromBits(philoxBits(drop.seed, uint64_t(drop.stream), index), bits);
  return roundToDType(u, dtype) >= roundToDType(drop.p, dtype) ? 1.0 / (1.0 - drop.p) : 0.0;
}

/// log(sum(exp(s))), 0 where every score is -inf (PyTorch's convention for
/// a fully masked row).
double logSumExp(const std::vector<double> &s) {
  double most = kMinusInf;
  for (double x : s)
    most = std::max(most, x);
  if (most == kMinusInf)
    return 0;
  double sum = 0;
  for (double x : s)
    sum += std::exp(x - most);
  return most + std::log(sum);
}

} // namespace

std::vector<RefTensor> ref::attention(const RefTensor &q, const RefTensor &k,
                                      const RefTensor &v, const RefTensor *mask, double scale,
                                      bool causal, const AttentionDropout &drop) {
  Sizes z(q, k, v, mask);
  Shape outShape = q.shape;
  outShape.back() = z.valueDim;
  RefTensor out = RefTensor::make(q.dtype, outShape);
  RefTensor lse = RefTensor::make(q.dtype, Shape(q.shape.begin(), q.shape.end() - 1));
  for (int64_t b = 0; b < z.batch; ++b)
    for (int64_t h = 0; h < z.heads; ++h)
      for (int64_t i = 0; i < z.queries; ++i) {
        std::vector<double> s = scoresOf(z, q, k, mask, scale, causal, b, h, i);
        bool allMasked = std::all_of(s.begin(), s.end(), [](double x) { return x == kMinusInf; });
        double l = logSumExp(s);
        int64_t row = (b * z.heads + h) * z.queries + i;
        lse.f[size_t(row)] = roundToDType(l, q.dtype);
        for (int64_t c = 0; c < z.valueDim; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < z.keys && !allMasked; ++j)
            acc += std::exp(s[size_t(j)] - l) * keptScale(z, drop, q.dtype, b, h, i, j) *
                   v.f[size_t(((b * z.kvHeads + z.kvHeadOf(h)) * z.keys + j) * z.valueDim + c)];
          out.f[size_t(row * z.valueDim + c)] = roundToDType(acc, q.dtype);
        }
      }
  return {std::move(out), std::move(lse)};
}

std::vector<RefTensor> ref::attentionGrad(const RefTensor &q, const RefTensor &k,
                                          const RefTensor &v, const RefTensor &grad,
                                          const RefTensor *mask, double scale, bool causal,
                                          const AttentionDropout &drop) {
  // The probabilities are recomputed in double from q and k (not from the
  // kernel's saved log-sum-exp), so the oracle does not inherit its errors.
  Sizes z(q, k, v, mask);
  std::vector<double> dq(q.f.size()), dk(k.f.size()), dv(v.f.size());
  std::vector<double> p(size_t(z.keys)), dp(size_t(z.keys)), kept(size_t(z.keys));
  for (int64_t b = 0; b < z.batch; ++b)
    for (int64_t h = 0; h < z.heads; ++h) {
      int64_t kh = z.kvHeadOf(h);
      auto kAt = [&](int64_t j) { return size_t(((b * z.kvHeads + kh) * z.keys + j)); };
      for (int64_t i = 0; i < z.queries; ++i) {
        std::vector<double> s = scoresOf(z, q, k, mask, scale, causal, b, h, i);
        if (std::all_of(s.begin(), s.end(), [](double x) { return x == kMinusInf; }))
          continue; // a fully masked row passes no gradient
        double l = logSumExp(s);
        int64_t row = (b * z.heads + h) * z.queries + i;
        const double *g = &grad.f[size_t(row * z.valueDim)];
        // With dropout, the output reads p_j * keep_j; dp_j is the
        // cotangent of p_j (dO . v_j * keep_j).
        double delta = 0; // sum_j p_j dp_j = rowsum(dO * O)
        for (int64_t j = 0; j < z.keys; ++j) {
          p[size_t(j)] = std::exp(s[size_t(j)] - l);
          kept[size_t(j)] = keptScale(z, drop, q.dtype, b, h, i, j);
          double d = 0;
          for (int64_t c = 0; c < z.valueDim; ++c)
            d += g[c] * v.f[kAt(j) * size_t(z.valueDim) + size_t(c)];
          dp[size_t(j)] = d * kept[size_t(j)];
          delta += p[size_t(j)] * dp[size_t(j)];
        }
        const double *qi = &q.f[size_t(row * z.headDim)];
        for (int64_t j = 0; j < z.keys; ++j) {
          double pj = p[size_t(j)];
          if (pj == 0)
            continue;
          for (int64_t c = 0; c < z.valueDim; ++c)
            dv[kAt(j) * size_t(z.valueDim) + size_t(c)] += pj * kept[size_t(j)] * g[c];
          double ds = pj * (dp[size_t(j)] - delta) * scale;
          for (int64_t e = 0; e < z.headDim; ++e) {
            dq[size_t(row * z.headDim + e)] += ds * k.f[kAt(j) * size_t(z.headDim) + size_t(e)];
            dk[kAt(j) * size_t(z.headDim) + size_t(e)] += ds * qi[e];
          }
        }
      }
    }
  auto rounded = [](const RefTensor &like, std::vector<double> values) {
    RefTensor t = RefTensor::make(like.dtype, like.shape);
    for (size_t n = 0; n < values.size(); ++n)
      t.f[n] = roundToDType(values[n], like.dtype);
    return t;
  };
  return {rounded(q, std::move(dq)), rounded(k, std::move(dk)), rounded(v, std::move(dv))};
}
