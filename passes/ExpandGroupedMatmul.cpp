//===- ExpandGroupedMatmul.cpp - grouped products written densely ---------===//
//
// Targets whose runtime has no grouped GEMM step (CUDA: a step whose sizes
// are data would need the host mid-step, which no CUDA graph can hold) get
// graph.grouped_matmul and its weights' gradient as one static GEMM each:
// every row moved into its group's block of an [S, G*K] matrix (zeros
// elsewhere), times the groups' matrices stacked into [G*K, N]. G times
// the work of the grouped rows, the op's results for finite values (rows
// in no group 0; the groups of runtime/GroupedGemm.h: row r in group
// #{offsets <= r}); an infinite or NaN element of one group's matrix
// reaches every row here (0 * inf), where the grouped step keeps it in its
// group.
//
//===----------------------------------------------------------------------===//
#include "passes/FuseOps.h"

#include "ir/graph/GraphEmitter.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;

namespace {

ArrayRef<int64_t> shapeOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()).getShape(); }

/// x [S, K] with each row moved into its group's block of [S, G*K].
Value placedRows(GraphEmitter &e, Value x, Value offsets) {
  OpBuilder &b = e.builder();
  int64_t rows = shapeOf(x)[0], k = shapeOf(x)[1], groups = shapeOf(offsets)[0];
  auto i64 = [&](ArrayRef<int64_t> shape) { return RankedTensorType::get(shape, b.getI64Type()); };
  auto iota = [&](int64_t dim) {
    return b.create<IotaOp>(e.location(), i64({rows, groups}), b.getI64IntegerAttr(dim));
  };
  Value ends = e.broadcast(e.cast(offsets, b.getI64Type()), {rows, groups}, {1});
  Value group = e.reduceSum(e.cast(e.le(ends, iota(0)), b.getI64Type()), {1}, false); // [S]
  Value member = e.eq(e.broadcast(group, {rows, groups}, {0}), iota(1));             // [S, G]
  Value spread = e.broadcast(x, {rows, groups, k}, {0, 2});
  Value placed = e.select(e.broadcast(member, {rows, groups, k}, {0, 1}), spread,
                          e.fullLike(spread, 0.0));
  return e.reshape(placed, {rows, groups * k});
}

} // namespace

void tilefuse::expandGroupedMatmuls(func::FuncOp func) {
  SmallVector<Operation *> ops;
  func.walk([&](Operation *op) {
    if (llvm::isa<GroupedMatmulOp, GroupedMatmulWeightGradOp>(op))
      ops.push_back(op);
  });
  for (Operation *op : ops) {
    OpBuilder b(op);
    GraphEmitter e(b, op->getLoc());
    Value placed = placedRows(e, op->getOperand(0), op->getOperand(2));
    Value dense;
    if (auto mm = llvm::dyn_cast<GroupedMatmulOp>(op)) {
      Value rhs = mm.getTransposeRhs() ? e.transpose(mm.getRhs(), {0, 2, 1}) : mm.getRhs();
      auto w = shapeOf(rhs); // [G, K, N]
      dense = e.matmul(placed, e.reshape(rhs, {w[0] * w[1], w[2]}), false, false);
    } else {
      auto out = shapeOf(op->getResult(0)); // [G, K, N]
      dense = e.reshape(e.matmul(placed, op->getOperand(1), true, false), out);
    }
    op->getResult(0).replaceAllUsesWith(dense);
    op->erase();
  }
}
