//===- SplitReduceToTile.cpp - split and column reductions -> tile --------===//
//
// The kernel family of reductions split in two kernels, for reductions
// with too little parallelism for their size: a partial kernel whose
// programs each fold one slice of the reduced rows into slots, and a
// combine kernel that folds the slices and computes the results. A full
// reduction has one slot per slice; a column reduction one row of kept
// elements per slice, walked per block of kept elements or, where the
// target has the scratch, by whole rows. Enters through lowerSplitReduction
// and lowerSplitColumnReduction (FusionToTile.h).
//
//===----------------------------------------------------------------------===//
#include "codegen/tile/FusionToTile.h"
#include "codegen/tile/KernelEmitter.h"

#include "ir/tile/TileDialect.h"
#include "passes/TargetInfo.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;
using namespace tilefuse::tilegen;


// --- split full reductions ----------------------------------------------------
/// The results the combine kernel of a split full reduction stores.
static SmallVector<unsigned> combineKernelResults(FusionOp fusion) {
  SmallVector<unsigned> partial = partialKernelResults(fusion), out;
  for (unsigned i = 0; i < fusion.getNumResults(); ++i)
    if (!llvm::is_contained(partial, i))
      out.push_back(i);
  return out;
}


/// Split full reductions (see lowerSplitReduction): the programs of the
/// partial kernel each reduce one of `n` slices into the buffers after
/// the inputs, and store the domain-sized results of their slice as the
/// reduction's walk reads it.
static LogicalResult emitPartial(KernelEmitter &e, int64_t n, ArrayRef<Operation *> reductions) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  FusionOp fusion = e.fusion;
  func::FuncOp kernel = e.kernel;
  SmallVector<unsigned> stored = partialKernelResults(fusion);
  e.bindArguments(reductions.size(), /*partial=*/stored.empty(), &stored);
  if (!stored.empty()) {
    e.earlyStoresIn = reductions.front();
    e.earlyOutputs = stored;
  }
  Block &entry = kernel.getBody().front();
  unsigned firstSlot = fusion.getBody().front().getNumArguments();
  kernel->setAttr(tile::kGridAttr, b.getI64IntegerAttr(n));
  e.chunkId = b.create<tile::ProgramIdOp>(loc, b.getI64Type());
  e.chunks = n;
  for (auto [k, op] : llvm::enumerate(reductions)) {
    FailureOr<Value> v = e.value(op->getResult(0), e.unitCoords(op->getResult(0)));
    if (failed(v))
      return failure();
    b.create<tile::StoreScalarOp>(loc, *v, entry.getArgument(firstSlot + k), e.chunkId);
  }
  if (!stored.empty() && !e.earlyStored)
    return fusion.emitOpError("internal error: a split reduction's walk did not store its "
                              "domain-sized results");
  return success();
}

/// The combine kernel of a split full reduction: one program folds the
/// slices.
static LogicalResult emitCombine(KernelEmitter &e, int64_t n, ArrayRef<Operation *> reductions) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  FusionOp fusion = e.fusion;
  func::FuncOp kernel = e.kernel;
  SmallVector<unsigned> results = combineKernelResults(fusion);
  e.bindArguments(reductions.size(), /*partial=*/false, &results);
  Block &entry = kernel.getBody().front();
  unsigned firstSlot = fusion.getBody().front().getNumArguments();
  kernel->setAttr(tile::kGridAttr, b.getI64IntegerAttr(1));
  for (auto [k, op] : llvm::enumerate(reductions)) {
    Value slots = entry.getArgument(firstSlot + k);
    Type t = llvm::cast<tile::PtrType>(slots.getType()).getPointee();
    Value partials = b.create<tile::LoadOp>(loc, e.vecType(t), slots, e.cst(0), e.cst(n),
                                            b.getI64IntegerAttr(1));
    tile::ReduceKind kind = isa<ReduceSumOp>(op)   ? tile::ReduceKind::add
                            : isa<ReduceMaxOp>(op) ? tile::ReduceKind::max
                                                   : tile::ReduceKind::min;
    Value total = b.create<tile::ReduceOp>(loc, t, kind, partials);
    e.memo.back()[e.keyOf(op->getResult(0), e.unitCoords(op->getResult(0)))] = total;
  }
  Operation *yield = fusion.getBody().front().getTerminator();
  for (unsigned i : results)
    if (failed(e.store(i, e.unitCoords(yield->getOperand(i)))))
      return failure();
  return success();
}

// --- split column reductions --------------------------------------------------

/// A sum of a domain-shaped value over every dimension (see
/// columnSplittableReductions): folded by a column kernel as column
/// partials, then over the columns.
static bool isTotalOf(Operation *op, FusionOp fusion) {
  auto dims = op->getAttrOfType<DenseI64ArrayAttr>("dims");
  return llvm::isa<ReduceSumOp>(op) && dims &&
         ArrayRef<int64_t>(shapeOf(op->getOperand(0))) == fusion.getDomain() &&
         int64_t(dims.size()) == int64_t(fusion.getDomain().size());
}

/// A result of the domain's elements (its shape, or a row-major reshape of
/// it: a layer norm's gradient input widened as [B*T, d] beside [B, T, d]
/// column sums) that reads no reduction: the partial kernel of a split
/// column reduction stores it where its walk computes it (a batch norm's
/// normalised output beside the next statistics), as storeDomainOutputs
/// maps the walk's coordinates to the result's.
static bool isColumnWalkResult(Value v, FusionOp fusion) {
  return numel(shapeOf(v)) == numel(fusion.getDomain()) && !readsReduction(v);
}

/// The results of split column reduction `fusion` its partial kernel
/// stores (isColumnWalkResult), or those its combine kernel stores.
static SmallVector<unsigned> columnResults(FusionOp fusion, bool walk) {
  SmallVector<unsigned> out;
  for (auto [i, v] : llvm::enumerate(fusion.getBody().front().getTerminator()->getOperands()))
    if (isColumnWalkResult(v, fusion) == walk)
      out.push_back(unsigned(i));
  return out;
}

/// One program per slice of rows, walking its rows in memory order: every
/// block of every row is read once, contiguously, and folded into
/// accumulators for all kept elements kept in scratch rows. (A program per
/// block of kept elements reads one block of every row: strided by the row,
/// a new page per row, and each row fetched by every block's program.)
static LogicalResult emitColumnPartialByRows(KernelEmitter &e, int64_t n,
                                             ArrayRef<Operation *> reductions,
                                             const KeptSpace &ks,
                                             ArrayRef<unsigned> walkResults) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  int64_t block = e.block;
  FusionOp fusion = e.fusion;
  func::FuncOp kernel = e.kernel;
  Block &entry = kernel.getBody().front();
  unsigned firstSlot = fusion.getBody().front().getNumArguments();
  kernel->setAttr(tile::kGridAttr, b.getI64IntegerAttr(n));
  e.chunkId = b.create<tile::ProgramIdOp>(loc, b.getI64Type());
  SmallVector<Value> accumulators;
  SmallVector<Type> accTypes;
  for (Operation *op : reductions) {
    Value init = e.accumulatorInit(op, e.neutral(op, computeType(dtypeOf(op->getOperand(0)))));
    accTypes.push_back(init.getType());
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&entry);
    accumulators.push_back(b.create<tile::ScratchOp>(
        loc, tile::PtrType::get(b.getContext(), init.getType()), ks.elements));
  }
  // Element offset of the lanes of kept block `kp` in the kept shape (also
  // in each scratch row); sets the active limit.
  auto keptBlock = [&](Value kp, Coords &dc) -> FailureOr<Value> {
    dc = e.keptDomainCoords(ks, kp);
    int64_t stride = 0;
    Value vecOffsets;
    Value offset = e.offsetOf(e.keptCoords(ks, dc, ks.keptShape), ks.keptShape, stride, vecOffsets);
    if (vecOffsets || stride != 1)
      return fusion.emitOpError("internal error: a column partial whose lanes are not contiguous");
    return offset;
  };
  auto unit = b.getI64IntegerAttr(1);
  // A block starts at a multiple of the block within a kept row; rows of a
  // length that is no multiple of the block shift the blocks of later rows.
  auto aligned = [&](Type t) {
    int64_t bytes = std::max<int64_t>(1, t.getIntOrFloatBitWidth() / 8);
    bool wholeBlocks = ks.keptShape.empty() || ks.keptShape.back() % block == 0;
    return b.getI64IntegerAttr(wholeBlocks ? std::min<int64_t>(64, block * bytes) : bytes);
  };
  // Neutral accumulators.
  if (failed(e.forLoop(ks.programs, ValueRange{},
                       [&](Value kp, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
                         Coords dc;
                         FailureOr<Value> at = keptBlock(kp, dc);
                         if (failed(at))
                           return failure();
                         for (auto [k, op] : llvm::enumerate(reductions))
                           b.create<tile::StoreOp>(
                               loc,
                               e.splat(e.accumulatorInit(
                                   op, e.neutral(op, computeType(dtypeOf(op->getOperand(0)))))),
                               accumulators[k], *at, e.activeLimit, unit, aligned(accTypes[k]),
                               UnitAttr());
                         return success();
                       })))
    return failure();
  // Rows go in groups of kRowsPerGroup: for each block of kept elements a
  // group folds into registers, and the scratch row is read and written
  // once per group instead of once per row (layer_norm's dgamma, dbeta and
  // value: three f64 read-modify-writes per element made the walk compute
  // bound). The group's rows stay in cache while its blocks are walked, so
  // memory is still read once, in order.
  // Four rows: rows of a power-of-two length map a column block of every
  // row to the same L1 set, so a group of 8 or more rows (8 ways) evicts
  // itself (65536 x 1024 f32: 4 rows 31 ms, 1 row 44 ms, 8 rows 28-41 ms,
  // 16 rows 95 ms).
  constexpr int64_t kRowsPerGroup = 4;
  ReducedLoops rows = reducedLoops(fusion.getReduced(), ks.domain, /*lanesElsewhere=*/true);
  int64_t rowCount = numel(rows.outerSizes);
  // Named copies: the lambdas below capture them (C++17).
  Value firstRow, endRow, groups;
  std::tie(firstRow, endRow, groups) = e.sliceRows(e.chunkId, rowCount, n, kRowsPerGroup);
  if (failed(e.forLoopRange(
          e.cst(0), groups, ValueRange{},
          [&](Value g, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
            Value lo = e.addS(firstRow, e.mulS(g, kRowsPerGroup));
            Value hi = b.create<arith::MinSIOp>(loc, e.addS(lo, e.cst(kRowsPerGroup)), endRow);
            return e.forLoop(
                ks.programs, ValueRange{},
                [&](Value kp, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
                  Coords dc;
                  FailureOr<Value> at = keptBlock(kp, dc);
                  if (failed(at))
                    return failure();
                  SmallVector<Value> init, sums;
                  for (Operation *op : reductions)
                    init.push_back(e.splat(e.accumulatorInit(
                        op, e.neutral(op, computeType(dtypeOf(op->getOperand(0)))))));
                  if (failed(e.forLoopRange(
                          lo, hi, init,
                          [&](Value r, ValueRange acc,
                              SmallVectorImpl<Value> &next) -> LogicalResult {
                            Coords rc = dc;
                            e.scatterIndex(r, rows.outerDims, rows.outerSizes, rc);
                            for (auto [k, op] : llvm::enumerate(reductions)) {
                              FailureOr<Value> v = e.value(op->getOperand(0), rc);
                              if (failed(v))
                                return failure();
                              next.push_back(e.accumulate(op, acc[k], e.toBlock(*v)));
                            }
                            return e.storeDomainOutputs(walkResults, rc);
                          },
                          &sums)))
                    return failure();
                  for (auto [k, op] : llvm::enumerate(reductions)) {
                    Value acc = b.create<tile::LoadOp>(loc, e.vecType(accTypes[k]), accumulators[k],
                                                       *at, e.activeLimit, unit);
                    b.create<tile::StoreOp>(loc, e.combine(op, acc, sums[k]), accumulators[k], *at,
                                            e.activeLimit, unit, aligned(accTypes[k]), UnitAttr());
                  }
                  return success();
                });
          })))
    return failure();
  // slot[slice][kept element], rounded once as the per-block partial does.
  return e.forLoop(ks.programs, ValueRange{},
                   [&](Value kp, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
                     Coords dc;
                     FailureOr<Value> at = keptBlock(kp, dc);
                     if (failed(at))
                       return failure();
                     for (auto [k, op] : llvm::enumerate(reductions)) {
                       Value acc = b.create<tile::LoadOp>(
                           loc, e.vecType(accTypes[k]), accumulators[k], *at, e.activeLimit, unit);
                       b.create<tile::StoreOp>(loc, e.accumulated(op, acc),
                                               entry.getArgument(firstSlot + k),
                                               e.addS(*at, e.mulS(e.chunkId, ks.elements)),
                                               e.activeLimit, unit, unit, UnitAttr());
                     }
                     return success();
                   });
}

/// Split column reductions (see lowerSplitColumnReduction): the programs
/// of the partial kernel each fold one of `n` slices of the reduced rows
/// for one block of kept elements into slot[slice, kept].
static LogicalResult emitColumnPartial(KernelEmitter &e, int64_t n,
                                       ArrayRef<Operation *> reductions) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  FusionOp fusion = e.fusion;
  func::FuncOp kernel = e.kernel;
  const TargetInfo &target = e.target;
  SmallVector<unsigned> walkResults = columnResults(fusion, /*walk=*/true);
  e.bindArguments(reductions.size(), /*partial=*/walkResults.empty(), &walkResults);
  Block &entry = kernel.getBody().front();
  unsigned firstSlot = fusion.getBody().front().getNumArguments();
  KeptSpace ks = e.keptSpace();
  if (ks.lanesKept && columnPartialWalksRows(fusion, reductions, target))
    return emitColumnPartialByRows(e, n, reductions, ks, walkResults);
  kernel->setAttr(tile::kGridAttr, b.getI64IntegerAttr(ks.programs * n));
  Value pid = b.create<tile::ProgramIdOp>(loc, b.getI64Type());
  e.chunkId = e.divS(pid, ks.programs);
  Coords dc = e.keptDomainCoords(ks, e.remS(pid, ks.programs));
  // One walk over this slice's rows folds every reduction (layer_norm's
  // dgamma and dbeta read dy once).
  ReducedLoops rows = reducedLoops(fusion.getReduced(), ks.domain, /*lanesElsewhere=*/true);
  int64_t rowCount = numel(rows.outerSizes);
  SmallVector<Value> init;
  for (Operation *op : reductions)
    init.push_back(
        e.accumulatorInit(op, e.splat(e.neutral(op, computeType(dtypeOf(op->getOperand(0)))))));
  SmallVector<Value> folded;
  if (failed(e.forLoopRange(
          e.divS(e.mulS(e.chunkId, rowCount), n),
          e.divS(e.mulS(e.addS(e.chunkId, e.cst(1)), rowCount), n), init,
          [&](Value r, ValueRange acc, SmallVectorImpl<Value> &yield) -> LogicalResult {
            Coords cc = dc;
            e.scatterIndex(r, rows.outerDims, rows.outerSizes, cc);
            for (auto [k, op] : llvm::enumerate(reductions)) {
              FailureOr<Value> v = e.value(op->getOperand(0), cc);
              if (failed(v))
                return failure();
              yield.push_back(e.accumulate(op, acc[k], e.toBlock(*v)));
            }
            return e.storeDomainOutputs(walkResults, cc);
          },
          &folded)))
    return failure();
  Coords slotCoords = e.keptCoords(ks, dc, ks.keptShape);
  for (auto [k, op] : llvm::enumerate(reductions)) {
    // slot[slice][kept element]: the lanes are contiguous kept elements.
    int64_t stride = 0;
    Value vecOffsets;
    Value offset = e.offsetOf(slotCoords, ks.keptShape, stride, vecOffsets);
    if (vecOffsets || stride != 1)
      return fusion.emitOpError("internal error: a column partial whose lanes are not contiguous");
    offset = e.addS(offset, e.mulS(e.chunkId, ks.elements));
    b.create<tile::StoreOp>(loc, e.accumulated(op, folded[k]), entry.getArgument(firstSlot + k),
                            offset, e.activeLimit, b.getI64IntegerAttr(1), b.getI64IntegerAttr(1),
                            UnitAttr());
  }
  return success();
}

/// `init` plus the block at `offset` of each of `n` slices of `slots`
/// (slice c at offset + c * elements), accumulated as `op` does.
static FailureOr<Value> foldSlices(KernelEmitter &e, Operation *op, Value slots, Value offset,
                                   int64_t n, int64_t elements, Value init) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Type t = llvm::cast<tile::PtrType>(slots.getType()).getPointee();
  SmallVector<Value> folded;
  if (failed(e.forLoop(
          n, ValueRange{init},
          [&](Value c, ValueRange acc, SmallVectorImpl<Value> &next) -> LogicalResult {
            Value part = b.create<tile::LoadOp>(loc, e.vecType(t), slots,
                                                e.addS(offset, e.mulS(c, elements)), e.activeLimit,
                                                b.getI64IntegerAttr(1));
            next.push_back(e.accumulate(op, acc[0], part));
            return success();
          },
          &folded)))
    return failure();
  return folded[0];
}

/// Program 0 of a column combine folds total `op`'s column partials
/// (`slots`) over slices and columns and stores the yields of its result,
/// marking them in `storedByTotal`.
static LogicalResult combineTotal(KernelEmitter &e, int64_t n, Operation *op, Value slots,
                                  const KeptSpace &ks, Value pid,
                                  SmallVectorImpl<bool> &storedByTotal) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  FusionOp fusion = e.fusion;
  Type t = llvm::cast<tile::PtrType>(slots.getType()).getPointee();
  Value init = e.accumulatorInit(op, e.splat(e.neutral(op, t)));
  // Program 0 folds every slice of every column; the others skip it (a
  // loop of one trip or none: programs have no branches).
  Value trips = b.create<arith::SelectOp>(
      loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, pid, e.cst(0)), e.cst(1),
      e.cst(0));
  Operation *yield = fusion.getBody().front().getTerminator();
  return e.forLoopRange(
      e.cst(0), trips, ValueRange{},
      [&](Value, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
        SmallVector<Value> sum;
        if (failed(e.forLoop(
                ks.programs, ValueRange{init},
                [&](Value kp, ValueRange acc, SmallVectorImpl<Value> &next) -> LogicalResult {
                  Coords kc = e.keptDomainCoords(ks, kp); // masks the last block's tail
                  int64_t stride = 0;
                  Value vecOffsets;
                  Value offset = e.offsetOf(e.keptCoords(ks, kc, ks.keptShape), ks.keptShape,
                                            stride, vecOffsets);
                  if (vecOffsets || stride != 1)
                    return fusion.emitOpError(
                        "internal error: a total whose lanes are not contiguous");
                  FailureOr<Value> column =
                      foldSlices(e, op, slots, offset, n, ks.elements, acc[0]);
                  if (failed(column))
                    return failure();
                  next.push_back(*column);
                  return success();
                },
                &sum)))
          return failure();
        Type accType = getElementTypeOrSelf(sum[0].getType());
        Value folded = b.create<tile::ReduceOp>(loc, accType, tile::ReduceKind::add, sum[0]);
        Value total = e.accumulated(op, folded);
        for (unsigned i = 0; i < yield->getNumOperands(); ++i)
          if (yield->getOperand(i) == op->getResult(0)) {
            if (failed(e.store(i, e.unitCoords(op->getResult(0)), total)))
              return failure();
            storedByTotal[i] = true;
          }
        return success();
      });
}

LogicalResult tilegen::emitColumnCombine(KernelEmitter &e, int64_t n,
                                         ArrayRef<Operation *> reductions,
                                         const SmallVector<unsigned> *yields,
                                         bool keptOfFusion) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  FusionOp fusion = e.fusion;
  func::FuncOp kernel = e.kernel;
  e.bindArguments(reductions.size(), /*partial=*/false, yields);
  Block &entry = kernel.getBody().front();
  unsigned firstSlot = fusion.getBody().front().getNumArguments();
  // A row kernel's column sums keep its innermost dimension.
  SmallVector<int64_t> columnDims;
  for (int64_t d = 0; d + 1 < int64_t(fusion.getDomain().size()); ++d)
    columnDims.push_back(d);
  KeptSpace ks = yields && !keptOfFusion ? e.keptSpace(columnDims) : e.keptSpace();
  kernel->setAttr(tile::kGridAttr, b.getI64IntegerAttr(ks.programs));
  Value pid = b.create<tile::ProgramIdOp>(loc, b.getI64Type());
  Coords dc = e.keptDomainCoords(ks, pid);
  int64_t stride = 0;
  Value vecOffsets;
  Value offset = e.offsetOf(e.keptCoords(ks, dc, ks.keptShape), ks.keptShape, stride, vecOffsets);
  if (vecOffsets || stride != 1)
    return fusion.emitOpError("internal error: a column combine whose lanes are not contiguous");
  Operation *yield = fusion.getBody().front().getTerminator();
  SmallVector<bool> storedByTotal(yield->getNumOperands(), false);
  for (auto [k, op] : llvm::enumerate(reductions)) {
    Value slots = entry.getArgument(firstSlot + k);
    Type t = llvm::cast<tile::PtrType>(slots.getType()).getPointee();
    if (isTotalOf(op, fusion)) {
      if (failed(combineTotal(e, n, op, slots, ks, pid, storedByTotal)))
        return failure();
      continue;
    }
    FailureOr<Value> total = foldSlices(e, op, slots, offset, n, ks.elements,
                                        e.accumulatorInit(op, e.splat(e.neutral(op, t))));
    if (failed(total))
      return failure();
    e.memo.back()[e.keyOf(op->getResult(0), e.keptCoords(ks, dc, shapeOf(op->getResult(0))))] =
        e.accumulated(op, *total);
  }
  for (unsigned i = 0; i < yield->getNumOperands(); ++i)
    if ((!yields || llvm::is_contained(*yields, i)) && !storedByTotal[i] &&
        failed(e.store(i, e.keptCoords(ks, dc, shapeOf(yield->getOperand(i))))))
      return failure();
  return success();
}

// --- the entry points -----------------------------------------------------------

namespace {
/// Appends to `out` the reductions of `body` (sum, max, min) when each
/// passes `accept` and none reads another's result; false when one does
/// not, or the body has an argmax.
template <typename Accept>
bool independentReductions(Block &body, Accept accept, SmallVectorImpl<Operation *> &out) {
  llvm::DenseSet<Operation *> dependsOnReduction;
  for (Operation &op : body.without_terminator()) {
    bool after = llvm::any_of(op.getOperands(), [&](Value v) {
      return v.getDefiningOp() && dependsOnReduction.contains(v.getDefiningOp());
    });
    if (llvm::isa<ArgmaxOp>(op))
      return false;
    if (llvm::isa<ReduceSumOp, ReduceMaxOp, ReduceMinOp>(op)) {
      if (after || !accept(op))
        return false;
      out.push_back(&op);
      after = true;
    }
    if (after)
      dependsOnReduction.insert(&op);
  }
  return true;
}
} // namespace

SmallVector<Operation *> tilefuse::splittableReductions(FusionOp fusion) {
  SmallVector<Operation *> none, reductions;
  auto domain = fusion.getDomain();
  int64_t elements = 1;
  for (int64_t d : domain)
    elements *= d;
  // Worth two kernels only when one program would stream a lot of data.
  if (fusion.getKind() != "reduction" ||
      int64_t(fusion.getReduced().size()) != int64_t(domain.size()) || domain.empty() ||
      elements < (int64_t(1) << 18))
    return none;
  Block &body = fusion.getBody().front();
  // Domain-sized results are stored by the walk of the one reduction.
  bool domainResults = false;
  for (Value v : body.getTerminator()->getOperands()) {
    if (numel(shapeOf(v)) == 1)
      continue;
    if (numel(shapeOf(v)) != elements || readsReduction(v))
      return none;
    domainResults = true;
  }
  // Every reduction folds the whole domain.
  auto accept = [&](Operation &op) {
    return numel(shapeOf(op.getResult(0))) == 1 &&
           numel(shapeOf(op.getOperand(0))) == elements;
  };
  if (!independentReductions(body, accept, reductions))
    return none;
  // Stored beside one walk only: a second reduction's walk would read
  // elements after the first stored there, and its shape must be the domain.
  if (domainResults &&
      (reductions.size() != 1 ||
       ArrayRef<int64_t>(shapeOf(reductions[0]->getOperand(0))) != domain))
    return none;
  return reductions.empty() ? none : reductions;
}

SmallVector<unsigned> tilefuse::partialKernelResults(FusionOp fusion) {
  SmallVector<unsigned> out;
  for (auto [i, v] : llvm::enumerate(fusion.getBody().front().getTerminator()->getOperands()))
    if (numel(shapeOf(v)) != 1)
      out.push_back(i);
  return out;
}


namespace {
/// The partial and combine kernels of a split reduction: `column` splits
/// a column reduction (both kernels take blocks of kept elements), else a
/// full reduction (the combine kernel is one program over the slots).
FailureOr<std::pair<func::FuncOp, func::FuncOp>>
lowerSplit(FusionOp fusion, ArrayRef<Operation *> reductions, int64_t chunks, ModuleOp module,
           const TargetInfo &target, StringRef name, bool column) {
  loadTileDialects(fusion.getContext());
  SmallVector<Value> reduced;
  for (Operation *r : reductions)
    reduced.push_back(r->getOperand(0));
  SmallVector<Type> partialArgs = pointersTo(fusion.getInputs());
  partialArgs.append(pointersTo(reduced, /*compute=*/true)); // the slots
  SmallVector<Type> combineArgs(partialArgs);
  // A full reduction's partial kernel stores the domain-sized results.
  auto resultsAt = [&](ArrayRef<unsigned> indices) {
    SmallVector<Value> values;
    for (unsigned i : indices)
      values.push_back(fusion.getResult(i));
    return pointersTo(values);
  };
  if (column) {
    partialArgs.append(resultsAt(columnResults(fusion, /*walk=*/true)));
    combineArgs.append(resultsAt(columnResults(fusion, /*walk=*/false)));
  } else {
    partialArgs.append(resultsAt(partialKernelResults(fusion)));
    combineArgs.append(resultsAt(combineKernelResults(fusion)));
  }
  int64_t block = target.blockSize(fusion.getDomain().back(), /*rowReduction=*/!column);
  int64_t combineBlock = column ? block : chunks;
  func::FuncOp partial =
      createKernel(fusion, module, (name + "_partial").str(), partialArgs, block);
  func::FuncOp combine =
      createKernel(fusion, module, (name + "_combine").str(), combineArgs, combineBlock);
  KernelEmitter first(fusion, partial, block, target);
  KernelEmitter second(fusion, combine, combineBlock, target);
  SmallVector<unsigned> combined = columnResults(fusion, /*walk=*/false);
  LogicalResult ok = column ? success(succeeded(emitColumnPartial(first, chunks, reductions)) &&
                                      succeeded(emitColumnCombine(second, chunks, reductions,
                                                                  &combined,
                                                                  /*keptOfFusion=*/true)))
                            : success(succeeded(emitPartial(first, chunks, reductions)) &&
                                      succeeded(emitCombine(second, chunks, reductions)));
  if (failed(ok)) {
    partial.erase();
    combine.erase();
    return failure();
  }
  finishKernel(partial);
  finishKernel(combine);
  return std::make_pair(partial, combine);
}

} // namespace

FailureOr<std::pair<func::FuncOp, func::FuncOp>>
tilefuse::lowerSplitReduction(FusionOp fusion, ArrayRef<Operation *> reductions,
                              int64_t chunks, ModuleOp module, const TargetInfo &target,
                              StringRef name) {
  return lowerSplit(fusion, reductions, chunks, module, target, name, /*column=*/false);
}

bool tilefuse::columnPartialWalksRows(FusionOp fusion, ArrayRef<Operation *> reductions,
                                      const TargetInfo &target) {
  int64_t kept = 1;
  for (auto [d, size] : llvm::enumerate(fusion.getDomain()))
    if (!llvm::is_contained(fusion.getReduced(), int64_t(d)))
      kept *= size;
  int64_t bytes = 0;
  for (Operation *op : reductions) {
    // f32 sums accumulate in f64 (KernelEmitter::widensSum).
    Type ct = computeType(dtypeOf(op->getOperand(0)));
    bool widened = isa<ReduceSumOp>(op) && ct.isF32();
    bytes += kept * (widened ? 8 : std::max<int64_t>(1, ct.getIntOrFloatBitWidth() / 8));
  }
  return bytes <= target.rowScratchBytes();
}

SmallVector<Operation *> tilefuse::columnSplittableReductions(FusionOp fusion) {
  SmallVector<Operation *> none, reductions;
  auto domain = fusion.getDomain();
  auto reduced = fusion.getReduced();
  int64_t rank = domain.size();
  // Lanes along the kept innermost dimension (of more than one element:
  // slots are written block by block); every result kept-shaped.
  if (fusion.getKind() != "reduction" || rank < 2 || reduced.empty() ||
      llvm::is_contained(reduced, rank - 1) || domain.back() < 2)
    return none;
  SmallVector<int64_t> keptShape;
  int64_t elements = 1;
  for (int64_t d = 0; d < rank; ++d) {
    elements *= domain[d];
    if (!llvm::is_contained(reduced, d))
      keptShape.push_back(domain[d]);
  }
  Block &body = fusion.getBody().front();
  for (Value v : body.getTerminator()->getOperands()) {
    Operation *def = v.getDefiningOp();
    if (squeezed(shapeOf(v)) != squeezed(keptShape) && !(def && isTotalOf(def, fusion)) &&
        !isColumnWalkResult(v, fusion))
      return none;
  }
  // Each folds exactly the kernel's reduced dimensions of a domain-shaped
  // value (the partial kernel walks the domain's rows once for all), or
  // sums it whole (a total: column partials, summed over the columns by
  // the combine kernel).
  auto accept = [&](Operation &op) {
    auto dims = op.getAttrOfType<DenseI64ArrayAttr>("dims").asArrayRef();
    return isTotalOf(&op, fusion) ||
           (shapeOf(op.getOperand(0)) == SmallVector<int64_t>(domain) &&
            SmallVector<int64_t>(dims) == SmallVector<int64_t>(reduced) &&
            squeezed(shapeOf(op.getResult(0))) == squeezed(keptShape));
  };
  if (!independentReductions(body, accept, reductions))
    return none;
  return reductions;
}

SmallVector<unsigned> tilefuse::columnPartialKernelResults(FusionOp fusion) {
  return columnResults(fusion, /*walk=*/true);
}

FailureOr<std::pair<func::FuncOp, func::FuncOp>>
tilefuse::lowerSplitColumnReduction(FusionOp fusion, ArrayRef<Operation *> reductions,
                                    int64_t chunks, ModuleOp module, const TargetInfo &target,
                                    StringRef name) {
  return lowerSplit(fusion, reductions, chunks, module, target, name, /*column=*/true);
}

int64_t tilefuse::keptPrograms(FusionOp fusion, const TargetInfo &target) {
  auto domain = fusion.getDomain();
  auto reduced = fusion.getReduced();
  int64_t rank = domain.size(), programs = 1;
  if (rank == 0 || llvm::is_contained(reduced, rank - 1))
    return 1;
  int64_t block = target.blockSize(domain.back(), /*rowReduction=*/false);
  for (int64_t d = 0; d + 1 < rank; ++d)
    if (!llvm::is_contained(reduced, d))
      programs *= domain[d];
  return programs * ((domain.back() + block - 1) / block);
}
