//===- NumericsProbe.cpp - fused graphs rewritten to expose kernel values -===//
//
// The numerics report compares each kernel of a mixed-precision program
// with the same kernel computed in f32. Both sides are compiled from the
// same fused function, rewritten after fusion so that the kernels stay the
// ones the real program runs:
//  - the f32 shadow: every f16/bf16 type becomes f32 (casts between them
//    vanish), and every kernel's results are also returned;
//  - the isolated program: every value a kernel reads from another kernel
//    becomes an argument, so each kernel can be fed the shadow's values
//    and its own error is measured, not the error it inherited.
//
//===----------------------------------------------------------------------===//
#include "frontend/NumericsProbe.h"

#include "frontend/GraphImpl.h"
#include "ir/graph/GraphDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseSet.h"

#include <map>

using namespace mlir;
using namespace tilefuse;

namespace {

bool isLowFloat(Type t) { return t.isF16() || t.isBF16(); }

/// What the report lists as a kernel: the fused regions and the library
/// calls that compute (not the views and copies between them, which are
/// exact).
bool isKernel(Operation *op) {
  return llvm::isa<graph::FusionOp, graph::MatmulOp, graph::GroupedMatmulOp, graph::SortOp,
                   graph::GroupedMatmulWeightGradOp, graph::GatherOp, graph::ScatterAddOp,
                   graph::AttentionOp, graph::AttentionGradOp, graph::ConvOp, graph::ConvBiasActOp,
                   graph::ConvGradInputOp, graph::ConvGradWeightOp>(op);
}

std::string opName(Operation *op) {
  return op->getName().getStringRef().drop_front(6).str(); // "graph."
}

std::string dtypeOf(Type t) {
  Type e = llvm::cast<RankedTensorType>(t).getElementType();
  std::string s;
  llvm::raw_string_ostream(s) << e;
  return s;
}

/// The lowest-precision float element type among `op`'s operands, results
/// and (for a fusion) the values inside it; "" if all are f32 or wider.
std::string lowestFloat(Operation *op) {
  Type lowest;
  auto note = [&](Type t) {
    auto tensor = llvm::dyn_cast<RankedTensorType>(t);
    if (!tensor)
      return;
    Type e = tensor.getElementType();
    if (e.isF16() || (e.isBF16() && !(lowest && lowest.isF16())))
      lowest = e;
  };
  op->walk([&](Operation *inner) {
    for (Type t : inner->getOperandTypes())
      note(t);
    for (Type t : inner->getResultTypes())
      note(t);
  });
  if (!lowest)
    return "";
  return lowest.isF16() ? "f16" : "bf16";
}

/// The longest sum result `result` of `op` depends on: the contraction of
/// a matmul, the reduced extent of a reduction kernel, else 1; and the
/// length of every reduction inside the kernel that the result reads (a row
/// kernel's column sums fold other dimensions than its rows, for those
/// results only).
int64_t reductionLength(Operation *op, unsigned result) {
  int64_t k = 1;
  op->walk([&](graph::MatmulOp mm) {
    auto lhs = llvm::cast<RankedTensorType>(mm.getLhs().getType()).getShape();
    int64_t r = int64_t(lhs.size());
    k = std::max(k, mm.getTransposeLhs() ? lhs[r - 2] : lhs[r - 1]);
  });
  auto fusion = llvm::dyn_cast<graph::FusionOp>(op);
  if (!fusion)
    return k;
  int64_t reduced = 1;
  for (int64_t d : fusion.getReduced())
    reduced *= fusion.getDomain()[d];
  k = std::max(k, reduced);
  SmallVector<Value> work = {fusion.getBody().front().getTerminator()->getOperand(result)};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    Operation *def = v.getDefiningOp();
    if (!def || !seen.insert(v).second)
      continue;
    if (auto dims = def->getAttrOfType<DenseI64ArrayAttr>("dims");
        dims && llvm::isa<graph::ReduceSumOp, graph::ReduceMaxOp, graph::ReduceMinOp>(def)) {
      auto in = llvm::cast<RankedTensorType>(def->getOperand(0).getType()).getShape();
      int64_t length = 1;
      for (int64_t d : dims.asArrayRef())
        length *= in[d];
      k = std::max(k, length);
    }
    for (Value operand : def->getOperands())
      work.push_back(operand);
  }
  return k;
}

/// "file:line" of the first op in `op` (or `op` itself) whose location
/// holds a source file, looking through names and fused locations;
/// "(no source line)" when none does (casts and updates the compiler added).
std::string firstFileLocation(Operation *op) {
  std::string found;
  op->walk<WalkOrder::PreOrder>([&](Operation *inner) {
    if (!found.empty())
      return WalkResult::interrupt();
    inner->getLoc()->walk([&](Location loc) {
      if (auto file = llvm::dyn_cast<FileLineColLoc>(loc)) {
        found = file.getFilename().str() + ":" + std::to_string(file.getLine());
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    return found.empty() ? WalkResult::advance() : WalkResult::interrupt();
  });
  return found.empty() ? "(no source line)" : found;
}

/// `type` with f16/bf16 elements made f32.
Type widened(Type type) {
  auto tensor = llvm::dyn_cast<RankedTensorType>(type);
  if (!tensor || !isLowFloat(tensor.getElementType()))
    return type;
  return RankedTensorType::get(tensor.getShape(), Float32Type::get(type.getContext()));
}

/// Rewrites `func` to compute in f32 wherever it computed in f16/bf16.
LogicalResult widenToF32(func::FuncOp func) {
  Block &body = func.getBody().front();
  for (BlockArgument arg : body.getArguments())
    arg.setType(widened(arg.getType()));
  SmallVector<graph::CastOp> identities;
  WalkResult walk = func.walk([&](Operation *op) -> WalkResult {
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          arg.setType(widened(arg.getType()));
    for (OpResult r : op->getResults())
      r.setType(widened(r.getType()));
    if (auto constant = llvm::dyn_cast<graph::ConstantOp>(op)) {
      auto dense = llvm::dyn_cast<DenseElementsAttr>(constant.getValue());
      if (dense && isLowFloat(dense.getElementType())) {
        Type f32 = Float32Type::get(op->getContext());
        auto type = RankedTensorType::get(dense.getType().getShape(), f32);
        SmallVector<float> values;
        for (const APFloat &v : dense.getValues<APFloat>())
          values.push_back(v.convertToFloat());
        constant.setValueAttr(DenseElementsAttr::get(type, ArrayRef<float>(values)));
      }
    }
    if (auto cast = llvm::dyn_cast<graph::CastOp>(op))
      if (cast.getOperand().getType() == cast.getType())
        identities.push_back(cast);
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  for (graph::CastOp cast : identities) {
    cast.getResult().replaceAllUsesWith(cast.getOperand());
    cast.erase();
  }
  func.setFunctionType(FunctionType::get(
      func.getContext(), body.getArgumentTypes(),
      body.getTerminator()->getOperandTypes()));
  return success();
}

} // namespace

LogicalResult tilefuse::probeNumerics(func::FuncOp func, bool shadow,
                                      NumericsProbeLayout &out) {
  Block &body = func.getBody().front();
  auto ret = llvm::cast<func::ReturnOp>(body.getTerminator());
  out.numResults = ret.getNumOperands();
  if (shadow && failed(widenToF32(func)))
    return failure();

  // Every kernel result, in program order.
  std::map<void *, int> valueIndex; // Value's opaque pointer -> out.values index
  SmallVector<Value> exposed;
  for (Operation &op : body.without_terminator()) {
    if (!isKernel(&op))
      continue;
    std::string kernel = opName(&op), location = firstFileLocation(&op);
    std::vector<std::string> ops;
    if (auto fusion = llvm::dyn_cast<graph::FusionOp>(op)) {
      kernel = fusion.getKernelName().str();
      for (Operation &inner : fusion.getBody().front().without_terminator())
        if (!llvm::isa<graph::FullOp, graph::IotaOp, graph::ConstantOp>(inner))
          ops.push_back(opName(&inner));
    } else {
      ops.push_back(kernel);
    }
    for (OpResult r : op.getResults()) {
      valueIndex[r.getAsOpaquePointer()] = int(out.values.size());
      ProbedValue v;
      v.kernel = kernel;
      v.ops = ops;
      v.location = location;
      v.dtype = dtypeOf(r.getType());
      v.lowest = lowestFloat(&op);
      v.reductionLength = reductionLength(&op, r.getResultNumber());
      v.output = int(r.getResultNumber());
      out.values.push_back(std::move(v));
      exposed.push_back(r);
    }
  }

  if (!shadow) {
    // Each value read from a kernel becomes an argument (one per value).
    std::map<void *, BlockArgument> cut;
    for (Operation &op : body.without_terminator())
      for (OpOperand &use : op.getOpOperands()) {
        auto it = valueIndex.find(use.get().getAsOpaquePointer());
        if (it == valueIndex.end())
          continue;
        BlockArgument &arg = cut[use.get().getAsOpaquePointer()];
        if (!arg) {
          arg = body.addArgument(use.get().getType(), use.get().getLoc());
          out.cutArguments.push_back(it->second);
        }
        use.set(arg);
      }
  }

  SmallVector<Value> results(ret.getOperands());
  llvm::append_range(results, exposed);
  OpBuilder b(ret);
  b.create<func::ReturnOp>(ret.getLoc(), results);
  ret.erase();
  func.setFunctionType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                         ValueRange(results).getTypes()));
  // Nothing is carried: a probe is called once, with every argument given.
  SmallVector<DictionaryAttr> plain(results.size(), DictionaryAttr::get(func.getContext()));
  func.setAllResultAttrs(plain);
  return success();
}
