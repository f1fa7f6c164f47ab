//===- SpecialOpsToTile.cpp - argmax, one-hot picks, random, concat -> tile ===//
//
// The op family of ops with a lowering of their own: argmax (first maximum,
// NaN as the maximum), one-hot picks (a sum of select(iota == k, v, 0)
// read at k instead of summed), Philox random numbers and concatenation.
//
//===----------------------------------------------------------------------===//
#include "codegen/tile/KernelEmitter.h"

#include "ir/tile/TileDialect.h"
#include "passes/TargetInfo.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <array>
#include <cmath>
#include <limits>

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;
using namespace tilefuse::tilegen;

/// A sum along one dimension `d` of select(iota_d == k, v, 0), with `k`
/// constant along `d` (a one-hot pick: cross-entropy's target logit, its
/// gradient's one-hot row) is v at index k, or 0 when k is outside the
/// dimension: exactly the sum (every other term is 0), without a pass over
/// the row. `oc` holds the operand coordinates of the kept dimensions.
std::optional<OneHotPick> tilegen::matchOneHotPick(Operation *op) {
  auto dims = op->getAttrOfType<DenseI64ArrayAttr>("dims");
  if (!isa<ReduceSumOp>(op) || !dims || dims.size() != 1)
    return std::nullopt;
  OneHotPick m;
  m.dim = dims[0];
  Value operand = op->getOperand(0);
  if (auto neg = operand.getDefiningOp<NegOp>()) {
    operand = neg.getOperand();
    m.negated = true;
  }
  m.select = operand.getDefiningOp<SelectOp>();
  auto isZero = [](Value v) {
    auto full = v.getDefiningOp<FullOp>();
    return full && full.getValue().isZero();
  };
  if (!m.select || !isZero(m.select.getOperand(2)))
    return std::nullopt;
  auto eq = m.select.getOperand(0).getDefiningOp<EqOp>();
  if (!eq)
    return std::nullopt;
  // Integer indices only (an iota may be float: equality then is not an
  // index match the pick could read at).
  auto iotaAlongD = [&](Value v) {
    auto iota = v.getDefiningOp<IotaOp>();
    return iota && int64_t(iota.getDim()) == m.dim && llvm::isa<IntegerType>(dtypeOf(v));
  };
  // k: a broadcast that maps no operand dimension to d.
  auto constantAlongD = [&](Value v) {
    auto bc = v.getDefiningOp<BroadcastInDimOp>();
    return bc && !llvm::is_contained(bc.getDims(), m.dim);
  };
  if (iotaAlongD(eq.getOperand(0)) && constantAlongD(eq.getOperand(1)))
    m.index = eq.getOperand(1);
  else if (iotaAlongD(eq.getOperand(1)) && constantAlongD(eq.getOperand(0)))
    m.index = eq.getOperand(0);
  if (!m.index)
    return std::nullopt;
  return m;
}

std::optional<FailureOr<Value>> tilegen::oneHotPick(KernelEmitter &e, Operation *op, Coords oc) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  FusionOp fusion = e.fusion;
  // A partial kernel reduces one slice of the row per program: the pick
  // would be counted once per slice.
  std::optional<OneHotPick> m = e.chunks > 0 ? std::nullopt : matchOneHotPick(op);
  if (!m)
    return std::nullopt;
  int64_t d = m->dim;
  Value k = m->index;
  SelectOp select = m->select;
  bool negated = m->negated;
  Value operand = op->getOperand(0);
  int64_t n = shapeOf(operand)[d];
  oc[d] = e.constCoord(0);
  FailureOr<Value> index = e.value(k, oc);
  if (failed(index))
    return failure();
  Value at = *index;
  if (!at.getType().isInteger(64))
    at = b.create<arith::ExtSIOp>(loc, b.getI64Type(), at);
  Value inside = b.create<arith::AndIOp>(
      loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, at, e.cst(0)),
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, at, e.cst(n)));
  // Read in bounds only: an index outside the row picks 0, not memory.
  oc[d] = {b.create<arith::SelectOp>(loc, inside, at, e.cst(0)), 0, {}, 1};
  FailureOr<Value> v = e.value(select.getOperand(1), oc);
  if (failed(v))
    return failure();
  if (llvm::isa<VectorType>(v->getType()))
    return FailureOr<Value>(fusion.emitOpError("internal error: a one-hot pick produced a block"));
  Value zero = b.create<arith::ConstantOp>(loc, b.getZeroAttr(v->getType()));
  Value picked = b.create<arith::SelectOp>(loc, inside, *v, zero);
  bool isFloat = llvm::isa<FloatType>(picked.getType());
  if (negated)
    picked = isFloat ? Value(b.create<arith::NegFOp>(loc, picked))
                     : Value(b.create<arith::SubIOp>(loc, zero, picked));
  // The sum starts from +0: a -0 pick sums to +0.
  if (isFloat)
    picked = b.create<arith::AddFOp>(loc, picked, zero);
  return FailureOr<Value>(picked);
}

/// One argmax per program: the lanes split the reduced dimension (block
/// by block), each keeping its first maximum and its index, then the lanes
/// agree on the maximum and on the smallest index holding it. (A serial
/// scan would run once per GPU thread, every thread reading the whole row.)
static FailureOr<Value> argmaxAcrossLanes(KernelEmitter &e, ArgmaxOp op, const Coords &oc) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  int64_t block = e.block;
  Value operand = op.getOperand();
  int64_t dim = op.getDim();
  int64_t n = shapeOf(operand)[dim];
  Type ct = computeType(dtypeOf(operand));
  bool isFloat = llvm::isa<FloatType>(ct);
  Value none = e.splat(e.cst(std::numeric_limits<int64_t>::max())); // no index yet
  Value init = e.splat(isFloat ? Value(b.create<arith::ConstantOp>(loc, b.getFloatAttr(ct, 0.0)))
                               : Value(b.create<arith::ConstantOp>(loc, b.getIntegerAttr(ct, 0))));
  auto isNan = [&](Value v) {
    return b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNO, v, v).getResult();
  };
  SmallVector<Value> res;
  if (failed(e.forLoop(
          (n + block - 1) / block, ValueRange{init, none},
          [&](Value j, ValueRange it, SmallVectorImpl<Value> &y) -> LogicalResult {
            FailureOr<Value> v = e.rowBlock(operand, oc, dim, n, j);
            if (failed(v))
              return failure();
            Value x = *v;
            Value start = e.mulS(j, block);
            Value unset = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, it[1], none);
            // Strictly greater keeps a lane's first maximum; NaN beats
            // everything but an earlier NaN.
            Value better;
            if (isFloat) {
              Value gt = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, x, it[0]);
              Value fresh = b.create<arith::XOrIOp>(
                  loc, isNan(it[0]),
                  e.splat(b.create<arith::ConstantOp>(loc, b.getBoolAttr(true))));
              better =
                  b.create<arith::AndIOp>(loc, b.create<arith::OrIOp>(loc, gt, isNan(x)), fresh);
            } else {
              better = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sgt, x, it[0]);
            }
            Value take = b.create<arith::AndIOp>(loc, e.activeMask(),
                                                 b.create<arith::OrIOp>(loc, unset, better));
            Value index = b.create<arith::AddIOp>(loc, e.splat(start), e.lanes());
            y.push_back(b.create<arith::SelectOp>(loc, take, x, it[0]));
            y.push_back(b.create<arith::SelectOp>(loc, take, index, it[1]));
            return success();
          },
          &res)))
    return failure();
  Value best = res[0], index = res[1];
  Value unset = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, index, none);
  // Lanes that saw no element do not take part in the maximum.
  Value lowest = isFloat ? Value(b.create<arith::ConstantOp>(
                               loc, b.getFloatAttr(ct, -std::numeric_limits<double>::infinity())))
                         : Value(b.create<arith::ConstantOp>(
                               loc, b.getIntegerAttr(ct, llvm::APInt::getSignedMinValue(
                                                             ct.getIntOrFloatBitWidth()))));
  best = b.create<arith::SelectOp>(loc, unset, e.splat(lowest), best);
  Value top = b.create<tile::ReduceOp>(loc, ct, tile::ReduceKind::max, best);
  Value holds =
      isFloat
          ? b.create<arith::OrIOp>(
                 loc, b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OEQ, best, e.splat(top)),
                 b.create<arith::AndIOp>(loc, isNan(best), e.splat(isNan(top))))
                .getResult()
          : b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, best, e.splat(top)).getResult();
  holds = b.create<arith::AndIOp>(
      loc, holds,
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, index, none));
  Value candidates = b.create<arith::SelectOp>(loc, holds, index, none);
  return b.create<tile::ReduceOp>(loc, b.getI64Type(), tile::ReduceKind::min, candidates)
      .getResult();
}

/// First maximum wins and NaN counts as the maximum (as numpy): a scalar
/// loop over the reduced dimension, each lane tracking its own row.
static FailureOr<Value> argmax(KernelEmitter &e, Operation *operation, const Coords &c) {
  auto op = llvm::cast<ArgmaxOp>(operation);
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Value operand = op.getOperand();
  auto in = shapeOf(operand);
  int64_t dim = op.getDim();
  Coords oc(in.size());
  size_t r = 0;
  for (int64_t d = 0; d < int64_t(in.size()); ++d) {
    if (d != dim)
      oc[d] = c[r];
    if (d != dim || op.getKeepdim())
      ++r;
  }
  bool lanes = llvm::any_of(c, [](const Coord &x) { return !x.isScalar(); });
  if (!lanes)
    return argmaxAcrossLanes(e, op, oc);
  Coords first = oc;
  first[dim] = e.constCoord(0);
  FailureOr<Value> v0 = e.value(operand, first);
  if (failed(v0))
    return failure();
  Value best = lanes ? e.toBlock(*v0) : *v0;
  Value bestIdx = lanes ? e.splat(e.cst(0)) : e.cst(0);
  bool isFloat = llvm::isa<FloatType>(getElementTypeOrSelf(best.getType()));
  SmallVector<Value> res;
  if (failed(e.forLoop(
          in[dim], ValueRange{best, bestIdx},
          [&](Value k, ValueRange it, SmallVectorImpl<Value> &y) -> LogicalResult {
            Coords cc = oc;
            cc[dim] = {k, 0, {}, 1};
            FailureOr<Value> v = e.value(operand, cc);
            if (failed(v))
              return failure();
            Value x = lanes ? e.toBlock(*v) : *v;
            Value take;
            if (isFloat) {
              Value gt = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, x, it[0]);
              Value xNan = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNO, x, x);
              Value bestNan = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNO, it[0], it[0]);
              Value notBestNan = b.create<arith::XOrIOp>(
                  loc, bestNan, b.create<arith::ConstantOp>(loc, b.getBoolAttr(true)).getResult());
              Value cand = b.create<arith::OrIOp>(loc, gt, xNan);
              if (lanes)
                notBestNan = b.create<arith::XOrIOp>(
                    loc, bestNan, e.splat(b.create<arith::ConstantOp>(loc, b.getBoolAttr(true))));
              take = b.create<arith::AndIOp>(loc, cand, notBestNan);
            } else {
              take = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sgt, x, it[0]);
            }
            y.push_back(b.create<arith::SelectOp>(loc, take, x, it[0]));
            Value kk = lanes ? e.splat(k) : k;
            y.push_back(b.create<arith::SelectOp>(loc, take, kk, it[1]));
            return success();
          },
          &res)))
    return failure();
  return res[1];
}

/// Philox 4x32-10 on the element's linear index, bit-identical to
/// codegen/reference/Philox.h.
static FailureOr<Value> random(KernelEmitter &e, Operation *operation, const Coords &c) {
  auto op = llvm::cast<RandomUniformOp>(operation);
  OpBuilder &b = e.b;
  Location loc = e.loc;
  int64_t block = e.block;
  const TargetInfo &target = e.target;
  FailureOr<Value> seed = e.value(op.getSeed(), {});
  if (failed(seed))
    return failure();
  // The stream: a kernel input (fusion made it one) or a constant.
  Value stream;
  if (Value v = op.getStreamValue()) {
    FailureOr<Value> s = e.value(v, {});
    if (failed(s))
      return failure();
    stream = b.create<arith::TruncIOp>(loc, b.getI32Type(), *s);
  } else {
    stream =
        b.create<arith::ConstantOp>(loc, b.getI32IntegerAttr(int32_t(uint32_t(op.getStream()))));
  }
  Coord lin = e.linearize(c, shapeOf(op.getResult()));
  Type i32 = b.getI32Type(), i64 = b.getI64Type();
  // `lanes` values per op: 0 for scalars.
  auto like = [&](Type t, int64_t lanes) -> Type {
    return lanes ? Type(VectorType::get({lanes}, t)) : t;
  };
  auto spread = [&](Value scalar, int64_t lanes) -> Value {
    return lanes ? b.create<vector::SplatOp>(loc, like(scalar.getType(), lanes), scalar).getResult()
                 : scalar;
  };
  auto k32 = [&](uint32_t v, int64_t lanes) {
    return spread(b.create<arith::ConstantOp>(loc, b.getIntegerAttr(i32, int64_t(v))), lanes);
  };
  /// The four 32-bit words of Philox 4x32-10 for counters `blk` (i64).
  auto philox = [&](Value blk, int64_t lanes) {
    Value ctr[4] = {
        b.create<arith::TruncIOp>(loc, like(i32, lanes), blk),
        b.create<arith::TruncIOp>(loc, like(i32, lanes),
                                  b.create<arith::ShRUIOp>(loc, blk, spread(e.cst(32), lanes))),
        spread(stream, lanes), k32(0, lanes)};
    Value s = spread(*seed, lanes);
    Value key[2] = {
        b.create<arith::TruncIOp>(loc, like(i32, lanes), s),
        b.create<arith::TruncIOp>(loc, like(i32, lanes),
                                  b.create<arith::ShRUIOp>(loc, s, spread(e.cst(32), lanes)))};
    for (int round = 0; round < 10; ++round) {
      auto m0 = b.create<arith::MulUIExtendedOp>(loc, k32(0xD2511F53u, lanes), ctr[0]);
      auto m1 = b.create<arith::MulUIExtendedOp>(loc, k32(0xCD9E8D57u, lanes), ctr[2]);
      Value n0 =
          b.create<arith::XOrIOp>(loc, b.create<arith::XOrIOp>(loc, m1.getHigh(), ctr[1]), key[0]);
      Value n2 =
          b.create<arith::XOrIOp>(loc, b.create<arith::XOrIOp>(loc, m0.getHigh(), ctr[3]), key[1]);
      ctr[0] = n0;
      ctr[1] = m1.getLow();
      ctr[2] = n2;
      ctr[3] = m0.getLow();
      key[0] = b.create<arith::AddIOp>(loc, key[0], k32(0x9E3779B9u, lanes));
      key[1] = b.create<arith::AddIOp>(loc, key[1], k32(0xBB67AE85u, lanes));
    }
    return std::array<Value, 4>{ctr[0], ctr[1], ctr[2], ctr[3]};
  };

  Value bits;
  int64_t lanes = lin.isScalar() ? 0 : block;
  if (lanes && lin.isLinear() && lin.coef == 1 && lin.align % 4 == 0 && block % 4 == 0 &&
      target.shufflesLanes()) {
    // Contiguous lanes starting at a multiple of 4: four neighbours share a
    // counter, so run Philox once per counter and interleave its words
    // (a quarter of the work of one Philox per lane).
    int64_t g = block / 4;
    SmallVector<int64_t> ids(g);
    for (int64_t i = 0; i < g; ++i)
      ids[i] = i;
    Value counters = b.create<arith::AddIOp>(
        loc, spread(b.create<arith::DivSIOp>(loc, lin.scalar, e.cst(4)), g),
        b.create<arith::ConstantOp>(
            loc, DenseElementsAttr::get(VectorType::get({g}, i64), ArrayRef<int64_t>(ids))));
    auto w = philox(counters, g);
    SmallVector<int64_t> pairs, quads;
    for (int64_t i = 0; i < g; ++i)
      pairs.append({i, g + i});
    for (int64_t i = 0; i < g; ++i)
      quads.append({2 * i, 2 * i + 1, 2 * g + 2 * i, 2 * g + 2 * i + 1});
    Value w01 = b.create<vector::ShuffleOp>(loc, w[0], w[1], pairs);
    Value w23 = b.create<vector::ShuffleOp>(loc, w[2], w[3], pairs);
    bits = b.create<vector::ShuffleOp>(loc, w01, w23, quads);
  } else {
    Value index = lanes ? e.coordVector(lin) : lin.scalar;
    auto w = philox(b.create<arith::ShRUIOp>(loc, index, spread(e.cst(2), lanes)), lanes);
    Value word = b.create<arith::TruncIOp>(
        loc, like(i32, lanes), b.create<arith::AndIOp>(loc, index, spread(e.cst(3), lanes)));
    bits = w[3];
    for (int k = 2; k >= 0; --k)
      bits = b.create<arith::SelectOp>(
          loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, word, k32(k, lanes)),
          w[k], bits);
  }
  Type dt = dtypeOf(op.getResult());
  int mb = dt.isF64() ? 32 : dt.isF32() ? 24 : dt.isF16() ? 11 : 8;
  Type ct = computeType(dt);
  Value top = b.create<arith::ShRUIOp>(loc, bits, k32(32 - mb, lanes));
  Value f = b.create<arith::UIToFPOp>(loc, like(ct, lanes), top);
  Value scaleK = b.create<arith::ConstantOp>(loc, b.getFloatAttr(ct, std::ldexp(1.0, -mb)));
  return b.create<arith::MulFOp>(loc, f, spread(scaleK, lanes)).getResult();
}

/// concat() where every block of lanes lies in one input; nullopt
/// where that is not known.
static std::optional<Value> concatOfWholeBlocks(KernelEmitter &e, ConcatOp op, const Coords &c) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  int64_t block = e.block;
  int64_t dim = op.getDim();
  const Coord &x = c[dim];
  // Lanes run along the concatenated dimension from a block-aligned start,
  // and every input starts at a multiple of the block: each block lies in
  // one input.
  if (!x.isLinear() || x.coef != 1 || !e.activeLimit || x.align % block != 0)
    return std::nullopt;
  for (Value in : op.getInputs())
    if (shapeOf(in)[dim] % block != 0)
      return std::nullopt;
  // Every input is computed at unclamped (affine) coordinates with its
  // loads masked off outside its own blocks, so a block reads only its
  // input, contiguously where that input is (clamping would turn every
  // input's reads into gathers); the block's input is selected whole.
  Value result;
  int64_t offset = 0;
  for (Value in : op.getInputs()) {
    int64_t n = shapeOf(in)[dim];
    Value inside = b.create<arith::AndIOp>(
        loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, x.scalar, e.cst(offset)),
        b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, x.scalar, e.cst(offset + n)));
    Coords cc = c;
    cc[dim] = {b.create<arith::SubIOp>(loc, x.scalar, e.cst(offset)),
               1,
               {},
               std::gcd(x.align, offset == 0 ? kAligned : offset)};
    FailureOr<Value> v = failure();
    {
      KernelEmitter::Scope scope(e);
      e.activeLimit = b.create<arith::SelectOp>(loc, inside, e.activeLimit, e.cst(0));
      v = e.value(in, cc);
    }
    if (failed(v))
      return std::nullopt;
    Value vv = e.toBlock(*v);
    result = result ? b.create<arith::SelectOp>(loc, inside, vv, result).getResult() : vv;
    offset += n;
  }
  return result;
}

/// concat() where lanes run along the concatenated dimension in order
/// (lane l at scalar + (l / div) * coef, coef > 0): each input's lanes are
/// a range [first, limit) of the block. Every input is computed at its
/// unclamped coordinates with its loads confined to its range, so a block
/// straddling inputs (a padding) reads each contiguously; the inputs are
/// selected lane by lane. nullopt for other coordinates.
static std::optional<FailureOr<Value>> concatOfLaneRanges(KernelEmitter &e, ConcatOp op,
                                                          const Coords &c) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  int64_t dim = op.getDim();
  const Coord &x = c[dim];
  if (x.vec || x.coef <= 0 || !e.activeLimit)
    return std::nullopt;
  // ceil(max(a, 0) / coef) * div, at most a block: the first lane whose
  // index reaches a.
  auto firstLaneAt = [&](Value a) {
    Value up = b.create<arith::AddIOp>(loc, b.create<arith::MaxSIOp>(loc, a, e.cst(0)),
                                       e.cst(x.coef - 1));
    Value lane = e.mulS(b.create<arith::DivSIOp>(loc, up, e.cst(x.coef)), x.div);
    return b.create<arith::MinSIOp>(loc, lane, e.cst(e.block)).getResult();
  };
  Value result;
  int64_t offset = 0;
  for (Value in : op.getInputs()) {
    int64_t n = shapeOf(in)[dim];
    Value rel = b.create<arith::SubIOp>(loc, x.scalar, e.cst(offset));
    // Lanes whose index rel + (l / div) * coef lies in [0, n).
    Value lo = firstLaneAt(b.create<arith::SubIOp>(loc, e.cst(0), rel));
    Value hi = firstLaneAt(b.create<arith::SubIOp>(loc, e.cst(n), rel));
    Coords cc = c;
    cc[dim] = {rel, x.coef, {}, gcd(x.align, offset == 0 ? kAligned : offset), x.div};
    FailureOr<Value> v = failure();
    {
      KernelEmitter::Scope scope(e);
      e.activeLimit = b.create<arith::MinSIOp>(loc, e.activeLimit, hi);
      // The first input starts at lane 0 unless an enclosing range starts
      // later (coordinates are never below 0 at an active lane): its loads
      // keep their plain (unmasked where full) form.
      if (offset != 0 || e.activeFirst)
        e.activeFirst = e.activeFirst
                            ? b.create<arith::MaxSIOp>(loc, e.activeFirst, lo).getResult()
                            : lo;
      v = e.value(in, cc);
    }
    if (failed(v))
      return failure();
    Value vv = e.toBlock(*v);
    if (!result) {
      result = vv;
    } else {
      Value inside = b.create<arith::AndIOp>(
          loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, e.lanes(), e.splat(lo)),
          b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, e.lanes(), e.splat(hi)));
      result = b.create<arith::SelectOp>(loc, inside, vv, result);
    }
    offset += n;
  }
  return FailureOr<Value>(result);
}

/// Every input read at a clamped coordinate, the right one selected.
static FailureOr<Value> concat(KernelEmitter &e, Operation *operation, const Coords &c) {
  auto op = llvm::cast<ConcatOp>(operation);
  OpBuilder &b = e.b;
  Location loc = e.loc;
  int64_t dim = op.getDim();
  const Coord &x = c[dim];
  if (std::optional<Value> whole = concatOfWholeBlocks(e, op, c))
    return *whole;
  if (std::optional<FailureOr<Value>> ranges = concatOfLaneRanges(e, op, c))
    return *ranges;
  Value result;
  int64_t offset = 0;
  for (Value in : op.getInputs()) {
    int64_t n = shapeOf(in)[dim];
    Coords cc = c;
    Value inRange;
    if (n == 1 && !x.isScalar()) {
      // An input one element wide is read at index 0 by every lane that
      // selects it (interleaving along a new dimension): no gather.
      cc[dim] = e.constCoord(0);
      inRange = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, e.coordVector(x),
                                        e.splat(e.cst(offset)));
    } else if (x.isScalar()) {
      Value rel = b.create<arith::SubIOp>(loc, x.scalar, e.cst(offset));
      Value lo = b.create<arith::MaxSIOp>(loc, rel, e.cst(0));
      cc[dim] = {b.create<arith::MinSIOp>(loc, lo, e.cst(n - 1)), 0, {}, 1};
      inRange = b.create<arith::AndIOp>(
          loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, rel, e.cst(0)),
          b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, rel, e.cst(n)));
    } else {
      Value rel = b.create<arith::SubIOp>(loc, e.coordVector(x), e.splat(e.cst(offset)));
      Value lo = b.create<arith::MaxSIOp>(loc, rel, e.splat(e.cst(0)));
      cc[dim] = {Value(), 0, b.create<arith::MinSIOp>(loc, lo, e.splat(e.cst(n - 1))), 1};
      inRange = b.create<arith::AndIOp>(
          loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, rel, e.splat(e.cst(0))),
          b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, rel, e.splat(e.cst(n))));
    }
    FailureOr<Value> v = e.value(in, cc);
    if (failed(v))
      return failure();
    Value vv = *v;
    if (!result) {
      result = vv;
    } else {
      if (llvm::isa<VectorType>(inRange.getType()) || llvm::isa<VectorType>(vv.getType()) ||
          llvm::isa<VectorType>(result.getType())) {
        vv = e.toBlock(vv);
        result = e.toBlock(result);
      }
      result = b.create<arith::SelectOp>(loc, inRange, vv, result);
    }
    offset += n;
  }
  return result;
}

void tilegen::populateSpecialOpsLowerings(OpLowerings &lowerings) {
  lowerings.add<ArgmaxOp>(argmax);
  lowerings.add<RandomUniformOp>(random);
  lowerings.add<ConcatOp>(concat);
}
