//===- Passes.td - graph-level passes ----------------------------*- tablegen -*-===//
#ifndef TILEFUSE_PASSES
#define TILEFUSE_PASSES

include "mlir/Pass/PassBase.td"

def DecomposeCompositesPass : Pass<"decompose-composites", "mlir::ModuleOp"> {
  let summary = "Rewrite composite graph ops into primitives";
  let description = [{
    softmax, log_softmax, layer_norm, gelu, silu, relu, linear, dropout,
    cross_entropy, nll, mse and bce become chains of primitive graph ops
    (elementwise math, reductions, broadcasts, matmul, random_uniform).
    Reductions subtract the maximum first where exp is involved, so the
    decomposed forms are as stable as the composites promise.
  }];
  let dependentDialects = ["::tilefuse::graph::GraphDialect"];
}

#endif // TILEFUSE_PASSES
