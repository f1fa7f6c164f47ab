//===- CpuBlockProduct.h - register-tiled f32 block products ----*- C++ -*-===//
//
// Small f32 products on the calling thread, C = A B or C += A B, with A
// read through any pair of strides (A^T costs nothing) and B row-major: a
// tile of C stays in AVX-512 registers over the whole inner dimension, B's
// rows are read in place and A's elements broadcast from where they lie.
// Fused attention's backward uses it for dV += P^T dO and dK += dS^T Q
// ([512 x 256]^T [256 x 64] per block pair), where oneDNN's matmul takes
// longer with A transposed; for the other block products oneDNN's kernels
// are as fast (bench/attention_products.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_CPUBLOCKPRODUCT_H
#define TILEFUSE_RUNTIME_CPUBLOCKPRODUCT_H

#include <cstdint>

namespace tilefuse::cpu {

/// Whether blockProduct runs on this CPU (AVX-512F) and is enabled; else
/// callers use the library GEMMs. TILEFUSE_BLOCK_PRODUCTS=0 disables it at
/// start-up, setBlockProductsEnabled at any time (benchmarks compare both
/// ways in one process).
bool haveBlockProduct();
void setBlockProductsEnabled(bool enabled);

/// C[m x n] (leading dimension ldc) = A B, or += with `accumulate`, where
/// A's element (i, p) is a[i * aRowStride + p * aColStride] and B[p][j] is
/// b[p * ldb + j]. Nothing outside the m x n elements of C is written, nor
/// outside A's and B's elements read. Requires haveBlockProduct().
void blockProduct(int64_t m, int64_t n, int64_t k, const float *a, int64_t aRowStride,
                  int64_t aColStride, const float *b, int64_t ldb, float *c, int64_t ldc,
                  bool accumulate);

} // namespace tilefuse::cpu

#endif // TILEFUSE_RUNTIME_CPUBLOCKPRODUCT_H
