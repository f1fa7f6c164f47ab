//===- CpuTarget.h - the CPU that kernels are compiled for ------*- C++ -*-===//
//
// One choice of CPU for the JIT and for ahead-of-time CPU libraries: this
// machine's CPU (the default), or the one named by the TILEFUSE_CPU
// environment variable, an LLVM CPU name such as x86-64 (any x86-64 CPU),
// x86-64-v3 (AVX2, FMA, F16C), x86-64-v4 (AVX-512) or znver4. Naming a
// CPU tests what other machines would compile and run, and makes artifacts
// that load on every machine of that level.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_CODEGEN_CPU_CPUTARGET_H
#define TILEFUSE_CODEGEN_CPU_CPUTARGET_H

#include "llvm/Support/Error.h"
#include "llvm/Target/TargetMachine.h"

#include <memory>
#include <string>
#include <vector>

namespace tilefuse {

struct CpuTarget {
  std::string triple;
  std::string cpu;      ///< LLVM CPU name ("znver4", "x86-64-v3", ...)
  std::string features; ///< LLVM feature string ("+avx2,-avx512fp16,..."), may be empty
  /// The features an artifact compiled for this CPU requires of the machine
  /// that loads it (a subset of checkedCpuFeatures()).
  std::vector<std::string> requiredFeatures;
};

/// The host CPU, or TILEFUSE_CPU's. Fails, saying why, for a name LLVM does
/// not know, and, when `runsHere` (the JIT), for a CPU whose instructions
/// this machine lacks.
llvm::Expected<CpuTarget> selectCpuTarget(bool runsHere);

/// Whether `target` masks 8- and 16-bit vector lanes in hardware (x86:
/// AVX-512BW).
bool masksNarrowLanes(const CpuTarget &target);

/// A target machine for `target` (position-independent code, one section
/// per function). Each compiling thread needs its own.
llvm::Expected<std::unique_ptr<llvm::TargetMachine>>
createCpuTargetMachine(const CpuTarget &target);

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_CPU_CPUTARGET_H
