//===- BlockProductTest.cpp - register-tiled f32 block products ------------===//
#include "runtime/CpuBlockProduct.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace tilefuse;

namespace {

constexpr float kGuard = 12345.0f;

struct Case {
  int64_t m, n, k;
  bool transposedA, accumulate;
};

/// Runs one product with C inside a larger guarded buffer (leading
/// dimension n + 5, two guard rows) and checks it against double sums and
/// that no element outside C changed.
void check(const Case &c) {
  std::mt19937 rng(uint32_t(c.m * 131 + c.n * 17 + c.k));
  std::normal_distribution<float> dist;
  int64_t lda = c.transposedA ? c.m + 3 : c.k + 3, ldb = c.n + 2, ldc = c.n + 5;
  std::vector<float> a(size_t((c.transposedA ? c.k : c.m) * lda + 1)), b(size_t(c.k * ldb + 1));
  for (float &x : a)
    x = dist(rng);
  for (float &x : b)
    x = dist(rng);
  auto aAt = [&](int64_t i, int64_t p) { return c.transposedA ? a[p * lda + i] : a[i * lda + p]; };
  std::vector<float> buffer(size_t((c.m + 2) * ldc), kGuard);
  float *cRows = buffer.data() + ldc; // one guard row above
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j)
      cRows[i * ldc + j] = float(i - j) * 0.5f;
  std::vector<float> before = buffer;
  cpu::blockProduct(c.m, c.n, c.k, a.data(), c.transposedA ? 1 : lda, c.transposedA ? lda : 1,
                    b.data(), ldb, cRows, ldc, c.accumulate);
  for (int64_t i = -1; i <= c.m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      float got = cRows[i * ldc + j];
      if (i < 0 || i == c.m || j >= c.n) {
        ASSERT_EQ(got, before[size_t((i + 1) * ldc + j)])
            << "wrote outside C at (" << i << ", " << j << ") for m " << c.m << " n " << c.n;
        continue;
      }
      double want = c.accumulate ? double(before[size_t((i + 1) * ldc + j)]) : 0.0;
      double magnitude = std::fabs(want);
      for (int64_t p = 0; p < c.k; ++p) {
        want += double(aAt(i, p)) * double(b[size_t(p * ldb + j)]);
        magnitude += std::fabs(double(aAt(i, p)) * double(b[size_t(p * ldb + j)]));
      }
      // f32 sums of k terms: a few ulps of the terms' magnitudes.
      ASSERT_NEAR(got, want, 4e-7 * magnitude * std::sqrt(double(c.k) + 1) + 1e-30)
          << "at (" << i << ", " << j << ") for m " << c.m << " n " << c.n << " k " << c.k;
    }
}

} // namespace

TEST(BlockProduct, MatchesDoubleSumsOnEdgeShapesAndWritesOnlyC) {
  if (!cpu::haveBlockProduct())
    GTEST_SKIP() << "this CPU has no AVX-512F: the attention kernels use the library GEMMs";
  // Rows around the 6-row tile, columns around the 16-lane vectors and the
  // 64-column panel, inner dimensions 0 (C = 0 or unchanged), 1 and odd.
  for (int64_t m : {1, 5, 6, 7, 13})
    for (int64_t n : {1, 15, 16, 17, 63, 64, 65, 130})
      for (int64_t k : {0, 1, 37})
        for (bool transposedA : {false, true})
          for (bool accumulate : {false, true})
            check({m, n, k, transposedA, accumulate});
  check({512, 64, 256, true, true}); // the attention backward's shape
}

TEST(BlockProduct, SwitchTurnsItOffAndOn) {
  if (!cpu::haveBlockProduct())
    GTEST_SKIP() << "this CPU has no AVX-512F";
  cpu::setBlockProductsEnabled(false);
  EXPECT_FALSE(cpu::haveBlockProduct());
  cpu::setBlockProductsEnabled(true);
  EXPECT_TRUE(cpu::haveBlockProduct());
}
