//===- FoldConvolutionEpilogues.cpp - per-channel epilogues into the conv ===//
//
// A convolution is usually followed by elementwise work per output
// channel: a bias, an inference batch norm ((y - mean) * rsqrt(var + eps)
// * gamma + beta), an activation. Run as a kernel after the library call,
// that work costs one more pass over the convolution's output. oneDNN
// applies a bias (the primitive's bias argument) and an activation (an
// eltwise post-op) while it writes the output, so on targets whose library
// does, for the convolutions where it pays
// (TargetInfo::convolutionAppliesEpilogue), such a chain is folded into one
// graph.conv_bias_act:
//
//   y = conv(x, w); z = act(y * s[o] + t[o])   (any chain of +, -, *, / by
//                                               per-channel values, then
//                                               silu or nothing)
//   ->  z = conv_bias_act(x, w * s[o], bias = t, act)
//
// The scale multiplies the weight, as PyTorch's inference conv-bn fusion
// does, and the shift is the bias. The weights are arguments here, not
// constants folded once, so the scaling is a kernel over the weight on
// every call: a chain with a scale folds only where the weight has at most
// 1/8 as many elements as the output (kScaledWeightShare), so that kernel
// moves at most an eighth of the bytes the epilogue kernel would. (Scaling
// every weight of ResNet-18, 44 MiB, made its inference call 38 -> 42 ms;
// oneDNN's binary post-ops, the other way to scale the output, made each
// convolution 5-17% slower, more than the kernel they replace costs.) The
// values are the same up to rounding: conv(x, w * s) rounds once where
// conv(x, w) * s rounds twice. Only values nothing else reads are folded (a
// batch norm in training reads the convolution's output for its
// statistics; a saved pre-activation stays a value of its own), so this
// runs on the differentiated program, where it changes no gradient.
//
//===----------------------------------------------------------------------===//
#include "passes/FuseOps.h"
#include "passes/TargetInfo.h"

#include "ir/graph/GraphEmitter.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <cstdlib>
#include <string>

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;

namespace {

/// A chain with a scale folds only where the weight, scaled on every call,
/// has at most 1/kScaledWeightShare of the output's elements.
constexpr int64_t kScaledWeightShare = 8;

/// Whether `v` (of a convolution's output shape [N, O, Q...]) holds one
/// value per output channel: a graph.full, or a broadcast of one value or
/// of O values whose only non-unit dimension lands on dim 1 (a [O],
/// [O, 1, 1] or [1, O, 1, 1] vector).
bool isPerChannel(Value v, int64_t channels) {
  if (v.getDefiningOp<FullOp>())
    return true;
  auto b = v.getDefiningOp<BroadcastInDimOp>();
  if (!b)
    return false;
  auto from = llvm::cast<RankedTensorType>(b.getOperand().getType());
  for (int64_t i = 0; i < from.getRank(); ++i)
    if (from.getDimSize(i) != 1 &&
        (b.getDims()[size_t(i)] != 1 || from.getDimSize(i) != channels))
      return false;
  return from.getNumElements() == 1 || from.getNumElements() == channels;
}

/// The O values of per-channel `v` (isPerChannel) as a [O] vector built at `e`.
Value channelVector(GraphEmitter &e, Value v, int64_t channels) {
  auto element = llvm::cast<RankedTensorType>(v.getType()).getElementType();
  if (auto full = v.getDefiningOp<FullOp>())
    return e.full(RankedTensorType::get({channels}, element), full.getValue().convertToDouble());
  Value from = v.getDefiningOp<BroadcastInDimOp>().getOperand();
  // Through reshapes to the vector they view (a [O] argument seen as
  // [1, O, 1, 1]): reshaping it again would copy it in a kernel of its own.
  while (auto r = from.getDefiningOp<ReshapeOp>())
    from = r.getOperand();
  auto type = llvm::cast<RankedTensorType>(from.getType());
  if (type.getNumElements() == 1)
    return e.broadcast(e.reshape(from, {}), {channels}, {});
  return type.getRank() == 1 ? from : e.reshape(from, {channels});
}

/// The activation `v`'s readers apply to it, as graph.conv_bias_act names
/// it, and the value it yields; ("none", v) where they apply none the
/// library can, or v has other readers. Not relu: oneDNN's vector relu
/// makes a NaN 0 where relu keeps it (a NaN a user looks for would vanish),
/// so relu stays a kernel.
std::pair<StringRef, Value> activationOf(Value v) {
  SmallVector<Operation *> users(v.getUsers().begin(), v.getUsers().end());
  if (users.size() != 2)
    return {"none", v};
  for (size_t i = 0; i < 2; ++i) {
    Operation *first = users[i], *second = users[1 - i];
    // silu as v * sigmoid(v)
    if (auto sig = llvm::dyn_cast<SigmoidOp>(first); sig && sig->hasOneUse())
      if (auto mul = llvm::dyn_cast<MulOp>(second);
          mul && ((mul.getLhs() == v && mul.getRhs() == sig.getResult()) ||
                  (mul.getRhs() == v && mul.getLhs() == sig.getResult())))
        return {"silu", mul.getResult()};
  }
  return {"none", v};
}

/// Folds the per-channel chain after `conv` (see the file comment); false
/// when there is nothing to fold.
bool foldEpilogue(ConvOp conv) {
  auto type = llvm::cast<RankedTensorType>(conv.getType());
  if (!type.getElementType().isF32() || conv.getChannelsLast())
    return false; // autocast's 16-bit chains cast in between; channels sit
                  // at dimension 1 only channels-first
  int64_t channels = type.getDimSize(1);
  // Match first, building nothing: a chain that turns out empty leaves the
  // IR untouched.
  SmallVector<Operation *> chain;
  Value cur = conv.getResult();
  while (cur.hasOneUse()) {
    Operation *user = *cur.getUsers().begin();
    if (!llvm::isa<AddOp, SubOp, MulOp, DivOp>(user))
      break;
    Value lhs = user->getOperand(0), rhs = user->getOperand(1);
    // v - y and v / y are no affine map of y the library applies.
    Value other = lhs == cur ? rhs : llvm::isa<AddOp, MulOp>(user) ? lhs : Value();
    if (!other || other == cur || !isPerChannel(other, channels))
      break;
    chain.push_back(user);
    cur = user->getResult(0);
  }
  auto [activation, result] = activationOf(cur);
  if (chain.empty() && activation == "none")
    return false;
  bool scales = llvm::any_of(chain, [](Operation *op) { return llvm::isa<MulOp, DivOp>(op); });
  auto weightType = llvm::cast<RankedTensorType>(conv.getRhs().getType());
  if (scales && weightType.getNumElements() * kScaledWeightShare > type.getNumElements())
    return false;

  SmallVector<Location> locs = {conv.getLoc()};
  for (Operation *op : chain)
    locs.push_back(op->getLoc());
  if (result != cur)
    locs.push_back(result.getDefiningOp()->getLoc());
  OpBuilder b(result.getDefiningOp());
  GraphEmitter e(b, b.getFusedLoc(locs));
  // z = y * scale + shift (null: 1 and 0).
  Value scale, shift, prev = conv.getResult();
  for (Operation *op : chain) {
    Value v = channelVector(e, op->getOperand(0) == prev ? op->getOperand(1) : op->getOperand(0),
                            channels);
    if (llvm::isa<AddOp>(op)) {
      shift = shift ? e.add(shift, v) : v;
    } else if (llvm::isa<SubOp>(op)) {
      shift = shift ? e.sub(shift, v) : e.neg(v);
    } else if (llvm::isa<MulOp>(op)) {
      scale = scale ? e.mul(scale, v) : v;
      shift = shift ? e.mul(shift, v) : shift;
    } else {
      scale = scale ? e.div(scale, v) : e.div(e.fullLike(v, 1.0), v);
      shift = shift ? e.div(shift, v) : shift;
    }
    prev = op->getResult(0);
  }
  Value weight = conv.getRhs();
  if (scale) // output channel o's weights are weight[o]
    weight = e.mul(weight, e.broadcast(scale, llvm::cast<RankedTensorType>(weight.getType())
                                                  .getShape(),
                                       {0}));
  auto fused = b.create<ConvBiasActOp>(
      e.location(), conv.getLhs(), weight, shift, conv.getStridesAttr(),
      conv.getPaddingLowAttr(), conv.getPaddingHighAttr(), conv.getDilationAttr(),
      conv.getGroupsAttr(), b.getStringAttr(activation));
  // The replaced ops are now unread: foldConvolutionEpilogues sweeps them.
  result.replaceAllUsesWith(fused.getResult());
  return true;
}

} // namespace

int tilefuse::foldConvolutionEpilogues(func::FuncOp func, const TargetInfo &target) {
  // TILEFUSE_CONV_EPILOGUES=0 keeps the epilogues as kernels (to compare).
  if (const char *on = std::getenv("TILEFUSE_CONV_EPILOGUES"); on && std::string(on) == "0")
    return 0;
  SmallVector<ConvOp> convs(func.getBody().front().getOps<ConvOp>());
  int folded = 0;
  for (ConvOp conv : convs)
    if (target.convolutionAppliesEpilogue(conv))
      folded += foldEpilogue(conv);
  // What the folds left unread, readers before what they read.
  if (folded) {
    SmallVector<Operation *> ops;
    for (Operation &op : func.getBody().front().without_terminator())
      ops.push_back(&op);
    for (Operation *op : llvm::reverse(ops))
      if (op->use_empty() && isOpTriviallyDead(op))
        op->erase();
  }
  return folded;
}
