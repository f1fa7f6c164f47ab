//===- Pipelines.cpp - the pass pipeline, step by step --------------------===//
#include "passes/Pipelines.h"

#include "passes/Passes.h"

#include "mlir/Transforms/Passes.h"

using namespace mlir;

void tilefuse::buildPrimitiveGraphPipeline(OpPassManager &pm) {
  // 1. Composites (softmax, layer_norm, losses, ...) -> primitive ops.
  pm.addPass(createDecomposeCompositesPass());
  // 2. Fold identities introduced by the rules (x * 1, reshape of reshape).
  pm.addPass(createCanonicalizerPass());
  // 3. Share repeated subexpressions (the same broadcast built twice).
  pm.addPass(createCSEPass());
}

LogicalResult tilefuse::lowerToPrimitives(ModuleOp module) {
  PassManager pm(module.getContext(), ModuleOp::getOperationName());
  buildPrimitiveGraphPipeline(pm);
  return pm.run(module);
}
