//===- CpuBlockProduct.cpp - register-tiled f32 block products ------------===//
//
// C is walked in panels of 64 columns (four AVX-512 vectors); each panel in
// tiles of 6 rows, whose 24 vectors of C stay in registers while the inner
// dimension runs: per step, four vectors of a B row are loaded and six
// elements of A broadcast, for 24 fused multiply-adds. The panel of B
// (inner dimension x 64 floats: 16 KiB at 64, 128 KiB at 512) is read by
// every tile of the panel from L1 or L2. The last vector of a panel is
// masked where n is not a multiple of 16, so any n works and nothing past
// C's row is touched.
//
// The runtime is built for portable x86-64: these functions carry their
// own target attribute and run only where the CPU reports AVX-512F.
//
//===----------------------------------------------------------------------===//
#include "runtime/CpuBlockProduct.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TILEFUSE_BLOCK_PRODUCT_X86 1
#endif

using namespace tilefuse;

#ifdef TILEFUSE_BLOCK_PRODUCT_X86
namespace {

constexpr int kTileRows = 6;
constexpr int kPanelVectors = 4;
constexpr int64_t kLanes = 16;

#define TILEFUSE_AVX512 __attribute__((target("avx512f")))

/// One tile: rows [0, Rows) of C x `Vectors` vectors of 16 columns, the
/// last of them masked by `lastMask`.
template <int Rows, int Vectors>
TILEFUSE_AVX512 void tile(int64_t k, const float *a, int64_t aRowStride, int64_t aColStride,
                          const float *b, int64_t ldb, float *c, int64_t ldc, bool accumulate,
                          __mmask16 lastMask) {
  // Every loop over Rows or Vectors is unrolled so that acc lives in
  // registers (left as loops, GCC keeps it in memory).
  __m512 acc[Rows][Vectors];
#pragma GCC unroll 8
  for (int i = 0; i < Rows; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < Vectors; ++v) {
      __mmask16 mask = v == Vectors - 1 ? lastMask : __mmask16(0xffff);
      acc[i][v] = accumulate ? _mm512_maskz_loadu_ps(mask, c + i * ldc + v * kLanes)
                             : _mm512_setzero_ps();
    }
#pragma GCC unroll 2
  for (int64_t p = 0; p < k; ++p) {
    const float *bRow = b + p * ldb;
    __m512 bv[Vectors];
#pragma GCC unroll 4
    for (int v = 0; v < Vectors - 1; ++v)
      bv[v] = _mm512_loadu_ps(bRow + v * kLanes);
    bv[Vectors - 1] = _mm512_maskz_loadu_ps(lastMask, bRow + (Vectors - 1) * kLanes);
    const float *aColumn = a + p * aColStride;
#pragma GCC unroll 8
    for (int i = 0; i < Rows; ++i) {
      __m512 ai = _mm512_set1_ps(aColumn[i * aRowStride]);
#pragma GCC unroll 4
      for (int v = 0; v < Vectors; ++v)
        acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < Rows; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < Vectors - 1; ++v)
      _mm512_storeu_ps(c + i * ldc + v * kLanes, acc[i][v]);
    _mm512_mask_storeu_ps(c + i * ldc + (Vectors - 1) * kLanes, lastMask, acc[i][Vectors - 1]);
  }
}

using TileFn = void (*)(int64_t, const float *, int64_t, int64_t, const float *, int64_t,
                        float *, int64_t, bool, __mmask16);

template <int Rows> TileFn tileFor(int vectors) {
  switch (vectors) {
  case 1:
    return &tile<Rows, 1>;
  case 2:
    return &tile<Rows, 2>;
  case 3:
    return &tile<Rows, 3>;
  default:
    return &tile<Rows, 4>;
  }
}

TileFn tileFn(int rows, int vectors) {
  switch (rows) {
  case 1:
    return tileFor<1>(vectors);
  case 2:
    return tileFor<2>(vectors);
  case 3:
    return tileFor<3>(vectors);
  case 4:
    return tileFor<4>(vectors);
  case 5:
    return tileFor<5>(vectors);
  default:
    return tileFor<6>(vectors);
  }
}

} // namespace
#endif

namespace {

bool cpuHasAvx512() {
#ifdef TILEFUSE_BLOCK_PRODUCT_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

std::atomic<bool> &blockProductsEnabled() {
  static std::atomic<bool> enabled{[] {
    const char *env = std::getenv("TILEFUSE_BLOCK_PRODUCTS");
    return !(env && std::strcmp(env, "0") == 0);
  }()};
  return enabled;
}

} // namespace

bool cpu::haveBlockProduct() {
  static const bool avx512 = cpuHasAvx512();
  return avx512 && blockProductsEnabled().load(std::memory_order_relaxed);
}

void cpu::setBlockProductsEnabled(bool enabled) {
  blockProductsEnabled().store(enabled, std::memory_order_relaxed);
}

void cpu::blockProduct(int64_t m, int64_t n, int64_t k, const float *a, int64_t aRowStride,
                       int64_t aColStride, const float *b, int64_t ldb, float *c, int64_t ldc,
                       bool accumulate) {
#ifdef TILEFUSE_BLOCK_PRODUCT_X86
  constexpr int64_t panel = kPanelVectors * kLanes;
  for (int64_t j0 = 0; j0 < n; j0 += panel) {
    int64_t cols = n - j0 < panel ? n - j0 : panel;
    int vectors = int((cols + kLanes - 1) / kLanes);
    int64_t lastLanes = cols - (vectors - 1) * kLanes;
    __mmask16 lastMask = __mmask16((1u << lastLanes) - 1u);
    for (int64_t i0 = 0; i0 < m; i0 += kTileRows) {
      int rows = int(m - i0 < kTileRows ? m - i0 : kTileRows);
      tileFn(rows, vectors)(k, a + i0 * aRowStride, aRowStride, aColStride, b + j0, ldb,
                            c + i0 * ldc + j0, ldc, accumulate, lastMask);
    }
  }
#else
  (void)m, (void)n, (void)k, (void)a, (void)aRowStride, (void)aColStride, (void)b, (void)ldb,
      (void)c, (void)ldc, (void)accumulate;
  std::abort(); // callers ask haveBlockProduct() first
#endif
}
