//===- CpuDnnl.h - GEMMs through oneDNN ---------------------------*- C++ -*-===//
#ifndef TILEFUSE_RUNTIME_CPUDNNL_H
#define TILEFUSE_RUNTIME_CPUDNNL_H

#include "runtime/Program.h"

#include <cstdint>
#include <string>

namespace tilefuse::cpu {

/// Runs GEMM step `s` on bf16 buffers through oneDNN's matmul (f32
/// accumulation, AVX512-BF16 where the CPU has it); false when oneDNN is
/// not loaded, `dtype` is not bf16, or oneDNN has only a reference kernel
/// for it (the caller then widens to f32). Throws CompileError when oneDNN
/// fails to run a GEMM it accepted.
bool dnnlGemm(const Step &s, DType dtype, const void *a, const void *b, void *c);

/// Whether oneDNN, where it is loaded, runs GEMMs of `dtype` (dnnlGemm's
/// element types): on the process's OpenMP team, as it runs convolutions.
bool dnnlTakesGemm(DType dtype);

/// One slab of an f32 GEMM on the calling thread (an OpenMP team of one:
/// tilefuse's pool splits the GEMM into slabs): C[rows x n] (leading
/// dimension ldc) = op(A)[rows x k] op(B)[k x n], row-major, a transposed
/// operand stored the other way round with its leading dimension. False
/// when oneDNN is not loaded, its f32 path is off (TILEFUSE_DNNL_F32=0), it
/// lacks dnnl_sgemm (which runs C = op(A) op(B)) or has only a reference
/// kernel for the shape, or it failed: the caller then runs the slab through
/// the BLAS.
/// `accumulate`: C += op(A) op(B) (a matmul primitive with a sum post-op)
/// instead.
bool dnnlSgemmSlab(bool transA, bool transB, int64_t rows, int64_t n, int64_t k, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc,
                   bool accumulate = false);

/// C = alpha op(A) op(B) + beta C on the calling thread through
/// dnnl_sgemm (a team of one), row-major with CBLAS's leading dimensions;
/// false where oneDNN or its f32 path is not available or it failed.
bool dnnlSgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha,
               const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
               int64_t ldc);

/// The same on this thread for bf16 A and B and an f32 C (f32
/// accumulation): C = op(A) op(B), or C += op(A) op(B) with `accumulate`.
/// False when oneDNN is not loaded, cannot give the slab a team of one
/// thread, has only a reference kernel for the shape, or failed: the
/// caller then widens the operands.
bool dnnlBf16GemmSlab(bool transA, bool transB, int64_t rows, int64_t n, int64_t k,
                      const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb, float *c,
                      int64_t ldc, bool accumulate);

/// Convolution step `p` on `dtype` (f32 or bf16, f32 accumulation) buffers
/// through oneDNN's convolution primitives (forward, backward data or
/// backward weights; the steps' plain row-major layouts, reordered to and
/// from the ones oneDNN picks; oneDNN's own OpenMP threads), made once per
/// shape: out = direction(a, b) as runtime/Conv.h defines it. False when
/// oneDNN is not loaded, lacks the convolution API, has only its reference
/// kernel for the shape, or runs in a forked child (the caller then widens
/// bf16 to f32, or runs the reference loops). Throws CompileError when
/// oneDNN fails to run a primitive it accepted.
///
/// `chain` (one per executor, reset at the start of each run) lets the
/// second of an output gradient's two backward convolutions (data and
/// weights, in either order) read the blocked copy of the gradient the
/// first left in the shared buffer (the same gradient buffer, the same
/// layout, no other convolution of the process in between, and no step of
/// the executor in between that writes the gradient's bytes: the caller
/// calls resetIfWritten for what each other step writes, and resets the
/// chain at collectives, which write in the background), instead of
/// reordering it again.
struct ConvChain {
  /// The process-wide number of this executor's last oneDNN convolution
  /// (0: none yet in this run, or the copy is void).
  uint64_t lastCall = 0;
  /// The plain bytes the kept blocked copy was made from: a step that
  /// writes any of them voids the chain (resetIfWritten).
  const char *gradient = nullptr;
  size_t gradientBytes = 0;
  void resetIfWritten(const void *data, size_t bytes) {
    const char *begin = static_cast<const char *>(data);
    if (gradient && begin < gradient + gradientBytes && gradient < begin + bytes)
      *this = {};
  }
};
/// `epilogue` (forward, f32 only): applied by the primitive as it writes
/// `out` (oneDNN's bias argument and eltwise post-op); false where this
/// oneDNN cannot (the caller then applies it after the convolution).
bool dnnlConv(ConvDirection direction, const ConvParams &p, DType dtype, const void *a,
              const void *b, void *out, ConvChain *chain = nullptr,
              const ConvEpilogue &epilogue = {});

/// Output-gradient reorders skipped so far by ConvChain (process-wide).
int64_t dnnlConvReordersReused();

/// f32 slabs oneDNN has run in this process; -1 when the f32 path is off.
int64_t dnnlF32SlabsRun();

/// "loaded", or why the oneDNN path is off.
std::string dnnlStatus();

/// Bytes of the one buffer holding the running convolution's operands in
/// oneDNN's blocked layouts (sized for the largest convolution run so far).
size_t dnnlConvScratchBytes();

} // namespace tilefuse::cpu

#endif // TILEFUSE_RUNTIME_CPUDNNL_H
