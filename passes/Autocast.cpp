//===- Autocast.cpp - the mixed-precision policy as a graph pass ---------===//
//
// Runs once, on the composite graph (softmax, layer_norm and the losses
// still whole), before decomposition and differentiation: GEMMs take
// bf16/f16 operands (the kernels accumulate in f32), numerically sensitive
// ops run in f32, everything else follows its operands (the widest).
// Arguments (the f32 master weights) and results keep their types; the
// casts it inserts fuse into neighbouring kernels, and the VJP of a cast
// casts gradients back, so f32 weights get f32 gradients.
//
//===----------------------------------------------------------------------===//
#include "passes/Autocast.h"

#include "ir/graph/GraphDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace tilefuse {
#define GEN_PASS_DEF_AUTOCASTPASS
#include "passes/Passes.h.inc"
} // namespace tilefuse

#include <cstdlib>
#include <string>

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;

namespace {

/// How an op's floating-point work is typed under the policy (PyTorch
/// autocast's op lists as the starting point).
enum class Rule {
  LowPrecision, ///< GEMM-class: operands cast to bf16/f16, result in it
  Float32,      ///< numerically sensitive: operands cast to f32
  Follow,       ///< the widest floating-point operand's type
};

Rule ruleOf(Operation *op, ArrayRef<std::string> keepFloat32) {
  StringRef name = op->getName().stripDialect();
  for (const std::string &k : keepFloat32)
    if (name == k)
      return Rule::Float32;
  if (isAutocastDisabled(op->getLoc()))
    return Rule::Float32;
  if (llvm::isa<MatmulOp, LinearOp, GroupedMatmulOp, GroupedMatmulWeightGradOp>(op))
    return Rule::LowPrecision;
  // Convolutions are GEMM-class too: oneDNN's bf16 convolutions
  // accumulate in f32 (f16 ones are widened to f32 on the CPU).
  if (llvm::isa<ConvOp, ConvGradInputOp, ConvGradWeightOp>(op))
    return Rule::LowPrecision;
  // Reductions that sum many values, normalizations, exponentials and
  // logarithms, and every loss: rounding there grows with the length of
  // what is summed or with the magnitude of the exponent.
  // Attention is GEMM-class too: its products take 16-bit operands with f32
  // accumulation, and its softmax statistics stay f32 inside the op (the
  // log-sum-exp it returns is f32). TILEFUSE_ATTENTION_16BIT=0 keeps it f32
  // (to compare).
  if (llvm::isa<AttentionOp, AttentionGradOp>(op))
    return autocastsAttention() ? Rule::LowPrecision : Rule::Float32;
  if (llvm::isa<SoftmaxOp, LogSoftmaxOp, LayerNormOp, ExpOp, LogOp, Log1pOp, Expm1Op, PowOp,
                SqrtOp, RsqrtOp, ReduceSumOp, CrossEntropyOp, NllOp, MseOp, BceOp>(op))
    return Rule::Float32;
  return Rule::Follow;
}

bool isFloat(Type t) { return llvm::isa<FloatType>(getElementTypeOrSelf(t)); }

unsigned widthOf(Type t) { return getElementTypeOrSelf(t).getIntOrFloatBitWidth(); }

Type withElement(Type t, Type element) {
  return llvm::cast<RankedTensorType>(t).clone(element);
}

class Autocaster {
public:
  Autocaster(func::FuncOp func, Type low, ArrayRef<std::string> keepFloat32)
      : func(func), low(low), f32(Float32Type::get(func.getContext())),
        keepFloat32(keepFloat32) {}

  void run() {
    Block &body = func.getBody().front();
    // Each op's traced float type: the widest of its float operands.
    for (Operation &op : body.without_terminator())
      for (Value v : op.getOperands())
        if (isFloat(v.getType())) {
          Type t = getElementTypeOrSelf(v.getType());
          Type &known = originalTypes[&op];
          if (!known || widthOf(t) > widthOf(known))
            known = t;
        }
    for (Operation &op : llvm::make_early_inc_range(body.without_terminator()))
      retype(&op);
    // Results keep the types the caller was promised.
    auto ret = llvm::cast<func::ReturnOp>(body.getTerminator());
    OpBuilder b(ret);
    for (auto [i, v] : llvm::enumerate(ret.getOperands()))
      if (v.getType() != func.getFunctionType().getResult(i))
        ret->setOperand(unsigned(i), castTo(b, v, getElementTypeOrSelf(
                                                     func.getFunctionType().getResult(i))));
  }

private:
  Value castTo(OpBuilder &b, Value v, Type element) {
    if (getElementTypeOrSelf(v.getType()) == element)
      return v;
    // One cast per value and type: the weights' bf16 copy is shared.
    auto key = std::make_pair(v, element);
    auto it = casts.find(key);
    if (it != casts.end())
      return it->second;
    OpBuilder::InsertionGuard guard(b);
    if (Operation *def = v.getDefiningOp())
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(&func.getBody().front());
    Value c = b.create<CastOp>(v.getLoc(), withElement(v.getType(), element), v);
    casts[key] = c;
    return c;
  }

  /// A splat fill or constant (a Python scalar in the user's code): like
  /// PyTorch's scalars it takes the other operands' type, never widens it.
  static bool isWeak(Value v) {
    if (v.getDefiningOp<FullOp>())
      return true;
    auto k = v.getDefiningOp<ConstantOp>();
    auto dense = k ? llvm::dyn_cast<DenseElementsAttr>(k.getValue()) : nullptr;
    return dense && dense.isSplat();
  }

  /// Gives `op` the precision its rule asks for: casts its floating-point
  /// operands, then retypes the results that carried the operands' type.
  void retype(Operation *op) {
    if (llvm::isa<CastOp>(op))
      return; // an explicit conversion of the user's: kept as written
    // The float type the op was traced in (results of that type follow the
    // op's new precision); ops without float operands and f64 work keep
    // theirs.
    Type original = originalTypes.lookup(op);
    if (!original || original.isF64())
      return;
    SmallVector<unsigned> floats;
    for (auto [i, v] : llvm::enumerate(op->getOperands()))
      if (isFloat(v.getType()))
        floats.push_back(unsigned(i));
    Type target;
    switch (ruleOf(op, keepFloat32)) {
    case Rule::LowPrecision:
      target = low;
      break;
    case Rule::Float32:
      target = f32;
      break;
    case Rule::Follow:
      for (unsigned i : floats) {
        Value v = op->getOperand(i);
        if (!isWeak(v) && (!target || widthOf(v.getType()) > widthOf(target)))
          target = getElementTypeOrSelf(v.getType());
      }
      if (!target)
        target = original;
      break;
    }
    // Attention's log-sum-exp stays f32 (the op's type rule).
    if (auto grad = llvm::dyn_cast<AttentionGradOp>(op))
      llvm::erase(floats, grad.getLogsumexpMutable().getOperandNumber());
    OpBuilder b(op);
    for (unsigned i : floats)
      op->setOperand(i, castTo(b, op->getOperand(i), target));
    if (auto attention = llvm::dyn_cast<AttentionOp>(op)) {
      attention.getResult().setType(
          llvm::cast<RankedTensorType>(withElement(attention.getResult().getType(), target)));
      return;
    }
    for (Value r : op->getResults())
      if (getElementTypeOrSelf(r.getType()) == original)
        r.setType(withElement(r.getType(), target));
  }

  func::FuncOp func;
  Type low, f32;
  ArrayRef<std::string> keepFloat32;
  llvm::DenseMap<std::pair<Value, Type>, Value> casts;
  llvm::DenseMap<Operation *, Type> originalTypes;
};

struct AutocastPass : tilefuse::impl::AutocastPassBase<AutocastPass> {
  using AutocastPassBase::AutocastPassBase;
  void runOnOperation() override {
    std::vector<std::string> keep(keepFloat32.begin(), keepFloat32.end());
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (failed(autocastFunction(func, precision, keep)))
        return signalPassFailure();
  }
};

} // namespace

bool tilefuse::autocastsAttention() {
  const char *on = std::getenv("TILEFUSE_ATTENTION_16BIT");
  return !(on && std::string(on) == "0");
}

bool tilefuse::isAutocastDisabled(Location loc) {
  bool off = false;
  loc->walk([&](Location inner) {
    if (auto name = llvm::dyn_cast<NameLoc>(inner))
      off |= name.getName().getValue() == kAutocastOffLocName;
    return WalkResult::advance();
  });
  return off;
}

LogicalResult tilefuse::autocastFunction(func::FuncOp func, StringRef precision,
                                         ArrayRef<std::string> keepFloat32) {
  MLIRContext *ctx = func.getContext();
  // Names checked first: a misspelt op kind is refused under every policy.
  for (const std::string &name : keepFloat32)
    if (!RegisteredOperationName::lookup("graph." + name, ctx))
      return emitError(func.getLoc())
             << "autocast: '" << name << "' names no graph op (keep_fp32 takes op names "
             << "such as softmax, gelu, matmul)";
  // The dtype names (f32, bf16, f16, float16, ...) spell precisions too.
  Type low;
  if (llvm::is_contained({"fp32", "f32", "float32"}, precision))
    return success();
  if (llvm::is_contained({"bf16", "bfloat16"}, precision))
    low = BFloat16Type::get(ctx);
  else if (llvm::is_contained({"fp16", "f16", "float16"}, precision))
    low = Float16Type::get(ctx);
  else
    return emitError(func.getLoc())
           << "unknown precision '" << precision << "'; expected fp32, bf16 or fp16";
  Autocaster(func, low, keepFloat32).run();
  return success();
}
