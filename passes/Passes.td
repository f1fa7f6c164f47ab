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
    (params, optimizer state, [scale, growth tracker, applied steps,] batch,
    step: tensor<i64>, lr: tensor<f64>) -> (loss, new params, new state
    [, new scale, tracker, applied steps]). Updated results carry `tilefuse.aliases`,
    the index of the argument they replace. Needs primitive ops.
  }];
  let options = [
    Option<"function", "function", "std::string", /*default=*/"\"\"",
           "Loss function (default: the only one)">,
    Option<"numParams", "num-params", "unsigned", /*default=*/"1",
           "How many leading arguments are parameters">,
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"",
           "sgd, adam, adamw or rmsprop">,
    Option<"momentum", "momentum", "double", /*default=*/"0.0", "SGD momentum">,
    Option<"nesterov", "nesterov", "bool", /*default=*/"false", "SGD Nesterov momentum">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "Adam beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "Adam beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "Adam epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.0", "Weight decay">,
    Option<"clipNorm", "clip-norm", "double", /*default=*/"0.0",
           "Clip gradients to this global norm (0: off)">,
    Option<"dynamicLossScale", "dynamic-loss-scale", "bool", /*default=*/"false",
           "Dynamic loss scaling (GradScaler semantics): adds the scale, the "
           "growth tracker and the applied-step count as state">,
    Option<"growthInterval", "growth-interval", "int64_t", /*default=*/"2000",
           "Finite steps in a row before the loss scale doubles">,
    Option<"parallel", "parallel", "std::string", /*default=*/"\"\"",
           "ddp: gradients averaged over a process group (bucketed all-reduces)">,
    Option<"groupSize", "group-size", "int64_t", /*default=*/"1",
           "Ranks of the data-parallel group dp">,
    Option<"bucketBytes", "bucket-bytes", "int64_t", /*default=*/"26214400",
           "Most bytes of gradients one all-reduce carries">
  ];
  let dependentDialects = ["::tilefuse::graph::GraphDialect"];
}

def FuseOpsPass : Pass<"fuse", "mlir::ModuleOp"> {
  let summary = "Group primitive graph ops into graph.fusion kernels";
  let description = [{
    Greedy producer-consumer fusion in program order: an elementwise or
    layout op joins the kernel of an operand when they iterate over the same
    domain; a reduction joins its prologue's kernel; the reduction's
    elementwise epilogue joins it, at the reduced shape or, for reductions
    over the innermost dimensions (rows), at the full shape (softmax and
    layer_norm become one row kernel each); reductions over the same domain
    and dimensions are fused horizontally (layer_norm backward's dgamma and
    dbeta). Fusion is refused when it would create a cycle between kernels,
    read a value of the kernel at another index (transpose, slice, concat),
    or need a result across program instances; `remarks=true` reports each
    refusal with its reason. matmul, gather and scatter_add stay library
    calls, unless the target applies an elementwise epilogue in the GEMM.
    Constants and fills are recomputed inside every kernel that uses them,
    and so are views and paddings (views of one value concatenated with
    constants or with each other).
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"",
           "cpu or cuda[:sm_XX]">,
    Option<"remarks", "remarks", "bool", /*default=*/"false",
           "Emit a remark for every refused fusion">,
  ];
  let dependentDialects = ["::tilefuse::graph::GraphDialect"];
}

def AutocastPass : Pass<"autocast", "mlir::ModuleOp"> {
  let summary = "Mixed precision: GEMMs in bf16/f16, sensitive ops in f32";
  let description = [{
    Runs on graphs of composite ops, before decompose-composites and
    autodiff. Under `precision=bf16|fp16`: matmul and linear take operands
    cast to the low precision (kernels and GEMM libraries accumulate in
    f32) and produce it; softmax, log_softmax, layer_norm, exp, log,
    log1p, expm1, pow, sqrt, rsqrt, reduce_sum and every loss run in f32;
    every other op follows its widest floating-point operand, splat fills
    and constants (Python scalars) taking the others' type. Ops in a
    `tilefuse.autocast(False)` region (NameLoc "tilefuse.autocast.off") and
    op kinds in `keep-fp32` run in f32. Function arguments (f32 master
    weights) and results keep their types; f64 work is left alone; every
    cast is a graph.cast, which fusion puts into the neighbouring kernels.
    `precision=fp32` changes nothing.
  }];
  let options = [
    Option<"precision", "precision", "std::string", /*default=*/"\"bf16\"",
           "fp32, bf16 or fp16">,
    ListOption<"keepFloat32", "keep-fp32", "std::string",
               "Op kinds (graph op names without 'graph.') to run in f32">,
  ];
  let dependentDialects = ["::tilefuse::graph::GraphDialect"];
}

def RematerializePass : Pass<"rematerialize", "mlir::ModuleOp"> {
  let summary = "Recompute saved kernel outputs inside the later kernel that reads them";
  let description = [{
    Runs on fused functions (the fuse pass ends with it). For a kernel F
    and the last later kernel B that reads F's outputs over the same
    iteration space (the same domain, and the same reduced dimensions when
    F reduces), B is rebuilt to compute F's body from F's inputs. Reads of
    F's outputs after B take B's recomputed values; reads before B that B
    does not depend on (a backward GEMM that needs the probabilities) move
    after B; reads B depends on (the forward pass) stay on F, and F keeps
    only the outputs still read. Applied when the bytes of F's outputs that
    no longer live until B exceed the bytes of F's inputs that now must:
    attention's softmax then saves its scores instead of exp(s - max) and
    the probabilities. Each rematerialization is tried on a copy of the
    function and kept only if the most bytes live at once (over the op
    order) drop, or do not grow and F disappears into B, or do not grow
    and the function's own peak (its results aside: they are the caller's
    buffers or state updated in place) drops, unless F draws random
    numbers. B reads a pointwise F's values through row-major reshapes
    in place (F computes them at whatever coordinates B asks). No kernel
    is added, and the bytes F and B move beyond what they moved before
    come out of a budget of 5% of the bytes all the
    function's kernels and library calls move (the softmax's backward
    kernel writes the probabilities again for the GEMM that needs them).
    TILEFUSE_REMATERIALIZE=N sets that share to N percent (0 turns the
    pass off; compile_train_step(memory_budget=...) raises it to fit).
    Kernels that reduce (F of kind reduction) are recomputed on targets
    whose kernels are memory-bound (TargetInfo::rematerializesReductions:
    CUDA), on the CPU only with a share above the default. Last, an output
    of a kernel that is a cheap pointwise function of the kernel's other
    outputs (a layer norm's x-hat of x - mean and rstd) is computed by its
    readers from those, where all of them are kernels and each output a
    reader did not read before is at most 1/8 of the derived one.
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"",
           "cpu or cuda[:sm_XX]">,
  ];
  let dependentDialects = ["::tilefuse::graph::GraphDialect"];
}

def LayOutChannelsLastPass : Pass<"lay-out-channels-last", "mlir::ModuleOp"> {
  let summary = "Give convolutions channels-last activations and carry that layout around them";
  let description = [{
    Every graph.conv, conv_bias_act, conv_grad_input and conv_grad_weight
    gets `channels_last` activations ([N, S..., C]); values around them
    take the same layout wherever their ops can run on it as they are:
    elementwise ops, broadcasts (a per-channel vector lands on the innermost
    dimension), reductions (batch-norm statistics over N, S...: the kept
    channels innermost), slices, concats (skip connections), transposes
    (cancelled where they undo the layout) and reshapes that move whole
    groups of dimensions in order (upsampling's interleave). A value needed
    in another layout is transposed once (a view fusion reads through).
    A region (values connected through those ops) changes layout when it
    holds at least two convolutions and the elements transposed at its
    edges, weighed at 4 reordered elements each, are fewer than the
    elements the channels-first convolutions would reorder. The fuse pass
    runs it on targets whose convolutions prefer the layout (oneDNN on the
    CPU), unless TILEFUSE_CHANNELS_LAST=0.
  }];
  let options = [
    Option<"weighCosts", "weigh-costs", "bool", /*default=*/"true",
           "keep only the regions whose transposes cost less than the reorders "
           "they save (false: every region of two or more convolutions)">,
  ];
  let dependentDialects = ["::tilefuse::graph::GraphDialect"];
}

#endif // TILEFUSE_PASSES

def RecognizeAttentionPass : Pass<"recognize-attention", "mlir::ModuleOp"> {
  let summary = "Turn attention written out with matmul and softmax into graph.attention";
  let description = [{
    `softmax(select(mask, q k^T * c, fill)) v` (the scale, the mask, and
    the transpose of k as an op or a matmul flag each optional; softmax over
    the last dimension; every intermediate used only on this path) becomes
    one `graph.attention`, whose kernels never build the L x S scores. The
    mask must be a constant: the causal triangle (tril) becomes the causal
    flag, any other constant in which every query row keeps a key becomes
    the mask operand; `fill` must be -inf or at most -1e8 (a score that
    far below the row's largest has probability exactly 0 in f32, as a
    masked one has). The softmax in f32; the products in f32, or in bf16 /
    f16 with the casts autocast puts around the softmax (the op then
    computes in f32 and its result is cast back). A dropout between the softmax and the
    product moves into the op (`dropout_p`, `stream`, its seed), which
    drops the same probabilities.
  }];
  let dependentDialects = ["::tilefuse::graph::GraphDialect"];
}
