//===- PadConvolutions.cpp - unequal convolution padding made explicit ====//
//
// cuDNN pads both sides of a spatial dimension alike. A convolution padded
// unequally (PyTorch's padding='same' with an even kernel, an explicit
// F.pad folded into the convolution) keeps the common part as the
// convolution's padding and writes the rest out as zeros concatenated to
// the input before fusion: the results are the same values, the extra
// zeros cost one copy of the input.
//
//===----------------------------------------------------------------------===//
#include "passes/FuseOps.h"

#include "ir/graph/GraphEmitter.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;

namespace {

/// Per spatial dim: the padding both sides share and what each side adds.
struct SplitPadding {
  SmallVector<int64_t> common, extraLow, extraHigh;
  bool unequal = false;
};

SplitPadding splitPadding(Operation *op) {
  SplitPadding s;
  auto low = op->getAttrOfType<DenseI64ArrayAttr>("padding_low").asArrayRef();
  auto high = op->getAttrOfType<DenseI64ArrayAttr>("padding_high").asArrayRef();
  for (size_t d = 0; d < low.size(); ++d) {
    int64_t c = std::min(low[d], high[d]);
    s.common.push_back(c);
    s.extraLow.push_back(low[d] - c);
    s.extraHigh.push_back(high[d] - c);
    s.unequal |= low[d] != high[d];
  }
  return s;
}

/// `x` ([N, C, S...]) with `low[d]` zeros before and `high[d]` after
/// spatial dim d.
Value padWithZeros(GraphEmitter &e, Value x, ArrayRef<int64_t> low, ArrayRef<int64_t> high) {
  for (size_t d = 0; d < low.size(); ++d) {
    if (low[d] == 0 && high[d] == 0)
      continue;
    auto type = llvm::cast<RankedTensorType>(x.getType());
    int64_t dim = int64_t(d) + 2;
    SmallVector<Value> pieces;
    auto zeros = [&](int64_t n) {
      SmallVector<int64_t> shape(type.getShape());
      shape[size_t(dim)] = n;
      return e.full(RankedTensorType::get(shape, type.getElementType()), 0.0);
    };
    if (low[d])
      pieces.push_back(zeros(low[d]));
    pieces.push_back(x);
    if (high[d])
      pieces.push_back(zeros(high[d]));
    x = e.concat(pieces, dim);
  }
  return x;
}

void setPadding(Operation *op, ArrayRef<int64_t> common) {
  Builder b(op->getContext());
  op->setAttr("padding_low", b.getDenseI64ArrayAttr(common));
  op->setAttr("padding_high", b.getDenseI64ArrayAttr(common));
}

/// One convolution-like op rewritten to equal padding (nothing when it
/// already pads equally).
void padSymmetrically(Operation *op) {
  SplitPadding s = splitPadding(op);
  if (!s.unequal)
    return;
  OpBuilder b(op);
  GraphEmitter e(b, op->getLoc());
  if (auto conv = llvm::dyn_cast<ConvOp>(op)) {
    // The same windows over the input with the extra zeros in it.
    conv.getLhsMutable().assign(padWithZeros(e, conv.getLhs(), s.extraLow, s.extraHigh));
    setPadding(op, s.common);
    return;
  }
  if (auto grad = llvm::dyn_cast<ConvGradWeightOp>(op)) {
    // The weight's gradient reads the input the forward read: padded alike.
    grad.getLhsMutable().assign(padWithZeros(e, grad.getLhs(), s.extraLow, s.extraHigh));
    setPadding(op, s.common);
    return;
  }
  auto grad = llvm::cast<ConvGradInputOp>(op);
  // The gradient of the padded input, with the extra zeros' part cut off.
  SmallVector<int64_t> spatial(grad.getInputSpatial()), padded(spatial);
  for (size_t d = 0; d < spatial.size(); ++d)
    padded[d] += s.extraLow[d] + s.extraHigh[d];
  grad.setInputSpatial(padded);
  setPadding(op, s.common);
  auto type = llvm::cast<RankedTensorType>(grad.getType());
  SmallVector<int64_t> paddedShape(type.getShape());
  for (size_t d = 0; d < padded.size(); ++d)
    paddedShape[d + 2] = padded[d];
  grad.getResult().setType(RankedTensorType::get(paddedShape, type.getElementType()));
  b.setInsertionPointAfter(op);
  SmallVector<int64_t> start(paddedShape.size(), 0), limit(paddedShape), stride(paddedShape.size(), 1);
  for (size_t d = 0; d < spatial.size(); ++d) {
    start[d + 2] = s.extraLow[d];
    limit[d + 2] = s.extraLow[d] + spatial[d];
  }
  GraphEmitter after(b, op->getLoc());
  Value cut = after.slice(grad.getResult(), start, limit, stride);
  grad.getResult().replaceAllUsesExcept(cut, cut.getDefiningOp());
}

} // namespace

void tilefuse::padConvolutionsSymmetrically(func::FuncOp func) {
  SmallVector<Operation *> convs;
  func.walk([&](Operation *op) {
    if (llvm::isa<ConvOp, ConvGradInputOp, ConvGradWeightOp>(op))
      convs.push_back(op);
  });
  for (Operation *op : convs)
    padSymmetrically(op);
}
