//===- CpuObject.h - tile kernels -> a shared library for the host -*- C++ -*-===//
#ifndef TILEFUSE_CODEGEN_CPU_CPUOBJECT_H
#define TILEFUSE_CODEGEN_CPU_CPUOBJECT_H

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace tilefuse {

struct CpuSharedLibrary {
  std::string bytes;
  /// ISA features the code may use, which the loading machine must have.
  std::vector<std::string> requiredFeatures;
};

/// Lowers the tile kernels of `module` (in place, as the JIT does) and
/// returns a shared library exporting each kernel with the CPU ABI of
/// TileToLLVM.h, compiled for the CPU of CpuTarget.h (the host's unless
/// TILEFUSE_CPU names another) and linked with the system C compiler ($CC,
/// else cc), with every symbol resolved at link time.
mlir::FailureOr<CpuSharedLibrary> emitCpuSharedLibrary(mlir::ModuleOp module);

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_CPU_CPUOBJECT_H
