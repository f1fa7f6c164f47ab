//===- FusionToTile.h - graph.fusion -> tile kernel ---------------*- C++ -*-===//
//
// Turns one kernel chosen by the fusion pass into a Triton-style tile
// program (ir/tile). Shared by every backend: the CPU backend lowers the
// result to LLVM, the CUDA renderer prints it.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_CODEGEN_TILE_FUSIONTOTILE_H
#define TILEFUSE_CODEGEN_TILE_FUSIONTOTILE_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace tilefuse {
class TargetInfo;
namespace graph {
class FusionOp;
}

/// Appends to `module` a kernel `func.func` named `name`: arguments are pointers to the fusion's inputs, then to its
/// results, all row-major and contiguous. Emits a diagnostic on the fusion
/// and fails when the region holds something no tile program expresses.
mlir::FailureOr<mlir::func::FuncOp>
lowerFusionToTile(graph::FusionOp fusion, mlir::ModuleOp module,
                  const TargetInfo &target, llvm::StringRef name);

/// Makes every non-splat graph.constant inside fusion regions of `func` an
/// input of its region instead (kernels read tables from memory; only splat
/// constants become immediates).
void hoistDenseConstants(mlir::func::FuncOp func);

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_TILE_FUSIONTOTILE_H
