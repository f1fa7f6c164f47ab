//===- CpuAttention.cpp - fused attention on the CPU ----------------------===//
//
// Each task owns the output rows it writes, so no atomics are needed: the
// forward's tasks are blocks of query rows; the backward's are whole
// key/value heads with the query heads that read them where there are
// enough of those to share out, else blocks of query rows (dQ) then blocks
// of key rows (dK, dV), which recomputes two of the five products. The
// block products go to the BLAS on the task's thread
// (cpu::sgemmOnThisThread); what is left is elementwise work on a block of
// scores (exp, row max and sum, rescaling), done by the helpers below.
//
// bf16 operands (autocast): the products take bf16 blocks with f32
// accumulation (oneDNN's bf16 matmul on the task's thread; AVX512-BF16 or
// AMX where the CPU has them), the probabilities and score gradients
// rounded to bf16 for their products as PyTorch's flash kernels do; scores,
// the softmax's statistics, the output rows and the gradients accumulate in
// f32, rounded to bf16 once at the end.
//
// The runtime is built for portable x86-64: left to itself the compiler
// would use SSE2 and call libm's expf for each of the tens of millions of
// scores a call has. The helpers are compiled for AVX-512, AVX2 and the
// baseline, picked at load time (target_clones), and the exponential is a
// range reduction by ln 2 with a polynomial, which vectorises.
//
//===----------------------------------------------------------------------===//
#include "runtime/CpuAttention.h"
#include "runtime/CpuBlockProduct.h"

#include "codegen/reference/Philox.h" // header-only, no MLIR: the bits every target draws
#include "runtime/CpuDnnl.h"
#include "runtime/CpuLibrary.h"
#include "runtime/ThreadPool.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace tilefuse;
using namespace tilefuse::cpu;

#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define TILEFUSE_VECTOR_CLONES                                                                     \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef TILEFUSE_VECTOR_CLONES
#define TILEFUSE_VECTOR_CLONES
#endif

namespace {

// A block of 256 query rows against 512 keys: its scores and their gradient
// (2 x 512 KiB) and the key and value blocks (2 x 128 KiB at a head size of
// 64) fit a 2 MiB L2 together, and the BLAS's packing of its operands is
// spread over large products. The fastest of 64-256 x 256-1024 at T = 2048,
// E = 64 on a 2-core AVX-512 Xeon: 3% under 256 x 256's time non-causal,
// 10% causal; 128 x 512 (half the scratch) took 6% more non-causal.
constexpr int64_t kQueryBlock = 256;
constexpr int64_t kKeyBlock = 512;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// 16 floats that the compiler maps onto whatever registers the clone has
/// (one AVX-512, two AVX2, four SSE). Written as plain loops instead, the
/// exponential's clamps and selects stay branches (GCC may not if-convert
/// floating-point operations that could trap) and nothing vectorises.
constexpr int64_t kLanes = 16;
typedef float Floats __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t Ints __attribute__((vector_size(kLanes * sizeof(int32_t))));
// Floats only pass between always-inlined helpers: the baseline's ABI for
// 64-byte vectors, which GCC warns about, is never used.
#pragma GCC diagnostic ignored "-Wpsabi"

inline __attribute__((always_inline)) Floats load(const float *p) {
  Floats v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline __attribute__((always_inline)) void store(float *p, const Floats &v) {
  std::memcpy(p, &v, sizeof(v));
}

/// The first n (< kLanes) floats of p, the other lanes `fill`.
inline __attribute__((always_inline)) Floats loadPartial(const float *p, int64_t n, float fill) {
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, fill);
  std::copy(p, p + n, lanes);
  return load(lanes);
}

inline __attribute__((always_inline)) void storePartial(float *p, int64_t n, const Floats &v) {
  float lanes[kLanes];
  store(lanes, v);
  std::copy(lanes, lanes + n, p);
}

inline __attribute__((always_inline)) float horizontalSum(const Floats &v) {
  float sum = 0;
  for (int64_t l = 0; l < kLanes; ++l)
    sum += v[l];
  return sum;
}

inline __attribute__((always_inline)) float horizontalMax(const Floats &v) {
  float result = kNegInf;
  for (int64_t l = 0; l < kLanes; ++l)
    result = std::max(result, v[l]);
  return result;
}

/// exp(x) to about 1 ulp for x <= 88.37 (Cephes' expf polynomial after
/// x = n ln 2 + r, |r| <= ln 2 / 2); 0 below ln(FLT_MIN), so exp(-inf) is
/// exactly 0 and results that would be denormal flush to 0 (they are
/// negligible beside a softmax's largest term, which is 1).
inline __attribute__((always_inline)) Floats vectorExp(const Floats &x) {
  constexpr float kMinArgument = -87.3365447f; // ln(FLT_MIN)
  constexpr float kMaxArgument = 88.3762626f;  // keeps n <= 127
  constexpr float kLog2e = 1.44269504088896341f;
  // Adding 1.5 * 2^23 rounds to an integer in the low mantissa bits.
  constexpr float kRoundToInteger = 12582912.0f;
  // ln 2 split so that n * kLn2High is exact for |n| <= 2^9.
  constexpr float kLn2High = 0.693359375f;
  constexpr float kLn2Low = -2.12194440e-4f;
  const Floats zero = {};
  Floats clamped = x < kMinArgument ? zero + kMinArgument : x;
  clamped = clamped > kMaxArgument ? zero + kMaxArgument : clamped;
  Floats n = (clamped * kLog2e + kRoundToInteger) - kRoundToInteger;
  Floats r = clamped - n * kLn2High - n * kLn2Low;
  Floats poly = zero + 1.9875691500e-4f;
  poly = poly * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  Floats expR = poly * (r * r) + r + 1.0f;
  Ints powerBits = (__builtin_convertvector(n, Ints) + 127) << 23;
  powerBits = x < kMinArgument ? Ints{} : powerBits;
  Floats power;
  std::memcpy(&power, &powerBits, sizeof(power));
  return expR * power;
}

typedef uint32_t Words __attribute__((vector_size(kLanes * sizeof(uint32_t))));
typedef uint16_t Halves __attribute__((vector_size(kLanes * sizeof(uint16_t))));

/// x rounded to bf16 (to nearest even, NaN kept quiet: HostTensor's
/// floatToBF16, a vector at a time).
inline __attribute__((always_inline)) Halves roundToBf16(const Floats &x) {
  Words bits;
  std::memcpy(&bits, &x, sizeof bits);
  Words rounded = (bits + (0x7fffu + ((bits >> 16) & 1u))) >> 16;
  Words nan = (bits >> 16) | 0x40u;
  Words out = (bits & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
  return __builtin_convertvector(out, Halves);
}

/// The first n (<= kLanes) lanes of x rounded to bf16 into dst.
inline __attribute__((always_inline)) void storeBf16(uint16_t *dst, int64_t n, const Floats &x) {
  Halves h = roundToBf16(x);
  if (n == kLanes) {
    std::memcpy(dst, &h, sizeof h);
    return;
  }
  uint16_t lanes[kLanes];
  std::memcpy(lanes, &h, sizeof h);
  std::copy(lanes, lanes + n, dst);
}

/// 16 bf16 values widened to f32 (exact).
inline __attribute__((always_inline)) Floats loadBf16(const uint16_t *p) {
  Halves h;
  std::memcpy(&h, p, sizeof h);
  Words bits = __builtin_convertvector(h, Words) << 16;
  Floats x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

/// The first n (< kLanes) floats of x times scale, the other lanes -inf
/// (whatever the scale's sign).
inline __attribute__((always_inline)) Floats loadScaledPartial(const float *x, int64_t n,
                                                               float scale) {
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, kNegInf);
  for (int64_t l = 0; l < n; ++l)
    lanes[l] = x[l] * scale;
  return load(lanes);
}

/// max_j (x[j] * scale) over n floats (-inf for none): the row's largest
/// scaled score, the same floats the exponential pass computes.
TILEFUSE_VECTOR_CLONES
float scaledRowMax(const float *x, int64_t n, float scale) {
  Floats lanes = Floats{} + kNegInf;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    Floats v = load(x + j) * scale;
    lanes = lanes < v ? v : lanes;
  }
  if (j < n) {
    Floats tail = loadScaledPartial(x + j, n - j, scale);
    lanes = lanes < tail ? tail : lanes;
  }
  return horizontalMax(lanes);
}

/// e[j] = exp(x[j] * scale - shift) for j < visible, 0 for visible <= j < n:
/// stored over x where `keepF32`, rounded to bf16 into `bf16` where it is
/// not null (the operand of the next product). Returns the sum of e in f32.
/// One pass over the row, where scaling, exponentials and rounding each
/// took one (the scores block lives in L2: the passes were the cost).
TILEFUSE_VECTOR_CLONES
float exponentials(float *x, int64_t visible, int64_t n, float scale, float shift, bool keepF32,
                   uint16_t *bf16) {
  Floats sum = {};
  int64_t j = 0;
  for (; j + kLanes <= visible; j += kLanes) {
    Floats e = vectorExp(load(x + j) * scale - shift);
    if (keepF32)
      store(x + j, e);
    if (bf16)
      storeBf16(bf16 + j, kLanes, e);
    sum += e;
  }
  if (j < visible) {
    Floats e = vectorExp(loadScaledPartial(x + j, visible - j, scale) - shift);
    int64_t lanes = std::min(kLanes, n - j);
    if (keepF32)
      storePartial(x + j, lanes, e); // lanes past `visible` hold exp(-inf) = 0
    if (bf16)
      storeBf16(bf16 + j, lanes, e);
    sum += e;
    j += lanes;
  }
  if (keepF32)
    std::fill(x + j, x + n, 0.0f);
  if (bf16)
    std::fill(bf16 + j, bf16 + n, uint16_t(0));
  return horizontalSum(sum);
}

TILEFUSE_VECTOR_CLONES
float dot(const float *x, const float *y, int64_t n) {
  Floats sum = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    sum += load(x + j) * load(y + j);
  sum += loadPartial(x + j, n - j, 0.0f) * loadPartial(y + j, n - j, 0.0f);
  return horizontalSum(sum);
}

/// The dot product of two bf16 rows, accumulated in f32.
TILEFUSE_VECTOR_CLONES
float dotBf16(const uint16_t *x, const uint16_t *y, int64_t n) {
  Floats sum = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    sum += loadBf16(x + j) * loadBf16(y + j);
  float tail = 0.0f;
  for (; j < n; ++j)
    tail += bf16ToFloat(x[j]) * bf16ToFloat(y[j]);
  return horizontalSum(sum) + tail;
}

TILEFUSE_VECTOR_CLONES
void scaleRow(float *x, int64_t n, float factor) {
  for (int64_t j = 0; j < n; ++j)
    x[j] *= factor;
}

/// dS = p * (dp - delta) * scale, the softmax's gradient for one row times
/// the softmax's scale (what both of dS's products take): over p where
/// `bf16` is null, else rounded to bf16 into it.
TILEFUSE_VECTOR_CLONES
void softmaxGradient(float *p, const float *dp, int64_t n, float delta, float scale,
                     uint16_t *bf16) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    Floats g = load(p + j) * (load(dp + j) - delta) * scale;
    if (bf16)
      storeBf16(bf16 + j, kLanes, g);
    else
      store(p + j, g);
  }
  if (j < n) {
    Floats g = loadPartial(p + j, n - j, 0.0f) * (loadPartial(dp + j, n - j, 0.0f) - delta) * scale;
    if (bf16)
      storeBf16(bf16 + j, n - j, g);
    else
      storePartial(p + j, n - j, g);
  }
}

/// dst[n] = scale * src rounded to bf16.
TILEFUSE_VECTOR_CLONES
void roundRowToBf16(const float *src, int64_t n, float scale, uint16_t *dst) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    storeBf16(dst + j, kLanes, load(src + j) * scale);
  if (j < n)
    storeBf16(dst + j, n - j, loadPartial(src + j, n - j, 0.0f) * scale);
}

/// dst[rows x cols] (leading dimension ldd) = scale * src (leading
/// dimension ld), rounded to bf16.
void toBf16(const float *src, int64_t rows, int64_t cols, int64_t ld, float scale, uint16_t *dst,
            int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r)
    roundRowToBf16(src + r * ld, cols, scale, dst + r * ldd);
}

/// C[m x n] (leading dimension ldc) = op(A) op(B), or += with `accumulate`,
/// for bf16 A and B (f32 accumulation): oneDNN's bf16 matmul on this thread,
/// else both operands widened for the BLAS.
void bf16Product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t *a,
                 int64_t lda, const uint16_t *b, int64_t ldb, float *c, int64_t ldc,
                 bool accumulate, std::vector<float> &wideA, std::vector<float> &wideB) {
  if (dnnlBf16GemmSlab(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate))
    return;
  auto widen = [](const uint16_t *x, int64_t rows, int64_t cols, int64_t ld,
                  std::vector<float> &out) {
    out.resize(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = 0; col < cols; ++col)
        out[size_t(r * cols + col)] = bf16ToFloat(x[r * ld + col]);
  };
  int64_t aCols = ta ? m : k, bCols = tb ? k : n;
  widen(a, ta ? k : m, aCols, lda, wideA);
  widen(b, tb ? n : k, bCols, ldb, wideB);
  sgemmOnThisThread(ta, tb, m, n, k, 1.0f, wideA.data(), aCols, wideB.data(), bCols,
                    accumulate ? 1.0f : 0.0f, c, ldc);
}

/// C[m x n] (leading dimension ldc) += op(A) op(B), f32, on this thread.
/// A transposed (dV += P^T dO, dK += dS^T Q) goes to blockProduct, which
/// reads A^T in place: 1.14x oneDNN's speed for [512 x 256]^T [256 x 64]
/// alone, the backward 1.12x (bench/results/2026-12-06-attention-block-
/// products.md); oneDNN's kernels are as fast or faster for the others. Else oneDNN's matmul with a sum post-op where it takes the shape
/// (its JIT kernels read the operands in place, where OpenBLAS packs them
/// first), else the BLAS.
void accumulateProduct(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                       int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc) {
  if (ta && !tb && haveBlockProduct()) {
    blockProduct(m, n, k, a, /*aRowStride=*/1, /*aColStride=*/lda, b, ldb, c, ldc,
                 /*accumulate=*/true);
    return;
  }
  if (!dnnlSgemmSlab(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, /*accumulate=*/true))
    sgemmOnThisThread(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 1.0f, c, ldc);
}

/// Blocks of scores and their gradient, kept per thread: a call's tasks
/// reuse them, and so do later calls.
struct BlockScratch {
  std::vector<float> scores, scoreGrads, rowMax, rowSum;
  /// Dropout's factors for a block (0 or 1 / (1 - p)), sized on first use.
  std::vector<float> kept;
  /// bf16 operands only (sized on first use): a block of probabilities or
  /// score gradients rounded for a product with a bf16 operand, a block of
  /// output rows accumulating in f32, and both operands of a product
  /// widened where oneDNN cannot take them.
  std::vector<uint16_t> block16;
  std::vector<float> outRows, wideA, wideB;
  /// A block of query rows times the softmax's scale (f32 scores).
  std::vector<float> scaledQuery;
  static BlockScratch &forThisThread() {
    thread_local BlockScratch scratch;
    if (scratch.scores.empty()) {
      scratch.scores.resize(size_t(kQueryBlock * kKeyBlock));
      scratch.scoreGrads.resize(size_t(kQueryBlock * kKeyBlock));
      scratch.rowMax.resize(size_t(kQueryBlock));
      scratch.rowSum.resize(size_t(kQueryBlock));
    }
    return scratch;
  }
};

/// The operands' addresses, and the score blocks both passes compute.
class Attention {
public:
  /// `bf16`: q, k, v (and the forward's out, the backward's out and dOut,
  /// an additive mask) are bf16, else f32; the products then take bf16
  /// operands with f32 accumulation, everything else stays f32.
  Attention(const AttentionShape &shape, const void *q, const void *k, const void *v,
            const void *mask, bool bf16)
      : s(shape), q(q), k(k), v(v), mask(mask), bf16(bf16), scale(float(shape.scale)),
        group(shape.kvHeads > 0 ? shape.heads / shape.kvHeads : 1) {}

  const AttentionShape &s;
  const void *q, *k, *v;
  const void *mask;
  bool bf16;
  float scale;
  int64_t group; ///< query heads per key/value head

  /// Row `row` of a [rows, dim] operand `x` of this attention's type.
  template <typename T> static const T *rowOf(const void *x, int64_t row, int64_t dim) {
    return static_cast<const T *>(x) + row * dim;
  }

  /// Index of query row i of head (b, h) among all query rows.
  int64_t queryRow(int64_t b, int64_t h, int64_t i) const {
    return (b * s.heads + h) * s.queries + i;
  }
  /// Index of key row j of the key/value head query head (b, h) reads.
  int64_t keyRow(int64_t b, int64_t h, int64_t j) const {
    return (b * s.kvHeads + h / group) * s.keys + j;
  }
  /// The keys a block of query rows ending at `queryEnd` sees at all.
  int64_t keyEnd(int64_t queryEnd) const { return s.causal ? std::min(s.keys, queryEnd) : s.keys; }
  /// The first query row that sees key `j`.
  int64_t firstQuery(int64_t j) const { return s.causal ? j : 0; }
  /// How many of the keys [j0, j0 + n) query row i sees (the rest are
  /// causally masked).
  int64_t visibleKeys(int64_t i, int64_t j0, int64_t n) const {
    return s.causal ? std::clamp<int64_t>(i + 1 - j0, 0, n) : n;
  }

  /// scores[r x n] (leading dimension kKeyBlock) = the masked scores of
  /// query rows [i0, i0 + r) of head (b, h) against keys [j0, j0 + n);
  /// causality is left to visibleKeys. Returns the factor the scores still
  /// need, which the caller's next pass over them applies: the softmax's
  /// scale for unmasked bf16 operands, else 1 (scaled here).
  float scores(int64_t b, int64_t h, int64_t i0, int64_t r, int64_t j0, int64_t n,
               float *out) const {
    int64_t qRow = queryRow(b, h, i0), kRow = keyRow(b, h, j0);
    if (bf16) {
      BlockScratch &scratch = BlockScratch::forThisThread();
      bf16Product(false, true, r, n, s.headDim, rowOf<uint16_t>(q, qRow, s.headDim), s.headDim,
                  rowOf<uint16_t>(k, kRow, s.headDim), s.headDim, out, kKeyBlock, false,
                  scratch.wideA, scratch.wideB);
      if (s.mask == AttentionMask::None)
        return scale;
      for (int64_t row = 0; row < r; ++row)
        scaleRow(out + row * kKeyBlock, n, scale);
      addMask(b, h, i0, r, j0, n, out);
      return 1.0f;
    }
    const float *qRows = rowOf<float>(q, qRow, s.headDim);
    const float *kRows = rowOf<float>(k, kRow, s.headDim);
    // Q K^T has B transposed, where oneDNN's kernels beat OpenBLAS's
    // (bench/results/2026-12-05-f32-gemm-library.md); it takes no alpha,
    // so the scale goes into a copy of the r query rows (r x E products
    // instead of r x n on the scores: 1/8 of them at E = 64, n = 512).
    BlockScratch &scratch = BlockScratch::forThisThread();
    scratch.scaledQuery.resize(size_t(r * s.headDim));
    float *scaled = scratch.scaledQuery.data();
    for (int64_t i = 0; i < r * s.headDim; ++i)
      scaled[i] = qRows[i] * scale;
    if (!dnnlSgemmSlab(false, true, r, n, s.headDim, scaled, s.headDim, kRows, s.headDim, out,
                       kKeyBlock)) {
      sgemmOnThisThread(false, true, r, n, s.headDim, scale, qRows, s.headDim, kRows, s.headDim,
                        0.0f, out, kKeyBlock);
    }
    addMask(b, h, i0, r, j0, n, out);
    return 1.0f;
  }

  /// The mask applied to a block of scaled scores (see scores).
  void addMask(int64_t b, int64_t h, int64_t i0, int64_t r, int64_t j0, int64_t n,
               float *out) const {
    if (s.mask == AttentionMask::None)
      return;
    int64_t maskStart = b * s.maskBatchStride + h * s.maskHeadStride + i0 * s.keys + j0;
    for (int64_t row = 0; row < r; ++row) {
      float *scoreRow = out + row * kKeyBlock;
      int64_t offset = maskStart + row * s.keys;
      if (s.mask == AttentionMask::Additive && bf16) {
        const uint16_t *maskRow = static_cast<const uint16_t *>(mask) + offset;
        for (int64_t c = 0; c < n; ++c)
          scoreRow[c] += bf16ToFloat(maskRow[c]);
      } else if (s.mask == AttentionMask::Additive) {
        const float *maskRow = static_cast<const float *>(mask) + offset;
        for (int64_t c = 0; c < n; ++c)
          scoreRow[c] += maskRow[c];
      } else {
        const uint8_t *maskRow = static_cast<const uint8_t *>(mask) + offset;
        for (int64_t c = 0; c < n; ++c)
          scoreRow[c] = maskRow[c] ? scoreRow[c] : kNegInf;
      }
    }
  }

  /// scores -> P = exp(pendingScale * score - lse) for rows [i0, i0 + r),
  /// 0 where a key is causally hidden, in place; also rounded to bf16 into
  /// p16 (leading dimension kKeyBlock) where it is not null. A fully masked
  /// row has lse 0 and scores -inf: P = 0.
  void probabilities(int64_t i0, int64_t r, int64_t j0, int64_t n, const float *lse,
                     float pendingScale, float *scoreBlock, uint16_t *p16) const {
    for (int64_t row = 0; row < r; ++row)
      exponentials(scoreBlock + row * kKeyBlock, visibleKeys(i0 + row, j0, n), n, pendingScale,
                   lse[row], /*keepF32=*/true, p16 ? p16 + row * kKeyBlock : nullptr);
  }

  /// Recomputes P for a block and turns it into dS = scale * P * (dP - delta)
  /// (the softmax's scale included: both of dS's products take it), where
  /// dP = dO V^T; `dV` (the key rows' value gradient), when given, gets
  /// P^T dO first. dS is left in scratch.scores for f32 operands, rounded to
  /// bf16 in scratch.block16 for bf16 ones.
  void scoreGradients(int64_t b, int64_t h, int64_t i0, int64_t r, int64_t j0, int64_t n,
                      const float *lse, const float *delta, const void *dOut, float *dV,
                      BlockScratch &scratch) const {
    float *p = scratch.scores.data(), *dP = scratch.scoreGrads.data();
    float pendingScale = scores(b, h, i0, r, j0, n, p);
    const float *kept = s.dropoutP != 0 ? keptFactors(b, h, i0, r, j0, n, scratch) : nullptr;
    uint16_t *p16 = nullptr;
    if (bf16) {
      scratch.block16.resize(size_t(kQueryBlock * kKeyBlock));
      // Without dropout, dV's product takes P itself: rounded as it is made.
      if (dV && !kept)
        p16 = scratch.block16.data();
    }
    probabilities(i0, r, j0, n, lse + queryRow(b, h, i0), pendingScale, p, p16);
    if (bf16) {
      bf16ScoreGradients(b, h, i0, r, j0, n, delta, dOut, dV, kept, scratch);
      return;
    }
    const float *dOutRows = rowOf<float>(dOut, queryRow(b, h, i0), s.valueDim);
    // With dropout the output reads P * kept: dV takes the dropped
    // probabilities, and dP (the cotangent of P) is dO V^T * kept; dS
    // still multiplies the undropped P.
    if (kept)
      dropped(p, kept, r, n, dP);
    if (dV)
      accumulateProduct(true, false, n, s.valueDim, r, kept ? dP : p, kKeyBlock, dOutRows,
                        s.valueDim, dV, s.valueDim);
    const float *vRows = rowOf<float>(v, keyRow(b, h, j0), s.valueDim);
    if (!dnnlSgemmSlab(false, true, r, n, s.valueDim, dOutRows, s.valueDim, vRows, s.valueDim, dP,
                       kKeyBlock)) // dO V^T: B transposed, as Q K^T
      sgemmOnThisThread(false, true, r, n, s.valueDim, 1.0f, dOutRows, s.valueDim, vRows,
                        s.valueDim, 0.0f, dP, kKeyBlock);
    softmaxGradients(b, h, i0, r, n, kept, delta, scratch);
  }

  /// out = p * kept over a block of r x n (leading dimension kKeyBlock).
  static void dropped(const float *p, const float *kept, int64_t r, int64_t n, float *out) {
    for (int64_t row = 0; row < r; ++row)
      for (int64_t c = 0; c < n; ++c)
        out[row * kKeyBlock + c] = p[row * kKeyBlock + c] * kept[row * kKeyBlock + c];
  }

  /// dS = scale * P * (dP * kept - delta) from P in scratch.scores and dO V^T
  /// in scratch.scoreGrads (kept: dropout's factors, or null): over P for
  /// f32 operands, rounded to bf16 into scratch.block16 for bf16 ones.
  void softmaxGradients(int64_t b, int64_t h, int64_t i0, int64_t r, int64_t n,
                        const float *kept, const float *delta, BlockScratch &scratch) const {
    float *p = scratch.scores.data(), *dP = scratch.scoreGrads.data();
    if (kept)
      for (int64_t row = 0; row < r; ++row)
        for (int64_t c = 0; c < n; ++c)
          dP[row * kKeyBlock + c] *= kept[row * kKeyBlock + c];
    const float *rowDelta = delta + queryRow(b, h, i0);
    uint16_t *dS16 = bf16 ? scratch.block16.data() : nullptr;
    for (int64_t row = 0; row < r; ++row)
      softmaxGradient(p + row * kKeyBlock, dP + row * kKeyBlock, n, rowDelta[row], scale,
                      dS16 ? dS16 + row * kKeyBlock : nullptr);
  }

  /// scoreGradients' products for bf16 operands, given P in scratch.scores
  /// (and, without dropout, P rounded in scratch.block16 where dV is
  /// wanted): P (dropped) for dV += P^T dO, dP = dO V^T.
  void bf16ScoreGradients(int64_t b, int64_t h, int64_t i0, int64_t r, int64_t j0, int64_t n,
                          const float *delta, const void *dOut, float *dV, const float *kept,
                          BlockScratch &scratch) const {
    float *p = scratch.scores.data(), *dP = scratch.scoreGrads.data();
    const uint16_t *dOutRows = rowOf<uint16_t>(dOut, queryRow(b, h, i0), s.valueDim);
    const uint16_t *vRows = rowOf<uint16_t>(v, keyRow(b, h, j0), s.valueDim);
    if (dV) {
      uint16_t *p16 = scratch.block16.data();
      if (kept) { // the dropped probabilities in dP's block, then rounded
        dropped(p, kept, r, n, dP);
        toBf16(dP, r, n, kKeyBlock, 1.0f, p16, kKeyBlock);
      }
      bf16Product(true, false, n, s.valueDim, r, p16, kKeyBlock, dOutRows, s.valueDim, dV,
                  s.valueDim, true, scratch.wideA, scratch.wideB);
    }
    bf16Product(false, true, r, n, s.valueDim, dOutRows, s.valueDim, vRows, s.valueDim, dP,
                kKeyBlock, false, scratch.wideA, scratch.wideB);
    softmaxGradients(b, h, i0, r, n, kept, delta, scratch);
  }

  /// C += dS op(X) for bf16 X (Q or K rows), the rounded dS (r x n, or its
  /// transpose with `transposed`) in scratch.block16.
  void bf16ScoreGradientProduct(bool transposed, int64_t r, int64_t n, const uint16_t *x,
                                int64_t dim, float *c, BlockScratch &scratch) const {
    bf16Product(transposed, false, transposed ? n : r, dim, transposed ? r : n,
                scratch.block16.data(), kKeyBlock, x, dim, c, dim, true, scratch.wideA,
                scratch.wideB);
  }

  /// Dropout's factor for scores [r x n] of rows i0.. and keys j0.. of head
  /// (b, h) in scratch.kept: graph.random_uniform's f32 value of element
  /// ((b H + h) L + i) S + j compared with p as graph.dropout does, so the
  /// written-out form drops the same probabilities.
  const float *keptFactors(int64_t b, int64_t h, int64_t i0, int64_t r, int64_t j0, int64_t n,
                           BlockScratch &scratch) const {
    if (scratch.kept.empty())
      scratch.kept.resize(size_t(kQueryBlock * kKeyBlock));
    float *out = scratch.kept.data();
    const float p = float(s.dropoutP), keep = float(1.0 / (1.0 - s.dropoutP));
    const auto stream = uint64_t(s.stream);
    for (int64_t row = 0; row < r; ++row) {
      uint64_t first = uint64_t(((b * s.heads + h) * s.queries + i0 + row) * s.keys + j0);
      float *factors = out + row * kKeyBlock;
      // One Philox call gives the words of four consecutive elements.
      for (int64_t c = 0; c < n;) {
        uint64_t index = first + uint64_t(c), block = index / 4;
        auto words = philox4x32_10(
            {uint32_t(block), uint32_t(block >> 32), uint32_t(stream), 0u},
            {uint32_t(s.seed), uint32_t(s.seed >> 32)});
        for (uint64_t w = index % 4; w < 4 && c < n; ++w, ++c) {
          float u = float(words[w] >> 8) * 0x1p-24f;
          factors[c] = u >= p ? keep : 0.0f;
        }
      }
    }
    return out;
  }

  /// Floating-point operations of one block of query rows against all keys
  /// (the forward's two products), to size the pool's ranges.
  double blockFlops() const {
    double keys = s.causal ? 0.5 * double(s.keys) : double(s.keys);
    return 2.0 * double(std::min(s.queries, kQueryBlock)) * keys * double(s.headDim + s.valueDim);
  }
};

int64_t blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }

/// Items per range so that a range is worth waking a thread for (~1 MFLOP).
int64_t minItemsPerRange(double flopsPerItem) {
  return std::max<int64_t>(1, int64_t(1e6 / std::max(1.0, flopsPerItem)));
}

void forwardBlock(const Attention &a, int64_t b, int64_t h, int64_t i0, void *out, float *lse) {
  const AttentionShape &s = a.s;
  BlockScratch &scratch = BlockScratch::forThisThread();
  int64_t r = std::min(kQueryBlock, s.queries - i0);
  // bf16: the rows accumulate in f32 and are rounded once at the end.
  if (a.bf16)
    scratch.outRows.resize(size_t(kQueryBlock * s.valueDim));
  float *outRows = a.bf16 ? scratch.outRows.data()
                          : static_cast<float *>(out) + a.queryRow(b, h, i0) * s.valueDim;
  float *runningMax = scratch.rowMax.data(), *runningSum = scratch.rowSum.data();
  std::fill(outRows, outRows + r * s.valueDim, 0.0f);
  std::fill(runningMax, runningMax + r, kNegInf);
  std::fill(runningSum, runningSum + r, 0.0f);
  float *p = scratch.scores.data();
  int64_t keyEnd = a.keyEnd(i0 + r);
  for (int64_t j0 = 0; j0 < keyEnd; j0 += kKeyBlock) {
    int64_t n = std::min(kKeyBlock, keyEnd - j0);
    float pendingScale = a.scores(b, h, i0, r, j0, n, p);
    // bf16 without dropout: P is rounded for its product with V as it is
    // made, and its f32 values are not kept.
    uint16_t *p16 = nullptr;
    if (a.bf16) {
      scratch.block16.resize(size_t(kQueryBlock * kKeyBlock));
      if (s.dropoutP == 0)
        p16 = scratch.block16.data();
    }
    for (int64_t row = 0; row < r; ++row) {
      float *pRow = p + row * kKeyBlock;
      uint16_t *p16Row = p16 ? p16 + row * kKeyBlock : nullptr;
      int64_t visible = a.visibleKeys(i0 + row, j0, n);
      float oldMax = runningMax[row];
      float newMax = std::max(oldMax, scaledRowMax(pRow, visible, pendingScale));
      // Every score so far is -inf: exp(-inf - -inf) would be NaN, and
      // the row has nothing to add yet.
      if (newMax == kNegInf) {
        exponentials(pRow, 0, n, pendingScale, 0.0f, !p16Row, p16Row); // zeros
        continue;
      }
      float sum = exponentials(pRow, visible, n, pendingScale, newMax, !p16Row, p16Row);
      if (newMax != oldMax) {
        float rescale = std::exp(oldMax - newMax);
        runningSum[row] *= rescale;
        scaleRow(outRows + row * s.valueDim, s.valueDim, rescale);
        runningMax[row] = newMax;
      }
      runningSum[row] += sum;
    }
    if (s.dropoutP != 0) { // the running sums above are of the undropped P
      const float *kept = a.keptFactors(b, h, i0, r, j0, n, scratch);
      for (int64_t row = 0; row < r; ++row)
        for (int64_t c = 0; c < n; ++c)
          p[row * kKeyBlock + c] *= kept[row * kKeyBlock + c];
    }
    if (a.bf16) { // P rounded to bf16 for its product with V
      if (!p16)
        toBf16(p, r, n, kKeyBlock, 1.0f, scratch.block16.data(), kKeyBlock);
      bf16Product(false, false, r, s.valueDim, n, scratch.block16.data(), kKeyBlock,
                  Attention::rowOf<uint16_t>(a.v, a.keyRow(b, h, j0), s.valueDim), s.valueDim,
                  outRows, s.valueDim, true, scratch.wideA, scratch.wideB);
      continue;
    }
    accumulateProduct(false, false, r, s.valueDim, n, p, kKeyBlock,
                      Attention::rowOf<float>(a.v, a.keyRow(b, h, j0), s.valueDim), s.valueDim,
                      outRows, s.valueDim);
  }
  float *lseRows = lse + a.queryRow(b, h, i0);
  for (int64_t row = 0; row < r; ++row) {
    if (runningSum[row] == 0.0f) {
      std::fill(outRows + row * s.valueDim, outRows + (row + 1) * s.valueDim, 0.0f);
      lseRows[row] = 0.0f;
      continue;
    }
    scaleRow(outRows + row * s.valueDim, s.valueDim, 1.0f / runningSum[row]);
    lseRows[row] = runningMax[row] + std::log(runningSum[row]);
  }
  if (a.bf16) {
    uint16_t *dst = static_cast<uint16_t *>(out) + a.queryRow(b, h, i0) * s.valueDim;
    toBf16(outRows, r, s.valueDim, s.valueDim, 1.0f, dst, s.valueDim);
  }
}

/// delta = rowsum(dOut * out) for query rows [i0, i0 + r) of head (b, h).
void rowDeltas(const Attention &a, int64_t b, int64_t h, int64_t i0, int64_t r, const void *out,
               const void *dOut, float *delta) {
  int64_t first = a.queryRow(b, h, i0), dv = a.s.valueDim;
  for (int64_t row = first; row < first + r; ++row) {
    if (!a.bf16) {
      delta[row] = dot(Attention::rowOf<float>(dOut, row, dv), Attention::rowOf<float>(out, row, dv),
                       dv);
      continue;
    }
    delta[row] = dotBf16(Attention::rowOf<uint16_t>(dOut, row, dv),
                         Attention::rowOf<uint16_t>(out, row, dv), dv);
  }
}

/// One of the backward's outputs (dq, dk or dv), `width` floats a row, and
/// how a task writes its rows: f32 outputs are accumulated in place; bf16
/// ones accumulate in f32 rows of the task's thread and are rounded once,
/// when the task is done with them (no gradient-sized f32 buffer, no
/// separate pass rounding one).
struct GradientOutput {
  void *data;
  int64_t width;
  bool bf16;

  /// Zeroed f32 rows [first, first + count) to accumulate into: the
  /// output's own, or `scratch` (grown as needed) for bf16.
  float *open(int64_t first, int64_t count, std::vector<float> &scratch) const {
    float *rows = static_cast<float *>(data) + first * width;
    if (bf16) {
      scratch.resize(std::max(scratch.size(), size_t(count * width)));
      rows = scratch.data();
    }
    std::fill(rows, rows + count * width, 0.0f);
    return rows;
  }
  /// The rows of open(first, count) are final: bf16 ones are rounded.
  void close(const float *rows, int64_t first, int64_t count) const {
    if (bf16)
      roundRowToBf16(rows, count * width, 1.0f, static_cast<uint16_t *>(data) + first * width);
  }
};

struct Gradients {
  GradientOutput dq, dk, dv;
};

/// Per-thread f32 rows of the gradients a bf16 backward task accumulates,
/// kept between tasks and calls up to kKeptGradientFloats each (a head
/// group of GPT-2 small's: 128 KiB); larger ones (long sequences, many
/// query heads per key/value head) are given back when the task is done.
constexpr size_t kKeptGradientFloats = size_t(1) << 22; // 16 MiB
struct GradientScratch {
  std::vector<float> dq, dk, dv;
  static GradientScratch &forThisThread() {
    thread_local GradientScratch scratch;
    return scratch;
  }
  void trim() {
    for (std::vector<float> *rows : {&dq, &dk, &dv})
      if (rows->size() > kKeptGradientFloats)
        std::vector<float>().swap(*rows);
  }
};

/// dQ for a block of query rows (computing their deltas first).
void queryGradientBlock(const Attention &a, int64_t b, int64_t h, int64_t i0, const void *out,
                        const float *lse, const void *dOut, float *delta, const Gradients &g) {
  const AttentionShape &s = a.s;
  BlockScratch &scratch = BlockScratch::forThisThread();
  int64_t r = std::min(kQueryBlock, s.queries - i0);
  rowDeltas(a, b, h, i0, r, out, dOut, delta);
  int64_t firstRow = a.queryRow(b, h, i0);
  float *dqRows = g.dq.open(firstRow, r, GradientScratch::forThisThread().dq);
  int64_t keyEnd = a.keyEnd(i0 + r);
  for (int64_t j0 = 0; j0 < keyEnd; j0 += kKeyBlock) {
    int64_t n = std::min(kKeyBlock, keyEnd - j0);
    a.scoreGradients(b, h, i0, r, j0, n, lse, delta, dOut, nullptr, scratch);
    if (a.bf16) {
      a.bf16ScoreGradientProduct(false, r, n,
                                 Attention::rowOf<uint16_t>(a.k, a.keyRow(b, h, j0), s.headDim),
                                 s.headDim, dqRows, scratch);
      continue;
    }
    accumulateProduct(false, false, r, s.headDim, n, scratch.scores.data(), kKeyBlock,
                      Attention::rowOf<float>(a.k, a.keyRow(b, h, j0), s.headDim), s.headDim,
                      dqRows, s.headDim);
  }
  g.dq.close(dqRows, firstRow, r);
  GradientScratch::forThisThread().trim();
}

/// dK and dV for a block of key rows of key/value head (b, kvHead), over
/// every query head that reads it, into dkRows and dvRows (the block's
/// rows); with `dqHeads` (the f32 dQ rows of the group's query heads, all
/// queries of each), also adds the block's share of those heads' dQ.
void keyGradientBlock(const Attention &a, int64_t b, int64_t kvHead, int64_t j0, const float *lse,
                      const void *dOut, const float *delta, float *dqHeads, float *dkRows,
                      float *dvRows) {
  const AttentionShape &s = a.s;
  BlockScratch &scratch = BlockScratch::forThisThread();
  int64_t firstHead = kvHead * a.group;
  int64_t keyRow = a.keyRow(b, firstHead, j0);
  int64_t blockKeys = std::min(kKeyBlock, s.keys - j0);
  for (int64_t h = firstHead; h < firstHead + a.group; ++h)
    for (int64_t i0 = a.firstQuery(j0) / kQueryBlock * kQueryBlock; i0 < s.queries;
         i0 += kQueryBlock) {
      int64_t r = std::min(kQueryBlock, s.queries - i0);
      // Causal: the keys past the block's last row get nothing from it.
      int64_t n = std::min(blockKeys, a.keyEnd(i0 + r) - j0);
      a.scoreGradients(b, h, i0, r, j0, n, lse, delta, dOut, dvRows, scratch);
      float *dqRows =
          dqHeads ? dqHeads + ((h - firstHead) * s.queries + i0) * s.headDim : nullptr;
      if (a.bf16) {
        a.bf16ScoreGradientProduct(
            true, r, n, Attention::rowOf<uint16_t>(a.q, a.queryRow(b, h, i0), s.headDim),
            s.headDim, dkRows, scratch);
        if (dqRows)
          a.bf16ScoreGradientProduct(false, r, n,
                                     Attention::rowOf<uint16_t>(a.k, keyRow, s.headDim),
                                     s.headDim, dqRows, scratch);
        continue;
      }
      float *dS = scratch.scores.data();
      const float *qRows = Attention::rowOf<float>(a.q, a.queryRow(b, h, i0), s.headDim);
      const float *kRows = Attention::rowOf<float>(a.k, keyRow, s.headDim);
      accumulateProduct(true, false, n, s.headDim, r, dS, kKeyBlock, qRows, s.headDim, dkRows,
                        s.headDim);
      if (dqRows)
        accumulateProduct(false, false, r, s.headDim, n, dS, kKeyBlock, kRows, s.headDim,
                          dqRows, s.headDim);
    }
}

/// The backward of one key/value head and all the query heads that read
/// it, on one thread: five products per block pair instead of the two
/// phases' seven, for grids with enough heads to keep every thread busy.
void headGroupGradients(const Attention &a, int64_t b, int64_t kvHead, const void *out,
                        const float *lse, const void *dOut, float *delta, const Gradients &g) {
  const AttentionShape &s = a.s;
  int64_t firstHead = kvHead * a.group;
  for (int64_t h = firstHead; h < firstHead + a.group; ++h)
    rowDeltas(a, b, h, 0, s.queries, out, dOut, delta);
  GradientScratch &scratch = GradientScratch::forThisThread();
  int64_t queryRow = a.queryRow(b, firstHead, 0), keyRow = a.keyRow(b, firstHead, 0);
  float *dqRows = g.dq.open(queryRow, a.group * s.queries, scratch.dq);
  float *dkRows = g.dk.open(keyRow, s.keys, scratch.dk);
  float *dvRows = g.dv.open(keyRow, s.keys, scratch.dv);
  for (int64_t j0 = 0; j0 < s.keys; j0 += kKeyBlock)
    keyGradientBlock(a, b, kvHead, j0, lse, dOut, delta, dqRows, dkRows + j0 * s.headDim,
                     dvRows + j0 * s.valueDim);
  g.dq.close(dqRows, queryRow, a.group * s.queries);
  g.dk.close(dkRows, keyRow, s.keys);
  g.dv.close(dvRows, keyRow, s.keys);
  scratch.trim();
}

void forward(const Attention &a, void *out, float *lse) {
  const AttentionShape &s = a.s;
  int64_t queryBlocks = blocks(s.queries, kQueryBlock);
  int64_t tasks = s.batch * s.heads * queryBlocks;
  ThreadPool::global().parallelFor(
      tasks, minItemsPerRange(a.blockFlops()), [&](int64_t first, int64_t end) {
        for (int64_t t = first; t < end; ++t) {
          int64_t head = t / queryBlocks;
          forwardBlock(a, head / s.heads, head % s.heads, t % queryBlocks * kQueryBlock, out, lse);
        }
      });
}

/// The gradients into g's dq, dk, dv (see attentionBackward).
void backward(const Attention &a, const void *out, const float *lse, const void *dOut,
              const Gradients &g) {
  const AttentionShape &s = a.s;
  ThreadPool &pool = ThreadPool::global();
  thread_local std::vector<float> deltaStorage;
  deltaStorage.resize(size_t(std::max<int64_t>(0, s.batch * s.heads * s.queries)));
  float *delta = deltaStorage.data();
  // The backward does two to three times the forward's products per block.
  double blockFlops = 2.0 * a.blockFlops();
  int64_t queryBlocks = blocks(s.queries, kQueryBlock);
  int64_t headGroups = s.batch * s.kvHeads;
  int64_t threads = int64_t(pool.threadsPerGrid());
  // Whole head groups when they share out evenly, or are enough (4 per
  // thread) that a last round with idle threads costs little: at T = 2048,
  // 12 heads, 2 threads, 0.8x the two phases' time.
  if (headGroups % threads == 0 || headGroups >= 4 * threads) {
    pool.parallelFor(headGroups, minItemsPerRange(blockFlops * double(queryBlocks * a.group)),
                     [&](int64_t first, int64_t end) {
                       for (int64_t t = first; t < end; ++t)
                         headGroupGradients(a, t / s.kvHeads, t % s.kvHeads, out, lse, dOut, delta,
                                            g);
                     });
    return;
  }
  // Too few head groups to share out: dQ by query blocks, then dK and dV
  // by key blocks, each output row written by one task.
  pool.parallelFor(s.batch * s.heads * queryBlocks, minItemsPerRange(blockFlops),
                   [&](int64_t first, int64_t end) {
                     for (int64_t t = first; t < end; ++t) {
                       int64_t head = t / queryBlocks;
                       queryGradientBlock(a, head / s.heads, head % s.heads,
                                          t % queryBlocks * kQueryBlock, out, lse, dOut, delta, g);
                     }
                   });
  int64_t keyBlocks = blocks(s.keys, kKeyBlock);
  double keyBlockFlops = blockFlops * double(std::max<int64_t>(1, queryBlocks) * a.group) *
                         double(std::min(s.keys, kKeyBlock)) / double(std::max<int64_t>(1, s.keys));
  pool.parallelFor(headGroups * keyBlocks, minItemsPerRange(keyBlockFlops),
                   [&](int64_t first, int64_t end) {
                     GradientScratch &scratch = GradientScratch::forThisThread();
                     for (int64_t t = first; t < end; ++t) {
                       int64_t group = t / keyBlocks, j0 = t % keyBlocks * kKeyBlock;
                       int64_t keyRow = group * s.keys + j0;
                       int64_t n = std::min(kKeyBlock, s.keys - j0);
                       float *dkRows = g.dk.open(keyRow, n, scratch.dk);
                       float *dvRows = g.dv.open(keyRow, n, scratch.dv);
                       keyGradientBlock(a, group / s.kvHeads, group % s.kvHeads, j0, lse, dOut,
                                        delta, nullptr, dkRows, dvRows);
                       g.dk.close(dkRows, keyRow, n);
                       g.dv.close(dvRows, keyRow, n);
                       scratch.trim();
                     }
                   });
}

} // namespace

void cpu::checkAttentionType(DType dtype) {
  if (dtype != DType::F32 && dtype != DType::BF16)
    throw CompileError(std::string("graph.attention: no CPU kernels for ") + dtypeName(dtype) +
                       " (f32 and bf16; compile the function again: fusion widens f16 "
                       "attention)");
}

void cpu::attentionForward(const AttentionShape &s, const float *q, const float *k, const float *v,
                           const void *mask, float *out, float *lse) {
  forward(Attention(s, q, k, v, mask, false), out, lse);
}

void cpu::attentionBackward(const AttentionShape &s, const float *q, const float *k, const float *v,
                            const void *mask, const float *out, const float *lse, const float *dOut,
                            float *dq, float *dk, float *dv) {
  backward(Attention(s, q, k, v, mask, false), out, lse, dOut,
           {{dq, s.headDim, false}, {dk, s.headDim, false}, {dv, s.valueDim, false}});
}

void cpu::attentionForward(const AttentionShape &s, DType dtype, const void *q, const void *k,
                           const void *v, const void *mask, void *out, float *lse) {
  checkAttentionType(dtype);
  forward(Attention(s, q, k, v, mask, dtype == DType::BF16), out, lse);
}

void cpu::attentionBackward(const AttentionShape &s, DType dtype, const void *q, const void *k,
                            const void *v, const void *mask, const void *out, const float *lse,
                            const void *dOut, void *dq, void *dk, void *dv) {
  checkAttentionType(dtype);
  bool bf16 = dtype == DType::BF16;
  backward(Attention(s, q, k, v, mask, bf16), out, lse, dOut,
           {{dq, s.headDim, bf16}, {dk, s.headDim, bf16}, {dv, s.valueDim, bf16}});
}
