//===- FuseOps.h - kernel fusion ---------------------------------*- C++ -*-===//
#ifndef TILEFUSE_PASSES_FUSEOPS_H
#define TILEFUSE_PASSES_FUSEOPS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace tilefuse {

class TargetInfo;

/// Groups the primitive graph ops of `func` into graph.fusion kernels (see
/// FuseOpsPass in Passes.td). With `remarks`, every refused fusion is
/// reported as a remark naming the reason.
mlir::LogicalResult fuseFunction(mlir::func::FuncOp func,
                                 const TargetInfo &target, bool remarks);

} // namespace tilefuse

#endif // TILEFUSE_PASSES_FUSEOPS_H
