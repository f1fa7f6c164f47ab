//===- GraphOps.cpp - shape rules and verifiers of the graph dialect ------===//
//
// Every shape rule lives in an inferReturnTypes function or a verifier here.
// Messages name the op, the operand types and what to do, because the same
// text reaches Python users through tilefuse.CompileError.
//
//===----------------------------------------------------------------------===//
#include "ir/graph/GraphDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace tilefuse::graph;

namespace {

using Loc = std::optional<Location>;

RankedTensorType tensorType(Value v) {
  return llvm::cast<RankedTensorType>(v.getType());
}

bool isFloat(Type t) { return llvm::isa<FloatType>(t); }
bool isBool(Type t) { return t.isInteger(1); }

std::string shapeString(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    s += (i ? ", " : "") + std::to_string(d);
  return s + "]";
}

/// Checks that `dims` are sorted, unique and within [0, rank).
LogicalResult checkDimList(Loc loc, StringRef opName, ArrayRef<int64_t> dims,
                           int64_t rank, Type operandType) {
  for (auto [i, d] : llvm::enumerate(dims)) {
    if (d < 0 || d >= rank)
      return opError(loc, opName, "dimension ", d, " is out of range for ",
                     operandType, " (rank ", rank, ")");
    if (i > 0 && dims[i - 1] >= d)
      return opError(loc, opName, "dims ", shapeString(dims),
                     " must be sorted and unique");
  }
  return success();
}

/// Checks `dim` is within [0, rank).
LogicalResult checkDim(Loc loc, StringRef opName, int64_t dim, int64_t rank,
                       Type operandType) {
  if (dim < 0 || dim >= rank)
    return opError(loc, opName, "dim ", dim, " is out of range for ",
                   operandType, " (rank ", rank, ")");
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise ops.
//===----------------------------------------------------------------------===//

LogicalResult tilefuse::graph::inferElementwiseType(
    Loc loc, StringRef opName, ElementwiseKind kind, ValueRange operands,
    SmallVectorImpl<Type> &out) {
  if (operands.empty())
    return opError(loc, opName, "expects operands");
  auto type = llvm::dyn_cast<RankedTensorType>(operands[0].getType());
  if (!type)
    return opError(loc, opName, "expects tensor operands, got ",
                   operands[0].getType());
  for (Value other : operands.drop_front())
    if (other.getType() != type)
      return opError(loc, opName, "operand types differ: ", type, " vs ",
                     other.getType(),
                     "; broadcasts are explicit: insert graph.broadcast_in_dim "
                     "or graph.cast first");
  Type elem = type.getElementType();
  if (kind == ElementwiseKind::FloatOnly && !isFloat(elem))
    return opError(loc, opName, "expects a floating-point tensor, got ", type,
                   "; cast it with graph.cast first");
  if (kind == ElementwiseKind::Arithmetic && isBool(elem))
    return opError(loc, opName, "does not accept i1 tensors (", type,
                   "); cast to a numeric type first");
  if (kind == ElementwiseKind::Compare)
    out.push_back(
        RankedTensorType::get(type.getShape(), IntegerType::get(
                                                   type.getContext(), 1)));
  else
    out.push_back(type);
  return success();
}

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be \"none\" or \"tanh\", got \"")
           << getApproximate() << "\"";
  return success();
}

LogicalResult SelectOp::inferReturnTypes(MLIRContext *, Loc loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &out) {
  auto cond = tensorType(adaptor.getCond());
  auto t = tensorType(adaptor.getOnTrue());
  auto f = tensorType(adaptor.getOnFalse());
  if (t != f)
    return opError(loc, getOperationName(), "branch types differ: ", t, " vs ",
                   f);
  if (cond.getShape() != t.getShape())
    return opError(loc, getOperationName(), "condition shape ",
                   shapeString(cond.getShape()), " differs from value shape ",
                   shapeString(t.getShape()),
                   "; broadcast the condition explicitly");
  out.push_back(t);
  return success();
}

//===----------------------------------------------------------------------===//
// Casts and constants.
//===----------------------------------------------------------------------===//

LogicalResult CastOp::verify() {
  if (getOperand().getType().getShape() != getType().getShape())
    return emitOpError("changes the shape: ")
           << getOperand().getType() << " -> " << getType()
           << "; a cast only changes the element type";
  return success();
}

LogicalResult ConstantOp::inferReturnTypes(MLIRContext *, Loc loc,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &out) {
  auto type = llvm::dyn_cast<RankedTensorType>(adaptor.getValue().getType());
  if (!type || !type.hasStaticShape())
    return opError(loc, getOperationName(),
                   "value must be a statically shaped tensor");
  out.push_back(type);
  return success();
}

LogicalResult IotaOp::verify() {
  auto type = getType();
  if (type.getRank() == 0)
    return emitOpError("result must have rank >= 1, got ") << type;
  if (isBool(type.getElementType()))
    return emitOpError("result must be numeric, got ") << type;
  return checkDim(getLoc(), getOperationName(), getDim(), type.getRank(),
                  type);
}

//===----------------------------------------------------------------------===//
// Layout ops.
//===----------------------------------------------------------------------===//

LogicalResult BroadcastInDimOp::verify() {
  auto in = getOperand().getType();
  auto out = getType();
  ArrayRef<int64_t> dims = getDims();
  if (in.getElementType() != out.getElementType())
    return emitOpError("changes the element type: ")
           << in << " -> " << out << "; use graph.cast";
  if (static_cast<int64_t>(dims.size()) != in.getRank())
    return emitOpError("dims has ")
           << dims.size() << " entries but the operand " << in << " has rank "
           << in.getRank();
  for (auto [i, d] : llvm::enumerate(dims)) {
    if (d < 0 || d >= out.getRank())
      return emitOpError("dims[") << i << "] = " << d
                                  << " is out of range for the result " << out;
    if (i > 0 && dims[i - 1] >= d)
      return emitOpError("dims ")
             << shapeString(dims) << " must be strictly increasing";
    int64_t size = in.getDimSize(i);
    if (size != 1 && size != out.getDimSize(d))
      return emitOpError("cannot broadcast ")
             << in << " to " << out << ": operand dimension " << i
             << " has size " << size << " but result dimension " << d
             << " has size " << out.getDimSize(d);
  }
  return success();
}

LogicalResult ReshapeOp::verify() {
  auto in = getOperand().getType();
  auto out = getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("changes the element type: ")
           << in << " -> " << out << "; use graph.cast";
  if (in.getNumElements() != out.getNumElements())
    return emitOpError("cannot reshape ")
           << in << " (" << in.getNumElements() << " elements) to " << out
           << " (" << out.getNumElements() << " elements)";
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *, Loc loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &out) {
  auto in = tensorType(adaptor.getOperand());
  ArrayRef<int64_t> perm = adaptor.getPerm();
  if (static_cast<int64_t>(perm.size()) != in.getRank())
    return opError(loc, getOperationName(), "perm ", shapeString(perm),
                   " has ", perm.size(), " entries but the operand ", in,
                   " has rank ", in.getRank());
  SmallVector<bool> seen(perm.size(), false);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= in.getRank() || seen[p])
      return opError(loc, getOperationName(), "perm ", shapeString(perm),
                     " is not a permutation of 0..", in.getRank() - 1);
    seen[p] = true;
    shape.push_back(in.getDimSize(p));
  }
  out.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *, Loc loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &out) {
  auto in = tensorType(adaptor.getOperand());
  ArrayRef<int64_t> start = adaptor.getStart(), limit = adaptor.getLimit(),
                    stride = adaptor.getStride();
  int64_t rank = in.getRank();
  if (static_cast<int64_t>(start.size()) != rank ||
      static_cast<int64_t>(limit.size()) != rank ||
      static_cast<int64_t>(stride.size()) != rank)
    return opError(loc, getOperationName(), "start/limit/stride need ", rank,
                   " entries each for ", in);
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < rank; ++i) {
    if (stride[i] < 1 || start[i] < 0 || start[i] > limit[i] ||
        limit[i] > in.getDimSize(i))
      return opError(loc, getOperationName(), "dimension ", i, " of ", in,
                     ": need 0 <= start (", start[i], ") <= limit (",
                     limit[i], ") <= ", in.getDimSize(i), " and stride (",
                     stride[i], ") >= 1");
    // ceil((limit - start) / stride) without overflowing for huge strides.
    shape.push_back(limit[i] == start[i]
                        ? 0
                        : (limit[i] - start[i] - 1) / stride[i] + 1);
  }
  out.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *, Loc loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &out) {
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return opError(loc, getOperationName(), "needs at least one input");
  auto first = tensorType(inputs[0]);
  int64_t dim = adaptor.getDim();
  if (failed(checkDim(loc, getOperationName(), dim, first.getRank(), first)))
    return failure();
  SmallVector<int64_t> shape(first.getShape());
  shape[dim] = 0;
  for (Value v : inputs) {
    auto t = tensorType(v);
    bool compatible = t.getElementType() == first.getElementType() &&
                      t.getRank() == first.getRank();
    for (int64_t i = 0; compatible && i < t.getRank(); ++i)
      compatible = i == dim || t.getDimSize(i) == first.getDimSize(i);
    if (!compatible)
      return opError(loc, getOperationName(), "cannot concatenate ", first,
                     " and ", t, " along dim ", dim,
                     ": element types and all other dimensions must match");
    shape[dim] += t.getDimSize(dim);
  }
  out.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions.
//===----------------------------------------------------------------------===//

namespace {
LogicalResult inferReduction(Loc loc, StringRef opName, Value operand,
                             ArrayRef<int64_t> dims, bool keepdim,
                             SmallVectorImpl<Type> &out) {
  auto in = tensorType(operand);
  if (isBool(in.getElementType()))
    return opError(loc, opName, "does not reduce i1 tensors (", in,
                   "); cast to a numeric type first");
  if (failed(checkDimList(loc, opName, dims, in.getRank(), in)))
    return failure();
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < in.getRank(); ++i) {
    bool reduced = llvm::is_contained(dims, i);
    if (!reduced)
      shape.push_back(in.getDimSize(i));
    else if (keepdim)
      shape.push_back(1);
  }
  out.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}
} // namespace

#define TILEFUSE_REDUCE_INFER(OP)                                              \
  LogicalResult OP::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,  \
                                     SmallVectorImpl<Type> &out) {             \
    return inferReduction(loc, getOperationName(), adaptor.getOperand(),      \
                          adaptor.getDims(), adaptor.getKeepdim(), out);       \
  }
TILEFUSE_REDUCE_INFER(ReduceSumOp)
TILEFUSE_REDUCE_INFER(ReduceMaxOp)
TILEFUSE_REDUCE_INFER(ReduceMinOp)
#undef TILEFUSE_REDUCE_INFER

LogicalResult ArgmaxOp::inferReturnTypes(MLIRContext *ctx, Loc loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &out) {
  SmallVector<Type, 1> reduced;
  int64_t dim = adaptor.getDim();
  auto in = tensorType(adaptor.getOperand());
  if (failed(checkDim(loc, getOperationName(), dim, in.getRank(), in)) ||
      failed(inferReduction(loc, getOperationName(), adaptor.getOperand(),
                            {dim}, adaptor.getKeepdim(), reduced)))
    return failure();
  out.push_back(RankedTensorType::get(
      llvm::cast<RankedTensorType>(reduced[0]).getShape(),
      IntegerType::get(ctx, 64)));
  return success();
}

//===----------------------------------------------------------------------===//
// Contractions and indexing.
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *, Loc loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &out) {
  auto a = tensorType(adaptor.getLhs());
  auto b = tensorType(adaptor.getRhs());
  StringRef name = getOperationName();
  if (a.getElementType() != b.getElementType())
    return opError(loc, name, "element types differ: ", a, " vs ", b,
                   "; cast one operand first");
  if (a.getRank() < 2 || a.getRank() != b.getRank())
    return opError(loc, name, "expects operands of equal rank >= 2, got ", a,
                   " and ", b, "; reshape or broadcast the batch dimensions");
  int64_t r = a.getRank();
  for (int64_t i = 0; i + 2 < r; ++i)
    if (a.getDimSize(i) != b.getDimSize(i))
      return opError(loc, name, "batch dimensions differ: ", a, " vs ", b,
                     "; broadcast them explicitly");
  bool ta = adaptor.getTransposeLhs(), tb = adaptor.getTransposeRhs();
  int64_t m = a.getDimSize(ta ? r - 1 : r - 2);
  int64_t ka = a.getDimSize(ta ? r - 2 : r - 1);
  int64_t kb = b.getDimSize(tb ? r - 1 : r - 2);
  int64_t n = b.getDimSize(tb ? r - 2 : r - 1);
  if (ka != kb)
    return opError(loc, name, "contraction sizes differ: ", a,
                   ta ? " (transposed)" : "", " has K = ", ka, " but ", b,
                   tb ? " (transposed)" : "", " has K = ", kb);
  SmallVector<int64_t> shape(a.getShape().drop_back(2));
  shape.push_back(m);
  shape.push_back(n);
  out.push_back(RankedTensorType::get(shape, a.getElementType()));
  return success();
}

namespace {
/// The checks graph.attention and graph.attention_grad share: q, k, v of
/// one float type (f32, bf16, f16 or f64) and equal rank >= 3 ([B..., H, L,
/// E], [B..., Hk, S, E], [B..., Hk, S, Ev]), Hk dividing H, and a mask
/// [B'..., H', L, S] whose leading dimensions are the query's or 1 (i1 or
/// the query's type).
LogicalResult checkAttentionOperands(Loc loc, StringRef name, Value query, Value key,
                                     Value value, Value mask) {
  auto q = tensorType(query), k = tensorType(key), v = tensorType(value);
  Type elem = q.getElementType();
  if ((!elem.isF32() && !elem.isF64() && !elem.isBF16() && !elem.isF16()) ||
      k.getElementType() != elem || v.getElementType() != elem)
    return opError(loc, name, "expects query, key and value of one type (f32, bf16, f16 or "
                              "f64), got ",
                   q, ", ", k, " and ", v, "; cast them first");
  int64_t r = q.getRank();
  if (r < 3 || k.getRank() != r || v.getRank() != r)
    return opError(loc, name, "expects query [..., H, L, E], key [..., Hk, S, E] and value "
                              "[..., Hk, S, Ev] of one rank >= 3, got ",
                   q, ", ", k, " and ", v);
  for (int64_t i = 0; i + 3 < r; ++i)
    if (k.getDimSize(i) != q.getDimSize(i) || v.getDimSize(i) != q.getDimSize(i))
      return opError(loc, name, "batch dimensions differ: query ", q, ", key ", k,
                     ", value ", v, "; broadcast them explicitly");
  int64_t heads = q.getDimSize(r - 3), kvHeads = k.getDimSize(r - 3);
  if (v.getDimSize(r - 3) != kvHeads || v.getDimSize(r - 2) != k.getDimSize(r - 2))
    return opError(loc, name, "key ", k, " and value ", v,
                   " must have the same heads and sequence length");
  if (kvHeads < 1 || heads % kvHeads)
    return opError(loc, name, "the key/value heads (", kvHeads,
                   ") must divide the query heads (", heads, "): query ", q, ", key ", k);
  if (k.getDimSize(r - 1) != q.getDimSize(r - 1))
    return opError(loc, name, "query ", q, " and key ", k,
                   " must have the same head size (last dimension)");
  if (!mask)
    return success();
  auto m = tensorType(mask);
  if (m.getElementType() != elem && !isBool(m.getElementType()))
    return opError(loc, name, "expects an i1 mask or one of the query's type (", elem,
                   "), got ", m);
  if (m.getRank() != r || m.getDimSize(r - 2) != q.getDimSize(r - 2) ||
      m.getDimSize(r - 1) != k.getDimSize(r - 2))
    return opError(loc, name, "mask ", m, " must be [..., L, S] of the query's rank with L = ",
                   q.getDimSize(r - 2), " and S = ", k.getDimSize(r - 2),
                   "; reshape or broadcast it");
  bool batchWhole = true, batchOne = true;
  for (int64_t i = 0; i + 3 < r; ++i) {
    batchWhole &= m.getDimSize(i) == q.getDimSize(i);
    batchOne &= m.getDimSize(i) == 1;
  }
  int64_t mh = m.getDimSize(r - 3);
  if (!(batchWhole || batchOne) || (mh != heads && mh != 1))
    return opError(loc, name, "mask ", m, " must have the query's batch dimensions or all 1, "
                   "and the query's heads (", heads, ") or 1; broadcast it explicitly");
  return success();
}
} // namespace

/// Dropout needs a seed, and a seed is only for dropout.
template <typename OpTy> LogicalResult verifyAttentionDropout(OpTy op) {
  double p = op.getDropoutP().convertToDouble();
  if (!(p >= 0.0 && p < 1.0))
    return op.emitOpError("dropout_p must be in [0, 1), got ") << p;
  if ((p > 0.0) != bool(op.getSeed()))
    return op.emitOpError(p > 0.0 ? "drops probabilities (dropout_p > 0) but has no seed"
                                  : "has a seed but dropout_p = 0");
  if (op.getStream() < 0)
    return op.emitOpError("stream must be >= 0, got ") << op.getStream();
  return success();
}

LogicalResult AttentionOp::verify() { return verifyAttentionDropout(*this); }
LogicalResult AttentionGradOp::verify() { return verifyAttentionDropout(*this); }

/// The type of attention's row statistics (the log-sum-exp) for operands
/// of type `elem`: f32 for 16-bit operands (rounded to 16 bits, a
/// log-sum-exp of ~10 would be off by ~0.03, the recomputed probabilities
/// by 3%), else the operands' own.
static Type attentionStatsType(Type elem) {
  return elem.isBF16() || elem.isF16() ? Float32Type::get(elem.getContext()) : elem;
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                            SmallVectorImpl<Type> &out) {
  if (failed(checkAttentionOperands(loc, getOperationName(), adaptor.getQuery(),
                                    adaptor.getKey(), adaptor.getValue(), adaptor.getMask())))
    return failure();
  auto q = tensorType(adaptor.getQuery()), v = tensorType(adaptor.getValue());
  SmallVector<int64_t> shape(q.getShape());
  shape.back() = v.getShape().back();
  out.push_back(RankedTensorType::get(shape, q.getElementType()));
  out.push_back(
      RankedTensorType::get(q.getShape().drop_back(), attentionStatsType(q.getElementType())));
  return success();
}

LogicalResult AttentionGradOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                                SmallVectorImpl<Type> &out) {
  StringRef name = getOperationName();
  if (failed(checkAttentionOperands(loc, name, adaptor.getQuery(), adaptor.getKey(),
                                    adaptor.getValue(), adaptor.getMask())))
    return failure();
  auto q = tensorType(adaptor.getQuery()), v = tensorType(adaptor.getValue());
  SmallVector<int64_t> outShape(q.getShape());
  outShape.back() = v.getShape().back();
  auto want = RankedTensorType::get(outShape, q.getElementType());
  auto lseWant =
      RankedTensorType::get(q.getShape().drop_back(), attentionStatsType(q.getElementType()));
  if (adaptor.getResult().getType() != want || adaptor.getGrad().getType() != want)
    return opError(loc, name, "result ", adaptor.getResult().getType(), " and grad ",
                   adaptor.getGrad().getType(), " must both be ", want);
  if (adaptor.getLogsumexp().getType() != lseWant)
    return opError(loc, name, "logsumexp ", adaptor.getLogsumexp().getType(), " must be ",
                   lseWant);
  out.push_back(adaptor.getQuery().getType());
  out.push_back(adaptor.getKey().getType());
  out.push_back(adaptor.getValue().getType());
  return success();
}

/// The shared checks of the grouped products: 2-D lhs, one offset per
/// group, one element type.
static LogicalResult verifyGroupedOperands(Loc loc, StringRef name, RankedTensorType lhs,
                                           RankedTensorType other, RankedTensorType offsets,
                                           int64_t groups) {
  if (lhs.getRank() != 2)
    return opError(loc, name, "lhs must be [S, K], got ", lhs);
  if (offsets.getRank() != 1 || offsets.getDimSize(0) != groups)
    return opError(loc, name, "offsets ", offsets, " must be [", groups,
                   "] (one end offset per group)");
  if (other.getElementType() != lhs.getElementType())
    return opError(loc, name, "operands ", lhs, " and ", other,
                   " must have the same element type");
  return success();
}

LogicalResult GroupedMatmulOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                                SmallVectorImpl<Type> &out) {
  auto lhs = tensorType(adaptor.getLhs()), rhs = tensorType(adaptor.getRhs());
  auto offsets = tensorType(adaptor.getOffsets());
  bool transposed = adaptor.getTransposeRhs();
  if (rhs.getRank() != 3)
    return opError(loc, getOperationName(), "rhs must be ",
                   transposed ? "[G, N, K] (transpose_rhs)" : "[G, K, N]", ", got ", rhs);
  if (failed(verifyGroupedOperands(loc, getOperationName(), lhs, rhs, offsets,
                                   rhs.getDimSize(0))))
    return failure();
  int64_t k = rhs.getDimSize(transposed ? 2 : 1), n = rhs.getDimSize(transposed ? 1 : 2);
  if (lhs.getDimSize(1) != k)
    return opError(loc, getOperationName(), "lhs ", lhs, " and rhs ", rhs,
                   " must agree on K (lhs dim 1, rhs dim ", transposed ? 2 : 1, ")");
  out.push_back(RankedTensorType::get({lhs.getDimSize(0), n}, lhs.getElementType()));
  return success();
}

LogicalResult GroupedMatmulWeightGradOp::inferReturnTypes(MLIRContext *, Loc loc,
                                                          Adaptor adaptor,
                                                          SmallVectorImpl<Type> &out) {
  auto lhs = tensorType(adaptor.getLhs()), grad = tensorType(adaptor.getGrad());
  auto offsets = tensorType(adaptor.getOffsets());
  if (offsets.getRank() != 1)
    return opError(loc, getOperationName(), "offsets must be [G], got ", offsets);
  if (failed(verifyGroupedOperands(loc, getOperationName(), lhs, grad, offsets,
                                   offsets.getDimSize(0))))
    return failure();
  if (grad.getRank() != 2 || grad.getDimSize(0) != lhs.getDimSize(0))
    return opError(loc, getOperationName(), "grad must be [S, N] with the lhs's S = ",
                   lhs.getDimSize(0), ", got ", grad);
  out.push_back(RankedTensorType::get(
      {offsets.getDimSize(0), lhs.getDimSize(1), grad.getDimSize(1)}, lhs.getElementType()));
  return success();
}

LogicalResult SortOp::inferReturnTypes(MLIRContext *ctx, Loc loc, Adaptor adaptor,
                                       SmallVectorImpl<Type> &out) {
  auto x = tensorType(adaptor.getOperand());
  if (x.getRank() < 1)
    return opError(loc, getOperationName(), "sorts along the last dimension: the operand "
                   "must have rank >= 1, got ", x);
  if (x.getElementType().isInteger(1))
    return opError(loc, getOperationName(), "sorts numbers, got ", x,
                   "; cast the booleans to an integer type first");
  out.push_back(x);
  out.push_back(RankedTensorType::get(x.getShape(), IntegerType::get(ctx, 64)));
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *, Loc loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &out) {
  auto table = tensorType(adaptor.getTable());
  auto idx = tensorType(adaptor.getIndices());
  if (table.getRank() < 1)
    return opError(loc, getOperationName(), "table must have rank >= 1, got ",
                   table);
  SmallVector<int64_t> shape(idx.getShape());
  llvm::append_range(shape, table.getShape().drop_front());
  out.push_back(RankedTensorType::get(shape, table.getElementType()));
  return success();
}

LogicalResult ScatterAddOp::inferReturnTypes(MLIRContext *, Loc loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &out) {
  auto base = tensorType(adaptor.getBase());
  auto idx = tensorType(adaptor.getIndices());
  auto upd = tensorType(adaptor.getUpdates());
  if (base.getRank() < 1)
    return opError(loc, getOperationName(), "base must have rank >= 1, got ",
                   base);
  SmallVector<int64_t> expected(idx.getShape());
  llvm::append_range(expected, base.getShape().drop_front());
  if (upd.getShape() != ArrayRef<int64_t>(expected) ||
      upd.getElementType() != base.getElementType())
    return opError(loc, getOperationName(), "updates ", upd,
                   " must have shape indices.shape + base.shape[1:] = ",
                   shapeString(expected), " and the element type of ", base);
  out.push_back(base);
  return success();
}

LogicalResult RandomUniformOp::verify() {
  // I64Attr getters return uint64_t; read the signed value.
  int64_t stream = getStreamAttr().getInt();
  if (stream < 0)
    return emitOpError("stream must be >= 0, got ") << stream;
  if (getStreamValue() && stream != 0)
    return emitOpError("has both a stream operand and stream = ")
           << stream << "; give one of them";
  return success();
}

//===----------------------------------------------------------------------===//
// Composites.
//===----------------------------------------------------------------------===//

namespace {
LogicalResult inferSoftmaxLike(Loc loc, StringRef name, Value operand,
                               int64_t dim, SmallVectorImpl<Type> &out) {
  auto in = tensorType(operand);
  if (failed(checkDim(loc, name, dim, in.getRank(), in)))
    return failure();
  out.push_back(in);
  return success();
}

/// cross_entropy / nll: input [..., C], target [...] -> 0-d.
LogicalResult inferClassLoss(Loc loc, StringRef name, Value input,
                             Value target, SmallVectorImpl<Type> &out) {
  auto x = tensorType(input);
  auto t = tensorType(target);
  if (x.getRank() < 1 || t.getShape() != x.getShape().drop_back())
    return opError(loc, name, "input ", x, " and target ", t,
                   " do not match: target must have the input's shape "
                   "without its last (class) dimension");
  out.push_back(RankedTensorType::get({}, x.getElementType()));
  return success();
}

LogicalResult inferPairLoss(Loc loc, StringRef name, Value input, Value target,
                            SmallVectorImpl<Type> &out) {
  auto x = tensorType(input);
  auto t = tensorType(target);
  if (x != t)
    return opError(loc, name, "input ", x, " and target ", t,
                   " must have the same type");
  out.push_back(RankedTensorType::get({}, x.getElementType()));
  return success();
}
} // namespace

LogicalResult SoftmaxOp::inferReturnTypes(MLIRContext *, Loc loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &out) {
  return inferSoftmaxLike(loc, getOperationName(), adaptor.getOperand(),
                          adaptor.getDim(), out);
}

LogicalResult LogSoftmaxOp::inferReturnTypes(MLIRContext *, Loc loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &out) {
  return inferSoftmaxLike(loc, getOperationName(), adaptor.getOperand(),
                          adaptor.getDim(), out);
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *, Loc loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &out) {
  auto x = tensorType(adaptor.getOperand());
  auto w = tensorType(adaptor.getWeight());
  auto b = tensorType(adaptor.getBias());
  if (w != b)
    return opError(loc, getOperationName(), "weight ", w, " and bias ", b,
                   " must have the same type");
  if (w.getElementType() != x.getElementType())
    return opError(loc, getOperationName(), "weight ", w,
                   " must have the element type of the input ", x);
  if (w.getRank() < 1 ||
      w.getRank() > x.getRank() ||
      x.getShape().take_back(w.getRank()) != w.getShape())
    return opError(loc, getOperationName(), "weight ", w,
                   " must match the trailing dimensions of the input ", x);
  if (adaptor.getEpsilon().convertToDouble() < 0)
    return opError(loc, getOperationName(), "epsilon must be >= 0");
  out.push_back(x);
  return success();
}

LogicalResult LinearOp::inferReturnTypes(MLIRContext *, Loc loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &out) {
  auto x = tensorType(adaptor.getOperand());
  auto w = tensorType(adaptor.getWeight());
  StringRef name = getOperationName();
  if (x.getRank() < 1 || w.getRank() != 2 ||
      w.getDimSize(1) != x.getShape().back() ||
      w.getElementType() != x.getElementType())
    return opError(loc, name, "input ", x, " and weight ", w,
                   " do not match: weight must be [out, in] with in = the "
                   "input's last dimension and the same element type");
  if (Value bias = adaptor.getBias()) {
    auto b = tensorType(bias);
    if (b.getRank() != 1 || b.getDimSize(0) != w.getDimSize(0) ||
        b.getElementType() != x.getElementType())
      return opError(loc, name, "bias ", b, " must be [", w.getDimSize(0),
                     "] of ", x.getElementType());
  }
  SmallVector<int64_t> shape(x.getShape().drop_back());
  shape.push_back(w.getDimSize(0));
  out.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

LogicalResult DropoutOp::inferReturnTypes(MLIRContext *, Loc loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &out) {
  double p = adaptor.getP().convertToDouble();
  if (!(p >= 0.0 && p < 1.0))
    return opError(loc, getOperationName(), "p must be in [0, 1), got ", p);
  if (static_cast<int64_t>(adaptor.getStream()) < 0)
    return opError(loc, getOperationName(), "stream must be >= 0");
  out.push_back(adaptor.getOperand().getType());
  return success();
}

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *, Loc loc,
                                               Adaptor adaptor,
                                               SmallVectorImpl<Type> &out) {
  return inferClassLoss(loc, getOperationName(), adaptor.getInput(),
                        adaptor.getTarget(), out);
}

LogicalResult NllOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &out) {
  return inferClassLoss(loc, getOperationName(), adaptor.getInput(),
                        adaptor.getTarget(), out);
}

LogicalResult MseOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &out) {
  return inferPairLoss(loc, getOperationName(), adaptor.getInput(),
                       adaptor.getTarget(), out);
}

LogicalResult BceOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &out) {
  return inferPairLoss(loc, getOperationName(), adaptor.getInput(),
                       adaptor.getTarget(), out);
}

//===----------------------------------------------------------------------===//
// Fusion regions.
//===----------------------------------------------------------------------===//

LogicalResult FusionOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError("has ") << getInputs().size() << " inputs but its body takes "
                               << body.getNumArguments() << " arguments";
  for (auto [i, pair] : llvm::enumerate(llvm::zip(getInputs(), body.getArguments())))
    if (std::get<0>(pair).getType() != std::get<1>(pair).getType())
      return emitOpError("input ") << i << " has type " << std::get<0>(pair).getType()
                                   << " but body argument " << i << " has type "
                                   << std::get<1>(pair).getType();
  auto yield = body.empty() ? YieldOp() : llvm::dyn_cast<YieldOp>(body.back());
  if (!yield)
    return emitOpError("body must end with graph.yield");
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("yields ") << yield.getValues().getTypes().size()
                                  << " values whose types differ from its results";
  if (getKind() != "pointwise" && getKind() != "reduction" &&
      getKind() != "matmul")
    return emitOpError("kind must be \"pointwise\", \"reduction\" or \"matmul\", got \"")
           << getKind() << "\"";
  for (Operation &op : body.without_terminator())
    if (llvm::isa<FusionOp>(op) || op.getDialect() != (*this)->getDialect())
      return op.emitOpError("cannot appear inside a graph.fusion");
  return success();
}

#define GET_OP_CLASSES
#include "ir/graph/GraphOps.cpp.inc"
