//===- ConvOps.cpp - shape rules of graph.conv and its gradients ----------===//
//
// The three ops share one window (strides, padding, dilation, groups) and
// one output-size rule; each checks its operands against it and names the
// sizes that disagree, since the message reaches Python users as is.
//
//===----------------------------------------------------------------------===//
#include "ir/graph/GraphDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"

#include <string>

using namespace mlir;
using namespace tilefuse::graph;

namespace {

using Loc = std::optional<Location>;

std::string list(ArrayRef<int64_t> v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

/// The window attributes of one op.
struct Window {
  ArrayRef<int64_t> strides, low, high, dilation;
  int64_t groups;
};

/// Each attribute has one entry per spatial dimension (1 to 3); strides
/// and dilations are positive, padding not negative, groups positive.
LogicalResult checkWindow(Loc loc, StringRef op, const Window &w, int64_t spatial) {
  if (spatial < 1 || spatial > 3)
    return opError(loc, op, "convolves 1 to 3 spatial dimensions, got ", spatial,
                     " (operands of rank ", spatial + 2, ")");
  for (ArrayRef<int64_t> a : {w.strides, w.low, w.high, w.dilation})
    if (int64_t(a.size()) != spatial)
      return opError(loc, op, "strides ", list(w.strides), ", padding_low ", list(w.low),
                       ", padding_high ", list(w.high), " and dilation ", list(w.dilation),
                       " need one entry per spatial dimension (", spatial, ")");
  for (int64_t i = 0; i < spatial; ++i)
    if (w.strides[size_t(i)] < 1 || w.dilation[size_t(i)] < 1 || w.low[size_t(i)] < 0 ||
        w.high[size_t(i)] < 0)
      return opError(loc, op, "needs strides and dilation >= 1 and padding >= 0, got strides ",
                       list(w.strides), ", dilation ", list(w.dilation), ", padding ",
                       list(w.low), " / ", list(w.high));
  if (w.groups < 1)
    return opError(loc, op, "groups must be >= 1, got ", w.groups);
  return success();
}

/// The output size along one dimension, or 0 where the dilated window is
/// larger than the padded input.
int64_t outputSize(int64_t size, int64_t kernel, int64_t low, int64_t high, int64_t stride,
                   int64_t dilation) {
  int64_t span = dilation * (kernel - 1) + 1, padded = size + low + high;
  return padded < span ? 0 : (padded - span) / stride + 1;
}

/// The output sizes of input spatial sizes `spatial` under kernel sizes
/// `kernel`, or failure naming the dimension whose window does not fit.
FailureOr<SmallVector<int64_t>> outputSizes(Loc loc, StringRef op, const Window &w,
                                            ArrayRef<int64_t> spatial, ArrayRef<int64_t> kernel) {
  SmallVector<int64_t> out;
  for (size_t i = 0; i < spatial.size(); ++i) {
    int64_t q = outputSize(spatial[i], kernel[i], w.low[i], w.high[i], w.strides[i],
                           w.dilation[i]);
    if (q < 1) {
      (void)opError(loc, op, "spatial dimension ", i, ": the kernel of ", kernel[i],
                      " dilated by ", w.dilation[i], " spans more than the input of ",
                      spatial[i], " padded by ", w.low[i], " + ", w.high[i]);
      return failure();
    }
    out.push_back(q);
  }
  return out;
}

/// Operands of one float type and one rank (spatial + 2).
LogicalResult checkOperands(Loc loc, StringRef op, RankedTensorType a, RankedTensorType b,
                            const char *what) {
  if (a.getElementType() != b.getElementType())
    return opError(loc, op, "operand types differ: ", a, " and ", b, "; cast one first");
  if (a.getRank() != b.getRank() || a.getRank() < 3)
    return opError(loc, op, "expects ", what, " of one rank >= 3, got ", a, " and ", b);
  return success();
}

/// Channels divide into the groups: `channels` of the input, `out` of the
/// output, the weight's second dimension the input's per group.
LogicalResult checkGroups(Loc loc, StringRef op, int64_t channels, int64_t out,
                          RankedTensorType weight, int64_t groups) {
  if (channels % groups || out % groups || weight.getDimSize(1) * groups != channels)
    return opError(loc, op, "with ", groups, " groups, expects input channels (", channels,
                     ") and output channels (", out, ") divisible by the groups and a weight ",
                     weight, " of [O, C / groups, kernel...]");
  return success();
}

/// `t` in the channels-first form the rules are stated in: with
/// `channelsLast`, its last dimension (the channels) moved to second.
RankedTensorType channelsFirst(RankedTensorType t, bool channelsLast) {
  if (!channelsLast || t.getRank() < 3)
    return t;
  SmallVector<int64_t> shape(t.getShape());
  int64_t channels = shape.back();
  shape.pop_back();
  shape.insert(shape.begin() + 1, channels);
  return RankedTensorType::get(shape, t.getElementType());
}

/// The inverse of channelsFirst: a channels-first type in the op's layout.
Type inLayout(RankedTensorType t, bool channelsLast) {
  if (!channelsLast)
    return t;
  SmallVector<int64_t> shape(t.getShape());
  int64_t channels = shape[1];
  shape.erase(shape.begin() + 1);
  shape.push_back(channels);
  return RankedTensorType::get(shape, t.getElementType());
}

/// Whether the op's activations are channels-last (an op built without
/// the attribute is not: its adaptor then has no default to give).
template <typename Adaptor> bool channelsLastOf(Adaptor &a) {
  BoolAttr attr = a.getChannelsLastAttr();
  return attr && attr.getValue();
}

template <typename Adaptor> Window windowOf(Adaptor &a) {
  return {a.getStrides(), a.getPaddingLow(), a.getPaddingHigh(), a.getDilation(),
          int64_t(a.getGroups())};
}

/// graph.conv's result type (also graph.conv_bias_act's).
template <typename Adaptor>
LogicalResult inferConvResult(Loc loc, StringRef name, Adaptor &adaptor,
                              SmallVectorImpl<Type> &out) {
  bool last = channelsLastOf(adaptor);
  auto x = channelsFirst(llvm::cast<RankedTensorType>(adaptor.getLhs().getType()), last);
  auto w = llvm::cast<RankedTensorType>(adaptor.getRhs().getType());
  Window window = windowOf(adaptor);
  if (failed(checkOperands(loc, name, x, w, "input [N, C, S...] and weight [O, C / groups, K...]")) ||
      failed(checkWindow(loc, name, window, x.getRank() - 2)) ||
      failed(checkGroups(loc, name, x.getDimSize(1), w.getDimSize(0), w, window.groups)))
    return failure();
  auto q = outputSizes(loc, name, window, x.getShape().drop_front(2), w.getShape().drop_front(2));
  if (failed(q))
    return failure();
  SmallVector<int64_t> shape = {x.getDimSize(0), w.getDimSize(0)};
  shape.append(q->begin(), q->end());
  out.push_back(inLayout(RankedTensorType::get(shape, x.getElementType()), last));
  return success();
}
} // namespace

LogicalResult ConvOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                       SmallVectorImpl<Type> &out) {
  return inferConvResult(loc, getOperationName(), adaptor, out);
}

LogicalResult ConvBiasActOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                              SmallVectorImpl<Type> &out) {
  StringRef name = getOperationName();
  if (failed(inferConvResult(loc, name, adaptor, out)))
    return failure();
  auto result = channelsFirst(llvm::cast<RankedTensorType>(out.back()), channelsLastOf(adaptor));
  if (Value bias = adaptor.getBias()) {
    auto b = llvm::cast<RankedTensorType>(bias.getType());
    if (b.getRank() != 1 || b.getDimSize(0) != result.getDimSize(1) ||
        b.getElementType() != result.getElementType())
      return opError(loc, name, "bias ", b, " must be one ", result.getElementType(),
                     " per output channel ([", result.getDimSize(1), "])");
  }
  StringRef activation = adaptor.getActivation();
  if (activation != "none" && activation != "relu" && activation != "silu")
    return opError(loc, name, "activation '", activation.str(),
                   "' is not one of \"none\", \"relu\", \"silu\"");
  return success();
}

LogicalResult ConvGradInputOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                                SmallVectorImpl<Type> &out) {
  StringRef name = getOperationName();
  bool last = channelsLastOf(adaptor);
  auto g = channelsFirst(llvm::cast<RankedTensorType>(adaptor.getLhs().getType()), last);
  auto w = llvm::cast<RankedTensorType>(adaptor.getRhs().getType());
  Window window = windowOf(adaptor);
  ArrayRef<int64_t> spatial = adaptor.getInputSpatial();
  if (failed(checkOperands(loc, name, g, w, "grad [N, O, Q...] and weight [O, C / groups, K...]")) ||
      failed(checkWindow(loc, name, window, g.getRank() - 2)))
    return failure();
  if (int64_t(spatial.size()) != g.getRank() - 2)
    return opError(loc, name, "input_spatial ", list(spatial), " needs ", g.getRank() - 2,
                     " entries");
  int64_t channels = w.getDimSize(1) * window.groups;
  if (failed(checkGroups(loc, name, channels, w.getDimSize(0), w, window.groups)))
    return failure();
  if (g.getDimSize(1) != w.getDimSize(0))
    return opError(loc, name, "grad ", g, " must have the weight's ", w.getDimSize(0),
                     " output channels");
  auto q = outputSizes(loc, name, window, spatial, w.getShape().drop_front(2));
  if (failed(q))
    return failure();
  if (ArrayRef<int64_t>(*q) != g.getShape().drop_front(2))
    return opError(loc, name, "grad ", g, " does not have the output size ", list(*q),
                     " of an input of spatial size ", list(spatial));
  SmallVector<int64_t> shape = {g.getDimSize(0), channels};
  shape.append(spatial.begin(), spatial.end());
  out.push_back(inLayout(RankedTensorType::get(shape, g.getElementType()), last));
  return success();
}

LogicalResult ConvGradWeightOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                                 SmallVectorImpl<Type> &out) {
  StringRef name = getOperationName();
  bool last = channelsLastOf(adaptor);
  auto x = channelsFirst(llvm::cast<RankedTensorType>(adaptor.getLhs().getType()), last);
  auto g = channelsFirst(llvm::cast<RankedTensorType>(adaptor.getRhs().getType()), last);
  Window window = windowOf(adaptor);
  ArrayRef<int64_t> kernel = adaptor.getKernel();
  if (failed(checkOperands(loc, name, x, g, "input [N, C, S...] and grad [N, O, Q...]")) ||
      failed(checkWindow(loc, name, window, x.getRank() - 2)))
    return failure();
  if (int64_t(kernel.size()) != x.getRank() - 2 ||
      llvm::any_of(kernel, [](int64_t k) { return k < 1; }))
    return opError(loc, name, "kernel ", list(kernel), " needs ", x.getRank() - 2,
                     " sizes >= 1");
  int64_t channels = x.getDimSize(1), outChannels = g.getDimSize(1);
  if (x.getDimSize(0) != g.getDimSize(0) || channels % window.groups ||
      outChannels % window.groups)
    return opError(loc, name, "input ", x, " and grad ", g, " need one batch and channels "
                     "divisible by the ", window.groups, " groups");
  auto q = outputSizes(loc, name, window, x.getShape().drop_front(2), kernel);
  if (failed(q))
    return failure();
  if (ArrayRef<int64_t>(*q) != g.getShape().drop_front(2))
    return opError(loc, name, "grad ", g, " does not have the output size ", list(*q),
                     " of input ", x, " under kernel ", list(kernel));
  SmallVector<int64_t> shape = {outChannels, channels / window.groups};
  shape.append(kernel.begin(), kernel.end());
  out.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}
