//===- GraphEmitter.cpp ---------------------------------------------------===//
#include "ir/graph/GraphEmitter.h"

using namespace mlir;
using namespace tilefuse::graph;

SmallVector<int64_t> tilefuse::graph::iotaDims(int64_t n, int64_t start) {
  SmallVector<int64_t> dims;
  for (int64_t i = 0; i < n; ++i)
    dims.push_back(start + i);
  return dims;
}

Value GraphEmitter::full(RankedTensorType type, double value) {
  return b.create<FullOp>(loc, type, b.getF64FloatAttr(value));
}

Value GraphEmitter::cast(Value a, Type elementType) {
  auto type = RankedTensorType::get(typeOf(a).getShape(), elementType);
  if (type == a.getType())
    return a;
  return b.create<CastOp>(loc, type, a);
}

Value GraphEmitter::reduceSum(Value a, ArrayRef<int64_t> dims, bool keepdim) {
  return b.create<ReduceSumOp>(loc, a, b.getDenseI64ArrayAttr(dims),
                               b.getBoolAttr(keepdim));
}

Value GraphEmitter::reduceMax(Value a, ArrayRef<int64_t> dims, bool keepdim) {
  return b.create<ReduceMaxOp>(loc, a, b.getDenseI64ArrayAttr(dims),
                               b.getBoolAttr(keepdim));
}

Value GraphEmitter::sumAll(Value a) {
  return reduceSum(a, iotaDims(typeOf(a).getRank()), /*keepdim=*/false);
}

Value GraphEmitter::broadcast(Value a, ArrayRef<int64_t> shape,
                              ArrayRef<int64_t> dims) {
  auto type = RankedTensorType::get(shape, typeOf(a).getElementType());
  if (type == a.getType())
    return a;
  return b.create<BroadcastInDimOp>(loc, type, a,
                                    b.getDenseI64ArrayAttr(dims));
}

Value GraphEmitter::broadcastKeepdim(Value a, ArrayRef<int64_t> shape) {
  return broadcast(a, shape, iotaDims(typeOf(a).getRank()));
}

Value GraphEmitter::reshape(Value a, ArrayRef<int64_t> shape) {
  auto type = RankedTensorType::get(shape, typeOf(a).getElementType());
  if (type == a.getType())
    return a;
  return b.create<ReshapeOp>(loc, type, a);
}

Value GraphEmitter::matmul(Value a, Value b_, bool transposeA,
                           bool transposeB) {
  return b.create<MatmulOp>(loc, a, b_, b.getBoolAttr(transposeA),
                            b.getBoolAttr(transposeB));
}

Value GraphEmitter::transpose(Value a, ArrayRef<int64_t> perm) {
  SmallVector<int64_t> shape;
  for (int64_t p : perm)
    shape.push_back(typeOf(a).getDimSize(p));
  return b.create<TransposeOp>(
      loc, RankedTensorType::get(shape, typeOf(a).getElementType()), a,
      b.getDenseI64ArrayAttr(perm));
}

Value GraphEmitter::slice(Value a, ArrayRef<int64_t> start,
                          ArrayRef<int64_t> limit, ArrayRef<int64_t> stride) {
  return b.create<SliceOp>(loc, a, b.getDenseI64ArrayAttr(start),
                           b.getDenseI64ArrayAttr(limit),
                           b.getDenseI64ArrayAttr(stride));
}

Value GraphEmitter::concat(ValueRange inputs, int64_t dim) {
  if (inputs.size() == 1)
    return inputs[0];
  return b.create<ConcatOp>(loc, inputs, b.getI64IntegerAttr(dim));
}

Value GraphEmitter::allReduceStart(Value a, StringRef group, int64_t size, StringRef reduce) {
  return b.create<AllReduceStartOp>(loc, a, b.getStringAttr(group), b.getI64IntegerAttr(size),
                                    b.getStringAttr(reduce));
}

Value GraphEmitter::reduceScatterStart(Value a, StringRef group, int64_t size) {
  return b.create<ReduceScatterStartOp>(loc, a, b.getStringAttr(group),
                                        b.getI64IntegerAttr(size), b.getStringAttr("sum"));
}

Value GraphEmitter::allGatherStart(Value a, StringRef group, int64_t size) {
  return b.create<AllGatherStartOp>(loc, a, b.getStringAttr(group), b.getI64IntegerAttr(size));
}

Value GraphEmitter::broadcastStart(Value a, StringRef group, int64_t size, int64_t root) {
  return b.create<BroadcastStartOp>(loc, a, b.getStringAttr(group), b.getI64IntegerAttr(size),
                                    b.getI64IntegerAttr(root));
}
