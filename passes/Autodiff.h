//===- Autodiff.h - reverse-mode differentiation of graph functions -*- C++ -*-===//
#ifndef TILEFUSE_PASSES_AUTODIFF_H
#define TILEFUSE_PASSES_AUTODIFF_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace tilefuse {

/// Builds, next to `primal`, a function `name` with the same arguments that
/// returns every result of `primal` followed by the gradient of its first
/// result (a 0-d float loss) with respect to each argument in `wrt`.
/// `primal` must hold only primitive graph ops (run decompose-composites
/// first). Emits a diagnostic and fails on an integer `wrt` argument, a
/// non-scalar loss or an op without a VJP rule.
///
/// With `seedArgument`, the function takes one more argument, last: the
/// loss's cotangent (a 0-d tensor of the loss's type) that seeds the
/// reverse pass in place of 1, so the gradients come out multiplied by it
/// (loss scaling).
mlir::FailureOr<mlir::func::FuncOp>
buildValueAndGrad(mlir::func::FuncOp primal, llvm::ArrayRef<unsigned> wrt,
                  llvm::StringRef name, bool seedArgument = false);

} // namespace tilefuse

#endif // TILEFUSE_PASSES_AUTODIFF_H
