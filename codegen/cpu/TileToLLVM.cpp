//===- TileToLLVM.cpp - tile kernels -> LLVM dialect for the CPU ----------===//
//
// 1. Each kernel gets the CPU calling convention: a loop over a range of
//    program ids around the program body, buffer pointers read from an array.
// 2. Block reductions become vector reductions; exp/log/tanh/erf become
//    polynomials (a libm call per lane is ~7x slower, see DESIGN.md); pow
//    becomes exp/log; bf16 conversions become integer code.
// 3. Everything converts to the LLVM dialect: masked vector loads and
//    stores for contiguous blocks, gathers and scatters for the rest.
//
//===----------------------------------------------------------------------===//
#include "codegen/cpu/TileToLLVM.h"
#include "codegen/Passes.h"

#include "ir/tile/TileDialect.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/LLVMCommon/ConversionTarget.h"
#include "mlir/Conversion/LLVMCommon/Pattern.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVM.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/DialectConversion.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"

namespace tilefuse {
#define GEN_PASS_DEF_TILETOLLVMPASS
#include "codegen/Passes.h.inc"
} // namespace tilefuse

using namespace mlir;
using namespace tilefuse;

namespace {

/// Step 1: `void name(void **buffers, i64 first, i64 end)`.
void wrapKernel(func::FuncOp kernel) {
  MLIRContext *ctx = kernel.getContext();
  OpBuilder b(kernel);
  Location loc = kernel.getLoc();
  auto ptrTy = LLVM::LLVMPointerType::get(ctx);
  auto i64 = b.getI64Type();
  std::string name = kernel.getSymName().str();
  kernel.setSymName(name + ".program");
  auto wrapper = b.create<func::FuncOp>(
      loc, name, b.getFunctionType({ptrTy, i64, i64}, {}));
  Block *entry = wrapper.addEntryBlock();
  b.setInsertionPointToStart(entry);
  IRMapping map;
  Block &body = kernel.getBody().front();
  for (auto [i, arg] : llvm::enumerate(body.getArguments())) {
    Value slot = b.create<LLVM::GEPOp>(loc, ptrTy, ptrTy, entry->getArgument(0),
                                       ArrayRef<LLVM::GEPArg>{int32_t(i)});
    Value p = b.create<LLVM::LoadOp>(loc, ptrTy, slot);
    map.map(arg, b.create<UnrealizedConversionCastOp>(loc, arg.getType(), p)
                     .getResult(0));
  }
  auto loop = b.create<scf::ForOp>(loc, entry->getArgument(1),
                                   entry->getArgument(2),
                                   b.create<arith::ConstantIntOp>(loc, 1, 64));
  b.create<func::ReturnOp>(loc);
  b.setInsertionPointToStart(loop.getBody());
  for (Operation &op : body.without_terminator()) {
    if (auto pid = llvm::dyn_cast<tile::ProgramIdOp>(op)) {
      map.map(pid.getResult(), loop.getInductionVar());
      continue;
    }
    if (llvm::isa<tile::ScratchOp>(op)) {
      // Allocated once per call, before the loop: an alloca inside it
      // would grow the stack with every program.
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(loop);
      b.clone(op, map);
      continue;
    }
    b.clone(op, map);
  }
  kernel.erase();
}

/// Step 2: tile.reduce -> vector.reduction.
struct ReduceToVector : OpRewritePattern<tile::ReduceOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tile::ReduceOp op,
                                PatternRewriter &rewriter) const override {
    bool isFloat = llvm::isa<FloatType>(op.getType());
    vector::CombiningKind kind = vector::CombiningKind::ADD;
    switch (op.getKind()) {
    case tile::ReduceKind::add: kind = vector::CombiningKind::ADD; break;
    case tile::ReduceKind::max:
      kind = isFloat ? vector::CombiningKind::MAXIMUMF : vector::CombiningKind::MAXSI;
      break;
    case tile::ReduceKind::min:
      kind = isFloat ? vector::CombiningKind::MINIMUMF : vector::CombiningKind::MINSI;
      break;
    }
    rewriter.replaceOpWithNewOp<vector::ReductionOp>(op, kind, op.getBlock());
    return success();
  }
};

/// Rewrites f32 `op` = f(x) as f(in(x)) adjusted by out() where x <
/// `threshold`, f(x) elsewhere; the new f is marked so this runs once.
/// `in` and `out` get a builder of f32 constants shaped like x.
using Adjust = llvm::function_ref<Value(Value, llvm::function_ref<Value(float)>)>;
template <typename MathOp>
LogicalResult rewriteBelow(MathOp op, PatternRewriter &rewriter, float threshold,
                           Adjust in, Adjust out) {
  constexpr const char *kMarker = "tilefuse.range_reduced";
  if (!getElementTypeOrSelf(op.getType()).isF32() || op->hasAttr(kMarker))
    return failure();
  Location loc = op.getLoc();
  auto constant = [&](float v) -> Value {
    Value c = rewriter.create<arith::ConstantOp>(loc, rewriter.getF32FloatAttr(v));
    if (auto vt = llvm::dyn_cast<VectorType>(op.getType()))
      c = rewriter.create<vector::SplatOp>(loc, vt, c);
    return c;
  };
  Value x = op.getOperand();
  Value below = rewriter.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLT, x,
                                               constant(threshold));
  Value arg = rewriter.create<arith::SelectOp>(loc, below, in(x, constant), x);
  auto f = rewriter.create<MathOp>(loc, arg);
  f->setAttr(kMarker, rewriter.getUnitAttr());
  rewriter.replaceOpWithNewOp<arith::SelectOp>(op, below, out(f, constant), f);
  return success();
}

/// Step 2: the polynomial log treats subnormal inputs as the smallest
/// normal number; scale them into the normal range first (x * 2^23) and
/// subtract 23 ln 2 after.
struct SubnormalSafeLog : OpRewritePattern<math::LogOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::LogOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    return rewriteBelow(
        op, rewriter, 1.17549435e-38f,
        [&](Value x, auto k) -> Value { return rewriter.create<arith::MulFOp>(loc, x, k(8388608.0f)); },
        [&](Value y, auto k) -> Value { return rewriter.create<arith::SubFOp>(loc, y, k(15.9423851528f)); });
  }
};

/// Step 2: the polynomial exp flushes results below the smallest normal
/// number to zero; compute those as exp(x + 32 ln 2) * 2^-32 (the scaling
/// by a power of two rounds once, into the subnormal range).
struct SubnormalSafeExp : OpRewritePattern<math::ExpOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::ExpOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    return rewriteBelow(
        op, rewriter, -87.0f,
        [&](Value x, auto k) -> Value { return rewriter.create<arith::AddFOp>(loc, x, k(22.1807097779f)); },
        [&](Value y, auto k) -> Value {
          return rewriter.create<arith::MulFOp>(loc, y, k(2.3283064365386963e-10f));
        });
  }
};

/// Replaces store `op` by "limit >= block ? a copy storing the whole block :
/// a copy as it is" and returns that second copy (the tail's).
tile::StoreOp splitStoreAtWholeBlocks(tile::StoreOp op, PatternRewriter &rewriter) {
  Location loc = op.getLoc();
  int64_t n = llvm::cast<VectorType>(op.getValue().getType()).getNumElements();
  Value full = rewriter.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, op.getLimit(),
                                              rewriter.create<arith::ConstantIntOp>(loc, n, 64));
  auto branch = rewriter.create<scf::IfOp>(loc, full, /*withElseRegion=*/true);
  rewriter.setInsertionPointToStart(branch.thenBlock());
  auto whole = llvm::cast<tile::StoreOp>(rewriter.clone(*op));
  whole.getLimitMutable().assign(rewriter.create<arith::ConstantIntOp>(loc, n, 64));
  rewriter.setInsertionPointToStart(branch.elseBlock());
  auto tail = llvm::cast<tile::StoreOp>(rewriter.clone(*op));
  rewriter.eraseOp(op);
  return tail;
}

/// Step 2: a streaming store becomes "full block ? non-temporal store :
/// masked store", so only the tail of a row pays for the mask.
struct SplitStreamingStores : OpRewritePattern<tile::StoreOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tile::StoreOp op,
                                PatternRewriter &rewriter) const override {
    int64_t n = llvm::cast<VectorType>(op.getValue().getType()).getNumElements();
    std::optional<int64_t> limit = getConstantIntValue(op.getLimit());
    if (!op.getStreaming() || (limit && *limit >= n) ||
        op->getParentOfType<scf::IfOp>())
      return failure();
    splitStoreAtWholeBlocks(op, rewriter).setStreaming(false);
    return success();
  }
};

/// Step 2, for targets without masked 8- and 16-bit lanes (no AVX-512BW:
/// AVX2 machines): a contiguous load or store of elements narrower than 32
/// bits (bf16, f16, booleans) whose limit is known only at run time becomes
/// "full block ? plain access : masked access". There, a masked access of
/// such lanes has no instruction and LLVM emits one access per lane (a bf16
/// row max over [1024, 50257] for x86-64-v3: 22.6 -> 16.5 ms; GPT-2 small's
/// bf16 cross-entropy kernel 104 -> 63 ms); only a row's last block pays
/// for the mask. With AVX-512BW a masked access is one instruction, so
/// blocks keep it (no branch per block).
constexpr const char *kTailAccess = "tilefuse.tail";
template <typename AccessOp>
bool isNarrowMaskedAccess(AccessOp op, VectorType vt) {
  std::optional<int64_t> limit = getConstantIntValue(op.getLimit());
  return op.getStride() == 1 && vt.getElementType().getIntOrFloatBitWidth() < 32 &&
         !(limit && *limit >= vt.getNumElements()) && !op->hasAttr(kTailAccess);
}
struct SplitNarrowMaskedLoads : OpRewritePattern<tile::LoadOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tile::LoadOp op, PatternRewriter &rewriter) const override {
    auto vt = llvm::cast<VectorType>(op.getType());
    if (!isNarrowMaskedAccess(op, vt) || op.getFirst() || op.getDiv() != 1)
      return failure();
    Location loc = op.getLoc();
    int64_t n = vt.getNumElements();
    Value full = rewriter.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, op.getLimit(),
                                                rewriter.create<arith::ConstantIntOp>(loc, n, 64));
    auto branch = rewriter.create<scf::IfOp>(loc, vt, full, /*withElseRegion=*/true);
    rewriter.setInsertionPointToStart(branch.thenBlock());
    auto whole = llvm::cast<tile::LoadOp>(rewriter.clone(*op));
    whole.getLimitMutable().assign(rewriter.create<arith::ConstantIntOp>(loc, n, 64));
    rewriter.create<scf::YieldOp>(loc, whole.getResult());
    rewriter.setInsertionPointToStart(branch.elseBlock());
    Operation *tail = rewriter.clone(*op);
    tail->setAttr(kTailAccess, rewriter.getUnitAttr());
    rewriter.create<scf::YieldOp>(loc, tail->getResult(0));
    rewriter.replaceOp(op, branch.getResult(0));
    return success();
  }
};
struct SplitNarrowMaskedStores : OpRewritePattern<tile::StoreOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tile::StoreOp op, PatternRewriter &rewriter) const override {
    auto vt = llvm::cast<VectorType>(op.getValue().getType());
    if (!isNarrowMaskedAccess(op, vt) || op.getStreaming())
      return failure();
    splitStoreAtWholeBlocks(op, rewriter)->setAttr(kTailAccess, rewriter.getUnitAttr());
    return success();
  }
};

// --- Step 3: tile memory ops -> LLVM -------------------------------------

int64_t lanesOf(Type t) { return llvm::cast<VectorType>(t).getNumElements(); }

Value laneNumbers(OpBuilder &b, Location loc, int64_t n) {
  SmallVector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i)
    ids[i] = i;
  auto t = VectorType::get({n}, b.getI64Type());
  return b.create<arith::ConstantOp>(loc, DenseElementsAttr::get(t, ArrayRef<int64_t>(ids)));
}
Value splatOf(OpBuilder &b, Location loc, Value s, int64_t n) {
  return b.create<vector::SplatOp>(loc, VectorType::get({n}, s.getType()), s);
}
Value laneMask(OpBuilder &b, Location loc, Value limit, int64_t n) {
  return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt,
                                 laneNumbers(b, loc, n), splatOf(b, loc, limit, n));
}
/// Lanes at or above `first`.
Value lanesFrom(OpBuilder &b, Location loc, Value first, int64_t n) {
  return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge,
                                 laneNumbers(b, loc, n), splatOf(b, loc, first, n));
}
/// Element pointers of lanes `offset + l * stride`.
Value lanePointers(OpBuilder &b, Location loc, Value base, Type element,
                   Value offsets, int64_t n) {
  auto ptrTy = LLVM::LLVMPointerType::get(b.getContext());
  auto vecPtrTy = LLVM::getFixedVectorType(ptrTy, n);
  return b.create<LLVM::GEPOp>(loc, vecPtrTy, element, base, ValueRange{offsets});
}
Value stridedOffsets(OpBuilder &b, Location loc, Value offset, int64_t stride, int64_t n) {
  Value l = laneNumbers(b, loc, n);
  if (stride != 1)
    l = b.create<arith::MulIOp>(loc, l, splatOf(b, loc, b.create<arith::ConstantIntOp>(loc, stride, 64), n));
  return b.create<arith::AddIOp>(loc, splatOf(b, loc, offset, n), l);
}
unsigned alignmentOf(Type element) {
  return std::max(1u, element.getIntOrFloatBitWidth() / 8);
}
/// Whether every lane of an `n`-lane access is below `limit`.
bool fullBlock(Value limit, int64_t n) {
  std::optional<int64_t> k = getConstantIntValue(limit);
  return k && *k >= n;
}
Value zeroOf(OpBuilder &b, Location loc, VectorType t) {
  return b.create<arith::ConstantOp>(loc, b.getZeroAttr(t));
}
/// The vector type blocks of `vt` move through memory as: 16-bit floats as
/// i16. A masked load, store, gather or scatter of bf16 or f16 vectors is
/// legal only on CPUs with AVX512-BF16 / AVX512-FP16; elsewhere LLVM splits
/// it into one access per lane (a bf16 row max 17x slower on an AVX-512 CPU
/// without BF16). The bits are the same, so a bitcast on either side.
VectorType memoryVectorOf(VectorType vt) {
  Type e = vt.getElementType();
  if (e.isBF16() || e.isF16())
    return VectorType::get(vt.getShape(), IntegerType::get(vt.getContext(), 16));
  return vt;
}
Value bitcastIfNeeded(OpBuilder &b, Location loc, Value v, VectorType to) {
  return v.getType() == to ? v : b.create<LLVM::BitcastOp>(loc, to, v).getResult();
}

/// A load whose lanes repeat each element `div` times or skip elements
/// (lane l at offset + (l / div) * stride): where `div` divides the block
/// and the elements it reads span at most four blocks, one (masked)
/// contiguous load of that span and a shuffle picking the lanes' elements;
/// otherwise a gather.
Value spreadLoad(ConversionPatternRewriter &rewriter, Location loc, tile::LoadOp op, VectorType vt,
                 Value base, Value mask, bool unmasked) {
  Type element = vt.getElementType();
  int64_t n = vt.getNumElements(), div = op.getDiv(), stride = op.getStride();
  auto ptrTy = LLVM::LLVMPointerType::get(rewriter.getContext());
  Value zero = zeroOf(rewriter, loc, vt);
  auto c = [&](int64_t k) { return rewriter.create<arith::ConstantIntOp>(loc, k, 64); };
  int64_t m = n % div == 0 ? n / div : 0; // distinct elements of a block
  int64_t span = (m - 1) * stride + 1;   // elements from the first to the last
  if (!m || span > 4 * n) {
    Value l = laneNumbers(rewriter, loc, n);
    Value offsets = rewriter.create<arith::MulIOp>(
        loc, rewriter.create<arith::DivUIOp>(loc, l, splatOf(rewriter, loc, c(div), n)),
        splatOf(rewriter, loc, c(stride), n));
    offsets = rewriter.create<arith::AddIOp>(loc, splatOf(rewriter, loc, op.getOffset(), n),
                                             offsets);
    Value ptrs = lanePointers(rewriter, loc, base, element, offsets, n);
    return rewriter.create<LLVM::masked_gather>(
        loc, vt, ptrs, mask, ValueRange{zero}, rewriter.getI32IntegerAttr(alignmentOf(element)));
  }
  // Contiguous elements: exactly the m distinct ones, or (stride > 1)
  // whole blocks covering the span, the ones between them read and dropped.
  int64_t width = stride == 1 ? m : (span + n - 1) / n * n;
  auto packedType = VectorType::get({width}, element);
  Value p = rewriter.create<LLVM::GEPOp>(loc, ptrTy, element, base, ValueRange{op.getOffset()});
  Value packed;
  if (unmasked && span == width) {
    packed = rewriter.create<LLVM::LoadOp>(loc, packedType, p, alignmentOf(element));
  } else {
    // Elements from the first active lane's to the last one's:
    // [first / div * stride, (ceil(limit / div) - 1) * stride + 1), within the span.
    Value upper = c(span);
    if (!unmasked) {
      Value lastGroup = rewriter.create<arith::DivSIOp>(
          loc, rewriter.create<arith::AddIOp>(loc, op.getLimit(), c(div - 1)), c(div));
      Value end = rewriter.create<arith::AddIOp>(
          loc, rewriter.create<arith::MulIOp>(loc, rewriter.create<arith::SubIOp>(loc, lastGroup, c(1)),
                                              c(stride)),
          c(1));
      upper = rewriter.create<arith::MinSIOp>(loc, end, upper);
    }
    Value packedMask = laneMask(rewriter, loc, upper, width);
    if (Value first = op.getFirst())
      packedMask = rewriter.create<arith::AndIOp>(
          loc, packedMask,
          lanesFrom(rewriter, loc,
                    rewriter.create<arith::MulIOp>(
                        loc, rewriter.create<arith::DivSIOp>(loc, first, c(div)), c(stride)),
                    width));
    packed = rewriter.create<LLVM::MaskedLoadOp>(loc, packedType, p, packedMask,
                                                 ValueRange{zeroOf(rewriter, loc, packedType)},
                                                 alignmentOf(element));
  }
  SmallVector<int32_t> spread(n);
  for (int64_t l = 0; l < n; ++l)
    spread[l] = int32_t(l / div * stride);
  Value result = rewriter.create<LLVM::ShuffleVectorOp>(loc, packed, packed, spread);
  // Lanes outside [first, limit) are zero, as for every load.
  return unmasked ? result : rewriter.create<arith::SelectOp>(loc, mask, result, zero);
}

struct LoadLowering : ConvertOpToLLVMPattern<tile::LoadOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(tile::LoadOp op, OpAdaptor a,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    auto blockType = llvm::cast<VectorType>(op.getType());
    VectorType vt = memoryVectorOf(blockType);
    Type element = vt.getElementType();
    int64_t n = vt.getNumElements();
    auto ptrTy = LLVM::LLVMPointerType::get(getContext());
    Value mask = laneMask(rewriter, loc, op.getLimit(), n);
    Value first = a.getFirst();
    if (first)
      mask = rewriter.create<arith::AndIOp>(loc, mask, lanesFrom(rewriter, loc, first, n));
    bool unmasked = !first && fullBlock(op.getLimit(), n);
    int64_t div = op.getDiv();
    Value result;
    if ((div > 1 && op.getStride() != 0) || (op.getStride() > 1 && op.getStride() <= 4)) {
      result = spreadLoad(rewriter, loc, op, vt, a.getPtr(), mask, unmasked);
    } else if (op.getStride() == 0) {
      Value p = rewriter.create<LLVM::GEPOp>(loc, ptrTy, element, a.getPtr(), ValueRange{op.getOffset()});
      Value s = rewriter.create<LLVM::LoadOp>(loc, element, p);
      result = splatOf(rewriter, loc, s, n);
    } else if (op.getStride() == 1 && unmasked) {
      Value p = rewriter.create<LLVM::GEPOp>(loc, ptrTy, element, a.getPtr(), ValueRange{op.getOffset()});
      result = rewriter.create<LLVM::LoadOp>(loc, vt, p, alignmentOf(element));
    } else if (op.getStride() == 1) {
      Value p = rewriter.create<LLVM::GEPOp>(loc, ptrTy, element, a.getPtr(), ValueRange{op.getOffset()});
      result = rewriter.create<LLVM::MaskedLoadOp>(
          loc, vt, p, mask, ValueRange{zeroOf(rewriter, loc, vt)}, alignmentOf(element));
    } else {
      Value ptrs = lanePointers(rewriter, loc, a.getPtr(), element,
                                stridedOffsets(rewriter, loc, op.getOffset(), op.getStride(), n), n);
      result = rewriter.create<LLVM::masked_gather>(
          loc, vt, ptrs, mask, ValueRange{zeroOf(rewriter, loc, vt)},
          rewriter.getI32IntegerAttr(alignmentOf(element)));
    }
    rewriter.replaceOp(op, bitcastIfNeeded(rewriter, loc, result, blockType));
    return success();
  }
};

struct GatherLowering : ConvertOpToLLVMPattern<tile::GatherOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(tile::GatherOp op, OpAdaptor a,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    auto blockType = llvm::cast<VectorType>(op.getType());
    VectorType vt = memoryVectorOf(blockType);
    int64_t n = vt.getNumElements();
    Value ptrs = lanePointers(rewriter, loc, a.getPtr(), vt.getElementType(), op.getOffsets(), n);
    Value result = rewriter.create<LLVM::masked_gather>(
        loc, vt, ptrs, op.getMask(), ValueRange{zeroOf(rewriter, loc, vt)},
        rewriter.getI32IntegerAttr(alignmentOf(vt.getElementType())));
    rewriter.replaceOp(op, bitcastIfNeeded(rewriter, loc, result, blockType));
    return success();
  }
};

struct LoadScalarLowering : ConvertOpToLLVMPattern<tile::LoadScalarOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(tile::LoadScalarOp op, OpAdaptor a,
                                ConversionPatternRewriter &rewriter) const override {
    auto ptrTy = LLVM::LLVMPointerType::get(getContext());
    Value p = rewriter.create<LLVM::GEPOp>(op.getLoc(), ptrTy, op.getType(), a.getPtr(),
                                           ValueRange{op.getOffset()});
    rewriter.replaceOpWithNewOp<LLVM::LoadOp>(op, op.getType(), p);
    return success();
  }
};

struct StoreLowering : ConvertOpToLLVMPattern<tile::StoreOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(tile::StoreOp op, OpAdaptor a,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    VectorType vt = memoryVectorOf(llvm::cast<VectorType>(op.getValue().getType()));
    Type element = vt.getElementType();
    int64_t n = vt.getNumElements();
    auto ptrTy = LLVM::LLVMPointerType::get(getContext());
    Value mask = laneMask(rewriter, loc, op.getLimit(), n);
    Value value = bitcastIfNeeded(rewriter, loc, a.getValue(), vt);
    int64_t vectorBytes = n * std::max<int64_t>(1, element.getIntOrFloatBitWidth() / 8);
    std::optional<int64_t> limit = getConstantIntValue(op.getLimit());
    if (op.getStride() == 1 && op.getStreaming() && limit && *limit >= n &&
        int64_t(op.getAlignment()) >= 64 && vectorBytes % 64 == 0) {
      // A full, aligned block bypasses the cache: no read for ownership of
      // lines it overwrites entirely (SplitStreamingStores made it full).
      Value p = rewriter.create<LLVM::GEPOp>(loc, ptrTy, element, a.getPtr(), ValueRange{op.getOffset()});
      rewriter.replaceOpWithNewOp<LLVM::StoreOp>(op, value, p, /*alignment=*/64,
                                                 /*isVolatile=*/false, /*isNonTemporal=*/true);
    } else if (op.getStride() == 1 && fullBlock(op.getLimit(), n)) {
      Value p = rewriter.create<LLVM::GEPOp>(loc, ptrTy, element, a.getPtr(), ValueRange{op.getOffset()});
      rewriter.replaceOpWithNewOp<LLVM::StoreOp>(op, value, p, alignmentOf(element));
    } else if (op.getStride() == 1) {
      Value p = rewriter.create<LLVM::GEPOp>(loc, ptrTy, element, a.getPtr(), ValueRange{op.getOffset()});
      rewriter.replaceOpWithNewOp<LLVM::MaskedStoreOp>(op, value, p, mask,
                                                       alignmentOf(element));
    } else {
      Value ptrs = lanePointers(rewriter, loc, a.getPtr(), element,
                                stridedOffsets(rewriter, loc, op.getOffset(), op.getStride(), n), n);
      rewriter.replaceOpWithNewOp<LLVM::masked_scatter>(op, value, ptrs, mask,
                                                        alignmentOf(element));
    }
    return success();
  }
};

struct ScatterLowering : ConvertOpToLLVMPattern<tile::ScatterOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(tile::ScatterOp op, OpAdaptor a,
                                ConversionPatternRewriter &rewriter) const override {
    VectorType vt = memoryVectorOf(llvm::cast<VectorType>(op.getValue().getType()));
    Value ptrs = lanePointers(rewriter, op.getLoc(), a.getPtr(), vt.getElementType(),
                              op.getOffsets(), vt.getNumElements());
    rewriter.replaceOpWithNewOp<LLVM::masked_scatter>(
        op, bitcastIfNeeded(rewriter, op.getLoc(), a.getValue(), vt), ptrs, op.getMask(),
        alignmentOf(vt.getElementType()));
    return success();
  }
};

struct StoreScalarLowering : ConvertOpToLLVMPattern<tile::StoreScalarOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(tile::StoreScalarOp op, OpAdaptor a,
                                ConversionPatternRewriter &rewriter) const override {
    auto ptrTy = LLVM::LLVMPointerType::get(getContext());
    Value p = rewriter.create<LLVM::GEPOp>(op.getLoc(), ptrTy, op.getValue().getType(),
                                           a.getPtr(), ValueRange{op.getOffset()});
    rewriter.replaceOpWithNewOp<LLVM::StoreOp>(op, a.getValue(), p);
    return success();
  }
};

/// A scratch buffer is stack memory of the calling thread, 64-byte aligned
/// like every buffer, so its blocks are whole cache lines.
struct ScratchLowering : ConvertOpToLLVMPattern<tile::ScratchOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(tile::ScratchOp op, OpAdaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value count = rewriter.create<LLVM::ConstantOp>(loc, rewriter.getI64Type(),
                                                    rewriter.getI64IntegerAttr(op.getElements()));
    rewriter.replaceOpWithNewOp<LLVM::AllocaOp>(
        op, LLVM::LLVMPointerType::get(getContext()), op.getType().getPointee(), count,
        /*alignment=*/64);
    return success();
  }
};

struct LanesLowering : ConvertOpToLLVMPattern<tile::LanesOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(tile::LanesOp op, OpAdaptor,
                                ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(op, laneNumbers(rewriter, op.getLoc(), lanesOf(op.getType())));
    return success();
  }
};

} // namespace

void tilefuse::loadCpuCodegenDialects(MLIRContext &context) {
  context.loadDialect<tile::TileDialect, arith::ArithDialect, math::MathDialect,
                      scf::SCFDialect, vector::VectorDialect, func::FuncDialect,
                      cf::ControlFlowDialect, LLVM::LLVMDialect>();
}

LogicalResult tilefuse::lowerTileToLLVM(ModuleOp module, bool narrowMaskedLanes) {
  MLIRContext *ctx = module.getContext();
  loadCpuCodegenDialects(*ctx);
  SmallVector<func::FuncOp> kernels;
  for (auto f : module.getOps<func::FuncOp>())
    if (f->hasAttr(tile::kKernelAttr))
      kernels.push_back(f);
  for (func::FuncOp k : kernels)
    wrapKernel(k);

  {
    RewritePatternSet patterns(ctx);
    patterns.add<SubnormalSafeLog, SubnormalSafeExp>(ctx);
    if (failed(applyPatternsAndFoldGreedily(module, std::move(patterns))))
      return module.emitError("tile-to-llvm: log rewriting did not converge");
  }
  {
    RewritePatternSet patterns(ctx);
    patterns.add<ReduceToVector, SplitStreamingStores>(ctx);
    if (!narrowMaskedLanes)
      patterns.add<SplitNarrowMaskedLoads, SplitNarrowMaskedStores>(ctx);
    populateExpandPowFPattern(patterns);
    populateMathPolynomialApproximationPatterns(patterns);
    if (failed(applyPatternsAndFoldGreedily(module, std::move(patterns))))
      return module.emitError("tile-to-llvm: math expansion did not converge");
  }
  {
    // f64 tanh, erf, log1p and expm1 have neither a polynomial here nor an
    // LLVM intrinsic: they call libm, lane by lane.
    SmallVector<Operation *> libmOps;
    module.walk([&](Operation *op) {
      if (llvm::isa<math::TanhOp, math::ErfOp, math::Log1pOp, math::ExpM1Op>(op))
        libmOps.push_back(op);
    });
    if (!libmOps.empty()) {
      RewritePatternSet patterns(ctx);
      populateMathToLibmConversionPatterns(patterns);
      GreedyRewriteConfig config;
      config.strictMode = GreedyRewriteStrictness::ExistingAndNewOps;
      (void)applyOpPatternsAndFold(libmOps, std::move(patterns), config);
    }
  }
  {
    // Polynomials may introduce bf16 conversions only after expansion.
    RewritePatternSet patterns(ctx);
    arith::populateExpandBFloat16Patterns(patterns);
    if (failed(applyPatternsAndFoldGreedily(module, std::move(patterns))))
      return module.emitError("tile-to-llvm: bf16 expansion did not converge");
  }
  {
    PassManager pm(ctx);
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createConvertSCFToCFPass());
    if (failed(pm.run(module)))
      return failure();
  }
  {
    LowerToLLVMOptions options(ctx);
    LLVMTypeConverter converter(ctx, options);
    converter.addConversion([&](tile::PtrType) -> Type {
      return LLVM::LLVMPointerType::get(ctx);
    });
    RewritePatternSet patterns(ctx);
    patterns.add<LoadLowering, GatherLowering, LoadScalarLowering, StoreLowering, ScatterLowering,
                 StoreScalarLowering, ScratchLowering, LanesLowering>(converter);
    arith::populateArithToLLVMConversionPatterns(converter, patterns);
    populateMathToLLVMConversionPatterns(converter, patterns);
    populateVectorToLLVMConversionPatterns(converter, patterns,
                                           /*reassociateFPReductions=*/true);
    cf::populateControlFlowToLLVMConversionPatterns(converter, patterns);
    populateFuncToLLVMConversionPatterns(converter, patterns);
    LLVMConversionTarget target(*ctx);
    target.addLegalOp<ModuleOp>();
    target.addLegalOp<UnrealizedConversionCastOp>();
    target.addIllegalDialect<tile::TileDialect>();
    if (failed(applyPartialConversion(module, target, std::move(patterns))))
      return failure();
  }
  PassManager pm(ctx);
  pm.addPass(createReconcileUnrealizedCastsPass());
  return pm.run(module);
}

namespace {
struct TileToLLVMPass : tilefuse::impl::TileToLLVMPassBase<TileToLLVMPass> {
  using TileToLLVMPassBase::TileToLLVMPassBase;
  void runOnOperation() override {
    if (failed(lowerTileToLLVM(getOperation(), narrowMaskedLanes)))
      signalPassFailure();
  }
};
} // namespace

std::map<std::string, std::string> tilefuse::eraseRepeatedKernels(ModuleOp module) {
  std::map<std::string, std::string> representative;
  std::map<std::string, std::string> firstWithText;
  for (func::FuncOp f : llvm::make_early_inc_range(module.getOps<func::FuncOp>())) {
    if (!f->hasAttr("tile.kernel") || f.isExternal())
      continue;
    std::string name = f.getSymName().str();
    f.setSymName("tilefuse_kernel");
    std::string text;
    llvm::raw_string_ostream os(text);
    // Local scope: printing the op alone, not the whole module per kernel.
    f->print(os, OpPrintingFlags().useLocalScope());
    f.setSymName(name);
    auto [it, inserted] = firstWithText.emplace(std::move(text), name);
    if (!inserted) {
      representative[name] = it->second;
      f.erase();
    }
  }
  return representative;
}
