//===- Pipelines.cpp - the pass pipeline, step by step --------------------===//
#include "passes/Pipelines.h"

#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace {
struct FusedPipelineOptions : PassPipelineOptions<FusedPipelineOptions> {
  Option<std::string> target{*this, "target",
                             llvm::cl::desc("cpu or cuda[:sm_XX]"),
                             llvm::cl::init("cpu")};
};
} // namespace

void tilefuse::buildPrimitiveGraphPipeline(OpPassManager &pm) {
  // 0. Attention written out with matmul and softmax -> graph.attention
  //    (before decomposition takes the softmax apart).
  pm.addPass(createRecognizeAttentionPass());
  // 1. Composites (softmax, layer_norm, losses, ...) -> primitive ops.
  pm.addPass(createDecomposeCompositesPass());
  // 2. Fold identities introduced by the rules (x * 1, reshape of reshape).
  pm.addPass(createCanonicalizerPass());
  // 3. Share repeated subexpressions (the same broadcast built twice).
  pm.addPass(createCSEPass());
}

void tilefuse::buildFusedGraphPipeline(OpPassManager &pm,
                                       const std::string &target) {
  buildPrimitiveGraphPipeline(pm);
  // 4. Group the primitive ops into kernels.
  FuseOpsPassOptions options;
  options.target = target;
  pm.addPass(createFuseOpsPass(options));
}

void tilefuse::registerTilefusePipelines() {
  PassPipelineRegistration<>("tilefuse-primitive",
                             "Lower graph ops to primitives (recognize attention, "
                             "decompose, canonicalize, cse)",
                             buildPrimitiveGraphPipeline);
  PassPipelineRegistration<FusedPipelineOptions>(
      "tilefuse-fused", "Primitives grouped into fused kernels",
      [](OpPassManager &pm, const FusedPipelineOptions &options) {
        buildFusedGraphPipeline(pm, options.target);
      });
}

LogicalResult tilefuse::lowerToPrimitives(ModuleOp module) {
  PassManager pm(module.getContext(), ModuleOp::getOperationName());
  buildPrimitiveGraphPipeline(pm);
  return pm.run(module);
}
