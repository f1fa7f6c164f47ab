//===- ConvParamsOf.cpp ---------------------------------------------------===//
#include "codegen/ConvParamsOf.h"

#include "ir/graph/GraphDialect.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace tilefuse;

namespace {
SmallVector<int64_t> shapeOf(Value v) {
  return SmallVector<int64_t>(llvm::cast<RankedTensorType>(v.getType()).getShape());
}

/// The window attributes shared by the three ops, and the sizes the
/// input [N, C, S...], weight [O, C/g, K...] and output [N, O, Q...] give
/// (activations given channels-last, [N, S..., C], when the op says so).
template <typename OpTy>
ConvParams paramsOf(OpTy op, SmallVector<int64_t> input, ArrayRef<int64_t> weight,
                    SmallVector<int64_t> output) {
  ConvParams p;
  p.channelsLast = op.getChannelsLast();
  if (p.channelsLast)
    for (SmallVector<int64_t> *shape : {&input, &output}) {
      int64_t channels = shape->pop_back_val();
      shape->insert(shape->begin() + 1, channels);
    }
  p.spatial = int32_t(input.size() - 2);
  p.batch = input[0], p.channels = input[1], p.outChannels = weight[0];
  p.groups = int64_t(op.getGroups());
  for (size_t i = 0; i < size_t(p.spatial); ++i) {
    p.input[i] = input[i + 2], p.kernel[i] = weight[i + 2], p.output[i] = output[i + 2];
    p.stride[i] = op.getStrides()[i], p.padLow[i] = op.getPaddingLow()[i];
    p.padHigh[i] = op.getPaddingHigh()[i], p.dilation[i] = op.getDilation()[i];
  }
  return p;
}
} // namespace

std::optional<std::pair<ConvDirection, ConvParams>> tilefuse::convParamsOf(Operation *op) {
  if (auto c = llvm::dyn_cast<graph::ConvOp>(op))
    return std::make_pair(ConvDirection::Forward,
                          paramsOf(c, shapeOf(c.getLhs()), shapeOf(c.getRhs()),
                                   shapeOf(c.getResult())));
  if (auto c = llvm::dyn_cast<graph::ConvBiasActOp>(op))
    return std::make_pair(ConvDirection::Forward,
                          paramsOf(c, shapeOf(c.getLhs()), shapeOf(c.getRhs()),
                                   shapeOf(c.getResult())));
  if (auto c = llvm::dyn_cast<graph::ConvGradInputOp>(op))
    return std::make_pair(ConvDirection::GradInput,
                          paramsOf(c, shapeOf(c.getResult()), shapeOf(c.getRhs()),
                                   shapeOf(c.getLhs())));
  if (auto c = llvm::dyn_cast<graph::ConvGradWeightOp>(op))
    return std::make_pair(ConvDirection::GradWeight,
                          paramsOf(c, shapeOf(c.getLhs()), shapeOf(c.getResult()),
                                   shapeOf(c.getRhs())));
  return std::nullopt;
}
