//===- CpuJit.h - compile tile kernels to machine code in process -*- C++ -*-===//
#ifndef TILEFUSE_CODEGEN_CPU_CPUJIT_H
#define TILEFUSE_CODEGEN_CPU_CPUJIT_H

#include "runtime/CpuExecutor.h"

#include "mlir/IR/BuiltinOps.h"

#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <vector>

namespace tilefuse {

/// Entry points of JIT-compiled kernels; `owner` keeps the code alive.
/// `objects` and `aliases` make the same code again without MLIR
/// (linkCpuObjects): the object files linked, and the kernels that run
/// another's code (repeated layers: name -> the kernel compiled).
struct CpuCode {
  std::vector<CpuKernelFn> kernels;
  std::shared_ptr<void> owner;
  std::vector<std::string> objects;
  std::map<std::string, std::string> aliases;
};

/// Lowers the tile kernels of `module` to LLVM (in place, see TileToLLVM.h),
/// compiles them for the host CPU and returns the entry points of `names`
/// in that order. Emits diagnostics and fails on any error.
mlir::FailureOr<CpuCode> jitCpuKernels(mlir::ModuleOp module,
                                       const std::vector<std::string> &names);

/// Links `objects` (a CpuCode's, compiled on this machine for the CPU that
/// selectCpuTarget(true) selects now) in a new JIT and returns the entry
/// points of `names`, through `aliases`. Fails, saying why, on objects this
/// JIT cannot link.
llvm::Expected<CpuCode> linkCpuObjects(const std::vector<std::string> &objects,
                                       const std::map<std::string, std::string> &aliases,
                                       const std::vector<std::string> &names);

/// `module`'s tile kernels as LLVM IR text (for --emit=llvm); `module` is
/// lowered in place.
mlir::FailureOr<std::string> cpuKernelsToLLVMIR(mlir::ModuleOp module);

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_CPU_CPUJIT_H
