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

def AutodiffPass : Pass<"autodiff", "mlir::ModuleOp"> {
  let summary = "Add a value-and-gradient function (reverse mode)";
  let description = [{
    For function `function` (or the only one), adds `<function>_value_and_grad`
    returning its results followed by the gradient of its first result (a 0-d
    float loss) with respect to the arguments listed in `wrt`. Needs primitive
    ops: run decompose-composites first.
  }];
  let options = [
    Option<"function", "function", "std::string", /*default=*/"\"\"",
           "Function to differentiate (default: the only one)">,
    ListOption<"wrt", "wrt", "unsigned", "Argument indices to differentiate">,
  ];
  let dependentDialects = ["::tilefuse::graph::GraphDialect"];
}

def BuildTrainStepPass : Pass<"build-train-step", "mlir::ModuleOp"> {
  let summary = "Add a whole training step: loss, gradients, optimizer update";
  let description = [{
    For the loss function `function` (or the only one) whose first
    `num-params` arguments are parameters, adds `<function>_train_step`:
    (params, optimizer state, batch, step: tensor<i64>, lr: tensor<f64>) ->
    (loss, new params, new state). Updated results carry `tilefuse.aliases`,
    the index of the argument they replace. Needs primitive ops.
  }];
  let options = [
    Option<"function", "function", "std::string", /*default=*/"\"\"",
           "Loss function (default: the only one)">,
    Option<"numParams", "num-params", "unsigned", /*default=*/"1",
           "How many leading arguments are parameters">,
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"",
           "sgd, adam or adamw">,
    Option<"momentum", "momentum", "double", /*default=*/"0.0", "SGD momentum">,
    Option<"nesterov", "nesterov", "bool", /*default=*/"false", "SGD Nesterov momentum">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "Adam beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "Adam beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "Adam epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.0", "Weight decay">,
    Option<"clipNorm", "clip-norm", "double", /*default=*/"0.0",
           "Clip gradients to this global norm (0: off)">,
  ];
  let dependentDialects = ["::tilefuse::graph::GraphDialect"];
}

#endif // TILEFUSE_PASSES
