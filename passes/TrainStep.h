//===- TrainStep.h - loss function -> one whole training step ---*- C++ -*-===//
#ifndef TILEFUSE_PASSES_TRAINSTEP_H
#define TILEFUSE_PASSES_TRAINSTEP_H

#include "passes/OptimizerConfig.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace tilefuse {

/// Attribute on a train step's results naming the argument each one
/// replaces (updated parameters and optimizer state): the memory planner and
/// the runtime may update that buffer in place.
constexpr const char *kAliasAttrName = "tilefuse.aliases";

/// From `loss` (args: the first `numParams` are parameters, the rest the
/// batch; result 0 a 0-d float loss, primitive ops only) builds `name`:
///   (params..., state..., [scale, tracker, applied,] batch...,
///    step: tensor<i64>, lr: tensor<f64> (one per parameter group))
///     -> (loss, new params..., new state..., [new scale, tracker, applied])
/// State is slot-major: all first slots (momentum buffer, or Adam's m), then
/// all second slots (Adam's v), each shaped like its parameter. `step` is
/// the 1-based count of this update (Adam's bias correction). With dynamic
/// loss scaling (config.lossScale), the step-wide state follows: the scale
/// (0-d f32), finite steps in a row (0-d i64) and updates applied (0-d
/// i64, which then counts for Adam's bias correction in place of `step`);
/// the loss returned is unscaled.
///
/// Model state (`numState` > 0: batch norm's running statistics, which the
/// forward pass updates and no optimizer touches): the loss then takes
/// (params, model state..., rest...) and returns (loss, new model
/// state...); the step takes the model state after the step-wide state and
/// returns its new values last, each replacing its argument.
mlir::FailureOr<mlir::func::FuncOp>
buildTrainStep(mlir::func::FuncOp loss, unsigned numParams,
               const OptimizerConfig &config, llvm::StringRef name, unsigned numState = 0);

} // namespace tilefuse

#endif // TILEFUSE_PASSES_TRAINSTEP_H
