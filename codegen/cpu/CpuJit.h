//===- CpuJit.h - compile tile kernels to machine code in process -*- C++ -*-===//
#ifndef TILEFUSE_CODEGEN_CPU_CPUJIT_H
#define TILEFUSE_CODEGEN_CPU_CPUJIT_H

#include "runtime/CpuExecutor.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace tilefuse {

/// Entry points of JIT-compiled kernels; `owner` keeps the code alive.
struct CpuCode {
  std::vector<CpuKernelFn> kernels;
  std::shared_ptr<void> owner;
};

/// Lowers the tile kernels of `module` to LLVM (in place, see TileToLLVM.h),
/// compiles them for the host CPU and returns the entry points of `names`
/// in that order. Emits diagnostics and fails on any error.
mlir::FailureOr<CpuCode> jitCpuKernels(mlir::ModuleOp module,
                                       const std::vector<std::string> &names);

/// `module`'s tile kernels as LLVM IR text (for --emit=llvm); `module` is
/// lowered in place.
mlir::FailureOr<std::string> cpuKernelsToLLVMIR(mlir::ModuleOp module);

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_CPU_CPUJIT_H
