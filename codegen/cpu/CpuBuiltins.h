//===- CpuBuiltins.h - every symbol JIT-compiled kernels may call -*- C++ -*-===//
//
// LLVM's code generation turns some IR into calls: half and bfloat16
// conversions a CPU has no instruction for (`__truncdfhf2` on every x86-64,
// `__extendhfsf2` without F16C), libm for math it cannot inline (`fmaf`
// without FMA, `floorf` without SSE4.1, `fmodf` for `frem`), memcpy/memset.
// Which calls appear depends on the CPU the kernels are compiled for, and
// whether the process happens to have loaded a library defining them
// depends on what else was imported. So the JIT resolves every external
// symbol from this one table, and nothing else: a kernel links the same way
// in any process on any x86-64 CPU, and a symbol missing here fails
// everywhere, with its name (CpuJit.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_CODEGEN_CPU_CPUBUILTINS_H
#define TILEFUSE_CODEGEN_CPU_CPUBUILTINS_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tilefuse {

/// (symbol name, address) of every function JIT-compiled kernels may call.
const std::vector<std::pair<std::string, void *>> &cpuKernelSymbols();

/// IEEE binary16 / bfloat16 bit patterns of `x`, rounded once to nearest
/// even (no double rounding through float), NaN kept quiet with its sign.
uint16_t roundToHalfBits(double x);
uint16_t roundToBFloat16Bits(double x);
/// The exact value of a binary16 / bfloat16 bit pattern.
float halfBitsToFloat(uint16_t bits);
float bfloat16BitsToFloat(uint16_t bits);

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_CPU_CPUBUILTINS_H
