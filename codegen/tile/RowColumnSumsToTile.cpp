//===- RowColumnSumsToTile.cpp - rows with column sums -> tile ------------===//
//
// The kernel family of row kernels that also fold column sums (the fusion
// pass merged them: layer_norm's dgamma, dbeta and loss beside dx): a
// partial kernel whose programs each run the row kernel over one slice of
// the rows while folding every sum into an accumulator row in scratch,
// stored to slot[slice, column], and a column combine kernel that folds the
// slices. The rows' inputs are read once for the rows and the sums. Enters
// through lowerRowsWithColumnSums (FusionToTile.h).
//
//===----------------------------------------------------------------------===//
#include "codegen/tile/FusionToTile.h"
#include "codegen/tile/KernelEmitter.h"

#include "ir/tile/TileDialect.h"
#include "passes/FuseOps.h"
#include "passes/TargetInfo.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;
using namespace tilefuse::tilegen;


/// A row kernel with column sums (see lowerRowsWithColumnSums): each of
/// `n` programs runs the row kernel over one slice of the rows, storing
/// results `rowYields`, and folds each of `sums` into an accumulator row
/// while it walks, stored to slot[slice, column].
static LogicalResult emitRowsWithColumnPartials(KernelEmitter &e, int64_t n,
                                                ArrayRef<Operation *> sums,
                                                const SmallVector<unsigned> &rowYields) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  int64_t block = e.block;
  FusionOp fusion = e.fusion;
  func::FuncOp kernel = e.kernel;
  e.bindArguments(sums.size(), /*partial=*/false, &rowYields);
  Block &entry = kernel.getBody().front();
  unsigned firstSlot = fusion.getBody().front().getNumArguments();
  KeptSpace ks = e.keptSpace();
  if (ks.lanesKept || ks.flat || e.keptLanes || ks.domain.size() < 2)
    return fusion.emitOpError("internal error: column sums in a kernel whose lanes do not run "
                              "along its rows");
  int64_t columns = ks.domain.back();
  e.columnSums.assign(sums.begin(), sums.end());
  SmallVector<Type> accTypes;
  for (Operation *op : sums) {
    Value init = e.accumulatorInit(op, e.neutral(op, computeType(dtypeOf(op->getOperand(0)))));
    accTypes.push_back(init.getType());
    e.columnScratchBytes += columns * (init.getType().getIntOrFloatBitWidth() / 8);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&entry);
    e.columnAccumulators.push_back(b.create<tile::ScratchOp>(
        loc, tile::PtrType::get(b.getContext(), init.getType()), columns));
  }
  e.planRowScratch(ks);
  kernel->setAttr(tile::kGridAttr, b.getI64IntegerAttr(n));
  Value slice = b.create<tile::ProgramIdOp>(loc, b.getI64Type());
  auto unit = b.getI64IntegerAttr(1);
  // Runs `body(start)` for every block of a row of accumulators, with the
  // active limit of that block.
  auto forColumnBlocks = [&](auto body) {
    return e.forLoop((columns + block - 1) / block, ValueRange{},
                     [&](Value j, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
                       Value start = e.mulS(j, block);
                       e.activeLimit = e.lanesLeft(columns, start);
                       e.activeFirst = Value();
                       return body(start);
                     });
  };
  if (failed(forColumnBlocks([&](Value start) -> LogicalResult {
        for (auto [k, op] : llvm::enumerate(sums))
          b.create<tile::StoreOp>(loc,
                                  e.splat(e.accumulatorInit(
                                      op, e.neutral(op, computeType(dtypeOf(op->getOperand(0)))))),
                                  e.columnAccumulators[k], start, e.activeLimit, unit, unit,
                                  UnitAttr());
        return success();
      })))
    return failure();
  // This program's rows, in order, in groups: each group's rows are the
  // row kernel's programs, walked together so that every block of the
  // accumulator rows is read and written once per group (one f64
  // read-modify-write per sum and row made the walk compute bound). The
  // last group repeats the slice's last row to fill up; the repeats store
  // the same results again (nothing is written over an input in this
  // kernel) and fold nothing. The group's rows are emitted one after the
  // other: a long kernel body (more than half of the ops a kernel may
  // take) walks one row at a time to keep the machine code, and its
  // compile time, in bounds.
  const int64_t kRowsPerGroup =
      fusion.getBody().front().getOperations().size() <= kMaxKernelOps / 2 ? 4 : 1;
  Value firstRow, endRow, groups;
  std::tie(firstRow, endRow, groups) = e.sliceRows(slice, ks.programs, n, kRowsPerGroup);
  Value lastRow = b.create<arith::SubIOp>(loc, endRow, e.cst(1));
  if (failed(e.forLoopRange(
          e.cst(0), groups, ValueRange{},
          [&](Value g, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
            Value base = e.addS(firstRow, e.mulS(g, kRowsPerGroup));
            SmallVector<Coords> rows;
            SmallVector<Value> valid;
            for (int64_t r = 0; r < kRowsPerGroup; ++r) {
              Value row = e.addS(base, e.cst(r));
              valid.push_back(b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, row, endRow));
              rows.push_back(e.keptDomainCoords(ks, b.create<arith::MinSIOp>(loc, row, lastRow)));
            }
            // One row a group: it is always a real one.
            return e.emitProgram(ks, rows,
                                 kRowsPerGroup > 1 ? ArrayRef<Value>(valid) : ArrayRef<Value>(),
                                 rowYields);
          })))
    return failure();
  // slot[slice][column], rounded once as a column partial is.
  return forColumnBlocks([&](Value start) -> LogicalResult {
    for (auto [k, op] : llvm::enumerate(sums)) {
      Value acc = b.create<tile::LoadOp>(loc, e.vecType(accTypes[k]), e.columnAccumulators[k],
                                         start, e.activeLimit, unit);
      b.create<tile::StoreOp>(loc, e.accumulated(op, acc), entry.getArgument(firstSlot + k),
                              e.addS(start, e.mulS(slice, columns)), e.activeLimit, unit, unit,
                              UnitAttr());
    }
    return success();
  });
}

FailureOr<RowColumnKernels> tilefuse::lowerRowsWithColumnSums(FusionOp fusion,
                                                             ArrayRef<Operation *> sums,
                                                             int64_t chunks, ModuleOp module,
                                                             const TargetInfo &target,
                                                             StringRef name) {
  loadTileDialects(fusion.getContext());
  // What the fusion pass merges (mergeColumnKernels): sums over every
  // dimension but the innermost, or all, of the domain, with an f64
  // accumulator row each in the target's scratch.
  auto domain = fusion.getDomain();
  int64_t rank = domain.size(), bytes = 0;
  for (Operation *op : sums) {
    auto dims = op->getAttrOfType<DenseI64ArrayAttr>("dims");
    bool columnsOrAll = dims && (int64_t(dims.size()) == rank || int64_t(dims.size()) == rank - 1);
    for (int64_t d = 0; columnsOrAll && d < int64_t(dims.size()); ++d)
      columnsOrAll = dims[d] == d;
    if (!llvm::isa<ReduceSumOp>(op) || ArrayRef<int64_t>(shapeOf(op->getOperand(0))) != domain ||
        !columnsOrAll)
      return op->emitOpError("cannot run in a row kernel: only sums of the kernel's domain over "
                             "every dimension but the innermost, or over all, can (run the fusion "
                             "pass to form the kernels)");
    bytes += domain.back() * 8;
  }
  if (bytes > target.rowScratchBytes())
    return fusion.emitOpError("folds ")
           << sums.size() << " column sums of " << domain.back()
           << " columns in its row kernel, which needs " << bytes
           << " bytes of scratch; the " << target.name() << " target has "
           << target.rowScratchBytes() << " (run the fusion pass for this target)";
  RowColumnKernels out;
  // Results that read a column sum exist once every slice is folded: they
  // are the sums themselves (the fusion pass puts nothing after them).
  llvm::DenseSet<Value> fromSums;
  for (Operation &op : fusion.getBody().front().without_terminator())
    if (llvm::is_contained(sums, &op) || llvm::any_of(op.getOperands(), [&](Value v) {
          return fromSums.contains(v);
        }))
      fromSums.insert(op.getResult(0));
  Operation *yield = fusion.getBody().front().getTerminator();
  for (auto [i, v] : llvm::enumerate(yield->getOperands())) {
    if (!fromSums.contains(v)) {
      out.rowYields.push_back(i);
      continue;
    }
    if (!llvm::is_contained(sums, v.getDefiningOp()))
      return fusion.emitOpError("internal error: result #")
             << i << " computes on a column sum; only the sums themselves can be results";
    out.columnYields.push_back(i);
  }
  SmallVector<Value> summed;
  for (Operation *op : sums)
    summed.push_back(op->getOperand(0));
  SmallVector<Type> slots = pointersTo(summed, /*compute=*/true);
  SmallVector<Type> partialArgs = pointersTo(fusion.getInputs());
  partialArgs.append(slots);
  SmallVector<Type> combineArgs(partialArgs);
  for (unsigned i : out.rowYields)
    partialArgs.append(pointersTo(fusion.getResult(i)));
  for (unsigned i : out.columnYields)
    combineArgs.append(pointersTo(fusion.getResult(i)));
  int64_t rowBlock = target.blockSize(fusion.getDomain().back(), /*rowReduction=*/true);
  int64_t columnBlock = target.blockSize(fusion.getDomain().back(), /*rowReduction=*/false);
  out.partial = createKernel(fusion, module, (name + "_partial").str(), partialArgs, rowBlock);
  out.combine = createKernel(fusion, module, (name + "_combine").str(), combineArgs, columnBlock);
  KernelEmitter first(fusion, out.partial, rowBlock, target);
  KernelEmitter second(fusion, out.combine, columnBlock, target);
  if (failed(emitRowsWithColumnPartials(first, chunks, sums, out.rowYields)) ||
      failed(emitColumnCombine(second, chunks, sums, &out.columnYields))) {
    out.partial.erase();
    out.combine.erase();
    return failure();
  }
  finishKernel(out.partial);
  finishKernel(out.combine);
  return out;
}
