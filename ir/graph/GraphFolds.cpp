//===- GraphFolds.cpp - folds of the graph dialect ------------------------===//
//
// Only the obvious identities: they keep traced graphs small (x + 0 from a
// bias-free layer, reshapes of reshapes, identity transposes, a matmul of a
// transposed operand) without changing numerics.
//
//===----------------------------------------------------------------------===//
#include "ir/graph/GraphDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace tilefuse::graph;

namespace {
/// True when `v` is a splat of the additive identity for `v`'s type: any 0
/// for integers, but only -0.0 for floats (x + (+0.0) turns -0.0 into +0.0).
/// `forSubtraction` asks for the identity of x - c instead (+0.0).
bool isAdditiveIdentity(Value v, Attribute folded, bool forSubtraction);

/// True when `v` is a splat of `x`, from graph.full or a constant.
bool isSplatOf(Value v, Attribute folded, double x) {
  if (auto full = v.getDefiningOp<FullOp>())
    return full.getValue().convertToDouble() == x;
  auto dense = llvm::dyn_cast_or_null<DenseElementsAttr>(folded);
  if (!dense || !dense.isSplat())
    return false;
  Type elem = dense.getElementType();
  if (llvm::isa<FloatType>(elem))
    return dense.getSplatValue<APFloat>().convertToDouble() == x;
  if (elem.isInteger(1))
    return false;
  return dense.getSplatValue<APInt>().getSExtValue() == x;
}

bool isAdditiveIdentity(Value v, Attribute folded, bool forSubtraction) {
  if (!isSplatOf(v, folded, 0.0))
    return false;
  auto elem = llvm::cast<RankedTensorType>(v.getType()).getElementType();
  if (!llvm::isa<FloatType>(elem))
    return true;
  bool negative;
  if (auto full = v.getDefiningOp<FullOp>())
    negative = full.getValue().isNegative();
  else
    negative = llvm::cast<DenseElementsAttr>(folded)
                   .getSplatValue<APFloat>()
                   .isNegative();
  return negative != forSubtraction;
}
} // namespace

OpFoldResult AddOp::fold(FoldAdaptor adaptor) {
  if (isAdditiveIdentity(getRhs(), adaptor.getRhs(), false))
    return getLhs();
  if (isAdditiveIdentity(getLhs(), adaptor.getLhs(), false))
    return getRhs();
  return {};
}

OpFoldResult SubOp::fold(FoldAdaptor adaptor) {
  if (isAdditiveIdentity(getRhs(), adaptor.getRhs(), true))
    return getLhs();
  return {};
}

OpFoldResult MulOp::fold(FoldAdaptor adaptor) {
  if (isSplatOf(getRhs(), adaptor.getRhs(), 1.0))
    return getLhs();
  if (isSplatOf(getLhs(), adaptor.getLhs(), 1.0))
    return getRhs();
  return {};
}

OpFoldResult DivOp::fold(FoldAdaptor adaptor) {
  if (isSplatOf(getRhs(), adaptor.getRhs(), 1.0))
    return getLhs();
  return {};
}

OpFoldResult NegOp::fold(FoldAdaptor) {
  if (auto inner = getOperand().getDefiningOp<NegOp>())
    return inner.getOperand();
  return {};
}

OpFoldResult SelectOp::fold(FoldAdaptor adaptor) {
  if (getOnTrue() == getOnFalse())
    return getOnTrue();
  if (auto cond = llvm::dyn_cast_or_null<DenseElementsAttr>(adaptor.getCond()))
    if (cond.isSplat())
      return cond.getSplatValue<bool>() ? getOnTrue() : getOnFalse();
  return {};
}

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getOperand().getType() == getType())
    return getOperand();
  return {};
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

OpFoldResult BroadcastInDimOp::fold(FoldAdaptor) {
  // Same type and strictly increasing dims: the identity.
  if (getOperand().getType() == getType())
    return getOperand();
  return {};
}

OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  if (getOperand().getType() == getType())
    return getOperand();
  if (auto inner = getOperand().getDefiningOp<ReshapeOp>()) {
    getOperandMutable().assign(inner.getOperand());
    return getResult();
  }
  return {};
}

OpFoldResult TransposeOp::fold(FoldAdaptor) {
  // A transpose of a transpose is one transpose: result dim i is the inner
  // result's dim perm[i], which is the operand's dim inner[perm[i]]
  // (AOTAutograd saves t(t(w)) of a weight the forward read as t(w)).
  bool composed = false;
  if (auto inner = getOperand().getDefiningOp<TransposeOp>()) {
    SmallVector<int64_t> perm;
    for (int64_t p : getPerm())
      perm.push_back(inner.getPerm()[p]);
    getOperandMutable().assign(inner.getOperand());
    setPerm(perm);
    composed = true;
  }
  for (auto [i, p] : llvm::enumerate(getPerm()))
    if (static_cast<int64_t>(i) != p)
      return composed ? OpFoldResult(getResult()) : OpFoldResult();
  return getOperand();
}

namespace {
/// A transpose that swaps the last two dimensions and keeps the others.
bool swapsLastTwo(TransposeOp t) {
  ArrayRef<int64_t> perm = t.getPerm();
  int64_t rank = static_cast<int64_t>(perm.size());
  if (rank < 2)
    return false;
  for (int64_t i = 0; i < rank - 2; ++i)
    if (perm[i] != i)
      return false;
  return perm[rank - 2] == rank - 1 && perm[rank - 1] == rank - 2;
}
} // namespace

namespace {
/// transpose(grouped_matmul_weight_grad(a, b), [0, 2, 1]) =
/// grouped_matmul_weight_grad(b, a): per group (a^T b)^T = b^T a. A
/// mixture-of-experts layer's weights stored [G, N, K] and multiplied
/// through a transposed view get their gradient so.
struct SwapTransposedWeightGrad : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp t, PatternRewriter &rewriter) const override {
    auto grad = t.getOperand().getDefiningOp<GroupedMatmulWeightGradOp>();
    if (!grad || t.getPerm() != ArrayRef<int64_t>{0, 2, 1})
      return rewriter.notifyMatchFailure(t, "not a [0, 2, 1] transpose of a grouped weight "
                                            "gradient");
    rewriter.replaceOpWithNewOp<GroupedMatmulWeightGradOp>(t, grad.getGrad(), grad.getLhs(),
                                                           grad.getOffsets());
    return success();
  }
};

/// transpose(matmul(a, b)) = matmul(b, a) with the operands' transposes
/// swapped and flipped: (op(A) op(B))^T = op(B)^T op(A)^T. The product is
/// written in the layout its reader wants instead of transposed after it (a
/// tied LM head's weight gradient, [d, vocab] -> [vocab, d]).
struct SwapTransposedMatmul : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp t, PatternRewriter &rewriter) const override {
    auto mm = t.getOperand().getDefiningOp<MatmulOp>();
    if (!mm || !swapsLastTwo(t) || !mm->hasOneUse())
      return rewriter.notifyMatchFailure(t, "not the only reader of a matmul, or not a "
                                            "transpose of its last two dimensions");
    rewriter.replaceOpWithNewOp<MatmulOp>(t, t.getType(), mm.getRhs(), mm.getLhs(),
                                          !mm.getTransposeRhs(), !mm.getTransposeLhs());
    return success();
  }
};

/// transpose(cast(matmul)) = cast(transpose(matmul)), where the transpose
/// then folds into the matmul (autocast puts the cast between them).
struct TransposeBeforeCastOfMatmul : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp t, PatternRewriter &rewriter) const override {
    auto cast = t.getOperand().getDefiningOp<CastOp>();
    MatmulOp mm = cast ? cast.getOperand().getDefiningOp<MatmulOp>() : MatmulOp();
    if (!mm || !swapsLastTwo(t) || !cast->hasOneUse() || !mm->hasOneUse())
      return rewriter.notifyMatchFailure(t, "not the only reader of a cast of a matmul read "
                                            "only by the cast");
    auto castType = llvm::cast<RankedTensorType>(cast.getType());
    auto transposed = rewriter.create<TransposeOp>(
        t.getLoc(), RankedTensorType::get(t.getType().getShape(), mm.getType().getElementType()),
        mm.getResult(), t.getPermAttr());
    rewriter.replaceOpWithNewOp<CastOp>(
        t, RankedTensorType::get(t.getType().getShape(), castType.getElementType()),
        transposed.getResult());
    return success();
  }
};
} // namespace

void TransposeOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                              MLIRContext *context) {
  patterns.add<SwapTransposedWeightGrad, SwapTransposedMatmul, TransposeBeforeCastOfMatmul>(
      context);
}

namespace {
/// cast(transpose(x)) = transpose(cast(x)) when only matmuls read the cast:
/// they then read the cast value transposed in place, and no kernel writes a
/// transposed copy (autocast's bf16 copy of a tied LM head's weight, [vocab,
/// d] read as [d, vocab]). A transpose of a matmul is left to
/// SwapTransposedMatmul.
struct CastBeforeTransposeForMatmuls : OpRewritePattern<CastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(CastOp cast, PatternRewriter &rewriter) const override {
    auto t = cast.getOperand().getDefiningOp<TransposeOp>();
    if (!t || !swapsLastTwo(t) || t.getOperand().getDefiningOp<MatmulOp>())
      return rewriter.notifyMatchFailure(cast, "not a cast of a transpose of the last two "
                                               "dimensions of something other than a matmul");
    if (cast->use_empty() ||
        !llvm::all_of(cast->getUsers(), [](Operation *user) { return isa<MatmulOp>(user); }))
      return rewriter.notifyMatchFailure(cast, "read by something other than matmuls");
    auto sourceType = llvm::cast<RankedTensorType>(t.getOperand().getType());
    auto castType = llvm::cast<RankedTensorType>(cast.getType());
    auto early = rewriter.create<CastOp>(
        cast.getLoc(), RankedTensorType::get(sourceType.getShape(), castType.getElementType()),
        t.getOperand());
    rewriter.replaceOpWithNewOp<TransposeOp>(cast, castType, early.getResult(), t.getPermAttr());
    return success();
  }
};

/// cast(reshape(x)) = reshape(cast(x)) when only matmuls read the cast: the
/// cast is then at x's shape, where it joins the kernel that computes x (a
/// layer norm's [B, T, d] row kernel writes its bf16 output for the next
/// GEMM instead of an f32 one that a kernel of its own casts as [B*T, d]),
/// and the GEMMs read the reshaped buffer in place.
struct CastBeforeReshapeForMatmuls : OpRewritePattern<CastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(CastOp cast, PatternRewriter &rewriter) const override {
    auto reshape = cast.getOperand().getDefiningOp<ReshapeOp>();
    if (!reshape)
      return rewriter.notifyMatchFailure(cast, "not a cast of a reshape");
    if (cast->use_empty() ||
        !llvm::all_of(cast->getUsers(), [](Operation *user) { return isa<MatmulOp>(user); }))
      return rewriter.notifyMatchFailure(cast, "read by something other than matmuls");
    auto sourceType = llvm::cast<RankedTensorType>(reshape.getOperand().getType());
    auto castType = llvm::cast<RankedTensorType>(cast.getType());
    auto early = rewriter.create<CastOp>(
        cast.getLoc(), RankedTensorType::get(sourceType.getShape(), castType.getElementType()),
        reshape.getOperand());
    rewriter.replaceOpWithNewOp<ReshapeOp>(cast, castType, early.getResult());
    return success();
  }
};
} // namespace

void CastOp::getCanonicalizationPatterns(RewritePatternSet &patterns, MLIRContext *context) {
  patterns.add<CastBeforeTransposeForMatmuls, CastBeforeReshapeForMatmuls>(context);
}

OpFoldResult SliceOp::fold(FoldAdaptor) {
  if (getOperand().getType() != getType())
    return {};
  for (auto [s, st] : llvm::zip(getStart(), getStride()))
    if (s != 0 || st != 1)
      return {};
  return getOperand();
}

OpFoldResult ConcatOp::fold(FoldAdaptor) {
  if (getInputs().size() == 1)
    return getInputs()[0];
  return {};
}

OpFoldResult GroupedMatmulOp::fold(FoldAdaptor) {
  // The groups' GEMMs read the matrices transposed where they are (a
  // mixture-of-experts layer's weights are stored [G, N, K]).
  auto t = getRhs().getDefiningOp<TransposeOp>();
  if (!t || !swapsLastTwo(t))
    return {};
  getRhsMutable().assign(t.getOperand());
  setTransposeRhs(!getTransposeRhs());
  return getResult();
}

OpFoldResult MatmulOp::fold(FoldAdaptor) {
  // The GEMM reads the operand transposed where it is: no kernel writes a
  // transposed copy (attention's q @ k^T, gradients' x^T @ dy).
  bool changed = false;
  if (auto t = getLhs().getDefiningOp<TransposeOp>(); t && swapsLastTwo(t)) {
    getLhsMutable().assign(t.getOperand());
    setTransposeLhs(!getTransposeLhs());
    changed = true;
  }
  if (auto t = getRhs().getDefiningOp<TransposeOp>(); t && swapsLastTwo(t)) {
    getRhsMutable().assign(t.getOperand());
    setTransposeRhs(!getTransposeRhs());
    changed = true;
  }
  return changed ? OpFoldResult(getResult()) : OpFoldResult();
}
