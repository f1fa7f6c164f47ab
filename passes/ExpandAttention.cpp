//===- ExpandAttention.cpp - graph.attention written out for other targets ===//
//
// Targets without fused attention kernels (CUDA, so far) get graph.attention
// and graph.attention_grad as the matmul / exp / reduction chains they
// stand for, before fusion: the L x S scores are materialised there, as
// they were before the fused op existed, and every result stays the op's
// (fully masked rows 0, dropout drawing graph.dropout's bits).
//
//===----------------------------------------------------------------------===//
#include "passes/FuseOps.h"

#include "ir/graph/GraphEmitter.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"

#include <functional>
#include <limits>

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;

namespace {

SmallVector<int64_t> shapeOf(Value v) {
  return SmallVector<int64_t>(llvm::cast<RankedTensorType>(v.getType()).getShape());
}

/// The pieces both expansions share, for one op's operands.
class AttentionMath {
public:
  /// `op`: a graph.attention or graph.attention_grad (the same operands
  /// and attributes).
  template <typename OpTy>
  AttentionMath(GraphEmitter &e, OpTy op)
      : e(e), q(op.getQuery()), mask(op.getMask()), seed(op.getSeed()),
        scale(op.getScale().convertToDouble()), causal(op.getCausal()),
        dropoutP(op.getDropoutP().convertToDouble()), stream(op.getStream()) {
    qShape = shapeOf(q);
    rank = int64_t(qShape.size());
    last = rank - 1;
    heads = qShape[size_t(rank - 3)];
    kvHeads = shapeOf(op.getKey())[size_t(rank - 3)];
    kx = repeatHeads(op.getKey());
    vx = repeatHeads(op.getValue());
    scoresShape = qShape;
    scoresShape.back() = shapeOf(op.getKey())[size_t(rank - 2)];
  }

  /// Key/value heads repeated to the query heads (h reads h / group).
  Value repeatHeads(Value x) {
    if (kvHeads == heads)
      return x;
    SmallVector<int64_t> shape = shapeOf(x), grouped(shape);
    int64_t group = heads / kvHeads;
    grouped.insert(grouped.begin() + (rank - 2), group);
    SmallVector<int64_t> dims;
    for (int64_t d = 0; d < rank; ++d)
      dims.push_back(d < rank - 2 ? d : d + 1);
    Value spread = e.broadcast(x, grouped, dims);
    shape[size_t(rank - 3)] = heads;
    return e.reshape(spread, shape);
  }
  /// The gradient of repeatHeads: each key/value head sums its group's.
  Value sumHeads(Value g) {
    if (kvHeads == heads)
      return g;
    SmallVector<int64_t> shape = shapeOf(g), grouped(shape);
    grouped[size_t(rank - 3)] = kvHeads;
    grouped.insert(grouped.begin() + (rank - 2), heads / kvHeads);
    return e.reduceSum(e.reshape(g, grouped), {rank - 2}, /*keepdim=*/false);
  }

  /// scale q k^T, masked (-inf where an i1 mask is false, + a float mask),
  /// -inf above the diagonal where causal.
  Value scores() {
    Value s = e.mulScalar(e.matmul(q, kx, false, true), scale);
    Value minusInf = e.fullLike(s, -std::numeric_limits<double>::infinity());
    if (mask) {
      SmallVector<int64_t> dims = iotaDims(rank);
      Value m = shapeOf(mask) == scoresShape ? mask : e.broadcast(mask, scoresShape, dims);
      auto type = llvm::cast<RankedTensorType>(mask.getType());
      s = type.getElementType().isInteger(1) ? e.select(m, s, minusInf) : e.add(s, m);
    }
    if (causal) {
      auto indexType = RankedTensorType::get(scoresShape, e.builder().getI64Type());
      Value row = e.builder().create<IotaOp>(e.location(), indexType,
                                             e.builder().getI64IntegerAttr(rank - 2));
      Value col = e.builder().create<IotaOp>(e.location(), indexType,
                                             e.builder().getI64IntegerAttr(rank - 1));
      s = e.select(e.le(col, row), s, minusInf);
    }
    return s;
  }

  /// Dropout's factor per probability (0 or 1 / (1 - p)), graph.dropout's
  /// bits; null without dropout.
  Value keptFactors(Value like) {
    if (dropoutP == 0)
      return nullptr;
    Value u = e.builder().create<RandomUniformOp>(e.location(), like.getType(), seed, Value(),
                                                  e.builder().getI64IntegerAttr(stream));
    Value keep = e.builder().create<GeOp>(e.location(), u, e.fullLike(u, dropoutP));
    return e.select(keep, e.fullLike(like, 1.0 / (1.0 - dropoutP)), e.fullLike(like, 0.0));
  }

  /// [..., L] -> [..., L, S].
  Value perRow(Value x) {
    SmallVector<int64_t> keep(shapeOf(x));
    keep.push_back(1);
    return e.broadcastKeepdim(e.reshape(x, keep), scoresShape);
  }

  GraphEmitter &e;
  Value q, kx, vx, mask, seed;
  double scale;
  bool causal;
  double dropoutP;
  int64_t stream;
  SmallVector<int64_t> qShape, scoresShape;
  int64_t rank, last, heads, kvHeads;
};

void expand(AttentionOp op) {
  OpBuilder b(op);
  GraphEmitter e(b, op.getLoc());
  AttentionMath m(e, op);
  int64_t last = m.last;
  Value s = m.scores();
  // A row whose scores are all -inf: max taken as 0, sum 0, output 0 and
  // log-sum-exp 0 (the fused kernels' and PyTorch's convention).
  Value rowMax = e.reduceMax(s, {last}, /*keepdim=*/true);
  Value dead = e.eq(rowMax, e.fullLike(rowMax, -std::numeric_limits<double>::infinity()));
  Value safeMax = e.select(dead, e.fullLike(rowMax, 0.0), rowMax);
  Value x = e.exp(e.sub(s, e.broadcastKeepdim(safeMax, m.scoresShape)));
  Value sum = e.reduceSum(x, {last}, /*keepdim=*/true);
  Value empty = e.eq(sum, e.fullLike(sum, 0.0));
  Value divisor = e.select(empty, e.fullLike(sum, 1.0), sum);
  Value p = e.div(x, e.broadcastKeepdim(divisor, m.scoresShape));
  if (Value kept = m.keptFactors(p))
    p = e.mul(p, kept);
  Value out = e.matmul(p, m.vx, false, false);
  Value lse = e.select(empty, e.fullLike(sum, 0.0), e.add(safeMax, e.log(divisor)));
  lse = e.reshape(lse, shapeOf(op.getLogsumexp()));
  op.getResult().replaceAllUsesWith(out);
  op.getLogsumexp().replaceAllUsesWith(lse);
  op.erase();
}

void expand(AttentionGradOp op) {
  OpBuilder b(op);
  GraphEmitter e(b, op.getLoc());
  AttentionMath m(e, op);
  int64_t last = m.last;
  // P from the saved log-sum-exp (a fully masked row: exp(-inf - 0) = 0).
  Value p = e.exp(e.sub(m.scores(), m.perRow(op.getLogsumexp())));
  Value kept = m.keptFactors(p);
  Value dropped = kept ? e.mul(p, kept) : p;
  Value g = op.getGrad();
  Value dv = m.sumHeads(e.matmul(dropped, g, true, false));
  Value dp = e.matmul(g, m.vx, false, true);
  if (kept)
    dp = e.mul(dp, kept);
  Value delta = e.reduceSum(e.mul(g, op.getResult()), {last}, /*keepdim=*/true);
  Value ds = e.mul(p, e.sub(dp, e.broadcastKeepdim(delta, m.scoresShape)));
  double scale = op.getScale().convertToDouble();
  Value dq = e.mulScalar(e.matmul(ds, m.kx, false, false), scale);
  Value dk = m.sumHeads(e.mulScalar(e.matmul(ds, op.getQuery(), true, false), scale));
  op.getGradQuery().replaceAllUsesWith(dq);
  op.getGradKey().replaceAllUsesWith(dk);
  op.getGradValue().replaceAllUsesWith(dv);
  op.erase();
}

} // namespace

Operation *tilefuse::widenAttentionOp(Operation *op) {
  if (!llvm::isa<AttentionOp, AttentionGradOp>(op))
    return op;
  Type element = llvm::cast<RankedTensorType>(op->getOperand(0).getType()).getElementType();
  if (!element.isBF16() && !element.isF16())
    return op;
  OpBuilder b(op);
  Type f32 = b.getF32Type();
  auto retyped = [&](Type t) { return llvm::cast<RankedTensorType>(t).clone(f32); };
  // Every 16-bit operand (q, k, v, an additive mask; out and dOut of the
  // gradient) widened; the log-sum-exp is f32 already.
  SmallVector<Value> operands;
  for (Value v : op->getOperands()) {
    auto t = llvm::dyn_cast<RankedTensorType>(v.getType());
    operands.push_back(t && t.getElementType() == element
                           ? b.create<CastOp>(op->getLoc(), retyped(t), v).getResult()
                           : v);
  }
  SmallVector<Type> types;
  for (Type t : op->getResultTypes())
    types.push_back(retyped(t));
  OperationState state(op->getLoc(), op->getName(), operands, types, op->getAttrs());
  Operation *wide = b.create(state);
  for (auto [narrow, result] : llvm::zip(op->getResults(), wide->getResults())) {
    Value back = result;
    if (llvm::cast<RankedTensorType>(narrow.getType()).getElementType() == element)
      back = b.create<CastOp>(op->getLoc(), narrow.getType(), result);
    narrow.replaceAllUsesWith(back);
  }
  op->erase();
  return wide;
}

void tilefuse::widenAttention(func::FuncOp func, const std::function<bool(Type)> &keeps) {
  SmallVector<Operation *> ops;
  func.walk([&](Operation *op) {
    if (!llvm::isa<AttentionOp, AttentionGradOp>(op))
      return;
    Type element = llvm::cast<RankedTensorType>(op->getOperand(0).getType()).getElementType();
    if ((element.isBF16() || element.isF16()) && !keeps(element))
      ops.push_back(op);
  });
  for (Operation *op : ops)
    widenAttentionOp(op);
}

void tilefuse::expandAttentionOp(Operation *op) {
  // 16-bit attention is written out in f32 on the widened operands, its
  // results rounded once.
  op = widenAttentionOp(op);
  if (auto a = llvm::dyn_cast<AttentionOp>(op))
    expand(a);
  else if (auto g = llvm::dyn_cast<AttentionGradOp>(op))
    expand(g);
}

void tilefuse::expandAttention(func::FuncOp func, int64_t keepUpToDim) {
  // Head and value dimensions: the last of the query's and the value's.
  auto lastDim = [](Value v) { return llvm::cast<RankedTensorType>(v.getType()).getShape().back(); };
  auto kept = [&](Value query, Value value) {
    return lastDim(query) <= keepUpToDim && lastDim(value) <= keepUpToDim;
  };
  SmallVector<Operation *> ops;
  func.walk([&](Operation *op) {
    if (auto a = llvm::dyn_cast<AttentionOp>(op); a && !kept(a.getQuery(), a.getValue()))
      ops.push_back(op);
    else if (auto g = llvm::dyn_cast<AttentionGradOp>(op); g && !kept(g.getQuery(), g.getValue()))
      ops.push_back(op);
  });
  for (Operation *op : ops)
    expandAttentionOp(op);
}
