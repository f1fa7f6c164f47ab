//===- DataParallel.h - gradients averaged over a process group ---*- C++ -*-===//
#ifndef TILEFUSE_PASSES_DATAPARALLEL_H
#define TILEFUSE_PASSES_DATAPARALLEL_H

#include "passes/OptimizerConfig.h"

#include "mlir/IR/Block.h"
#include "mlir/IR/Builders.h"

namespace tilefuse {

/// Replaces each of `grads` (values of `body`, the train step's) by its
/// mean over the ranks of `config`'s group, as PyTorch's
/// DistributedDataParallel does: gradients in buckets of one dtype and at
/// most config.bucketBytes (the first at most 1 MiB, so communication
/// starts early; a larger gradient gets a bucket of its own), in
/// the order the backward pass produces them; each bucket flattened into
/// one buffer and its all-reduce started right after its last gradient is
/// computed; the wait, and the division by the group size, at `b`'s
/// insertion point (where the optimizer starts reading them). Returns the
/// number of buckets.
unsigned averageGradients(mlir::OpBuilder &b, mlir::Block &body,
                          llvm::MutableArrayRef<mlir::Value> grads, const ParallelConfig &config);

} // namespace tilefuse

#endif // TILEFUSE_PASSES_DATAPARALLEL_H
