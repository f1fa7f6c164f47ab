//===- ReduceToTile.cpp - row reductions -> tile --------------------------===//
//
// The reduction op family: reduce_sum, reduce_max and reduce_min at result
// coordinates, inside any kernel. A reduction whose result is one value per
// program walks its reduced dimensions with the lanes along the innermost
// one and folds the lanes at the end (a row kernel: softmax, layer_norm);
// one whose result coordinates hold the lanes accumulates per lane in a
// scalar loop (a column kernel). A partial kernel (SplitReduceToTile.cpp)
// folds one slice of the walk.
//
//===----------------------------------------------------------------------===//
#include "codegen/tile/KernelEmitter.h"

#include "ir/tile/TileDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;
using namespace tilefuse::tilegen;

/// A reduction at result coordinates `c`. When `c` has no lanes (one
/// result per program), lanes run along the operand's innermost reduced
/// dimension and fold at the end; otherwise each lane accumulates its own
/// result while a scalar loop walks the reduced dimensions.
static FailureOr<Value> reduction(KernelEmitter &e, Operation *op, const Coords &c) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  int64_t block = e.block;
  FusionOp fusion = e.fusion;
  Value operand = op->getOperand(0);
  auto in = shapeOf(operand);
  auto dims = op->getAttrOfType<DenseI64ArrayAttr>("dims").asArrayRef();
  bool keepdim = op->getAttrOfType<BoolAttr>("keepdim") &&
                 op->getAttrOfType<BoolAttr>("keepdim").getValue();
  Type ct = computeType(dtypeOf(operand));
  // Operand coordinates of the kept dimensions; reduced ones filled per step.
  Coords oc(in.size());
  {
    size_t r = 0;
    for (int64_t d = 0; d < int64_t(in.size()); ++d) {
      bool reduced = llvm::is_contained(dims, d);
      if (!reduced)
        oc[d] = c[r];
      if (!reduced || keepdim)
        ++r;
    }
  }
  bool lanesInResult = llvm::any_of(c, [](const Coord &x) { return !x.isScalar(); });
  if (!lanesInResult)
    if (std::optional<FailureOr<Value>> picked = oneHotPick(e, op, oc))
      return *picked;
  ReducedLoops loops = reducedLoops(dims, in, lanesInResult);
  // Named copies: lambdas below capture them (C++17 lambdas cannot capture
  // structured bindings).
  SmallVector<int64_t> outerDims = loops.outerDims, outerSizes = loops.outerSizes;
  int64_t laneDim = loops.laneDim;
  int64_t outerCount = numel(outerSizes);

  // Accumulate per lane when lanes fold at the end or when each lane has
  // its own result.
  bool vectorAcc = laneDim >= 0 || lanesInResult;
  Value init = e.neutral(op, ct);
  if (vectorAcc)
    init = e.splat(init);
  // f32 sums accumulate in f64 and round once (along a row, in groups of
  // kSumGroup blocks summed in f32 first, see below).
  init = e.accumulatorInit(op, init);
  // A partial kernel reduces one slice: of the outer loop when it has a
  // trip per slice, else of the blocks of the lane loop.
  bool split = e.chunks > 0 && !lanesInResult && laneDim >= 0;
  int64_t laneSteps = laneDim >= 0 ? (in[laneDim] + block - 1) / block : 1;
  bool splitOuter = split && outerCount >= e.chunks;
  auto sliceBound = [&](int64_t total, int64_t k) -> Value {
    return e.divS(e.mulS(e.addS(e.chunkId, e.cst(k)), total), e.chunks);
  };
  Value outerLo = splitOuter ? sliceBound(outerCount, 0) : e.cst(0);
  Value outerHi = splitOuter ? sliceBound(outerCount, 1) : e.cst(outerCount);
  SmallVector<Value> acc;
  Value filling; // the operand whose scratch row this pass fills
  bool storedEarly = false;
  LogicalResult ok = e.forLoopRange(
      outerLo, outerHi, ValueRange{init},
      [&](Value o, ValueRange iter, SmallVectorImpl<Value> &yield) -> LogicalResult {
        Coords cc = oc;
        e.scatterIndex(o, outerDims, outerSizes, cc);
        if (laneDim < 0) {
          FailureOr<Value> v = e.value(operand, cc);
          if (failed(v))
            return failure();
          if (!vectorAcc && llvm::isa<VectorType>(v->getType()))
            return fusion.emitOpError()
                   << "internal error: a per-program reduction of '" << op->getName()
                   << "' produced a block";
          if (op == e.earlyStoresIn) {
            if (failed(e.storeDomainOutputs(e.earlyOutputs, cc)))
              return failure();
            storedEarly = true;
          }
          yield.push_back(e.accumulate(op, iter[0], vectorAcc ? e.toBlock(*v) : *v));
          return success();
        }
        int64_t n = in[laneDim];
        bool splitInner = split && !splitOuter;
        auto blockStep = [&](Value j, ValueRange it2, SmallVectorImpl<Value> &y2) -> LogicalResult {
          FailureOr<Value> v = e.rowBlock(operand, cc, laneDim, n, j);
          if (failed(v))
            return failure();
          if (op == e.earlyStoresIn && split) {
            // A split full reduction's walk stores the domain-sized
            // results at the block it just read (each block is in one
            // slice).
            Coords bc = cc;
            bc[laneDim] = {e.rowStart, 1, {}, block};
            if (failed(e.storeDomainOutputs(e.earlyOutputs, bc)))
              return failure();
            storedEarly = true;
          }
          Value x = *v;
          if (laneDim == e.rowDim && outerCount == 1 && !split && e.storeRowScratch(operand, cc, x))
            filling = operand;
          if (n % block != 0)
            x = b.create<arith::SelectOp>(loc, e.activeMask(), x, e.splat(e.neutral(op, ct)));
          y2.push_back(e.accumulate(op, it2[0], x));
          return success();
        };
        SmallVector<Value> inner;
        // A widened sum along a row adds groups of kSumGroup blocks in its
        // compute type first and widens each group's sum once: widening
        // every block made long row kernels compute bound (layer_norm's
        // backward), and a sum of a few terms per lane adds an error of a
        // few units of roundoff, not one growing with the row.
        constexpr int64_t kSumGroup = 8;
        if (!split && e.widensSum(op, ct) && laneSteps > 1) {
          int64_t groups = (laneSteps + kSumGroup - 1) / kSumGroup;
          if (failed(e.forLoop(
                  groups, ValueRange{iter[0]},
                  [&](Value g, ValueRange wide, SmallVectorImpl<Value> &y1) -> LogicalResult {
                    Value lo = e.mulS(g, kSumGroup);
                    Value hi = b.create<arith::MinSIOp>(loc, e.addS(lo, e.cst(kSumGroup)),
                                                        e.cst(laneSteps));
                    SmallVector<Value> narrow;
                    if (failed(e.forLoopRange(lo, hi, ValueRange{e.splat(e.neutral(op, ct))},
                                              blockStep, &narrow)))
                      return failure();
                    y1.push_back(e.accumulate(op, wide[0], narrow[0]));
                    return success();
                  },
                  &inner)))
            return failure();
        } else if (failed(e.forLoopRange(splitInner ? sliceBound(laneSteps, 0) : e.cst(0),
                                         splitInner ? sliceBound(laneSteps, 1) : e.cst(laneSteps),
                                         ValueRange{iter[0]}, blockStep, &inner))) {
          return failure();
        }
        yield.push_back(inner[0]);
        return success();
      },
      &acc);
  if (failed(ok))
    return failure();
  // A walk stored them where lanes are in the result, or in a partial
  // kernel along the reduced dimension (whose blocks are the domain's).
  if (storedEarly)
    e.earlyStored = true;
  if (filling)
    e.rowScratch[filling].filled = true;
  if (laneDim < 0)
    return e.accumulated(op, acc[0]);
  tile::ReduceKind kind = isa<ReduceSumOp>(op)   ? tile::ReduceKind::add
                          : isa<ReduceMaxOp>(op) ? tile::ReduceKind::max
                                                 : tile::ReduceKind::min;
  // Fold the lanes at the accumulator's width, then round once.
  Type accType = getElementTypeOrSelf(acc[0].getType());
  Value folded = b.create<tile::ReduceOp>(loc, accType, kind, acc[0]);
  return accType == ct ? folded : b.create<arith::TruncFOp>(loc, ct, folded).getResult();
}

void tilegen::populateReduceLowerings(OpLowerings &lowerings) {
  lowerings.add<ReduceSumOp, ReduceMaxOp, ReduceMinOp>(reduction);
}
