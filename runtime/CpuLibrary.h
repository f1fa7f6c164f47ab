//===- CpuLibrary.h - library steps of the CPU executor ------------*- C++ -*-===//
//
// Steps that are calls rather than generated kernels: GEMM (a CPU BLAS
// loaded at run time, see CpuLibrary.cpp), embedding gather and its
// gradient's scatter-add.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_CPULIBRARY_H
#define TILEFUSE_RUNTIME_CPULIBRARY_H

#include "runtime/CpuDnnl.h"
#include "runtime/Program.h"

namespace tilefuse::cpu {

/// c = op(a) * op(b), batched; f32 and f64 natively, f16/bf16 through f32.
void gemm(const Step &s, DType dtype, const void *a, const void *b, void *c);
/// Grouped GEMM step `s` (Step::Kind::GroupedGemm): one GEMM per group
/// of rows, the groups read from `offsets` (runtime/GroupedGemm.h); rows
/// in no group, and empty groups' weight gradients, are 0.
void groupedGemm(const Step &s, DType dtype, DType offsetType, const void *a, const void *b,
                 const void *offsets, void *c);
/// Sort step `s` (graph.sort): each of `s.m` rows of `s.n` elements of
/// `dtype` sorted stably (NaN above every number), values and i64 indices.
void sort(const Step &s, DType dtype, const void *x, void *values, int64_t *indices);
/// Convolution step `s` (Conv, ConvGradInput or ConvGradWeight) on buffers
/// of `dtype`: oneDNN for f32 and bf16; f16 (and bf16 where oneDNN cannot)
/// widened to f32 and the result rounded once; the reference loops where
/// oneDNN is missing.
/// `chain`: the calling executor's (see ConvChain). `bias`: buffer 3 of a
/// Conv whose epilogue has "bias"; the epilogue (f32 only) is applied by
/// oneDNN, else after the convolution.
void conv(const Step &s, DType dtype, const void *a, const void *b, void *out,
          ConvChain *chain = nullptr, const void *bias = nullptr);
/// out[q, ...] = table[indices[q], ...]; throws CompileError on a bad index,
/// naming `what` (the op the indices belong to).
void gather(const BufferInfo &table, const BufferInfo &indices,
            const void *tablePtr, const void *indexPtr, void *out,
            const std::string &what = "graph.gather");
/// out = base; out[indices[q], ...] += updates[q, ...]. A null `basePtr`
/// is a base of zeros (an embedding's gradient): `out` is cleared instead
/// of copied, so the base's bytes are never read.
void scatterAdd(const BufferInfo &base, const BufferInfo &indices,
                const void *basePtr, const void *indexPtr,
                const void *updatesPtr, void *out);
/// c = alpha op(a) op(b) + beta c on the calling thread only (row-major,
/// leading dimensions as CBLAS takes them), through the BLAS loaded at run
/// time (oneDNN's dnnl_sgemm where the BLAS's kernels are narrower than the
/// CPU's) or a plain loop: for kernels that split work over the pool
/// themselves and multiply blocks inside each task.
void sgemmOnThisThread(bool transposeA, bool transposeB, int64_t m, int64_t n, int64_t k,
                       float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                       float beta, float *c, int64_t ldc);
/// Whether a 2-D f32 GEMM of this shape runs its row slabs through oneDNN
/// (where it is loaded) rather than the BLAS: f32GemmRule for the BLAS
/// loaded in this process. TILEFUSE_DNNL_F32=all picks oneDNN for every
/// shape, =0 none.
bool f32GemmPrefersDnnl(bool transposeA, bool transposeB, int64_t m, int64_t n, int64_t k);
/// The rule, measured per shape and transpose on a 2-core Intel Xeon and a
/// 2-core Zen 5 (bench/f32_gemm_library.py): oneDNN's dnnl_sgemm for every
/// shape when the BLAS runs narrower vector kernels than the CPU has
/// (`blasNarrower`); else for untransposed A at every size and for small
/// GEMMs with A transposed, OpenBLAS for large ones with A transposed.
bool f32GemmRule(bool blasNarrower, bool transposeA, bool transposeB, int64_t m, int64_t n,
                 int64_t k);
/// The BLAS library GEMMs go to ("libopenblas.so.0 (SkylakeX kernels)",
/// "libblis.so.4"), or "built-in loop" when none loads (or
/// TILEFUSE_BLAS=none).
std::string blasName();
/// Whether the BLAS's kernels use narrower vectors than this CPU's: an
/// OpenBLAS core type without AVX-512 (OPENBLAS_CORETYPE=Haswell, say) on
/// a CPU with AVX-512.
bool blasNarrowerThanCpu();

} // namespace tilefuse::cpu

#endif // TILEFUSE_RUNTIME_CPULIBRARY_H
