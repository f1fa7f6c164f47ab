//===- CpuLibrary.h - library steps of the CPU executor ------------*- C++ -*-===//
//
// Steps that are calls rather than generated kernels: GEMM (a CPU BLAS
// loaded at run time, see CpuLibrary.cpp), embedding gather and its
// gradient's scatter-add.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_CPULIBRARY_H
#define TILEFUSE_RUNTIME_CPULIBRARY_H

#include "runtime/Program.h"

namespace tilefuse::cpu {

/// c = op(a) * op(b), batched; f32 and f64 natively, f16/bf16 through f32.
void gemm(const Step &s, DType dtype, const void *a, const void *b, void *c);
/// out[q, ...] = table[indices[q], ...]; throws CompileError on a bad index,
/// naming `what` (the op the indices belong to).
void gather(const BufferInfo &table, const BufferInfo &indices,
            const void *tablePtr, const void *indexPtr, void *out,
            const std::string &what = "graph.gather");
/// out = base; out[indices[q], ...] += updates[q, ...].
void scatterAdd(const BufferInfo &base, const BufferInfo &indices,
                const void *basePtr, const void *indexPtr,
                const void *updatesPtr, void *out);
/// The BLAS library GEMMs go to ("libopenblas.so.0", "libblis.so.4"), or
/// "built-in loop" when none loads (or TILEFUSE_BLAS=none).
std::string blasName();

} // namespace tilefuse::cpu

#endif // TILEFUSE_RUNTIME_CPULIBRARY_H
