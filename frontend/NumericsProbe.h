//===- NumericsProbe.h - expose every kernel's values of a fused graph -*- C++ -*-===//
#ifndef TILEFUSE_FRONTEND_NUMERICSPROBE_H
#define TILEFUSE_FRONTEND_NUMERICSPROBE_H

#include "frontend/Graph.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace tilefuse {

/// Rewrites the fused function `func` so that it also returns every
/// result of every kernel (fusions and library calls), described in
/// `out.values`, after its own `out.numResults` results; drops its carried
/// results' aliases. With `shadow`, the whole function computes in f32
/// (f16/bf16 types widened, casts between them gone). Without it, every
/// value a kernel reads from another kernel becomes a trailing argument
/// (`out.cutArguments`: the value each one stands for).
mlir::LogicalResult probeNumerics(mlir::func::FuncOp func, bool shadow,
                                  NumericsProbeLayout &out);

} // namespace tilefuse

#endif // TILEFUSE_FRONTEND_NUMERICSPROBE_H
