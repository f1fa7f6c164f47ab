//===- Pipelines.h - the one pass pipeline -----------------------*- C++ -*-===//
//
// Python, the CLI and the tests all lower through these functions, so no
// second, divergent pipeline exists anywhere.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_PASSES_PIPELINES_H
#define TILEFUSE_PASSES_PIPELINES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

namespace tilefuse {

/// Graph -> primitive graph: decompose composites, canonicalize, CSE.
void buildPrimitiveGraphPipeline(mlir::OpPassManager &pm);

/// Runs buildPrimitiveGraphPipeline on `module`; diagnostics go to the
/// context's handler.
mlir::LogicalResult lowerToPrimitives(mlir::ModuleOp module);

} // namespace tilefuse

#endif // TILEFUSE_PASSES_PIPELINES_H
