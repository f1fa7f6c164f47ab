//===- CudaAttention.cpp --------------------------------------------------===//
//
// Three kernels per head-dimension bound, none of which makes a buffer of
// queries x keys:
//  - forward: a block owns a tile of query rows of one head and walks the
//    blocks of keys with an online softmax (running max and sum), causal
//    blocks past the diagonal skipped; it stores the output and each row's
//    log-sum-exp.
//  - key grads: a block owns a tile of keys of one key/value head and walks
//    the query tiles of every query head that reads it, recomputing the
//    probabilities from the saved log-sum-exp; dK and dV sum in registers,
//    so no atomics (and the same bits every run).
//  - query grads: a block owns a tile of query rows and walks the key blocks
//    for dQ. The probabilities are recomputed twice (FlashAttention-2 uses
//    atomics for dQ instead); the delta term rowsum(dO * O) is computed
//    where a tile of rows is loaded.
// A row (or key) is owned by the threads of one warp: row statistics are
// warp shuffles, and each thread keeps its share of the row's accumulators
// in registers. The products read their operands from shared memory, one
// multiply-add per thread at a time; in 16 bits from sm_80 the products
// run on tensor cores instead (the *_mma kernels below).
// q, k, v, the outputs and the gradients are f32, bf16 or f16 in memory;
// the tiles are widened to f32 as they are loaded and all arithmetic is
// f32. In 16 bits the probabilities (after dropout) and the score gradients
// (times the scale) are rounded to 16 bits before their products, as the
// CPU's bf16 kernels and PyTorch's flash kernels do; the log-sum-exp stays
// f32. The tiles are dynamic shared memory, so head sizes whose tiles need
// more than 48 KiB (256) run where the executor opts in.
//
//===----------------------------------------------------------------------===//
#include "codegen/cuda/CudaAttention.h"

#include "runtime/CudaAttentionKernels.h"

using namespace tilefuse;

namespace {
constexpr const char *kKernels = R"(
#include <cuda_bf16.h>
#include <cuda_fp16.h>
// Tensor cores take the 16-bit kernels' products from sm_80 (bf16 and f16
// warp matrix operations); the CUDA emulation defines TF_ATTENTION_MMA with
// its own nvcuda::wmma.
#if !defined(TF_ATTENTION_MMA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#include <mma.h>
#define TF_ATTENTION_MMA 1
#endif
#ifndef TF_ATTENTION_MMA
#define TF_ATTENTION_MMA 0
#endif

// The kernels' one argument: runtime/CudaAttentionKernels.h's
// CudaAttentionArgs, field for field. q, k, v, an additive mask, out, dOut,
// dq, dk and dv are of the kernel's element type T.
struct TfAttentionArgs {
  const void *q, *k, *v;
  const void *mask;
  const unsigned long long *seed;
  void *out;
  float *lse;
  const void *dOut;
  void *dq, *dk, *dv;
  long long batch, heads, kvHeads, queries, keys, headDim, valueDim;
  long long causal, maskKind, maskBatchStride, maskHeadStride, stream;
  double scale, dropoutP;
};

#define TF_ATTENTION_NEG_INF __int_as_float((int)0xff800000u)

// The tiles are in dynamic shared memory, sized by the launch
// (cudaAttentionSharedBytes in runtime/CudaAttentionKernels.h): a launch
// with less than a kernel's layout needs traps instead of running past it.
#ifndef TF_DYNAMIC_SHARED
#define TF_DYNAMIC_SHARED(name, bytes)                                                     \
  extern __shared__ __align__(128) unsigned char name[];                                   \
  {                                                                                        \
    unsigned tf_have_;                                                                     \
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(tf_have_));                     \
    if (tf_have_ < (unsigned)(bytes))                                                      \
      __trap();                                                                            \
  }
#endif
#define TF_ATTENTION_SHARED(Layout, name)                                                  \
  TF_DYNAMIC_SHARED(tf_attention_smem, sizeof(Layout));                                    \
  Layout &name = *reinterpret_cast<Layout *>(tf_attention_smem)

// Elements in memory (T) and in arithmetic (f32).
__device__ __forceinline__ float tf_attention_widen(float x) { return x; }
__device__ __forceinline__ float tf_attention_widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float tf_attention_widen(__half x) { return __half2float(x); }
template <typename T> struct TfAttentionNarrow;
template <> struct TfAttentionNarrow<float> {
  static __device__ __forceinline__ float of(float x) { return x; }
};
template <> struct TfAttentionNarrow<__nv_bfloat16> {
  static __device__ __forceinline__ __nv_bfloat16 of(float x) { return __float2bfloat16_rn(x); }
};
template <> struct TfAttentionNarrow<__half> {
  static __device__ __forceinline__ __half of(float x) { return __float2half_rn(x); }
};
template <typename T> __device__ __forceinline__ T tf_attention_narrow(float x) {
  return TfAttentionNarrow<T>::of(x);
}
// x at T's precision: an operand of a 16-bit product (P, dS).
template <typename T> __device__ __forceinline__ float tf_attention_round(float x) {
  return tf_attention_widen(tf_attention_narrow<T>(x));
}

// Philox 4x32-10 word `index % 4` of block `index / 4`: graph.random_uniform's
// bits (codegen/reference/Philox.h).
__device__ __forceinline__ unsigned tf_attention_philox(unsigned long long index,
                                                        unsigned long long stream,
                                                        unsigned long long seed) {
  unsigned long long block = index >> 2;
  unsigned c0 = (unsigned)block, c1 = (unsigned)(block >> 32), c2 = (unsigned)stream, c3 = 0u;
  unsigned k0 = (unsigned)seed, k1 = (unsigned)(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    unsigned hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    unsigned hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    unsigned n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
    k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
  }
  unsigned w = (unsigned)(index & 3);
  return w == 0 ? c0 : w == 1 ? c1 : w == 2 ? c2 : c3;
}

// Dropout's factor for score (b, h, i, j): 1 / (1 - p) where graph.dropout
// keeps the written-out probability, else 0.
__device__ __forceinline__ float tf_attention_keep(const TfAttentionArgs &a,
                                                   unsigned long long seed, long long b,
                                                   long long h, long long i, long long j) {
  unsigned long long index =
      (unsigned long long)(((b * a.heads + h) * a.queries + i) * a.keys + j);
  unsigned bits = tf_attention_philox(index, (unsigned long long)a.stream, seed);
  float u = (float)(bits >> 8) * 5.9604644775390625e-08f; // 2^-24
  return u >= (float)a.dropoutP ? (float)(1.0 / (1.0 - a.dropoutP)) : 0.0f;
}

// The masked, scaled score of query i and key j of head (b, h) from their
// dot product: -inf where hidden.
template <typename T>
__device__ __forceinline__ float tf_attention_score(const TfAttentionArgs &a, float dot,
                                                    long long b, long long h, long long i,
                                                    long long j) {
  if (a.causal && j > i)
    return TF_ATTENTION_NEG_INF;
  float s = dot * (float)a.scale;
  if (a.maskKind != 0) {
    long long at = b * a.maskBatchStride + h * a.maskHeadStride + i * a.keys + j;
    if (a.maskKind == 1) {
      if (((const unsigned char *)a.mask)[at] == 0)
        return TF_ATTENTION_NEG_INF;
    } else {
      s += tf_attention_widen(((const T *)a.mask)[at]);
    }
  }
  return s;
}

// rows x cols of a row-major matrix with leading dimension `ld` into a
// shared f32 tile (row stride DMAX + 1 against bank conflicts); zeros past
// the matrix, so partial tiles compute with zeros.
template <int DMAX, int ROWS, typename T>
__device__ __forceinline__ void tf_attention_load(float (&tile)[ROWS][DMAX + 1], const T *src,
                                                  long long first, long long rows,
                                                  long long cols) {
  for (int e = threadIdx.x; e < ROWS * DMAX; e += blockDim.x) {
    int r = e / DMAX, d = e % DMAX;
    tile[r][d] = first + r < rows && d < cols ? tf_attention_widen(src[(first + r) * cols + d])
                                              : 0.0f;
  }
}

template <int THREADS>
__device__ __forceinline__ float tf_attention_group_max(float x) {
  for (int o = 1; o < THREADS; o <<= 1)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
template <int THREADS>
__device__ __forceinline__ float tf_attention_group_sum(float x) {
  for (int o = 1; o < THREADS; o <<= 1)
    x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// The tile of query rows this block owns: head bh (= b * heads + h) from
// row i0, and the key/value head kvh (= b * kvHeads + h's group) it reads.
struct TfAttentionQueryTile {
  long long bh, i0, b, h, kvh;
};
template <int BM>
__device__ __forceinline__ TfAttentionQueryTile tf_attention_query_tile(const TfAttentionArgs &a) {
  const long long blocksPerHead = (a.queries + BM - 1) / BM;
  TfAttentionQueryTile tile;
  tile.bh = (long long)blockIdx.x / blocksPerHead;
  tile.i0 = (long long)blockIdx.x % blocksPerHead * BM;
  tile.b = tile.bh / a.heads, tile.h = tile.bh % a.heads;
  tile.kvh = tile.b * a.kvHeads + tile.h / (a.heads / a.kvHeads);
  return tile;
}

// Each kernel's shared memory; cudaAttentionSharedBytes adds up the same.
template <int DMAX, int BM, int BN> struct TfAttentionForwardShared {
  float qs[BM][DMAX + 1];
  float kv[BN][DMAX + 1]; // K, then V, of the key block
  float ps[BM][BN + 1];
};
template <int DMAX, int BM, int BN> struct TfAttentionKeyGradShared {
  float ks[BN][DMAX + 1], vs[BN][DMAX + 1];
  float qs[BM][DMAX + 1], dos[BM][DMAX + 1];
  float pt[BN][BM + 1], dst[BN][BM + 1]; // transposed: a key's row
  float lses[BM], deltas[BM];
};
template <int DMAX, int BM, int BN> struct TfAttentionQueryGradShared {
  float qs[BM][DMAX + 1], dos[BM][DMAX + 1];
  float ks[BN][DMAX + 1], vs[BN][DMAX + 1];
  float dss[BM][BN + 1];
  float lses[BM], deltas[BM];
};

// The row's log-sum-exp and delta = rowsum(dO * O) of rows [i0, i0 + ROWS)
// of head bh into lses and deltas (0 past the last row).
template <typename T, int ROWS>
__device__ __forceinline__ void tf_attention_row_terms(const TfAttentionArgs &a, long long bh,
                                                       long long i0, float (&lses)[ROWS],
                                                       float (&deltas)[ROWS]) {
  const T *dOut = (const T *)a.dOut, *out = (const T *)a.out;
  for (int r = threadIdx.x; r < ROWS; r += blockDim.x) {
    const long long i = i0 + r;
    float lse = 0.0f, delta = 0.0f;
    if (i < a.queries) {
      const long long at = bh * a.queries + i;
      lse = a.lse[at];
      for (long long d = 0; d < a.valueDim; ++d)
        delta += tf_attention_widen(dOut[at * a.valueDim + d]) *
                 tf_attention_widen(out[at * a.valueDim + d]);
    }
    lses[r] = lse, deltas[r] = delta;
  }
}

// One key block's step of a query row's online softmax, from the scores s
// of the row this thread holds (keys g, g + TPR, ...; -inf where hidden)
// and the row's running max m and sum l: each probability (after dropout)
// goes to store(x, p) as soon as it is made (held in registers until the
// block's last, the f32 forward's spilled), and the new statistics come back
// with the factor that rescales the row's output so far. A row that has
// seen only hidden keys adds nothing (exp(-inf - -inf) would be NaN).
struct TfAttentionRowStats {
  float m, l, alpha;
};
template <int TPR, int COLS, typename Store>
__device__ __forceinline__ TfAttentionRowStats tf_attention_online_softmax(
    const TfAttentionArgs &a, unsigned long long seed, long long b, long long h, long long i,
    long long j0, int g, const float (&s)[COLS], float m, float l, Store store) {
  float blockMax = TF_ATTENTION_NEG_INF;
#pragma unroll
  for (int x = 0; x < COLS; ++x)
    blockMax = fmaxf(blockMax, s[x]);
  const float mNew = fmaxf(m, tf_attention_group_max<TPR>(blockMax));
  const float alpha = mNew == TF_ATTENTION_NEG_INF ? 1.0f : expf(m - mNew);
  float sum = 0.0f;
#pragma unroll
  for (int x = 0; x < COLS; ++x) {
    float p = mNew == TF_ATTENTION_NEG_INF ? 0.0f : expf(s[x] - mNew);
    sum += p; // the softmax's sum is of the probabilities before dropout
    if (a.dropoutP > 0 && p != 0.0f)
      p *= tf_attention_keep(a, seed, b, h, i, j0 + g + x * TPR);
    store(x, p);
  }
  return {mNew, l * alpha + tf_attention_group_sum<TPR>(sum), alpha};
}

// --- tensor cores (16-bit operands, sm_80 and later) ----------------------
//
// The same three kernels with every product on warp matrix operations
// (16 x 16 x 16, 16-bit operands, f32 accumulation): the tiles stay 16-bit
// in shared memory (rows padded by 8 elements: the operations' leading
// dimensions must be multiples of 16 bytes), the products land in f32
// tiles, and the softmax, the masks, dropout and dS = P * (dP - delta) are
// the elementwise work between them, done by the block's threads exactly as
// the kernels above do it. Every array of the layouts starts at a multiple
// of 32 bytes, as the operations need. dK, dV and dQ accumulate in
// fragments (registers) over the whole walk; the forward's output rows in
// shared f32, since the online softmax rescales them by row.
template <typename T> struct TfAttentionTensorCores {
  static constexpr bool value = false;
};
#if TF_ATTENTION_MMA
template <> struct TfAttentionTensorCores<__nv_bfloat16> {
  static constexpr bool value = true;
};
template <> struct TfAttentionTensorCores<__half> {
  static constexpr bool value = true;
};
namespace tf_wmma = nvcuda::wmma;
typedef tf_wmma::fragment<tf_wmma::accumulator, 16, 16, 16, float> TfAttentionAcc;
template <typename T, typename L>
using TfAttentionA = tf_wmma::fragment<tf_wmma::matrix_a, 16, 16, 16, T, L>;
template <typename T, typename L>
using TfAttentionB = tf_wmma::fragment<tf_wmma::matrix_b, 16, 16, 16, T, L>;

// rows x width of a row-major matrix (leading dimension `cols`) into a
// 16-bit tile: zeros past the matrix and up to `width` (a multiple of 16,
// so every 16 x 16 operand is defined).
template <int STRIDE, int ROWS, typename T>
__device__ __forceinline__ void tf_attention_load16(T (&tile)[ROWS][STRIDE], const T *src,
                                                    long long first, long long rows,
                                                    long long cols, int width) {
  const T zero = tf_attention_narrow<T>(0.0f);
  for (int e = threadIdx.x; e < ROWS * width; e += blockDim.x) {
    int r = e / width, d = e % width;
    tile[r][d] = first + r < rows && d < cols ? src[(first + r) * cols + d] : zero;
  }
}

template <typename L> struct TfAttentionColMajor {
  static constexpr bool value = false;
};
template <> struct TfAttentionColMajor<tf_wmma::col_major> {
  static constexpr bool value = true;
};

// acc += A B over `steps` steps of 16 along the inner dimension. A's tile
// is at `aTile` (LA row_major: A row-major, leading dimension lda;
// col_major: A^T row-major, as a [rows x keys] tile read for a product
// over its rows), B's at `bTile` (LB row_major: B row-major; col_major: B^T
// row-major, a block of keys or values as stored).
template <typename T, typename LA, typename LB>
__device__ __forceinline__ void tf_attention_mma(TfAttentionAcc &acc, const T *aTile,
                                                 unsigned lda, const T *bTile, unsigned ldb,
                                                 int steps) {
  constexpr bool aColMajor = TfAttentionColMajor<LA>::value;
  constexpr bool bColMajor = TfAttentionColMajor<LB>::value;
  for (int k = 0; k < steps; ++k) {
    TfAttentionA<T, LA> fa;
    TfAttentionB<T, LB> fb;
    tf_wmma::load_matrix_sync(fa, aColMajor ? aTile + k * 16 * lda : aTile + k * 16, lda);
    tf_wmma::load_matrix_sync(fb, bColMajor ? bTile + k * 16 : bTile + k * 16 * ldb, ldb);
    tf_wmma::mma_sync(acc, fa, fb, acc);
  }
}

template <typename T, int DMAX, int BM, int BN> struct __align__(32) TfAttentionForwardMmaShared {
  T qs[BM][DMAX + 8];
  T kv[BN][DMAX + 8]; // K, then V, of the key block
  union Scores {      // the block's scores, then (once read) its probabilities
    float s[BM][BN + 4];
    T p[BM][BN + 8];
  } sp;
  float o[BM][DMAX + 4]; // the output rows, unnormalised
};
template <typename T, int DMAX, int BM, int BN> struct __align__(32) TfAttentionKeyGradMmaShared {
  T ks[BN][DMAX + 8], vs[BN][DMAX + 8];
  union Phases {
    struct Walk { // per query tile
      T qs[BM][DMAX + 8], dos[BM][DMAX + 8];
      float s[BM][BN + 4], dp[BM][BN + 4];
      T p[BM][BN + 8], ds[BM][BN + 8]; // dropped P, scale * dS
      float lses[BM], deltas[BM];
    } walk;
    struct Out { // the accumulated dK and dV, on their way out
      float dk[BN][DMAX + 4], dv[BN][DMAX + 4];
    } out;
  } u;
};
template <typename T, int DMAX, int BM, int BN>
struct __align__(32) TfAttentionQueryGradMmaShared {
  T qs[BM][DMAX + 8], dos[BM][DMAX + 8];
  union Phases {
    struct Walk { // per key block
      T ks[BN][DMAX + 8], vs[BN][DMAX + 8];
    } walk;
    float dq[BM][DMAX + 4]; // the accumulated dQ, on its way out
  } u;
  float s[BM][BN + 4], dp[BM][BN + 4];
  T ds[BM][BN + 8]; // scale * dS
  float lses[BM], deltas[BM];
};

// S = Q K^T (job < tiles) and dP = dO V^T (the next `tiles` jobs) for a
// BM x BN tile, 16 x 16 tiles shared out over the block's four warps.
template <typename T, int DMAX, int BM, int BN>
__device__ __forceinline__ void tf_attention_scores_mma(const TfAttentionArgs &a,
                                                        const T (*qs)[DMAX + 8],
                                                        const T (*ks)[DMAX + 8],
                                                        const T (*dos)[DMAX + 8],
                                                        const T (*vs)[DMAX + 8],
                                                        float (*s)[BN + 4], float (*dp)[BN + 4]) {
  constexpr int TILES = BM / 16 * (BN / 16);
  const int kSteps = (int)((a.headDim + 15) / 16), vSteps = (int)((a.valueDim + 15) / 16);
  for (int job = threadIdx.x / 32; job < (dos ? 2 * TILES : TILES); job += 4) {
    const bool grad = job >= TILES;
    const int tile = grad ? job - TILES : job;
    const int m0 = tile / (BN / 16) * 16, n0 = tile % (BN / 16) * 16;
    TfAttentionAcc acc;
    tf_wmma::fill_fragment(acc, 0.0f);
    tf_attention_mma<T, tf_wmma::row_major, tf_wmma::col_major>(
        acc, grad ? &dos[m0][0] : &qs[m0][0], DMAX + 8, grad ? &vs[n0][0] : &ks[n0][0], DMAX + 8,
        grad ? vSteps : kSteps);
    tf_wmma::store_matrix_sync(grad ? &dp[m0][n0] : &s[m0][n0], acc, BN + 4,
                               tf_wmma::mem_row_major);
  }
}

template <typename T, int DMAX, int BM, int BN>
__device__ __forceinline__ void tf_attention_forward_mma(const TfAttentionArgs &a) {
  constexpr int TPR = 128 / BM;  // threads per query row
  constexpr int COLS = BN / TPR; // scores of a row a thread handles per key block
  using Shared = TfAttentionForwardMmaShared<T, DMAX, BM, BN>;
  TF_ATTENTION_SHARED(Shared, sh);
  const int t = threadIdx.x, r = t / TPR, g = t % TPR, warp = t / 32;
  const TfAttentionQueryTile tile = tf_attention_query_tile<BM>(a);
  const long long bh = tile.bh, i0 = tile.i0, i = i0 + r, b = tile.b, h = tile.h, kvh = tile.kvh;
  const T *k = (const T *)a.k + kvh * a.keys * a.headDim;
  const T *v = (const T *)a.v + kvh * a.keys * a.valueDim;
  const unsigned long long seed = a.dropoutP > 0 ? *a.seed : 0ull;
  const bool row = i < a.queries;
  const int vSteps = (int)((a.valueDim + 15) / 16);
  tf_attention_load16<DMAX + 8, BM>(sh.qs, (const T *)a.q + bh * a.queries * a.headDim, i0,
                                    a.queries, a.headDim, DMAX);
  for (int e = t; e < BM * DMAX; e += blockDim.x)
    sh.o[e / DMAX][e % DMAX] = 0.0f;
  float m = TF_ATTENTION_NEG_INF, l = 0.0f;
  const long long keyEnd = a.causal && i0 + BM < a.keys ? i0 + BM : a.keys;
  for (long long j0 = 0; j0 < keyEnd; j0 += BN) {
    __syncthreads(); // the previous block's V and P are read
    tf_attention_load16<DMAX + 8, BN>(sh.kv, k, j0, a.keys, a.headDim, DMAX);
    __syncthreads();
    tf_attention_scores_mma<T, DMAX, BM, BN>(a, sh.qs, sh.kv, nullptr, nullptr, sh.sp.s,
                                             nullptr);
    __syncthreads();
    float s[COLS];
#pragma unroll
    for (int x = 0; x < COLS; ++x) {
      const int c = g + x * TPR;
      s[x] = row && j0 + c < a.keys ? tf_attention_score<T>(a, sh.sp.s[r][c], b, h, i, j0 + c)
                                    : TF_ATTENTION_NEG_INF;
    }
    // The probabilities wait in s: the scores they overwrite in shared
    // memory are still being read by other threads.
    const TfAttentionRowStats stats = tf_attention_online_softmax<TPR>(
        a, seed, b, h, i, j0, g, s, m, l, [&](int x, float p) { s[x] = p; });
    const float alpha = stats.alpha;
    m = stats.m, l = stats.l;
    __syncthreads(); // every score is read: the probabilities overwrite them
#pragma unroll
    for (int x = 0; x < COLS; ++x)
      sh.sp.p[r][g + x * TPR] = tf_attention_narrow<T>(s[x]);
    for (int d = g; d < DMAX; d += TPR)
      sh.o[r][d] *= alpha;
    tf_attention_load16<DMAX + 8, BN>(sh.kv, v, j0, a.keys, a.valueDim, DMAX); // K is read
    __syncthreads();
    for (int job = warp; job < BM / 16 * (DMAX / 16); job += 4) {
      const int m0 = job / (DMAX / 16) * 16, n0 = job % (DMAX / 16) * 16;
      if (n0 >= vSteps * 16)
        continue; // columns past the value dimension stay 0
      TfAttentionAcc acc;
      tf_wmma::load_matrix_sync(acc, &sh.o[m0][n0], DMAX + 4, tf_wmma::mem_row_major);
      tf_attention_mma<T, tf_wmma::row_major, tf_wmma::row_major>(
          acc, &sh.sp.p[m0][0], BN + 8, &sh.kv[0][n0], DMAX + 8, BN / 16);
      tf_wmma::store_matrix_sync(&sh.o[m0][n0], acc, DMAX + 4, tf_wmma::mem_row_major);
    }
  }
  __syncthreads();
  if (!row)
    return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  T *out = (T *)a.out + (bh * a.queries + i) * a.valueDim;
  for (int d = g; d < a.valueDim; d += TPR)
    out[d] = tf_attention_narrow<T>(sh.o[r][d] * inv);
  if (g == 0)
    a.lse[bh * a.queries + i] = l > 0.0f ? m + logf(l) : 0.0f;
}

template <typename T, int DMAX, int BM, int BN>
__device__ __forceinline__ void tf_attention_key_grads_mma(const TfAttentionArgs &a) {
  // dK and dV as 16 x 16 fragments: fragment f = warp + 4 x of a thread's
  // warp is dK's (f < HALF) or dV's tile (f % HALF) / (DMAX / 16) of keys,
  // (f % HALF) % (DMAX / 16) of dimensions.
  constexpr int HALF = BN / 16 * (DMAX / 16), PER_WARP = 2 * HALF / 4;
  using Shared = TfAttentionKeyGradMmaShared<T, DMAX, BM, BN>;
  TF_ATTENTION_SHARED(Shared, sh);
  auto &w = sh.u.walk;
  const int t = threadIdx.x, warp = t / 32;
  const long long blocksPerHead = (a.keys + BN - 1) / BN;
  const long long bkv = (long long)blockIdx.x / blocksPerHead;
  const long long j0 = (long long)blockIdx.x % blocksPerHead * BN;
  const long long b = bkv / a.kvHeads, group = a.heads / a.kvHeads;
  const unsigned long long seed = a.dropoutP > 0 ? *a.seed : 0ull;
  const float scale = (float)a.scale;
  tf_attention_load16<DMAX + 8, BN>(sh.ks, (const T *)a.k + bkv * a.keys * a.headDim, j0, a.keys,
                                    a.headDim, DMAX);
  tf_attention_load16<DMAX + 8, BN>(sh.vs, (const T *)a.v + bkv * a.keys * a.valueDim, j0,
                                    a.keys, a.valueDim, DMAX);
  TfAttentionAcc acc[PER_WARP];
#pragma unroll
  for (int x = 0; x < PER_WARP; ++x)
    tf_wmma::fill_fragment(acc[x], 0.0f);
  const long long firstTile = a.causal ? j0 / BM * BM : 0;
  for (long long hg = 0; hg < group; ++hg) {
    const long long h = bkv % a.kvHeads * group + hg, bh = b * a.heads + h;
    for (long long i0 = firstTile; i0 < a.queries; i0 += BM) {
      __syncthreads(); // the previous tile is read
      tf_attention_load16<DMAX + 8, BM>(w.qs, (const T *)a.q + bh * a.queries * a.headDim, i0,
                                        a.queries, a.headDim, DMAX);
      tf_attention_load16<DMAX + 8, BM>(w.dos, (const T *)a.dOut + bh * a.queries * a.valueDim,
                                        i0, a.queries, a.valueDim, DMAX);
      tf_attention_row_terms<T>(a, bh, i0, w.lses, w.deltas);
      __syncthreads();
      tf_attention_scores_mma<T, DMAX, BM, BN>(a, w.qs, sh.ks, w.dos, sh.vs, w.s, w.dp);
      __syncthreads();
      for (int e = t; e < BM * BN; e += blockDim.x) {
        const int r = e / BN, c = e % BN;
        const long long i = i0 + r, j = j0 + c;
        float dropped = 0.0f, ds = 0.0f;
        if (i < a.queries && j < a.keys) {
          const float s = tf_attention_score<T>(a, w.s[r][c], b, h, i, j);
          const float p = s == TF_ATTENTION_NEG_INF ? 0.0f : expf(s - w.lses[r]);
          const float keep = a.dropoutP > 0 && p != 0.0f ? tf_attention_keep(a, seed, b, h, i, j)
                                                         : 1.0f;
          dropped = p * keep;
          ds = p * (w.dp[r][c] * keep - w.deltas[r]);
        }
        w.p[r][c] = tf_attention_narrow<T>(dropped);
        w.ds[r][c] = tf_attention_narrow<T>(ds * scale);
      }
      __syncthreads();
#pragma unroll
      for (int x = 0; x < PER_WARP; ++x) {
        const int f = warp + 4 * x, key = f % HALF / (DMAX / 16) * 16,
                  dim = f % HALF % (DMAX / 16) * 16;
        const bool dv = f >= HALF;
        // dK += (scale dS)^T Q, dV += P^T dO: A^T read from the [rows x
        // keys] tile as column-major.
        tf_attention_mma<T, tf_wmma::col_major, tf_wmma::row_major>(
            acc[x], dv ? &w.p[0][key] : &w.ds[0][key], BN + 8,
            dv ? &w.dos[0][dim] : &w.qs[0][dim], DMAX + 8, BM / 16);
      }
    }
  }
  __syncthreads(); // the last tile is read: the output tiles take its place
#pragma unroll
  for (int x = 0; x < PER_WARP; ++x) {
    const int f = warp + 4 * x, key = f % HALF / (DMAX / 16) * 16,
              dim = f % HALF % (DMAX / 16) * 16;
    tf_wmma::store_matrix_sync(f >= HALF ? &sh.u.out.dv[key][dim] : &sh.u.out.dk[key][dim],
                               acc[x], DMAX + 4, tf_wmma::mem_row_major);
  }
  __syncthreads();
  for (int e = t; e < BN * DMAX; e += blockDim.x) {
    const int c = e / DMAX, d = e % DMAX;
    const long long j = j0 + c;
    if (j >= a.keys)
      continue;
    if (d < a.headDim)
      ((T *)a.dk)[(bkv * a.keys + j) * a.headDim + d] = tf_attention_narrow<T>(sh.u.out.dk[c][d]);
    if (d < a.valueDim)
      ((T *)a.dv)[(bkv * a.keys + j) * a.valueDim + d] =
          tf_attention_narrow<T>(sh.u.out.dv[c][d]);
  }
}

template <typename T, int DMAX, int BM, int BN>
__device__ __forceinline__ void tf_attention_query_grads_mma(const TfAttentionArgs &a) {
  constexpr int TILES = BM / 16 * (DMAX / 16), PER_WARP = TILES / 4;
  using Shared = TfAttentionQueryGradMmaShared<T, DMAX, BM, BN>;
  TF_ATTENTION_SHARED(Shared, sh);
  const int t = threadIdx.x, warp = t / 32;
  const TfAttentionQueryTile tile = tf_attention_query_tile<BM>(a);
  const long long bh = tile.bh, i0 = tile.i0, b = tile.b, h = tile.h, kvh = tile.kvh;
  const unsigned long long seed = a.dropoutP > 0 ? *a.seed : 0ull;
  const float scale = (float)a.scale;
  tf_attention_load16<DMAX + 8, BM>(sh.qs, (const T *)a.q + bh * a.queries * a.headDim, i0,
                                    a.queries, a.headDim, DMAX);
  tf_attention_load16<DMAX + 8, BM>(sh.dos, (const T *)a.dOut + bh * a.queries * a.valueDim, i0,
                                    a.queries, a.valueDim, DMAX);
  tf_attention_row_terms<T>(a, bh, i0, sh.lses, sh.deltas);
  TfAttentionAcc acc[PER_WARP];
#pragma unroll
  for (int x = 0; x < PER_WARP; ++x)
    tf_wmma::fill_fragment(acc[x], 0.0f);
  const long long keyEnd = a.causal && i0 + BM < a.keys ? i0 + BM : a.keys;
  for (long long j0 = 0; j0 < keyEnd; j0 += BN) {
    __syncthreads(); // the previous block is read (and the row tiles are in)
    tf_attention_load16<DMAX + 8, BN>(sh.u.walk.ks, (const T *)a.k + kvh * a.keys * a.headDim,
                                      j0, a.keys, a.headDim, DMAX);
    tf_attention_load16<DMAX + 8, BN>(sh.u.walk.vs, (const T *)a.v + kvh * a.keys * a.valueDim,
                                      j0, a.keys, a.valueDim, DMAX);
    __syncthreads();
    tf_attention_scores_mma<T, DMAX, BM, BN>(a, sh.qs, sh.u.walk.ks, sh.dos, sh.u.walk.vs, sh.s,
                                             sh.dp);
    __syncthreads();
    for (int e = t; e < BM * BN; e += blockDim.x) {
      const int r = e / BN, c = e % BN;
      const long long i = i0 + r, j = j0 + c;
      float ds = 0.0f;
      if (i < a.queries && j < a.keys) {
        const float s = tf_attention_score<T>(a, sh.s[r][c], b, h, i, j);
        const float p = s == TF_ATTENTION_NEG_INF ? 0.0f : expf(s - sh.lses[r]);
        const float keep =
            a.dropoutP > 0 && p != 0.0f ? tf_attention_keep(a, seed, b, h, i, j) : 1.0f;
        ds = p * (sh.dp[r][c] * keep - sh.deltas[r]);
      }
      sh.ds[r][c] = tf_attention_narrow<T>(ds * scale);
    }
    __syncthreads();
#pragma unroll
    for (int x = 0; x < PER_WARP; ++x) {
      const int f = warp + 4 * x, m0 = f / (DMAX / 16) * 16, n0 = f % (DMAX / 16) * 16;
      tf_attention_mma<T, tf_wmma::row_major, tf_wmma::row_major>(
          acc[x], &sh.ds[m0][0], BN + 8, &sh.u.walk.ks[0][n0], DMAX + 8, BN / 16);
    }
  }
  __syncthreads(); // the last key block is read: dQ takes its place
#pragma unroll
  for (int x = 0; x < PER_WARP; ++x) {
    const int f = warp + 4 * x, m0 = f / (DMAX / 16) * 16, n0 = f % (DMAX / 16) * 16;
    tf_wmma::store_matrix_sync(&sh.u.dq[m0][n0], acc[x], DMAX + 4, tf_wmma::mem_row_major);
  }
  __syncthreads();
  for (int e = t; e < BM * DMAX; e += blockDim.x) {
    const int r = e / DMAX, d = e % DMAX;
    if (i0 + r < a.queries && d < a.headDim)
      ((T *)a.dq)[(bh * a.queries + i0 + r) * a.headDim + d] = tf_attention_narrow<T>(sh.u.dq[r][d]);
  }
}
#endif // TF_ATTENTION_MMA

template <typename T, int DMAX, int BM, int BN>
__device__ __forceinline__ void tf_attention_forward(const TfAttentionArgs &a) {
#if TF_ATTENTION_MMA
  if constexpr (TfAttentionTensorCores<T>::value) {
    tf_attention_forward_mma<T, DMAX, BM, BN>(a);
    return;
  }
#endif
  constexpr int TPR = 128 / BM;  // threads per query row
  constexpr int COLS = BN / TPR; // scores of a row a thread computes per key block
  constexpr int DIMS = DMAX / TPR;
  using Shared = TfAttentionForwardShared<DMAX, BM, BN>;
  TF_ATTENTION_SHARED(Shared, sh);
  auto &qs = sh.qs;
  auto &kv = sh.kv;
  auto &ps = sh.ps;
  const int t = threadIdx.x, r = t / TPR, g = t % TPR;
  const TfAttentionQueryTile tile = tf_attention_query_tile<BM>(a);
  const long long bh = tile.bh, i0 = tile.i0, i = i0 + r, b = tile.b, h = tile.h, kvh = tile.kvh;
  const T *k = (const T *)a.k + kvh * a.keys * a.headDim;
  const T *v = (const T *)a.v + kvh * a.keys * a.valueDim;
  const unsigned long long seed = a.dropoutP > 0 ? *a.seed : 0ull;
  const bool row = i < a.queries;
  tf_attention_load<DMAX, BM>(qs, (const T *)a.q + bh * a.queries * a.headDim, i0, a.queries,
                              a.headDim);
  float m = TF_ATTENTION_NEG_INF, l = 0.0f, acc[DIMS];
#pragma unroll
  for (int y = 0; y < DIMS; ++y)
    acc[y] = 0.0f;
  // Key blocks past the tile's last row are all hidden when causal.
  const long long keyEnd = a.causal && i0 + BM < a.keys ? i0 + BM : a.keys;
  for (long long j0 = 0; j0 < keyEnd; j0 += BN) {
    __syncthreads(); // the previous block's V is read
    tf_attention_load<DMAX, BN>(kv, k, j0, a.keys, a.headDim);
    __syncthreads();
    float s[COLS];
#pragma unroll
    for (int x = 0; x < COLS; ++x) {
      const int c = g + x * TPR;
      s[x] = TF_ATTENTION_NEG_INF;
      if (row && j0 + c < a.keys) {
        float dot = 0.0f;
        for (int d = 0; d < a.headDim; ++d)
          dot += qs[r][d] * kv[c][d];
        s[x] = tf_attention_score<T>(a, dot, b, h, i, j0 + c);
      }
    }
    const TfAttentionRowStats stats = tf_attention_online_softmax<TPR>(
        a, seed, b, h, i, j0, g, s, m, l,
        [&](int x, float p) { ps[r][g + x * TPR] = tf_attention_round<T>(p); });
    const float alpha = stats.alpha;
    m = stats.m, l = stats.l;
    __syncthreads(); // K is read
    tf_attention_load<DMAX, BN>(kv, v, j0, a.keys, a.valueDim);
    __syncthreads();
#pragma unroll
    for (int y = 0; y < DIMS; ++y) {
      const int d = g + y * TPR;
      float o = acc[y] * alpha;
      for (int c = 0; c < BN; ++c)
        o += ps[r][c] * kv[c][d];
      acc[y] = o;
    }
  }
  if (!row)
    return;
  // A fully hidden row: output 0 and log-sum-exp 0, as on the CPU.
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  T *out = (T *)a.out + (bh * a.queries + i) * a.valueDim;
#pragma unroll
  for (int y = 0; y < DIMS; ++y)
    if (g + y * TPR < a.valueDim)
      out[g + y * TPR] = tf_attention_narrow<T>(acc[y] * inv);
  if (g == 0)
    a.lse[bh * a.queries + i] = l > 0.0f ? m + logf(l) : 0.0f;
}

// dS of score (i, j) and the dropped probability, from the rows q_i, k_j,
// dO_i and v_j (in shared memory), the row's log-sum-exp and delta.
template <typename T>
__device__ __forceinline__ float tf_attention_score_grad(const TfAttentionArgs &a,
                                                         unsigned long long seed, const float *q,
                                                         const float *k, const float *dOut,
                                                         const float *v, float lse, float delta,
                                                         long long b, long long h, long long i,
                                                         long long j, float *dropped) {
  float qk = 0.0f, dov = 0.0f;
  for (int d = 0; d < a.headDim; ++d)
    qk += q[d] * k[d];
  for (int d = 0; d < a.valueDim; ++d)
    dov += dOut[d] * v[d];
  const float s = tf_attention_score<T>(a, qk, b, h, i, j);
  const float p = s == TF_ATTENTION_NEG_INF ? 0.0f : expf(s - lse);
  float keep = 1.0f;
  if (a.dropoutP > 0 && p != 0.0f)
    keep = tf_attention_keep(a, seed, b, h, i, j);
  *dropped = p * keep;
  return p * (dov * keep - delta);
}

template <typename T, int DMAX, int BM, int BN>
__device__ __forceinline__ void tf_attention_key_grads(const TfAttentionArgs &a) {
#if TF_ATTENTION_MMA
  if constexpr (TfAttentionTensorCores<T>::value) {
    tf_attention_key_grads_mma<T, DMAX, BM, BN>(a);
    return;
  }
#endif
  constexpr int TPK = 128 / BN;  // threads per key
  constexpr int ROWS = BM / TPK; // query rows of a tile a thread computes
  constexpr int DIMS = DMAX / TPK;
  using Shared = TfAttentionKeyGradShared<DMAX, BM, BN>;
  TF_ATTENTION_SHARED(Shared, sh);
  auto &ks = sh.ks;
  auto &vs = sh.vs;
  auto &qs = sh.qs;
  auto &dos = sh.dos;
  auto &pt = sh.pt;
  auto &dst = sh.dst;
  const int t = threadIdx.x, c = t / TPK, g = t % TPK;
  const long long blocksPerHead = (a.keys + BN - 1) / BN;
  const long long bkv = (long long)blockIdx.x / blocksPerHead;
  const long long j0 = (long long)blockIdx.x % blocksPerHead * BN, j = j0 + c;
  const long long b = bkv / a.kvHeads, group = a.heads / a.kvHeads;
  const unsigned long long seed = a.dropoutP > 0 ? *a.seed : 0ull;
  const float scale = (float)a.scale;
  const bool key = j < a.keys;
  tf_attention_load<DMAX, BN>(ks, (const T *)a.k + bkv * a.keys * a.headDim, j0, a.keys,
                              a.headDim);
  tf_attention_load<DMAX, BN>(vs, (const T *)a.v + bkv * a.keys * a.valueDim, j0, a.keys,
                              a.valueDim);
  float dk[DIMS], dv[DIMS];
#pragma unroll
  for (int y = 0; y < DIMS; ++y)
    dk[y] = dv[y] = 0.0f;
  // Causal: rows before the block's first key see none of its keys.
  const long long firstTile = a.causal ? j0 / BM * BM : 0;
  for (long long hg = 0; hg < group; ++hg) {
    const long long h = bkv % a.kvHeads * group + hg, bh = b * a.heads + h;
    for (long long i0 = firstTile; i0 < a.queries; i0 += BM) {
      __syncthreads(); // the previous tile is read
      tf_attention_load<DMAX, BM>(qs, (const T *)a.q + bh * a.queries * a.headDim, i0,
                                  a.queries, a.headDim);
      tf_attention_load<DMAX, BM>(dos, (const T *)a.dOut + bh * a.queries * a.valueDim, i0,
                                  a.queries, a.valueDim);
      tf_attention_row_terms<T>(a, bh, i0, sh.lses, sh.deltas);
      __syncthreads();
#pragma unroll
      for (int x = 0; x < ROWS; ++x) {
        const int r = g + x * TPK;
        float dropped = 0.0f, ds = 0.0f;
        if (key && i0 + r < a.queries)
          ds = tf_attention_score_grad<T>(a, seed, qs[r], ks[c], dos[r], vs[c], sh.lses[r],
                                          sh.deltas[r], b, h, i0 + r, j, &dropped);
        pt[c][r] = tf_attention_round<T>(dropped), dst[c][r] = tf_attention_round<T>(ds * scale);
      }
      __syncthreads();
#pragma unroll
      for (int y = 0; y < DIMS; ++y) {
        const int d = g + y * TPK;
        float kAcc = dk[y], vAcc = dv[y];
        for (int r = 0; r < BM; ++r) {
          vAcc += pt[c][r] * dos[r][d];
          kAcc += dst[c][r] * qs[r][d];
        }
        dk[y] = kAcc, dv[y] = vAcc;
      }
    }
  }
  if (!key)
    return;
  T *dkOut = (T *)a.dk + (bkv * a.keys + j) * a.headDim;
  T *dvOut = (T *)a.dv + (bkv * a.keys + j) * a.valueDim;
#pragma unroll
  for (int y = 0; y < DIMS; ++y) {
    const int d = g + y * TPK;
    if (d < a.headDim)
      dkOut[d] = tf_attention_narrow<T>(dk[y]);
    if (d < a.valueDim)
      dvOut[d] = tf_attention_narrow<T>(dv[y]);
  }
}

template <typename T, int DMAX, int BM, int BN>
__device__ __forceinline__ void tf_attention_query_grads(const TfAttentionArgs &a) {
#if TF_ATTENTION_MMA
  if constexpr (TfAttentionTensorCores<T>::value) {
    tf_attention_query_grads_mma<T, DMAX, BM, BN>(a);
    return;
  }
#endif
  constexpr int TPR = 128 / BM;
  constexpr int COLS = BN / TPR;
  constexpr int DIMS = DMAX / TPR;
  using Shared = TfAttentionQueryGradShared<DMAX, BM, BN>;
  TF_ATTENTION_SHARED(Shared, sh);
  auto &qs = sh.qs;
  auto &dos = sh.dos;
  auto &ks = sh.ks;
  auto &vs = sh.vs;
  auto &dss = sh.dss;
  const int t = threadIdx.x, r = t / TPR, g = t % TPR;
  const TfAttentionQueryTile tile = tf_attention_query_tile<BM>(a);
  const long long bh = tile.bh, i0 = tile.i0, i = i0 + r, b = tile.b, h = tile.h, kvh = tile.kvh;
  const unsigned long long seed = a.dropoutP > 0 ? *a.seed : 0ull;
  const float scale = (float)a.scale;
  const bool row = i < a.queries;
  tf_attention_load<DMAX, BM>(qs, (const T *)a.q + bh * a.queries * a.headDim, i0, a.queries,
                              a.headDim);
  tf_attention_load<DMAX, BM>(dos, (const T *)a.dOut + bh * a.queries * a.valueDim, i0,
                              a.queries, a.valueDim);
  tf_attention_row_terms<T>(a, bh, i0, sh.lses, sh.deltas);
  float dq[DIMS];
#pragma unroll
  for (int y = 0; y < DIMS; ++y)
    dq[y] = 0.0f;
  const long long keyEnd = a.causal && i0 + BM < a.keys ? i0 + BM : a.keys;
  for (long long j0 = 0; j0 < keyEnd; j0 += BN) {
    __syncthreads(); // the previous block is read (and the row tiles are in)
    tf_attention_load<DMAX, BN>(ks, (const T *)a.k + kvh * a.keys * a.headDim, j0, a.keys,
                                a.headDim);
    tf_attention_load<DMAX, BN>(vs, (const T *)a.v + kvh * a.keys * a.valueDim, j0, a.keys,
                                a.valueDim);
    __syncthreads();
#pragma unroll
    for (int x = 0; x < COLS; ++x) {
      const int c = g + x * TPR;
      float ds = 0.0f, dropped = 0.0f;
      if (row && j0 + c < a.keys)
        ds = tf_attention_score_grad<T>(a, seed, qs[r], ks[c], dos[r], vs[c], sh.lses[r],
                                        sh.deltas[r], b, h, i, j0 + c, &dropped);
      dss[r][c] = tf_attention_round<T>(ds * scale);
    }
    __syncthreads();
#pragma unroll
    for (int y = 0; y < DIMS; ++y) {
      const int d = g + y * TPR;
      float acc = dq[y];
      for (int c = 0; c < BN; ++c)
        acc += dss[r][c] * ks[c][d];
      dq[y] = acc;
    }
  }
  if (!row)
    return;
  T *dqOut = (T *)a.dq + (bh * a.queries + i) * a.headDim;
#pragma unroll
  for (int y = 0; y < DIMS; ++y)
    if (g + y * TPR < a.headDim)
      dqOut[g + y * TPR] = tf_attention_narrow<T>(dq[y]);
}
)";

/// The CUDA C type of element type `t`.
const char *cudaElementType(DType t) {
  switch (t) {
  case DType::F32: return "float";
  case DType::BF16: return "__nv_bfloat16";
  case DType::F16: return "__half";
  default: break;
  }
  throw CompileError(std::string("the CUDA attention kernels take f32, bf16 or f16, not ") +
                     dtypeName(t));
}

/// extern "C" kernels instantiating the templates for variant `v`.
std::string instantiate(const CudaAttentionVariant &v) {
  const CudaAttentionTiles &t = *v.tiles;
  auto kernel = [&](const char *name, const char *templ, int rows, int keys) {
    return "extern \"C\" __global__ void __launch_bounds__(" +
           std::to_string(kCudaAttentionThreads) + ") " + cudaAttentionKernel(name, v) +
           "(TfAttentionArgs a) {\n  " + templ + "<" + cudaElementType(v.element) + ", " +
           std::to_string(t.maxDim) + ", " + std::to_string(rows) + ", " +
           std::to_string(keys) + ">(a);\n}\n";
  };
  return kernel("forward", "tf_attention_forward", t.forwardRows, t.forwardKeys) +
         kernel("key_grads", "tf_attention_key_grads", t.keyGradRows, t.keyGradKeys) +
         kernel("query_grads", "tf_attention_query_grads", t.queryGradRows, t.queryGradKeys);
}
} // namespace

std::string tilefuse::cudaAttentionSource(const std::vector<CudaAttentionVariant> &variants) {
  std::string s = kKernels;
  for (const CudaAttentionVariant &v : variants)
    s += instantiate(v);
  return s;
}
