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

/// The primitive pipeline, then 4. fusion into graph.fusion kernels for
/// `target` ("cpu" or "cuda[:sm_XX]").
void buildFusedGraphPipeline(mlir::OpPassManager &pm, const std::string &target);

/// Registers the pipelines as `tilefuse-primitive` and
/// `tilefuse-fused{target=...}` for tilefuse-opt.
void registerTilefusePipelines();

/// Runs buildPrimitiveGraphPipeline on `module`; diagnostics go to the
/// context's handler.
mlir::LogicalResult lowerToPrimitives(mlir::ModuleOp module);

} // namespace tilefuse

#endif // TILEFUSE_PASSES_PIPELINES_H
