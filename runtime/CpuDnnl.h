//===- CpuDnnl.h - bf16 GEMMs through oneDNN ---------------------*- C++ -*-===//
#ifndef TILEFUSE_RUNTIME_CPUDNNL_H
#define TILEFUSE_RUNTIME_CPUDNNL_H

#include "runtime/Program.h"

#include <string>

namespace tilefuse::cpu {

/// Runs GEMM step `s` on bf16 buffers through oneDNN's matmul (f32
/// accumulation, AVX512-BF16 where the CPU has it); false when oneDNN is
/// not loaded, `dtype` is not bf16, or oneDNN has only a reference kernel
/// for it (the caller then widens to f32). Throws CompileError when oneDNN
/// fails to run a GEMM it accepted.
bool dnnlGemm(const Step &s, DType dtype, const void *a, const void *b, void *c);

/// "loaded", or why the oneDNN path is off.
std::string dnnlStatus();

} // namespace tilefuse::cpu

#endif // TILEFUSE_RUNTIME_CPUDNNL_H
