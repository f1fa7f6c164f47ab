//===- DecomposeComposites.cpp - composites -> primitive graph ops --------===//
//
// Each composite op of the graph dialect is rewritten into primitives, so
// that everything downstream (interpreter, fusion, codegen) only needs the
// primitive set. Exp-based rules subtract the row maximum first.
//
//===----------------------------------------------------------------------===//
#include "ir/graph/GraphEmitter.h"
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace tilefuse {
#define GEN_PASS_DEF_DECOMPOSECOMPOSITESPASS
#include "passes/Passes.h.inc"
} // namespace tilefuse

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;

namespace {

/// Shared skeleton: build the replacement with a GraphEmitter at the op.
template <typename OpTy>
struct DecomposePattern : OpRewritePattern<OpTy> {
  using OpRewritePattern<OpTy>::OpRewritePattern;
  LogicalResult matchAndRewrite(OpTy op,
                                PatternRewriter &rewriter) const final {
    GraphEmitter e(rewriter, op.getLoc());
    rewriter.replaceOp(op, expand(op, e));
    return success();
  }
  virtual Value expand(OpTy op, GraphEmitter &e) const = 0;
};

/// relu(x) = x <= 0 ? 0 : x. As a select, its derivative is PyTorch's:
/// 0 at x = 0, and NaN inputs pass both NaN and their cotangent.
struct DecomposeRelu : DecomposePattern<ReluOp> {
  using DecomposePattern::DecomposePattern;
  Value expand(ReluOp op, GraphEmitter &e) const override {
    Value x = op.getOperand();
    Value zero = e.fullLike(x, 0.0);
    return e.select(e.le(x, zero), zero, x);
  }
};

/// silu(x) = x * sigmoid(x)
struct DecomposeSilu : DecomposePattern<SiluOp> {
  using DecomposePattern::DecomposePattern;
  Value expand(SiluOp op, GraphEmitter &e) const override {
    Value x = op.getOperand();
    return e.mul(x, e.sigmoid(x));
  }
};

/// gelu(x) = 0.5 x (1 + erf(x / sqrt 2)), or the tanh approximation.
struct DecomposeGelu : DecomposePattern<GeluOp> {
  using DecomposePattern::DecomposePattern;
  Value expand(GeluOp op, GraphEmitter &e) const override {
    Value x = op.getOperand();
    Value inner;
    if (op.getApproximate() == "tanh") {
      Value cube = e.mul(e.mul(x, x), x);
      Value poly = e.add(x, e.mulScalar(cube, 0.044715));
      inner = e.tanh(e.mulScalar(poly, std::sqrt(2.0 / M_PI)));
    } else {
      inner = e.erf(e.mulScalar(x, M_SQRT1_2));
    }
    return e.mul(e.mulScalar(x, 0.5), e.addScalar(inner, 1.0));
  }
};

/// x - max(x) along `dim`. The shift is a constant of the derivative
/// (stop_gradient): differentiated, it would send the rounding residue of
/// sum(softmax) - 1 to each row's argmax, an error growing with the row.
Value subtractRowMax(GraphEmitter &e, Value x, int64_t dim) {
  auto shape = GraphEmitter::typeOf(x).getShape();
  Value max = e.stopGradient(e.reduceMax(x, {dim}, /*keepdim=*/true));
  return e.sub(x, e.broadcastKeepdim(max, shape));
}

/// softmax(x) = exp(x - max) / sum(exp(x - max))
struct DecomposeSoftmax : DecomposePattern<SoftmaxOp> {
  using DecomposePattern::DecomposePattern;
  Value expand(SoftmaxOp op, GraphEmitter &e) const override {
    auto shape = op.getType().getShape();
    Value ex = e.exp(subtractRowMax(e, op.getOperand(), op.getDim()));
    Value sum = e.reduceSum(ex, {op.getDim()}, /*keepdim=*/true);
    return e.div(ex, e.broadcastKeepdim(sum, shape));
  }
};

/// log_softmax(x) = (x - max) - log(sum(exp(x - max)))
Value logSoftmax(GraphEmitter &e, Value x, int64_t dim) {
  auto shape = GraphEmitter::typeOf(x).getShape();
  Value shifted = subtractRowMax(e, x, dim);
  Value lse = e.log(e.reduceSum(e.exp(shifted), {dim}, /*keepdim=*/true));
  return e.sub(shifted, e.broadcastKeepdim(lse, shape));
}

struct DecomposeLogSoftmax : DecomposePattern<LogSoftmaxOp> {
  using DecomposePattern::DecomposePattern;
  Value expand(LogSoftmaxOp op, GraphEmitter &e) const override {
    return logSoftmax(e, op.getOperand(), op.getDim());
  }
};

/// (x - mean) * rsqrt(var + eps) * w + b over the trailing dims of w.
struct DecomposeLayerNorm : DecomposePattern<LayerNormOp> {
  using DecomposePattern::DecomposePattern;
  Value expand(LayerNormOp op, GraphEmitter &e) const override {
    Value x = op.getOperand();
    auto shape = op.getType().getShape();
    int64_t rank = shape.size();
    int64_t k = op.getWeight().getType().getRank();
    SmallVector<int64_t> dims = iotaDims(k, rank - k);
    double n = 1;
    for (int64_t d : dims)
      n *= shape[d];
    Value mean = e.mulScalar(e.reduceSum(x, dims, true), 1.0 / n);
    Value centered = e.sub(x, e.broadcastKeepdim(mean, shape));
    Value var =
        e.mulScalar(e.reduceSum(e.mul(centered, centered), dims, true), 1.0 / n);
    Value inv = e.rsqrt(e.addScalar(var, op.getEpsilon().convertToDouble()));
    Value normed = e.mul(centered, e.broadcastKeepdim(inv, shape));
    Value scaled = e.mul(normed, e.broadcast(op.getWeight(), shape, dims));
    return e.add(scaled, e.broadcast(op.getBias(), shape, dims));
  }
};

/// linear(x, W, b) = x W^T + b, batch dims of x flattened into rows.
struct DecomposeLinear : DecomposePattern<LinearOp> {
  using DecomposePattern::DecomposePattern;
  Value expand(LinearOp op, GraphEmitter &e) const override {
    Value x = op.getOperand();
    auto inShape = op.getOperand().getType().getShape();
    auto outShape = op.getType().getShape();
    int64_t in = inShape.back();
    int64_t rows = 1;
    for (int64_t d : inShape.drop_back())
      rows *= d;
    Value rows2d = e.reshape(x, {rows, in});
    Value y = e.matmul(rows2d, op.getWeight(), false, /*transposeB=*/true);
    y = e.reshape(y, outShape);
    if (Value bias = op.getBias())
      y = e.add(y, e.broadcast(bias, outShape, {(int64_t)outShape.size() - 1}));
    return y;
  }
};

/// dropout(x) = select(u >= p, x / (1 - p), 0) with u = random_uniform(seed).
struct DecomposeDropout : DecomposePattern<DropoutOp> {
  using DecomposePattern::DecomposePattern;
  Value expand(DropoutOp op, GraphEmitter &e) const override {
    Value x = op.getOperand();
    double p = op.getP().convertToDouble();
    if (p == 0.0)
      return x;
    Value u = e.builder().create<RandomUniformOp>(
        e.location(), op.getType(), op.getSeed(), /*stream_value=*/Value(), op.getStreamAttr());
    Value keep = e.builder().create<GeOp>(e.location(), u, e.fullLike(u, p));
    return e.select(keep, e.mulScalar(x, 1.0 / (1.0 - p)), e.fullLike(x, 0.0));
  }
};

/// Mean over non-ignored targets of -logp[target], picked with a one-hot
/// mask (no integer gather: keeps the rule elementwise + reductions, which
/// is what fusion wants).
Value negLogLikelihood(GraphEmitter &e, Value logp, Value target,
                       int64_t ignoreIndex, StringRef opName) {
  auto xType = GraphEmitter::typeOf(logp);
  auto tType = GraphEmitter::typeOf(target);
  auto shape = xType.getShape();
  int64_t rank = shape.size();
  auto classType = RankedTensorType::get(shape, tType.getElementType());
  Value classes = e.builder().create<IotaOp>(
      e.location(), classType, e.builder().getI64IntegerAttr(rank - 1));
  Value targets = e.broadcast(target, shape, iotaDims(rank - 1));
  Value onehot = e.builder().create<EqOp>(e.location(), classes, targets);
  Value picked = e.reduceSum(e.select(onehot, logp, e.fullLike(logp, 0.0)),
                             {rank - 1}, /*keepdim=*/false);
  Value valid = e.builder().create<NeOp>(e.location(), target,
                                         e.fullLike(target, ignoreIndex));
  // A target outside [0, C) would pick nothing and count as a zero loss:
  // a gather of zero rows checks every (non-ignored) target at run time, as
  // for embedding ids, and adds exactly 0. Named after the loss in errors.
  Value safeTargets = e.select(valid, target, e.fullLike(target, 0.0));
  Value noRows = e.full(RankedTensorType::get({shape.back(), 1}, xType.getElementType()), 0.0);
  auto name = NameLoc::get(e.builder().getStringAttr(
                               (opName + ": a class target").str()),
                           e.location());
  Value checked = e.builder().create<GatherOp>(name, noRows, safeTargets);
  picked = e.add(picked, e.reshape(checked, GraphEmitter::typeOf(picked).getShape()));
  Value losses = e.select(valid, e.neg(picked), e.fullLike(picked, 0.0));
  Value count = e.sumAll(e.cast(valid, xType.getElementType()));
  return e.div(e.sumAll(losses), count);
}

struct DecomposeNll : DecomposePattern<NllOp> {
  using DecomposePattern::DecomposePattern;
  Value expand(NllOp op, GraphEmitter &e) const override {
    return negLogLikelihood(e, op.getInput(), op.getTarget(),
                            op.getIgnoreIndex(), "graph.nll");
  }
};

struct DecomposeCrossEntropy : DecomposePattern<CrossEntropyOp> {
  using DecomposePattern::DecomposePattern;
  Value expand(CrossEntropyOp op, GraphEmitter &e) const override {
    int64_t classDim = op.getInput().getType().getRank() - 1;
    Value logp = logSoftmax(e, op.getInput(), classDim);
    return negLogLikelihood(e, logp, op.getTarget(), op.getIgnoreIndex(),
                            "graph.cross_entropy");
  }
};

Value meanAll(GraphEmitter &e, Value v) {
  double n = GraphEmitter::typeOf(v).getNumElements();
  Value sum = e.sumAll(v);
  return e.div(sum, e.fullLike(sum, n));
}

struct DecomposeMse : DecomposePattern<MseOp> {
  using DecomposePattern::DecomposePattern;
  Value expand(MseOp op, GraphEmitter &e) const override {
    Value d = e.sub(op.getInput(), op.getTarget());
    return meanAll(e, e.mul(d, d));
  }
};

/// max(log x, -100), written so that its gradient is finite everywhere:
/// where x <= 0 the log sees 1 instead of x and the result is the clamp, so
/// the backward pass never forms 0 * (1 / 0) (p exactly 0 or 1, as a
/// saturated sigmoid gives).
Value clampedLog(GraphEmitter &e, Value x) {
  Value positive = e.gt(x, e.fullLike(x, 0.0));
  Value safe = e.select(positive, x, e.fullLike(x, 1.0));
  Value floor = e.fullLike(x, -100.0);
  return e.maximum(e.select(positive, e.log(safe), floor), floor);
}

/// max(log1p(-p), -100): log(1 - p) without rounding 1 - p (exact to the
/// last bit for p near 0, where 1 - p is 1), finite gradient as clampedLog.
Value clampedLog1m(GraphEmitter &e, Value p) {
  Value below = e.lt(p, e.fullLike(p, 1.0));
  Value safe = e.select(below, p, e.fullLike(p, 0.0));
  Value floor = e.fullLike(p, -100.0);
  return e.maximum(e.select(below, e.log1p(e.neg(safe)), floor), floor);
}

/// -(t log p + (1 - t) log1p(-p)), each log clamped at -100 (PyTorch's form).
struct DecomposeBce : DecomposePattern<BceOp> {
  using DecomposePattern::DecomposePattern;
  Value expand(BceOp op, GraphEmitter &e) const override {
    Value p = op.getInput(), t = op.getTarget();
    Value one = e.fullLike(p, 1.0);
    Value logP = clampedLog(e, p);
    Value log1mP = clampedLog1m(e, p);
    Value perElement =
        e.neg(e.add(e.mul(t, logP), e.mul(e.sub(one, t), log1mP)));
    return meanAll(e, perElement);
  }
};

struct DecomposeCompositesPass
    : tilefuse::impl::DecomposeCompositesPassBase<DecomposeCompositesPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<DecomposeRelu, DecomposeSilu, DecomposeGelu, DecomposeSoftmax,
                 DecomposeLogSoftmax, DecomposeLayerNorm, DecomposeLinear,
                 DecomposeDropout, DecomposeNll, DecomposeCrossEntropy,
                 DecomposeMse, DecomposeBce>(&getContext());
    GreedyRewriteConfig config;
    config.enableRegionSimplification = GreedySimplifyRegionLevel::Disabled;
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns),
                                            config)))
      signalPassFailure();
  }
};

} // namespace
