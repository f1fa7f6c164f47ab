//===- Autocast.h - mixed-precision policy ------------------------*- C++ -*-===//
#ifndef TILEFUSE_PASSES_AUTOCAST_H
#define TILEFUSE_PASSES_AUTOCAST_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <string>
#include <vector>

namespace tilefuse {

/// The NameLoc name `tilefuse.autocast(False)` puts around the locations
/// of the ops traced inside it: autocast runs them in f32.
inline constexpr llvm::StringLiteral kAutocastOffLocName = "tilefuse.autocast.off";

/// Whether `loc` lies in a `tilefuse.autocast(False)` region.
bool isAutocastDisabled(mlir::Location loc);

/// Whether autocast runs attention in 16 bits (and written-out attention
/// under autocast is recognised in 16 bits); TILEFUSE_ATTENTION_16BIT=0
/// keeps it f32 (to compare).
bool autocastsAttention();

/// Applies the precision policy `precision` ("fp32": nothing, "bf16",
/// "fp16") to `func`, a graph of composite ops (see AutocastPass in
/// Passes.td). `keepFloat32` names op kinds (graph op names without the
/// dialect: "gelu", "matmul") forced to f32.
mlir::LogicalResult autocastFunction(mlir::func::FuncOp func, llvm::StringRef precision,
                                     llvm::ArrayRef<std::string> keepFloat32 = {});

} // namespace tilefuse

#endif // TILEFUSE_PASSES_AUTOCAST_H
