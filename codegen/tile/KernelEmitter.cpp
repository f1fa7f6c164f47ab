//===- KernelEmitter.cpp - the core of graph.fusion -> tile ---------------===//
//
// Programs split the kernel's domain: the kept (not reduced) dimensions are
// divided among programs, the reduced ones are looped over inside a
// program. Values of the region are generated on demand at an index ("emit
// value v at coordinates c"): views (broadcast, transpose, slice, reshape)
// only rewrite coordinates, so they cost no memory traffic, and a
// coordinate that stays affine in the lane number turns into a contiguous
// or strided block load. Anything else falls back to per-lane offsets and a
// gather, which is slower but exact. Every other op is lowered by the op
// family that registered its kind (KernelFamilies.def).
//
//===----------------------------------------------------------------------===//
#include "codegen/tile/KernelEmitter.h"

#include "ir/tile/TileDialect.h"
#include "passes/TargetInfo.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;
using namespace tilefuse::tilegen;


ReducedLoops tilegen::reducedLoops(ArrayRef<int64_t> dims, ArrayRef<int64_t> shape,
                                   bool lanesElsewhere) {
  ReducedLoops l;
  l.outerDims.assign(dims.begin(), dims.end());
  if (!lanesElsewhere && !dims.empty()) {
    l.laneDim = dims.back();
    l.outerDims.pop_back();
  }
  for (int64_t d : l.outerDims)
    l.outerSizes.push_back(shape[d]);
  return l;
}

Type tilegen::storageType(Type dtype) {
  if (dtype.isInteger(1))
    return IntegerType::get(dtype.getContext(), 8);
  return dtype;
}
Type tilegen::computeType(Type dtype) {
  if (dtype.isF16() || dtype.isBF16())
    return Float32Type::get(dtype.getContext());
  return dtype;
}

bool tilegen::isReductionOp(Operation *op) {
  return llvm::isa<ReduceSumOp, ReduceMaxOp, ReduceMinOp, ArgmaxOp>(op);
}

bool tilegen::readsOperandsInPlace(Operation *op) {
  return !llvm::isa<BroadcastInDimOp, TransposeOp, SliceOp, ReshapeOp, ConcatOp,
                    ReduceSumOp, ReduceMaxOp, ReduceMinOp, ArgmaxOp,
                    RandomUniformOp, FullOp, ConstantOp, IotaOp>(op);
}

// --- constants and scalar index arithmetic ----------------------------------

Value KernelEmitter::cst(int64_t v) {
  auto it = intConstants.find(v);
  if (it != intConstants.end())
    return it->second;
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(&kernel.getBody().front());
  Value c = b.create<arith::ConstantIntOp>(loc, v, 64);
  intConstants[v] = c;
  return c;
}

std::optional<int64_t> KernelEmitter::constOf(Value v) {
  APInt value;
  if (matchPattern(v, m_ConstantInt(&value)))
    return value.getSExtValue();
  return std::nullopt;
}

Value KernelEmitter::addS(Value a, Value c) {
  auto x = constOf(a), y = constOf(c);
  if (x && y) return cst(*x + *y);
  if (x && *x == 0) return c;
  if (y && *y == 0) return a;
  return b.create<arith::AddIOp>(loc, a, c);
}

Value KernelEmitter::mulS(Value a, int64_t k) {
  auto x = constOf(a);
  if (x) return cst(*x * k);
  if (k == 1) return a;
  if (k == 0) return cst(0);
  return b.create<arith::MulIOp>(loc, a, cst(k));
}

Value KernelEmitter::divS(Value a, int64_t k) {
  if (auto x = constOf(a)) return cst(*x / k);
  if (k == 1) return a;
  return b.create<arith::DivUIOp>(loc, a, cst(k));
}

Value KernelEmitter::remS(Value a, int64_t k) {
  if (auto x = constOf(a)) return cst(*x % k);
  if (k == 1) return cst(0);
  return b.create<arith::RemUIOp>(loc, a, cst(k));
}

int64_t KernelEmitter::alignOf(Value v, int64_t fallback) {
  if (auto x = constOf(v))
    return *x == 0 ? kAligned : std::abs(*x);
  return fallback;
}

// --- blocks -------------------------------------------------------------------

Value KernelEmitter::splat(Value scalar) {
  return b.create<vector::SplatOp>(loc, vecType(scalar.getType()), scalar);
}

Value KernelEmitter::toBlock(Value v) {
  return llvm::isa<VectorType>(v.getType()) ? v : splat(v);
}

Value KernelEmitter::lanes() {
  if (!laneIds) {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&kernel.getBody().front());
    laneIds = b.create<tile::LanesOp>(loc, vecType(b.getI64Type()));
  }
  return laneIds;
}

Value KernelEmitter::activeMask() {
  assert(activeLimit && "lanes used outside a block loop");
  Value mask = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, lanes(),
                                       splat(activeLimit));
  if (activeFirst)
    mask = b.create<arith::AndIOp>(
        loc, mask, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, lanes(),
                                           splat(activeFirst)));
  return mask;
}

Value KernelEmitter::lanesLeft(int64_t n, Value start) {
  if (n % block == 0)
    return cst(block);
  return b.create<arith::SubIOp>(loc, cst(n), start);
}

Value KernelEmitter::coordVector(const Coord &c) {
  if (c.vec)
    return c.vec;
  Value v = splat(c.scalar);
  if (c.coef != 0) {
    Value l = lanes();
    if (c.div != 1)
      l = b.create<arith::DivUIOp>(loc, l, splat(cst(c.div)));
    if (c.coef != 1)
      l = b.create<arith::MulIOp>(loc, l, splat(cst(c.coef)));
    v = b.create<arith::AddIOp>(loc, v, l);
  }
  return v;
}

Coord KernelEmitter::add(const Coord &x, const Coord &y) {
  // Two lane terms repeating at different rates have no affine sum.
  if (x.vec || y.vec || (x.coef && y.coef && x.div != y.div))
    return {Value(), 0,
            b.create<arith::AddIOp>(loc, coordVector(x), coordVector(y)), 1};
  int64_t coef = x.coef + y.coef;
  return {addS(x.scalar, y.scalar), coef, {}, gcd(x.align, y.align),
          coef == 0 ? 1 : (x.coef ? x.div : y.div)};
}

Coord KernelEmitter::scale(const Coord &x, int64_t k) {
  if (x.vec)
    return {Value(), 0, b.create<arith::MulIOp>(loc, x.vec, splat(cst(k))), 1};
  int64_t al = x.align >= kAligned ? kAligned : x.align * k;
  return {mulS(x.scalar, k), x.coef * k, {}, k == 0 ? kAligned : al,
          k == 0 || x.coef == 0 ? 1 : x.div};
}

/// Whether a scalar known to be a multiple of `align` is one of `k`
/// (kAligned: the scalar is 0).
static bool multipleOf(int64_t align, int64_t k) { return align >= kAligned || align % k == 0; }

/// Whether two coordinates are the same values (same SSA values and lanes).
static bool sameCoord(const Coord &x, const Coord &y) {
  return x.scalar == y.scalar && x.coef == y.coef && x.vec == y.vec && x.div == y.div;
}

Coord KernelEmitter::linearize(const Coords &c, ArrayRef<int64_t> shape) {
  // Coordinates delinearize computed lane by lane, linearized back in the
  // same shape: the original (affine) index, so a contiguous access stays
  // one block load or store instead of a gather.
  for (const Delinearized &d : delinearized)
    if (ArrayRef<int64_t>(d.shape) == shape && c.size() == d.coords.size() &&
        llvm::all_of(llvm::seq<size_t>(0, c.size()),
                     [&](size_t i) { return sameCoord(c[i], d.coords[i]); }))
      return d.lin;
  auto st = rowMajorStrides(shape);
  Coord lin = constCoord(0);
  for (size_t d = 0; d < c.size(); ++d)
    lin = add(lin, scale(c[d], st[d]));
  return lin;
}

Coords KernelEmitter::delinearize(const Coord &lin, ArrayRef<int64_t> shape) {
  Coords out(shape.size());
  if (shape.empty())
    return out;
  int64_t inner = shape.back();
  // The block's lanes take `distinct` indices (each repeated `div` times);
  // they lie in one innermost row when the row is a whole number of them
  // and the first is where one starts.
  int64_t distinct = block % lin.div == 0 ? block / lin.div : 0;
  bool sameRow = lin.isScalar() ||
                 (lin.isAffine() && lin.coef == 1 && distinct && inner % distinct == 0 &&
                  lin.align % distinct == 0);
  if (sameRow) {
    Value rest = lin.scalar;
    for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
      out[d] = {remS(rest, shape[d]), 0, {}, 1};
      if (out[d].scalar == cst(0)) out[d].align = kAligned;
      rest = divS(rest, shape[d]);
    }
    out.back().coef = lin.coef;
    out.back().div = lin.coef ? lin.div : 1;
    out.back().align = lin.coef ? gcd(lin.align, inner) : out.back().align;
    return out;
  }
  if (lin.isLinear() && lin.coef == 1 && shape.size() >= 2 && inner < block &&
      block % inner == 0 && multipleOf(lin.align, inner)) {
    // Rows shorter than the block, the block starting at a row: lane l is
    // at column l % inner of row scalar / inner + l / inner. The rows are
    // one index repeated `inner` times, so a load of the rows' elements is
    // contiguous (the inverse of a strided slice, nearest upsampling).
    Value rows = constOf(lin.scalar) ? cst(*constOf(lin.scalar) / inner)
                                     : b.create<arith::DivSIOp>(loc, lin.scalar, cst(inner))
                                           .getResult();
    Coord outer{rows, 1, {}, lin.align >= kAligned ? kAligned : lin.align / inner, inner};
    Coords rowCoords = delinearize(outer, shape.drop_back());
    std::copy(rowCoords.begin(), rowCoords.end(), out.begin());
    out.back() = {Value(), 0, b.create<arith::RemUIOp>(loc, lanes(), splat(cst(inner))), 1};
    delinearized.push_back({SmallVector<int64_t>(shape), out, lin});
    return out;
  }
  Value rest = coordVector(lin);
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    Value n = splat(cst(shape[d]));
    out[d] = {Value(), 0, b.create<arith::RemUIOp>(loc, rest, n), 1};
    rest = b.create<arith::DivUIOp>(loc, rest, n);
  }
  if (lin.isAffine())
    delinearized.push_back({SmallVector<int64_t>(shape), out, lin});
  return out;
}

void KernelEmitter::scatterIndex(Value linear, ArrayRef<int64_t> dims, ArrayRef<int64_t> sizes,
                                 Coords &into) {
  for (int64_t k = int64_t(dims.size()) - 1; k >= 0; --k) {
    into[dims[k]] = {remS(linear, sizes[k]), 0, {}, 1};
    linear = divS(linear, sizes[k]);
  }
}

KernelEmitter::Key KernelEmitter::keyOf(Value v, const Coords &c) {
  std::string k;
  for (const Coord &x : c) {
    k += std::to_string(reinterpret_cast<uintptr_t>(x.scalar.getAsOpaquePointer()));
    k += ':' + std::to_string(x.coef) + '/' + std::to_string(x.div) + ':';
    k += std::to_string(reinterpret_cast<uintptr_t>(x.vec.getAsOpaquePointer()));
    k += ';';
  }
  return {v.getAsOpaquePointer(), k};
}

// --- values -------------------------------------------------------------------

std::optional<Value> KernelEmitter::memoized(const Key &key) {
  for (auto it = memo.rbegin(); it != memo.rend(); ++it) {
    auto found = it->find(key);
    if (found != it->end())
      return found->second;
  }
  return std::nullopt;
}

// A kernel may chain thousands of ops. Native recursion is bounded by the
// number of index remaps and loops on a path, not by its length: view
// chains are followed in a loop, and same-index operand chains are computed
// bottom-up from an explicit stack before the op that reads them.
FailureOr<Value> KernelEmitter::value(Value v, const Coords &c) {
  Coords coords = c;
  SmallVector<Key> aliases;
  FailureOr<Value> r = failure();
  while (true) {
    Key key = keyOf(v, coords);
    if (std::optional<Value> known = memoized(key)) {
      r = *known;
      break;
    }
    aliases.push_back(std::move(key));
    if (std::optional<Value> kept = loadRowScratch(v, coords)) {
      r = *kept;
      break;
    }
    Operation *op = v.getDefiningOp();
    if (op) {
      if (std::optional<std::pair<Value, Coords>> source = viewSource(op, coords)) {
        v = source->first;
        coords = std::move(source->second);
        continue;
      }
      if (readsOperandsInPlace(op) && failed(computeOperandChains(op, coords)))
        return failure();
    }
    r = compute(v, coords);
    break;
  }
  if (succeeded(r))
    for (Key &key : aliases)
      memo.back()[key] = *r;
  return r;
}

LogicalResult KernelEmitter::computeOperandChains(Operation *root, const Coords &c) {
  struct Frame {
    Operation *op;
    unsigned next;
  };
  SmallVector<Frame> stack = {{root, 0}};
  while (!stack.empty()) {
    Frame &top = stack.back();
    if (top.next == top.op->getNumOperands()) {
      Operation *done = top.op;
      stack.pop_back();
      if (done == root)
        break;
      if (failed(value(done->getResult(0), c)))
        return failure();
      continue;
    }
    Value operand = top.op->getOperand(top.next++);
    Operation *def = operand.getDefiningOp();
    if (!def || !readsOperandsInPlace(def) || memoized(keyOf(operand, c))) {
      // Leaves and remapped operands, in operand order as the op would read them.
      if (failed(value(operand, c)))
        return failure();
      continue;
    }
    // Not memoised, so not computed yet (nor on the stack: the graph has
    // no cycles).
    stack.push_back({def, 0});
  }
  return success();
}

std::optional<std::pair<Value, Coords>>
KernelEmitter::viewSource(Operation *op, const Coords &c) {
  auto resultShape = shapeOf(op->getResult(0));
  if (auto bc = llvm::dyn_cast<BroadcastInDimOp>(op)) {
    auto in = shapeOf(bc.getOperand());
    Coords oc;
    for (auto [i, d] : llvm::enumerate(bc.getDims()))
      oc.push_back(in[i] == 1 && resultShape[d] != 1 ? constCoord(0) : c[d]);
    return std::make_pair(bc.getOperand(), std::move(oc));
  }
  if (auto tr = llvm::dyn_cast<TransposeOp>(op)) {
    Coords oc(c.size());
    for (auto [i, p] : llvm::enumerate(tr.getPerm()))
      oc[p] = c[i];
    return std::make_pair(tr.getOperand(), std::move(oc));
  }
  if (auto sl = llvm::dyn_cast<SliceOp>(op)) {
    Coords oc;
    for (size_t d = 0; d < c.size(); ++d)
      oc.push_back(add(constCoord(sl.getStart()[d]), scale(c[d], sl.getStride()[d])));
    return std::make_pair(sl.getOperand(), std::move(oc));
  }
  if (auto rs = llvm::dyn_cast<ReshapeOp>(op)) {
    auto in = shapeOf(rs.getOperand());
    if (squeezed(in) == squeezed(resultShape))
      return std::make_pair(rs.getOperand(), matchUnitDims(c, resultShape, in));
    if (std::optional<Coords> kept = reshapeAlongRows(c, resultShape, in))
      return std::make_pair(rs.getOperand(), std::move(*kept));
    return std::make_pair(rs.getOperand(), delinearize(linearize(c, resultShape), in));
  }
  return std::nullopt;
}

std::optional<Coords> KernelEmitter::reshapeAlongRows(const Coords &c, ArrayRef<int64_t> from,
                                                      ArrayRef<int64_t> to) {
  if (from.size() >= 2 && to.size() >= 1 && from[from.size() - 2] * from.back() == to.back() &&
      c.back().isScalar() && c[c.size() - 2].isAffine() &&
      llvm::all_of(ArrayRef<Coord>(c).drop_back(2), [](const Coord &x) { return x.isScalar(); })) {
    // Groups of s merged into rows, the lanes running along the groups and
    // one element of each taken (a phase of an interleaving): lane l is at
    // element group * s + k of the row, a strided load. Lanes past the
    // groups' end are inactive, so no lane leaves its row.
    int64_t s = from.back();
    Coord lead = linearize(Coords(c.begin(), c.end() - 2), from.drop_back(2));
    Coords out = delinearize(lead, to.drop_back());
    out.push_back(add(scale(c[c.size() - 2], s), c.back()));
    return out;
  }
  if (from.empty() || to.empty() ||
      !llvm::all_of(ArrayRef<Coord>(c).drop_back(), [](const Coord &x) { return x.isScalar(); }))
    return std::nullopt;
  const Coord &last = c.back();
  int64_t row = from.back();
  // The leading dimensions (one index each) are remapped as numbers.
  Coord lead = linearize(Coords(c.begin(), c.end() - 1), from.drop_back());
  if (to.back() == row) {
    // The rows stay rows: the lanes' coordinate along them is kept
    // whatever it is.
    Coords out = delinearize(lead, to.drop_back());
    out.push_back(last);
    return out;
  }
  int64_t s = to.back();
  if (to.size() < 2 || to[to.size() - 2] * s != row || !last.isLinear() || last.coef != 1 ||
      s <= 1 || s >= block || block % s != 0 || !multipleOf(last.align, s))
    return std::nullopt;
  // Each row split into groups of s, the lanes running along a row from a
  // group's start: lane l is at element l % s of group scalar / s + l / s.
  // Lanes past the row's end are inactive, so this holds however long the
  // row is (unlike delinearize, which must keep every lane in one row).
  Value groups = constOf(last.scalar)
                     ? cst(*constOf(last.scalar) / s)
                     : b.create<arith::DivSIOp>(loc, last.scalar, cst(s)).getResult();
  Coords out = delinearize(lead, to.drop_back(2));
  out.push_back({groups, 1, {}, last.align >= kAligned ? kAligned : last.align / s, s});
  out.push_back({Value(), 0, b.create<arith::RemUIOp>(loc, lanes(), splat(cst(s))), 1});
  delinearized.push_back({SmallVector<int64_t>(to), out, linearize(c, from)});
  return out;
}

FailureOr<Value> KernelEmitter::compute(Value v, const Coords &c) {
  if (auto arg = llvm::dyn_cast<BlockArgument>(v))
    return load(arg, c);
  Operation *op = v.getDefiningOp();
  if (std::optional<std::pair<Value, Coords>> source = viewSource(op, c))
    return value(source->first, source->second);
  if (OpLowering lower = opLowerings().lookup(op))
    return lower(*this, op, c);
  return fusion.emitOpError() << "cannot compile '" << op->getName()
                              << "' inside a kernel; no tile lowering exists for it";
}

Value KernelEmitter::offsetOf(const Coords &c, ArrayRef<int64_t> shape,
                              int64_t &stride, Value &vecOffsets,
                              int64_t *align, int64_t *div) {
  Coord lin = linearize(c, shape);
  if (lin.vec || (lin.div != 1 && !div)) {
    vecOffsets = coordVector(lin);
    stride = 0;
    return Value();
  }
  stride = lin.coef;
  if (align)
    *align = lin.align;
  if (div)
    *div = lin.div;
  return lin.scalar;
}

FailureOr<Value> KernelEmitter::load(BlockArgument arg, const Coords &c) {
  Value ptr = argPointers.lookup(arg);
  Type dt = dtypeOf(arg), st = storageType(dt);
  int64_t stride = 0, div = 1;
  Value vecOffsets;
  Value offset = offsetOf(c, shapeOf(arg), stride, vecOffsets, nullptr, &div);
  Value raw;
  if (!vecOffsets && stride == 0) {
    // Lanes below activeFirst may lie before the input; an index that no
    // active lane shares can be anywhere: kept inside the buffer.
    if (activeFirst)
      offset = b.create<arith::MinSIOp>(
          loc, b.create<arith::MaxSIOp>(loc, offset, cst(0)), cst(numel(shapeOf(arg)) - 1));
    raw = b.create<tile::LoadScalarOp>(loc, st, ptr, offset);
  } else if (!vecOffsets) {
    raw = b.create<tile::LoadOp>(loc, vecType(st), ptr, offset, activeLimit,
                                 b.getI64IntegerAttr(stride), activeFirst,
                                 b.getI64IntegerAttr(div));
  } else {
    raw = b.create<tile::GatherOp>(loc, vecType(st), ptr, vecOffsets, activeMask());
  }
  bool isVec = llvm::isa<VectorType>(raw.getType());
  auto like = [&](Type t) -> Type { return isVec ? Type(vecType(t)) : t; };
  if (dt.isInteger(1)) {
    Value zero = b.create<arith::ConstantOp>(loc, b.getIntegerAttr(st, 0));
    if (isVec) zero = splat(zero);
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, raw, zero).getResult();
  }
  if (computeType(dt) != dt)
    return b.create<arith::ExtFOp>(loc, like(computeType(dt)), raw).getResult();
  return raw;
}

FailureOr<Value> KernelEmitter::rowBlock(Value operand, Coords coords, int64_t dim, int64_t n,
                                         Value j) {
  Value start = mulS(j, block);
  coords[dim] = {start, 1, {}, block};
  // A new block of lanes, all of them from the first (a concat's input
  // range belongs to the block it was set for).
  activeLimit = lanesLeft(n, start);
  activeFirst = Value();
  rowStart = start;
  FailureOr<Value> v = value(operand, coords);
  if (failed(v))
    return failure();
  return toBlock(*v);
}

// --- accumulators -------------------------------------------------------------

Value KernelEmitter::neutral(Operation *op, Type t) {
  bool isFloat = llvm::isa<FloatType>(t);
  if (isa<ReduceSumOp>(op))
    return isFloat ? Value(b.create<arith::ConstantOp>(loc, b.getFloatAttr(t, 0.0)))
                   : b.create<arith::ConstantOp>(loc, b.getIntegerAttr(t, 0));
  bool isMax = isa<ReduceMaxOp>(op);
  if (isFloat)
    return b.create<arith::ConstantOp>(
        loc, b.getFloatAttr(t, isMax ? -INFINITY : INFINITY));
  unsigned w = t.getIntOrFloatBitWidth();
  APInt v = isMax ? APInt::getSignedMinValue(w) : APInt::getSignedMaxValue(w);
  return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(t, v));
}

Value KernelEmitter::combine(Operation *op, Value acc, Value v) {
  bool isFloat = llvm::isa<FloatType>(getElementTypeOrSelf(acc.getType()));
  if (isa<ReduceSumOp>(op))
    return isFloat ? Value(b.create<arith::AddFOp>(loc, acc, v))
                   : b.create<arith::AddIOp>(loc, acc, v);
  if (isa<ReduceMaxOp>(op))
    return isFloat ? Value(b.create<arith::MaximumFOp>(loc, acc, v))
                   : b.create<arith::MaxSIOp>(loc, acc, v);
  return isFloat ? Value(b.create<arith::MinimumFOp>(loc, acc, v))
                 : b.create<arith::MinSIOp>(loc, acc, v);
}

// f32 sums accumulate in f64: a lane that adds
// many small terms to one large one (a softmax row with a dominant logit)
// would drop them all in f32, an error growing with the row (1e-5 relative
// at 262,144 classes). A compensated (Kahan) f32 sum is as accurate but
// lengthens the loop-carried dependency fourfold; the f64 add keeps one
// add per step, at the cost of a widening conversion. f64 sums stay f64.
bool KernelEmitter::widensSum(Operation *op, Type t) const {
  return isa<ReduceSumOp>(op) && getElementTypeOrSelf(t).isF32();
}

Value KernelEmitter::accumulatorInit(Operation *op, Value neutralValue) {
  if (!widensSum(op, neutralValue.getType()))
    return neutralValue;
  Type wide = b.getF64Type();
  if (auto v = llvm::dyn_cast<VectorType>(neutralValue.getType()))
    wide = VectorType::get(v.getShape(), wide);
  return b.create<arith::ConstantOp>(loc, b.getZeroAttr(wide));
}

Value KernelEmitter::accumulate(Operation *op, Value acc, Value x) {
  if (getElementTypeOrSelf(acc.getType()) != getElementTypeOrSelf(x.getType()))
    x = b.create<arith::ExtFOp>(loc, acc.getType(), x);
  return combine(op, acc, x);
}

Value KernelEmitter::accumulated(Operation *op, Value acc) {
  Type want = computeType(dtypeOf(op->getOperand(0)));
  if (getElementTypeOrSelf(acc.getType()) == want)
    return acc;
  if (auto v = llvm::dyn_cast<VectorType>(acc.getType()))
    want = VectorType::get(v.getShape(), want);
  return b.create<arith::TruncFOp>(loc, want, acc);
}

// --- stores and arguments -----------------------------------------------------

Coords KernelEmitter::matchUnitDims(const Coords &from,
                                    ArrayRef<int64_t> fromShape,
                                    ArrayRef<int64_t> shape) {
  Coords nonUnit;
  for (size_t d = 0; d < fromShape.size(); ++d)
    if (fromShape[d] != 1)
      nonUnit.push_back(from[d]);
  Coords out;
  size_t k = 0;
  for (int64_t s : shape)
    out.push_back(s == 1 ? constCoord(0) : nonUnit[k++]);
  return out;
}

LogicalResult KernelEmitter::store(unsigned output, const Coords &c, Value computed) {
  Value result = fusion.getBody().front().getTerminator()->getOperand(output);
  FailureOr<Value> v = computed ? FailureOr<Value>(computed) : value(result, c);
  if (failed(v))
    return failure();
  Type dt = dtypeOf(result), st = storageType(dt);
  int64_t stride = 0, alignElems = 1;
  Value vecOffsets;
  Value offset = offsetOf(c, shapeOf(result), stride, vecOffsets, &alignElems);
  Value x = *v;
  bool isVec = stride != 0 || vecOffsets;
  if (isVec)
    x = toBlock(x);
  else if (llvm::isa<VectorType>(x.getType()))
    x = b.create<vector::ExtractOp>(loc, x, ArrayRef<int64_t>{0});
  auto like = [&](Type t) -> Type { return isVec ? Type(vecType(t)) : t; };
  if (dt.isInteger(1))
    x = b.create<arith::ExtUIOp>(loc, like(st), x);
  else if (computeType(dt) != dt)
    x = b.create<arith::TruncFOp>(loc, like(st), x);
  if (output >= outputPointers.size() || !outputPointers[output])
    return fusion.emitOpError("internal error: result ")
           << output << " has no output argument in kernel '" << kernel.getSymName() << "'";
  Value ptr = outputPointers[output];
  if (vecOffsets)
    b.create<tile::ScatterOp>(loc, x, ptr, vecOffsets, activeMask());
  else if (isVec) {
    auto storeOp = b.create<tile::StoreOp>(loc, x, ptr, offset, activeLimit,
                                           b.getI64IntegerAttr(stride),
                                           b.getI64IntegerAttr(1), UnitAttr());
    // Bytes known to divide lane 0's address, capped at a cache line.
    int64_t bytes = st.getIntOrFloatBitWidth() / 8;
    int64_t alignBytes = 1;
    while (alignBytes < 64 && (alignElems * bytes) % (alignBytes * 2) == 0)
      alignBytes *= 2;
    storeOp.setAlignment(alignBytes);
    int64_t total = bytes;
    for (int64_t d : shapeOf(result))
      total *= d;
    if (stride == 1 && total >= target.streamingStoreBytes())
      storeOp.setStreaming(true);
  }
  else
    b.create<tile::StoreScalarOp>(loc, x, ptr, offset);
  return success();
}

void KernelEmitter::bindArguments(unsigned extraBeforeOutputs, bool partial,
                                  const SmallVector<unsigned> *only) {
  Block &entry = kernel.getBody().front();
  b.setInsertionPointToStart(&entry);
  memo.emplace_back();
  Block &body = fusion.getBody().front();
  for (auto [i, arg] : llvm::enumerate(body.getArguments()))
    argPointers[arg] = entry.getArgument(i);
  if (partial)
    return;
  outputPointers.assign(fusion.getNumResults(), Value());
  unsigned bound = only ? only->size() : fusion.getNumResults();
  for (unsigned k = 0; k < bound; ++k)
    outputPointers[only ? (*only)[k] : k] =
        entry.getArgument(body.getNumArguments() + extraBeforeOutputs + k);
}

// --- programs -----------------------------------------------------------------

KeptSpace KernelEmitter::keptSpace(ArrayRef<int64_t> reduced) {
  KeptSpace k;
  k.domain.assign(fusion.getDomain().begin(), fusion.getDomain().end());
  int64_t rank = k.domain.size();
  for (int64_t d = 0; d < rank; ++d)
    if (!llvm::is_contained(reduced, d)) {
      k.kept.push_back(d);
      k.keptShape.push_back(k.domain[d]);
      k.elements *= k.domain[d];
    }
  // A pointwise kernel whose rows are much shorter than its block runs its
  // lanes across rows (flatPointwise): blocks of the whole domain.
  if (flatLanes) {
    k.flat = true;
    k.lanesKept = true;
    k.programs = (k.elements + block - 1) / block;
    return k;
  }
  // Lanes run along the innermost dimension; when it is kept, programs
  // split it into blocks, otherwise each program owns whole rows. Short
  // rows (keptLanes) put the lanes on the innermost kept dimension instead:
  // one lane per row, each looping over its few elements.
  k.lanesKept = rank > 0 && !k.kept.empty() && (k.kept.back() == rank - 1 || keptLanes);
  k.laneDim = k.lanesKept ? k.kept.back() : -1;
  k.progDims = k.kept;
  if (k.lanesKept)
    k.progDims.pop_back();
  k.blocksPerRow = k.lanesKept ? (k.domain[k.laneDim] + block - 1) / block : 1;
  k.programs = k.blocksPerRow;
  for (int64_t d : k.progDims) {
    k.progSizes.push_back(k.domain[d]);
    k.programs *= k.domain[d];
  }
  return k;
}

Coords KernelEmitter::keptDomainCoords(const KeptSpace &k, Value pid) {
  int64_t rank = k.domain.size();
  if (k.flat) {
    Value start = mulS(pid, block);
    activeLimit = lanesLeft(k.elements, start);
    activeFirst = Value();
    return delinearize({start, 1, {}, block}, k.domain);
  }
  Coords dc(rank);
  Value rest = pid;
  SmallVector<int64_t> dims = k.progDims, sizes = k.progSizes;
  if (k.fastProgDim >= 0) {
    dc[dims[k.fastProgDim]] = {remS(pid, sizes[k.fastProgDim]), 0, {}, 1};
    rest = divS(pid, sizes[k.fastProgDim]);
    dims.erase(dims.begin() + k.fastProgDim);
    sizes.erase(sizes.begin() + k.fastProgDim);
  }
  scatterIndex(divS(rest, k.blocksPerRow), dims, sizes, dc);
  if (k.lanesKept) {
    Value start = mulS(remS(rest, k.blocksPerRow), block);
    dc[k.laneDim] = {start, 1, {}, block};
    activeLimit = lanesLeft(k.domain[k.laneDim], start);
    activeFirst = Value();
  }
  return dc;
}

Coords KernelEmitter::keptCoords(const KeptSpace &k, const Coords &dc, ArrayRef<int64_t> shape) {
  Coords kc;
  for (int64_t d : k.kept)
    kc.push_back(dc[d]);
  return matchUnitDims(kc, k.keptShape, shape);
}

std::tuple<Value, Value, Value> KernelEmitter::sliceRows(Value slice, int64_t rows, int64_t n,
                                                         int64_t perGroup) {
  Value first = divS(mulS(slice, rows), n);
  Value end = divS(mulS(addS(slice, cst(1)), rows), n);
  Value groups =
      divS(addS(b.create<arith::SubIOp>(loc, end, first), cst(perGroup - 1)), perGroup);
  return {first, end, groups};
}

// --- row scratch --------------------------------------------------------------

/// Whether `root`, or an op it reads at the same coordinates, costs more
/// than a load: a transcendental, a division, random bits.
static bool costlyToRecompute(Operation *root) {
  SmallVector<Operation *> work = {root};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!work.empty() && seen.size() < 64) {
    Operation *op = work.pop_back_val();
    if (!seen.insert(op).second)
      continue;
    if (llvm::isa<ExpOp, LogOp, TanhOp, ErfOp, PowOp, SigmoidOp, SqrtOp, RsqrtOp, Log1pOp,
                  Expm1Op, RandomUniformOp>(op) ||
        (llvm::isa<DivOp>(op) && llvm::isa<FloatType>(dtypeOf(op->getResult(0)))))
      return true;
    if (!readsOperandsInPlace(op))
      continue;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        work.push_back(def);
  }
  return false;
}

void KernelEmitter::planRowScratch(const KeptSpace &ks) {
  auto reduced = fusion.getReduced();
  if (chunks > 0 || flatLanes || keptLanes || ks.lanesKept || reduced.size() != 1 ||
      reduced[0] != int64_t(ks.domain.size()) - 1)
    return;
  rowDim = reduced[0];
  int64_t budget = target.rowScratchBytes() - columnScratchBytes;
  int64_t n = ks.domain[rowDim];
  Block &body = fusion.getBody().front();
  for (Operation &op : body.without_terminator()) {
    // A one-hot pick reads one element, not the row: nothing to keep.
    if (!llvm::isa<ReduceSumOp, ReduceMaxOp, ReduceMinOp>(op) ||
        squeezed(shapeOf(op.getResult(0))) != squeezed(ks.keptShape) || matchOneHotPick(&op))
      continue;
    Value v = op.getOperand(0);
    Operation *def = v.getDefiningOp();
    Type ct = computeType(dtypeOf(v));
    bool readAgain = llvm::any_of(v.getUsers(), [&](Operation *u) { return u != &op; });
    int64_t bytes = n * (ct.getIntOrFloatBitWidth() / 8);
    if (!def || rowScratch.count(v) ||
        ArrayRef<int64_t>(shapeOf(v)) != ArrayRef<int64_t>(ks.domain) ||
        !(ct.isF32() || ct.isF64()) || !readAgain || !costlyToRecompute(def) || bytes > budget)
      continue;
    budget -= bytes;
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&kernel.getBody().front());
    rowScratch[v].buffer =
        b.create<tile::ScratchOp>(loc, tile::PtrType::get(b.getContext(), ct), n);
  }
}

bool KernelEmitter::storeRowScratch(Value v, const Coords &c, Value x) {
  auto it = rowScratch.find(v);
  if (it == rowScratch.end() || it->second.filled)
    return false;
  int64_t bytes = getElementTypeOrSelf(x.getType()).getIntOrFloatBitWidth() / 8;
  b.create<tile::StoreOp>(loc, x, it->second.buffer, rowStart, activeLimit,
                          b.getI64IntegerAttr(1),
                          b.getI64IntegerAttr(std::min<int64_t>(64, block * bytes)),
                          UnitAttr());
  it->second.stored = c;
  return true;
}

std::optional<Value> KernelEmitter::loadRowScratch(Value v, const Coords &c) {
  auto it = rowScratch.find(v);
  if (it == rowScratch.end() || !it->second.filled || !rowStart)
    return std::nullopt;
  const Coords &stored = it->second.stored;
  for (size_t d = 0; d < c.size(); ++d) {
    bool match = int64_t(d) == rowDim
                     ? c[d].scalar == rowStart && c[d].coef == 1 && c[d].isLinear()
                     : sameCoord(c[d], stored[d]);
    if (!match)
      return std::nullopt;
  }
  Type t = llvm::cast<tile::PtrType>(it->second.buffer.getType()).getPointee();
  return b.create<tile::LoadOp>(loc, vecType(t), it->second.buffer, rowStart, activeLimit,
                                b.getI64IntegerAttr(1))
      .getResult();
}

// --- op families and kernels --------------------------------------------------

OpLowering OpLowerings::lookup(Operation *op) const {
  return table.lookup(op->getName().getTypeID());
}

const OpLowerings &tilegen::opLowerings() {
  static const OpLowerings lowerings = [] {
    OpLowerings all;
#define TILEFUSE_OP_FAMILY(Name) populate##Name##Lowerings(all);
#include "codegen/tile/KernelFamilies.def"
#undef TILEFUSE_OP_FAMILY
    return all;
  }();
  return lowerings;
}

void tilegen::loadTileDialects(MLIRContext *ctx) {
  ctx->loadDialect<tile::TileDialect, arith::ArithDialect, math::MathDialect,
                   scf::SCFDialect, vector::VectorDialect, func::FuncDialect>();
}

SmallVector<Type> tilegen::pointersTo(ValueRange values, bool compute) {
  SmallVector<Type> out;
  for (Value v : values)
    out.push_back(tile::PtrType::get(v.getContext(), compute ? computeType(dtypeOf(v))
                                                             : storageType(dtypeOf(v))));
  return out;
}

func::FuncOp tilegen::createKernel(FusionOp fusion, ModuleOp module, StringRef name,
                                   ArrayRef<Type> args, int64_t block) {
  OpBuilder b(fusion.getContext());
  b.setInsertionPointToEnd(module.getBody());
  auto kernel = b.create<func::FuncOp>(fusion.getLoc(), name, b.getFunctionType(args, {}));
  kernel.addEntryBlock();
  kernel->setAttr(tile::kKernelAttr, b.getUnitAttr());
  kernel->setAttr(tile::kBlockAttr, b.getI64IntegerAttr(block));
  SmallVector<Attribute> names;
  for (Operation &op : fusion.getBody().front().without_terminator())
    names.push_back(b.getStringAttr(op.getName().getStringRef()));
  kernel->setAttr(tile::kFusedOpsAttr, b.getArrayAttr(names));
  return kernel;
}

void tilegen::finishKernel(func::FuncOp kernel) {
  OpBuilder end(kernel.getContext());
  end.setInsertionPointToEnd(&kernel.getBody().front());
  end.create<func::ReturnOp>(kernel.getLoc());
}
