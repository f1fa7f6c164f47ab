//===- CpuObject.h - tile kernels -> a shared library for the host -*- C++ -*-===//
#ifndef TILEFUSE_CODEGEN_CPU_CPUOBJECT_H
#define TILEFUSE_CODEGEN_CPU_CPUOBJECT_H

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace tilefuse {

/// Lowers the tile kernels of `module` (in place, as the JIT does) and
/// returns the bytes of a shared library exporting each kernel with the CPU
/// ABI of TileToLLVM.h, compiled for this host's CPU and linked with the
/// system C compiler ($CC, else cc).
mlir::FailureOr<std::string> emitCpuSharedLibrary(mlir::ModuleOp module);

/// Vector ISA features of this host the generated code may use (and an
/// artifact therefore requires): "avx512f", "avx2", ...
std::vector<std::string> hostCpuFeatures();

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_CPU_CPUOBJECT_H
