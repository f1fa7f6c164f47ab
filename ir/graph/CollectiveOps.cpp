//===- CollectiveOps.cpp - shape rules of the collective ops --------------===//
//
// The start ops share their group checks; each then has its own shape
// rule. A wait must finish exactly one start, so every collective has one
// point where its bytes are known to be complete.
//
//===----------------------------------------------------------------------===//
#include "ir/graph/GraphDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace tilefuse::graph;

namespace {

using Loc = std::optional<Location>;

LogicalResult checkGroup(Loc loc, StringRef op, StringRef group, int64_t size) {
  if (group.empty())
    return opError(loc, op, "needs a process group name (group = \"...\")");
  if (size < 1)
    return opError(loc, op, "group_size must be >= 1, got ", size);
  return success();
}

LogicalResult checkReduce(Loc loc, StringRef op, StringRef reduce, Type element) {
  if (reduce != "sum" && reduce != "max" && reduce != "min")
    return opError(loc, op, "reduce must be \"sum\", \"max\" or \"min\", got \"", reduce, "\"");
  if (element.isInteger(1) && reduce == "sum")
    return opError(loc, op, "cannot sum i1 tensors; reduce with \"max\" (any) or \"min\" (all)");
  return success();
}

RankedTensorType tensorOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

/// `type` with its first dimension times `num` / `den`.
RankedTensorType resized(RankedTensorType type, int64_t num, int64_t den) {
  SmallVector<int64_t> shape(type.getShape());
  shape[0] = shape[0] * num / den;
  return RankedTensorType::get(shape, type.getElementType());
}

} // namespace

bool tilefuse::graph::isCollectiveStart(Operation *op) {
  return llvm::isa<AllReduceStartOp, ReduceScatterStartOp, AllGatherStartOp, BroadcastStartOp>(op);
}

std::pair<StringRef, int64_t> tilefuse::graph::collectiveGroupOf(Operation *op) {
  auto group = op->getAttrOfType<StringAttr>("group");
  auto size = op->getAttrOfType<IntegerAttr>("group_size");
  return {group ? group.getValue() : StringRef(), size ? size.getInt() : 0};
}

LogicalResult AllReduceStartOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                                 SmallVectorImpl<Type> &out) {
  auto input = tensorOf(adaptor.getInput());
  if (failed(checkGroup(loc, getOperationName(), adaptor.getGroup(), adaptor.getGroupSize())) ||
      failed(checkReduce(loc, getOperationName(), adaptor.getReduce(), input.getElementType())))
    return failure();
  out.push_back(input);
  return success();
}

LogicalResult ReduceScatterStartOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                                     SmallVectorImpl<Type> &out) {
  auto input = tensorOf(adaptor.getInput());
  int64_t size = adaptor.getGroupSize();
  if (failed(checkGroup(loc, getOperationName(), adaptor.getGroup(), size)) ||
      failed(checkReduce(loc, getOperationName(), adaptor.getReduce(), input.getElementType())))
    return failure();
  if (input.getRank() < 1 || input.getDimSize(0) % size != 0)
    return opError(loc, getOperationName(), "scatters the first dimension over ", size,
                " ranks; it must be a multiple of ", size, ", got ", input,
                " (pad the input, or shard a dimension that divides)");
  out.push_back(resized(input, 1, size));
  return success();
}

LogicalResult AllGatherStartOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                                 SmallVectorImpl<Type> &out) {
  auto input = tensorOf(adaptor.getInput());
  int64_t size = adaptor.getGroupSize();
  if (failed(checkGroup(loc, getOperationName(), adaptor.getGroup(), size)))
    return failure();
  if (input.getRank() < 1)
    return opError(loc, getOperationName(), "gathers along the first dimension; got ", input,
                " (reshape a 0-d value to [1])");
  out.push_back(resized(input, size, 1));
  return success();
}

LogicalResult BroadcastStartOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                                 SmallVectorImpl<Type> &out) {
  int64_t size = adaptor.getGroupSize(), root = adaptor.getRoot();
  if (failed(checkGroup(loc, getOperationName(), adaptor.getGroup(), size)))
    return failure();
  if (root < 0 || root >= size)
    return opError(loc, getOperationName(), "root ", root, " is not a rank of a group of ", size);
  out.push_back(tensorOf(adaptor.getInput()));
  return success();
}

LogicalResult CollectiveWaitOp::verify() {
  Operation *start = getPending().getDefiningOp();
  if (!start || !isCollectiveStart(start))
    return emitOpError("waits for a value no graph.*_start op gives; a wait finishes "
                       "exactly one collective start");
  if (!getPending().hasOneUse())
    return emitOpError("is not the only use of the pending value of ")
           << start->getName()
           << "; use the wait's result (the value is incomplete until the wait)";
  return success();
}
