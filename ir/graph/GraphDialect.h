//===- GraphDialect.h - the graph dialect ------------------------*- C++ -*-===//
//
// Tensor-level ops of a traced training step. See GraphBase.td.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_IR_GRAPH_GRAPHDIALECT_H
#define TILEFUSE_IR_GRAPH_GRAPHDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace tilefuse::graph {

/// Which dtypes an elementwise op accepts and what it returns.
enum class ElementwiseKind {
  Arithmetic, ///< any numeric dtype (not i1), result = operand type
  FloatOnly,  ///< floating-point dtypes only, result = operand type
  Compare,    ///< any dtype, result has element type i1
};

/// Shared by every elementwise op: same-type operands, dtype rule of `kind`.
llvm::LogicalResult inferElementwiseType(std::optional<mlir::Location> loc,
                                         llvm::StringRef opName,
                                         ElementwiseKind kind,
                                         mlir::ValueRange operands,
                                         llvm::SmallVectorImpl<mlir::Type> &out);

/// An error at `loc` worded as verifiers word theirs ("'graph.x' op ..."):
/// for type inference, which reports shape errors with a location, not an
/// op, so the parser, the verifier and the tracer say the same.
template <typename... Args>
llvm::LogicalResult opError(std::optional<mlir::Location> loc, llvm::StringRef opName,
                            Args &&...args) {
  return mlir::emitOptionalError(loc, "'", opName, "' op ", std::forward<Args>(args)...);
}

/// Why a tensor of `type` cannot exist (its element or byte count does not
/// fit in 63 bits, so every size computed from it would wrap), or "".
std::string tensorSizeError(mlir::Type type);

/// `graph.op %a[, %b] [attr-dict] : tensor<...>` for elementwise ops.
mlir::ParseResult parseElementwiseOp(mlir::OpAsmParser &parser,
                                     mlir::OperationState &result);
void printElementwiseOp(mlir::OpAsmPrinter &printer, mlir::Operation *op);

/// Ops traced inside `tilefuse.checkpoint` carry a NameLoc named
/// "<kCheckpointLocPrefix><region id>" around their source location; the
/// autodiff pass recomputes such a region in the backward pass.
inline constexpr llvm::StringLiteral kCheckpointLocPrefix = "tilefuse.checkpoint.";
/// The checkpoint region `loc` belongs to, or -1.
int64_t checkpointRegionOf(mlir::Location loc);
/// The name an op's location gives it (a NameLoc that is not a region
/// marker "tilefuse.*"), or "".
std::string locationName(mlir::Location loc);

} // namespace tilefuse::graph

#include "ir/graph/GraphDialect.h.inc"

#define GET_OP_CLASSES
#include "ir/graph/GraphOps.h.inc"

namespace tilefuse::graph {
/// Whether `op` starts a collective (graph.all_reduce_start and the other
/// graph.*_start ops): the pending value it gives is finished by a
/// graph.collective_wait.
bool isCollectiveStart(mlir::Operation *op);
/// The group name and size of a collective start op.
std::pair<llvm::StringRef, int64_t> collectiveGroupOf(mlir::Operation *op);
} // namespace tilefuse::graph

#endif // TILEFUSE_IR_GRAPH_GRAPHDIALECT_H
