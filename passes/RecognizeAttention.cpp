//===- RecognizeAttention.cpp - written-out attention -> graph.attention --===//
//
// Models that write attention out (gpt2_mini: matmul, scale, causal select,
// softmax, matmul) get the fused attention kernels too: the chain becomes
// one graph.attention before decomposition and differentiation, so its
// backward is graph.attention_grad and no L x S buffer is planned.
//
//===----------------------------------------------------------------------===//
#include "passes/Autocast.h"
#include "passes/Passes.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

namespace tilefuse {
#define GEN_PASS_DEF_RECOGNIZEATTENTIONPASS
#include "passes/Passes.h.inc"
} // namespace tilefuse

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;

namespace {

/// The value every element of `v` holds, when it is a splat (a full, a
/// splat constant, or a broadcast of one).
std::optional<double> splatValue(Value v) {
  if (auto b = v.getDefiningOp<BroadcastInDimOp>())
    return splatValue(b.getOperand());
  if (auto c = v.getDefiningOp<CastOp>()) // autocast's copy of a scalar
    return llvm::isa<FloatType>(llvm::cast<RankedTensorType>(c.getType()).getElementType())
               ? splatValue(c.getOperand())
               : std::nullopt;
  if (auto f = v.getDefiningOp<FullOp>())
    return f.getValue().convertToDouble();
  DenseElementsAttr attr;
  if (matchPattern(v, m_Constant(&attr)) && attr.isSplat() &&
      llvm::isa<FloatType>(attr.getElementType()))
    return attr.getSplatValue<APFloat>().convertToDouble();
  return std::nullopt;
}

/// A constant [L, S] boolean matrix (the value itself, or broadcast along
/// leading dimensions only) as row-major bools.
std::optional<std::vector<bool>> constantScoresMask(Value cond, int64_t rows, int64_t cols) {
  Value source = cond;
  if (auto b = cond.getDefiningOp<BroadcastInDimOp>()) {
    auto dims = b.getDims();
    int64_t rank = llvm::cast<RankedTensorType>(b.getType()).getRank();
    int64_t inRank = llvm::cast<RankedTensorType>(b.getOperand().getType()).getRank();
    for (int64_t i = 0; i < inRank; ++i)
      if (dims[size_t(i)] != rank - inRank + i)
        return std::nullopt;
    source = b.getOperand();
  }
  DenseElementsAttr attr;
  if (!matchPattern(source, m_Constant(&attr)))
    return std::nullopt;
  auto type = llvm::cast<RankedTensorType>(attr.getType());
  if (!type.getElementType().isInteger(1) || type.getRank() < 2 ||
      type.getDimSize(type.getRank() - 2) != rows || type.getDimSize(type.getRank() - 1) != cols ||
      type.getNumElements() != rows * cols)
    return std::nullopt;
  std::vector<bool> keep;
  for (bool b : attr.getValues<bool>())
    keep.push_back(b);
  return keep;
}

bool isLastTwoSwapped(TransposeOp t) {
  auto perm = t.getPerm();
  int64_t r = int64_t(perm.size());
  if (r < 2 || perm[size_t(r - 2)] != r - 1 || perm[size_t(r - 1)] != r - 2)
    return false;
  for (int64_t i = 0; i + 2 < r; ++i)
    if (perm[size_t(i)] != i)
      return false;
  return true;
}

/// softmax(select(mask, q k^T * c, fill)) @ v -> graph.attention.
struct AttentionPattern : OpRewritePattern<MatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MatmulOp pv, PatternRewriter &rw) const override {
    auto type = llvm::cast<RankedTensorType>(pv.getType());
    int64_t rank = type.getRank();
    Type elem = type.getElementType();
    if (rank < 3 || !(elem.isF32() || elem.isBF16() || elem.isF16()) || pv.getTransposeLhs() ||
        pv.getTransposeRhs())
      return rw.notifyMatchFailure(pv, "not a batched product P V in f32, bf16 or f16");
    // Under autocast the products run in 16 bits and the softmax in f32:
    // the casts between them are part of the chain. The fused op then takes
    // the 16-bit q, k, v as they are (its scores and statistics f32, as the
    // chain's softmax), unless TILEFUSE_ATTENTION_16BIT=0 asks for the f32
    // op between casts (to compare).
    Value probs = pv.getLhs();
    if (auto cast = probs.getDefiningOp<CastOp>(); cast && cast->hasOneUse())
      probs = cast.getOperand();
    // Dropout of the probabilities moves into the op: the kernels draw the
    // same Philox bits element by element.
    auto dropout = probs.getDefiningOp<DropoutOp>();
    if (dropout) {
      if (!dropout->hasOneUse())
        return rw.notifyMatchFailure(pv, "the dropped probabilities are used twice");
      probs = dropout.getOperand();
    }
    auto softmax = probs.getDefiningOp<SoftmaxOp>();
    if (!softmax || !softmax->hasOneUse() ||
        (softmax.getDim() != rank - 1 && softmax.getDim() != -1))
      return rw.notifyMatchFailure(pv, "its left operand is no softmax over keys used once");
    SmallVector<Location> locs = {softmax.getLoc(), pv.getLoc()};
    if (dropout)
      locs.push_back(dropout.getLoc());
    Value scores = softmax.getOperand();
    if (!llvm::cast<RankedTensorType>(scores.getType()).getElementType().isF32())
      return rw.notifyMatchFailure(pv, "the softmax is not in f32");
    if (auto cast = scores.getDefiningOp<CastOp>(); cast && cast->hasOneUse())
      scores = cast.getOperand();
    auto scoresType = llvm::cast<RankedTensorType>(scores.getType());
    int64_t rows = scoresType.getDimSize(rank - 2), cols = scoresType.getDimSize(rank - 1);

    bool causal = false;
    Value maskSource; // a constant mask other than the causal triangle
    Location maskLoc = pv.getLoc();
    if (auto sel = scores.getDefiningOp<SelectOp>()) {
      std::optional<double> fill = splatValue(sel.getOnFalse());
      if (!sel->hasOneUse() || !fill || !(*fill <= -1e8))
        return rw.notifyMatchFailure(pv, "the scores are selected against no -inf-like fill");
      std::optional<std::vector<bool>> keep = constantScoresMask(sel.getCond(), rows, cols);
      if (!keep)
        return rw.notifyMatchFailure(pv, "the mask is not a constant [L, S] matrix");
      bool tril = true;
      for (int64_t i = 0; i < rows; ++i) {
        bool anyKept = false;
        for (int64_t j = 0; j < cols; ++j) {
          bool kept = (*keep)[size_t(i * cols + j)];
          anyKept |= kept;
          tril &= kept == (j <= i);
        }
        // Written out, such a row averages every key; fused, it is 0.
        if (!anyKept)
          return rw.notifyMatchFailure(pv, "a query row of the mask keeps no key");
      }
      causal = tril;
      if (!tril) {
        maskSource = sel.getCond();
        if (auto b = maskSource.getDefiningOp<BroadcastInDimOp>())
          maskSource = b.getOperand();
        maskLoc = sel.getLoc();
      }
      locs.push_back(sel.getLoc());
      scores = sel.getOnTrue();
    }

    double scale = 1.0;
    Operation *scaleOp = scores.getDefiningOp();
    if (scaleOp && scaleOp->hasOneUse() && llvm::isa<MulOp, DivOp>(scaleOp)) {
      Value lhs = scaleOp->getOperand(0), rhs = scaleOp->getOperand(1);
      std::optional<double> c = splatValue(rhs);
      if (!c && llvm::isa<MulOp>(scaleOp) && (c = splatValue(lhs)))
        std::swap(lhs, rhs);
      if (c && std::isfinite(*c) && *c != 0) {
        scale = llvm::isa<MulOp>(scaleOp) ? *c : 1.0 / *c;
        locs.push_back(scaleOp->getLoc());
        scores = lhs;
      }
    }

    auto qk = scores.getDefiningOp<MatmulOp>();
    if (!qk || !qk->hasOneUse() || qk.getTransposeLhs())
      return rw.notifyMatchFailure(pv, "the scores are no product Q K^T used once");
    Value key = qk.getRhs();
    CastOp keyCast; // autocast's cast of K^T to 16 bits
    if (!qk.getTransposeRhs()) {
      if (auto cast = key.getDefiningOp<CastOp>(); cast && cast->hasOneUse()) {
        keyCast = cast;
        key = cast.getOperand();
      }
      auto t = key.getDefiningOp<TransposeOp>();
      if (!t || !isLastTwoSwapped(t))
        return rw.notifyMatchFailure(pv, "K is not transposed in its last two dimensions");
      key = t.getOperand();
    }
    locs.push_back(qk.getLoc());
    // Matched: only now are ops created (a failed match leaves the IR as is).
    Location loc = rw.getFusedLoc(locs);
    auto toF32 = [&](Value x) -> Value {
      auto t = llvm::cast<RankedTensorType>(x.getType());
      if (t.getElementType().isF32())
        return x;
      return rw.create<CastOp>(loc, t.clone(rw.getF32Type()), x);
    };
    if (keyCast) // K rounded as the product read it
      key = rw.create<CastOp>(
          loc,
          llvm::cast<RankedTensorType>(key.getType())
              .clone(llvm::cast<RankedTensorType>(keyCast.getType()).getElementType()),
          key);
    Value mask;
    if (maskSource) {
      SmallVector<int64_t> shape(size_t(rank), 1);
      shape[size_t(rank - 2)] = rows, shape[size_t(rank - 1)] = cols;
      mask = rw.create<ReshapeOp>(maskLoc, RankedTensorType::get(shape, rw.getI1Type()),
                                  maskSource);
    }
    double dropoutP = dropout ? dropout.getP().convertToDouble() : 0.0;
    Value seed = dropoutP > 0 ? dropout.getSeed() : Value();
    Value q = qk.getLhs(), v = pv.getRhs();
    auto elementOf = [](Value x) { return llvm::cast<RankedTensorType>(x.getType()).getElementType(); };
    bool narrow = !elem.isF32() && elementOf(q) == elem && elementOf(key) == elem &&
                  elementOf(v) == elem && autocastsAttention();
    if (!narrow)
      q = toF32(q), key = toF32(key), v = toF32(v);
    auto attention = rw.create<AttentionOp>(
        loc, q, key, v, mask, seed, rw.getF64FloatAttr(scale), rw.getBoolAttr(causal),
        rw.getF64FloatAttr(dropoutP), rw.getI64IntegerAttr(dropout ? dropout.getStream() : 0));
    Value out = attention.getResult();
    if (out.getType() != type)
      out = rw.create<CastOp>(loc, type, out);
    rw.replaceOp(pv, out);
    return success();
  }
};

struct RecognizeAttentionPass
    : tilefuse::impl::RecognizeAttentionPassBase<RecognizeAttentionPass> {
  void runOnOperation() override {
    // TILEFUSE_FUSED_ATTENTION=0 keeps attention written out (to compare).
    if (const char *on = std::getenv("TILEFUSE_FUSED_ATTENTION"); on && std::string(on) == "0")
      return;
    RewritePatternSet patterns(&getContext());
    patterns.add<AttentionPattern>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
