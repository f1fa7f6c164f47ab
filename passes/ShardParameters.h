//===- ShardParameters.h - ZeRO: parameters sharded over a group --*- C++ -*-===//
#ifndef TILEFUSE_PASSES_SHARDPARAMETERS_H
#define TILEFUSE_PASSES_SHARDPARAMETERS_H

#include "passes/OptimizerConfig.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace tilefuse {

/// Attribute on a sharded train step (and its sharded loss): the parameter
/// indices each shard holds, in order (an array of i64 arrays). Shard `b` of
/// rank `r` is elements [r * n_b, (r + 1) * n_b) of those parameters
/// flattened and concatenated, zero-padded to a multiple of the group size.
constexpr const char *kShardsAttrName = "tilefuse.shards";

/// The shards of `numParams` parameters of `loss`: in argument order, a new
/// shard where the dtype, the parameter group or the weight decay changes,
/// or where config.parallel.bucketBytes would be exceeded.
std::vector<std::vector<unsigned>> shardLayout(mlir::func::FuncOp loss, unsigned numParams,
                                               const OptimizerConfig &config);

/// `loss` (params..., rest...) as a function `name` of the shards (one 1-D
/// tensor per shard of `layout`, then the rest): each shard all-gathered
/// over config.parallel's group and sliced back into the parameters before
/// the loss's ops. Differentiating it reduce-scatters the gradients (the
/// all-gather's VJP). The function carries kShardsAttrName; its ops carry a
/// marker that regatherForBackward reads.
mlir::func::FuncOp shardParameters(mlir::func::FuncOp loss, unsigned numParams,
                                   const std::vector<std::vector<unsigned>> &layout,
                                   const ParallelConfig &config, llvm::StringRef name);

/// ZeRO-3 in a value-and-grad function of a shardParameters loss: backward
/// ops that read gathered parameters read a second all-gather instead,
/// started once the backward pass reaches them, so no gathered parameter
/// lives from the forward pass to the backward pass. Removes the markers.
void regatherForBackward(mlir::func::FuncOp grad, unsigned numShards);

/// Moves every reduce-scatter start of `step`, with the cheap ops that only
/// feed it, right after the last value it needs: autodiff emits the
/// all-gathers' VJPs after every other, at the end of the backward pass,
/// where every full gradient would still be alive.
void startReductionsEarly(mlir::func::FuncOp step);

/// Removes shardParameters' markers from `f`'s ops.
void dropForwardMarkers(mlir::func::FuncOp f);

} // namespace tilefuse

#endif // TILEFUSE_PASSES_SHARDPARAMETERS_H
