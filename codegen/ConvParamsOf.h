//===- ConvParamsOf.h - a convolution op's sizes for the runtime --*- C++ -*-===//
#ifndef TILEFUSE_CODEGEN_CONVPARAMSOF_H
#define TILEFUSE_CODEGEN_CONVPARAMSOF_H

#include "runtime/Conv.h"

#include "mlir/IR/Operation.h"

#include <optional>

namespace tilefuse {

/// The sizes of graph.conv (or graph.conv_bias_act), graph.conv_grad_input or
/// graph.conv_grad_weight
/// `op` (read from its verified types and attributes) and what it computes;
/// nullopt for any other op.
std::optional<std::pair<ConvDirection, ConvParams>> convParamsOf(mlir::Operation *op);

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_CONVPARAMSOF_H
