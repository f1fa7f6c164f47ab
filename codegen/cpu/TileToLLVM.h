//===- TileToLLVM.h - tile kernels -> LLVM dialect for the CPU ---*- C++ -*-===//
//
// The CPU backend's lowering. Each tile kernel becomes
//
//     void name(void **buffers, int64_t firstProgram, int64_t endProgram)
//
// which runs programs [firstProgram, endProgram) in order: the runtime's
// thread pool hands each worker a range (runtime/CpuExecutor.h).
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_CODEGEN_CPU_TILETOLLVM_H
#define TILEFUSE_CODEGEN_CPU_TILETOLLVM_H

#include "mlir/IR/BuiltinOps.h"

#include <map>
#include <string>

namespace tilefuse {

/// Rewrites every tile kernel of `module` to the CPU calling convention and
/// lowers the module to the LLVM dialect (vector math with polynomial
/// approximations of exp, log, tanh and erf). `narrowMaskedLanes`: the
/// target masks 8- and 16-bit vector lanes in hardware (AVX-512BW);
/// otherwise blocks of such lanes are accessed unmasked where whole.
mlir::LogicalResult lowerTileToLLVM(mlir::ModuleOp module, bool narrowMaskedLanes = true);

/// Erases every tile kernel of `module` that is the same program as an
/// earlier one (each layer of a deep model repeats its kernels, which then
/// differ in name only), so code generation sees each program once.
/// Returns each erased kernel's name -> the kept kernel computing it.
std::map<std::string, std::string> eraseRepeatedKernels(mlir::ModuleOp module);

/// Dialects the lowering creates; load them before running it in a context.
void loadCpuCodegenDialects(mlir::MLIRContext &context);

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_CPU_TILETOLLVM_H
