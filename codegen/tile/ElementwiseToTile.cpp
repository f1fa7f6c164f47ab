//===- ElementwiseToTile.cpp - elementwise ops and casts -> tile ----------===//
//
// The elementwise op family: arithmetic, comparisons, select and math
// functions on the values of their operands at the same coordinates, casts
// with the rounding they imply, and the generators (fills, splat constants,
// iota) that need no memory. Scalars stay scalars; a block operand makes
// the result a block.
//
//===----------------------------------------------------------------------===//
#include "codegen/tile/KernelEmitter.h"

#include "ir/tile/TileDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;
using namespace tilefuse::tilegen;

/// Whether `v` is (a view of) sum(exp(a - max(a))) over the dims of the max:
/// the max's element contributes exp(0) = 1, every other term is at most 1.
static bool isSumOfShiftedExp(Value v) {
  auto throughViews = [](Value x) {
    while (Operation *def = x.getDefiningOp()) {
      if (!llvm::isa<BroadcastInDimOp, ReshapeOp, StopGradientOp>(def))
        break;
      x = def->getOperand(0);
    }
    return x;
  };
  auto sum = throughViews(v).getDefiningOp<ReduceSumOp>();
  if (!sum)
    return false;
  auto exp = sum.getOperand().getDefiningOp<ExpOp>();
  auto shifted = exp ? exp.getOperand().getDefiningOp<SubOp>() : SubOp();
  auto max = shifted ? throughViews(shifted.getRhs()).getDefiningOp<ReduceMaxOp>() : ReduceMaxOp();
  return max && max.getOperand() == shifted.getLhs() && max.getDims() == sum.getDims();
}

/// Compute-type value `v` of dtype `from` converted to dtype `to`, with the
/// rounding an explicit cast implies (to f16/bf16: round, then widen again).
static Value castTo(KernelEmitter &e, Value v, Type from, Type to) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Type cfrom = computeType(from), cto = computeType(to);
  auto vt = llvm::dyn_cast<VectorType>(v.getType());
  auto like = [&](Type t) -> Type { return vt ? Type(e.vecType(t)) : t; };
  // Literal constants arrive in their dtype; bring them to compute type.
  if (v.getType() != like(cfrom) && v.getType() == like(from))
    v = b.create<arith::ExtFOp>(loc, like(cfrom), v);
  Value r = v;
  if (llvm::isa<FloatType>(cfrom) && llvm::isa<FloatType>(cto)) {
    auto fw = llvm::cast<FloatType>(cfrom).getWidth(), tw = llvm::cast<FloatType>(to).getWidth();
    if (to.isF16() || to.isBF16()) {
      Value narrow = b.create<arith::TruncFOp>(loc, like(to), v);
      return b.create<arith::ExtFOp>(loc, like(cto), narrow);
    }
    if (fw > tw) r = b.create<arith::TruncFOp>(loc, like(cto), v);
    else if (fw < tw) r = b.create<arith::ExtFOp>(loc, like(cto), v);
    return r;
  }
  if (llvm::isa<FloatType>(cfrom)) { // float -> integer
    if (to.isInteger(1)) {
      Value zero = b.create<arith::ConstantOp>(loc, b.getFloatAttr(cfrom, 0.0));
      if (vt)
        zero = e.splat(zero);
      return b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNE, v, zero);
    }
    return b.create<arith::FPToSIOp>(loc, like(cto), v);
  }
  if (llvm::isa<FloatType>(cto)) { // integer -> float
    Value f;
    if (from.isInteger(1))
      f = b.create<arith::UIToFPOp>(loc, like(to), v);
    else
      f = b.create<arith::SIToFPOp>(loc, like(to), v);
    return to == cto ? f : b.create<arith::ExtFOp>(loc, like(cto), f).getResult();
  }
  // integer -> integer
  unsigned fw = cfrom.getIntOrFloatBitWidth(), tw = cto.getIntOrFloatBitWidth();
  if (to.isInteger(1)) {
    Value zero = b.create<arith::ConstantOp>(loc, b.getIntegerAttr(cfrom, 0));
    if (vt)
      zero = e.splat(zero);
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, v, zero);
  }
  if (fw > tw) return b.create<arith::TruncIOp>(loc, like(cto), v);
  if (fw < tw) {
    if (from.isInteger(1)) return b.create<arith::ExtUIOp>(loc, like(cto), v);
    return b.create<arith::ExtSIOp>(loc, like(cto), v);
  }
  return v;
}

/// graph.full: a constant, rounded as its dtype stores it.
static FailureOr<Value> fill(KernelEmitter &e, Operation *op, const Coords &) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Value v = op->getResult(0);
  auto full = llvm::cast<FullOp>(op);
  Type t = computeType(dtypeOf(v));
  if (llvm::isa<FloatType>(t))
    return castTo(e, b.create<arith::ConstantOp>(
                      loc, b.getFloatAttr(dtypeOf(v), full.getValue().convertToDouble())),
                  dtypeOf(v), dtypeOf(v));
  return b.create<arith::ConstantOp>(
              loc, b.getIntegerAttr(t, static_cast<int64_t>(
                                           full.getValue().convertToDouble())))
      .getResult();
}

/// graph.constant: splat constants only (hoistDenseConstants makes the
/// others kernel inputs).
static FailureOr<Value> constant(KernelEmitter &e, Operation *op, const Coords &) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Value v = op->getResult(0);
  auto k = llvm::cast<ConstantOp>(op);
  auto dense = llvm::dyn_cast<SplatElementsAttr>(k.getValue());
  if (!dense)
    return e.fusion.emitOpError()
           << "holds a non-splat graph.constant; hoistDenseConstants must run first";
  Type dt = dtypeOf(v);
  TypedAttr attr = llvm::isa<FloatType>(dt)
                       ? TypedAttr(dense.getSplatValue<FloatAttr>())
                       : TypedAttr(dense.getSplatValue<IntegerAttr>());
  return castTo(e, b.create<arith::ConstantOp>(loc, attr), dt, dt);
}

/// graph.iota: the coordinate itself.
static FailureOr<Value> iota(KernelEmitter &e, Operation *op, const Coords &c) {
  OpBuilder &b = e.b;
  Value v = op->getResult(0);
  auto io = llvm::cast<IotaOp>(op);
  const Coord &x = c[io.getDim()];
  Value idx = x.isScalar() ? x.scalar : e.coordVector(x);
  return castTo(e, idx, b.getI64Type(), dtypeOf(v));
}

/// graph.cast: its operand converted as castTo does.
static FailureOr<Value> cast(KernelEmitter &e, Operation *op, const Coords &c) {
  Value v = op->getResult(0);
  auto ca = llvm::cast<CastOp>(op);
  FailureOr<Value> x = e.value(ca.getOperand(), c);
  if (failed(x))
    return failure();
  return castTo(e, *x, dtypeOf(ca.getOperand()), dtypeOf(v));
}

static FailureOr<Value> elementwise(KernelEmitter &e, Operation *op, const Coords &c) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  FusionOp fusion = e.fusion;
  SmallVector<Value> xs;
  bool anyVector = false;
  for (Value operand : op->getOperands()) {
    FailureOr<Value> x = e.value(operand, c);
    if (failed(x))
      return failure();
    anyVector |= llvm::isa<VectorType>(x->getType());
    xs.push_back(*x);
  }
  Value scalarDivisor = xs.size() == 2 && !llvm::isa<VectorType>(xs[1].getType()) ? xs[1] : Value();
  if (anyVector)
    for (Value &x : xs)
      x = e.toBlock(x);
  Type dt = op->getNumOperands() ? dtypeOf(op->getOperand(0)) : Type();
  bool isFloat = dt && llvm::isa<FloatType>(dt);
  auto like = [&](Value x, double f) -> Value {
    Type et = getElementTypeOrSelf(x.getType());
    Value k = b.create<arith::ConstantOp>(loc, b.getFloatAttr(et, f));
    return llvm::isa<VectorType>(x.getType()) ? e.splat(k) : k;
  };
  auto likeInt = [&](Value x, int64_t i) -> Value {
    Type et = getElementTypeOrSelf(x.getType());
    Value k = b.create<arith::ConstantOp>(loc, b.getIntegerAttr(et, i));
    return llvm::isa<VectorType>(x.getType()) ? e.splat(k) : k;
  };
  // Booleans are i1, whose signed reading of true is -1: their order
  // (false < true) is the unsigned one. (maximum/minimum refuse i1.)
  bool isBool = !isFloat && !xs.empty() &&
                getElementTypeOrSelf(xs[0].getType()).isInteger(1);
  auto cmp = [&](arith::CmpFPredicate f, arith::CmpIPredicate i) -> Value {
    if (isFloat)
      return b.create<arith::CmpFOp>(loc, f, xs[0], xs[1]);
    if (isBool) {
      using I = arith::CmpIPredicate;
      i = i == I::slt ? I::ult : i == I::sle ? I::ule : i == I::sgt ? I::ugt
          : i == I::sge ? I::uge : i;
    }
    return b.create<arith::CmpIOp>(loc, i, xs[0], xs[1]);
  };
  using P = arith::CmpFPredicate;
  using I = arith::CmpIPredicate;
  /// An integer divisor that cannot trap (1 where it is 0 or -1), and those
  /// two conditions.
  auto safeDivisor = [&](Value d) -> std::tuple<Value, Value, Value> {
    Value isZero = b.create<arith::CmpIOp>(loc, I::eq, d, likeInt(d, 0));
    Value isM1 = b.create<arith::CmpIOp>(loc, I::eq, d, likeInt(d, -1));
    Value trap = b.create<arith::OrIOp>(loc, isZero, isM1);
    return {b.create<arith::SelectOp>(loc, trap, likeInt(d, 1), d), isZero, isM1};
  };
  if (isa<AddOp>(op))
    return isFloat ? Value(b.create<arith::AddFOp>(loc, xs[0], xs[1]))
                   : b.create<arith::AddIOp>(loc, xs[0], xs[1]);
  if (isa<SubOp>(op))
    return isFloat ? Value(b.create<arith::SubFOp>(loc, xs[0], xs[1]))
                   : b.create<arith::SubIOp>(loc, xs[0], xs[1]);
  if (isa<MulOp>(op))
    return isFloat ? Value(b.create<arith::MulFOp>(loc, xs[0], xs[1]))
                   : b.create<arith::MulIOp>(loc, xs[0], xs[1]);
  if (isa<DivOp>(op)) {
    if (isFloat) {
      // A block divided by a softmax's row sum: one division, then a
      // multiplication per lane, as PyTorch's CPU softmax does (a vector
      // division costs several multiplications). Only there: such a sum
      // lies in [1, n], so its reciprocal is a normal number and the
      // product differs from the quotient by at most one rounding; a
      // reciprocal of any divisor would overflow for tiny ones.
      if (anyVector && scalarDivisor && isSumOfShiftedExp(op->getOperand(1))) {
        Value reciprocal = b.create<arith::DivFOp>(loc, like(scalarDivisor, 1.0), scalarDivisor);
        return b.create<arith::MulFOp>(loc, xs[0], e.splat(reciprocal)).getResult();
      }
      return b.create<arith::DivFOp>(loc, xs[0], xs[1]).getResult();
    }
    // Integer division never traps in a kernel: x / 0 is 0 and
    // INT_MIN / -1 wraps (the interpreter reports division by zero).
    auto [safe, isZero, isM1] = safeDivisor(xs[1]);
    Value zero = likeInt(xs[1], 0);
    Value q = b.create<arith::DivSIOp>(loc, xs[0], safe);
    Value neg = b.create<arith::SubIOp>(loc, zero, xs[0]);
    q = b.create<arith::SelectOp>(loc, isM1, neg, q);
    return b.create<arith::SelectOp>(loc, isZero, zero, q).getResult();
  }
  if (isa<PowOp>(op)) return b.create<math::PowFOp>(loc, xs[0], xs[1]).getResult();
  if (isa<RemOp>(op)) {
    if (isFloat)
      return b.create<arith::RemFOp>(loc, xs[0], xs[1]).getResult();
    // As division: never traps; x % 0 is 0 and x % -1 is 0 (divided by 1).
    Value safe = std::get<0>(safeDivisor(xs[1]));
    return b.create<arith::RemSIOp>(loc, xs[0], safe).getResult();
  }
  if (isa<MaximumOp>(op))
    return isFloat ? Value(b.create<arith::MaximumFOp>(loc, xs[0], xs[1]))
                   : b.create<arith::MaxSIOp>(loc, xs[0], xs[1]);
  if (isa<MinimumOp>(op))
    return isFloat ? Value(b.create<arith::MinimumFOp>(loc, xs[0], xs[1]))
                   : b.create<arith::MinSIOp>(loc, xs[0], xs[1]);
  if (isa<EqOp>(op)) return cmp(P::OEQ, I::eq);
  if (isa<NeOp>(op)) return cmp(P::UNE, I::ne);
  if (isa<LtOp>(op)) return cmp(P::OLT, I::slt);
  if (isa<LeOp>(op)) return cmp(P::OLE, I::sle);
  if (isa<GtOp>(op)) return cmp(P::OGT, I::sgt);
  if (isa<GeOp>(op)) return cmp(P::OGE, I::sge);
  if (isa<SelectOp>(op)) return b.create<arith::SelectOp>(loc, xs[0], xs[1], xs[2]).getResult();
  if (isa<NegOp>(op))
    return isFloat ? Value(b.create<arith::NegFOp>(loc, xs[0]))
                   : b.create<arith::SubIOp>(loc, likeInt(xs[0], 0), xs[0]);
  if (isa<AbsOp>(op))
    return isFloat ? Value(b.create<math::AbsFOp>(loc, xs[0])) : b.create<math::AbsIOp>(loc, xs[0]);
  if (isa<ExpOp>(op)) return b.create<math::ExpOp>(loc, xs[0]).getResult();
  if (isa<LogOp>(op)) return b.create<math::LogOp>(loc, xs[0]).getResult();
  if (isa<TanhOp>(op)) return b.create<math::TanhOp>(loc, xs[0]).getResult();
  if (isa<SqrtOp>(op)) return b.create<math::SqrtOp>(loc, xs[0]).getResult();
  if (isa<RsqrtOp>(op)) {
    // 1/sqrt rather than math.rsqrt: the latter may use a low-precision
    // hardware estimate.
    Value s = b.create<math::SqrtOp>(loc, xs[0]);
    return b.create<arith::DivFOp>(loc, like(s, 1.0), s).getResult();
  }
  if (isa<ErfOp>(op)) return b.create<math::ErfOp>(loc, xs[0]).getResult();
  if (isa<Log1pOp>(op)) return b.create<math::Log1pOp>(loc, xs[0]).getResult();
  if (isa<Expm1Op>(op)) return b.create<math::ExpM1Op>(loc, xs[0]).getResult();
  if (isa<FloorOp>(op)) return b.create<math::FloorOp>(loc, xs[0]).getResult();
  if (isa<SigmoidOp>(op)) {
    // r = t/(1+t) with t = exp(-|x|) never overflows and is sigmoid(-|x|);
    // sigmoid(x) = 1 - r for x >= 0 (rounds correctly next to 1, where
    // 1/(1+t) would lose t), r otherwise.
    Value t = b.create<math::ExpOp>(
        loc, b.create<arith::NegFOp>(loc, b.create<math::AbsFOp>(loc, xs[0])));
    Value r = b.create<arith::DivFOp>(loc, t, b.create<arith::AddFOp>(loc, like(t, 1.0), t));
    Value pos = b.create<arith::CmpFOp>(loc, P::OGE, xs[0], like(t, 0.0));
    return b.create<arith::SelectOp>(loc, pos, b.create<arith::SubFOp>(loc, like(t, 1.0), r), r)
        .getResult();
  }
  return fusion.emitOpError() << "cannot compile '" << op->getName()
                              << "' inside a kernel; no tile lowering exists for it";
}

void tilegen::populateElementwiseLowerings(OpLowerings &lowerings) {
  lowerings.add<AddOp, SubOp, MulOp, DivOp, PowOp, RemOp, MaximumOp, MinimumOp, EqOp, NeOp, LtOp,
                LeOp, GtOp, GeOp, SelectOp, NegOp, AbsOp, ExpOp, LogOp, TanhOp, SqrtOp, RsqrtOp,
                ErfOp, Log1pOp, Expm1Op, FloorOp, SigmoidOp>(elementwise);
  lowerings.add<CastOp>(cast);
  lowerings.add<FullOp>(fill);
  lowerings.add<ConstantOp>(constant);
  lowerings.add<IotaOp>(iota);
}
