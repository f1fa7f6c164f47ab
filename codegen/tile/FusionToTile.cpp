//===- FusionToTile.cpp - graph.fusion -> tile kernel ---------------------===//
//
// The kernel entry: each graph.fusion becomes one tile program (or, for the
// kernel families of SplitReduceToTile.cpp and RowColumnSumsToTile.cpp,
// two). A program computes its per-program results (reductions whose
// result is one per program first, in body order), then walks the reduced
// dimensions once, storing the full-size results. The emitter's core is in
// KernelEmitter.cpp; the op families it lowers values with are listed in
// KernelFamilies.def.
//
//===----------------------------------------------------------------------===//
#include "codegen/tile/FusionToTile.h"
#include "codegen/tile/KernelEmitter.h"

#include "ir/tile/TileDialect.h"
#include "passes/FuseOps.h"
#include "passes/FusionGraph.h"
#include "passes/TargetInfo.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;
using namespace tilefuse::tilegen;


bool tilegen::readsReduction(Value v) {
  llvm::DenseSet<Value> seen;
  SmallVector<Value> work = {v};
  while (!work.empty()) {
    Value x = work.pop_back_val();
    Operation *def = x.getDefiningOp();
    if (!def || !seen.insert(x).second)
      continue;
    if (isReductionOp(def))
      return true;
    for (Value operand : def->getOperands())
      work.push_back(operand);
  }
  return false;
}

LogicalResult KernelEmitter::storeDomainOutputs(ArrayRef<unsigned> outputs, const Coords &c) {
  Operation *yield = fusion.getBody().front().getTerminator();
  ArrayRef<int64_t> domain = fusion.getDomain();
  SmallVector<std::tuple<unsigned, Coords, Value>> computed;
  for (unsigned i : outputs) {
    auto s = shapeOf(yield->getOperand(i));
    // A result reshaped from the domain keeping its rows ([B*T, N] as
    // [B, T, N]) maps the leading coordinates alone, so a block stays one
    // contiguous store even where a row's length is not a multiple of the
    // block (a vocabulary of 50257).
    Coords oc;
    if (squeezed(s) == squeezed(domain))
      oc = matchUnitDims(c, domain, s);
    else if (std::optional<Coords> rows = reshapeAlongRows(c, domain, s))
      oc = std::move(*rows);
    else
      oc = delinearize(linearize(c, domain), s);
    FailureOr<Value> v = value(yield->getOperand(i), oc);
    if (failed(v))
      return failure();
    computed.emplace_back(i, std::move(oc), *v);
  }
  for (auto &[i, oc, v] : computed)
    if (failed(store(i, oc, v)))
      return failure();
  return success();
}

/// For a pointwise kernel that reads a value transposed (its innermost,
/// contiguous dimension on a domain dimension other than the lanes'): the
/// index in `ks.progDims` of the domain dimension that innermost dimension
/// lies along, else -1. Programs then step along it first, so consecutive
/// programs read the same cache lines of the transposed input (one element
/// of each of a block's rows) while they are still in the first-level
/// cache, instead of each row of the result walking the whole input column
/// again. A [1024, 3072] f32 transpose on one core: 17 ms in row order,
/// 5 ms stepping along the input's rows.
static int64_t transposedReadDim(FusionOp fusion, const KeptSpace &ks) {
  if (!fusion.getReduced().empty() || ks.flat || !ks.lanesKept || ks.progDims.empty())
    return -1;
  ArrayRef<int64_t> domain = fusion.getDomain();
  int64_t rank = domain.size();
  for (Operation &op : fusion.getBody().front().without_terminator()) {
    auto t = llvm::dyn_cast<TransposeOp>(op);
    if (!t || ArrayRef<int64_t>(shapeOf(t.getResult())) != domain)
      continue;
    ArrayRef<int64_t> perm = t.getPerm();
    if (perm[rank - 1] == rank - 1)
      continue;
    int64_t along = llvm::find(perm, rank - 1) - perm.begin();
    auto at = llvm::find(ks.progDims, along);
    if (at != ks.progDims.end() && domain[along] > 1)
      return at - ks.progDims.begin();
  }
  return -1;
}

LogicalResult KernelEmitter::emit() {
  bindArguments(0);
  KeptSpace ks = keptSpace();
  ks.fastProgDim = transposedReadDim(fusion, ks);
  planRowScratch(ks);
  kernel->setAttr(tile::kGridAttr, b.getI64IntegerAttr(ks.programs));
  Value pid = b.create<tile::ProgramIdOp>(loc, b.getI64Type());
  SmallVector<unsigned> yields(fusion.getNumResults());
  std::iota(yields.begin(), yields.end(), 0u);
  return emitProgram(ks, {keptDomainCoords(ks, pid)}, {}, yields);
}

LogicalResult KernelEmitter::emitProgram(const KeptSpace &ks, ArrayRef<Coords> programs,
                                         ArrayRef<Value> valid, ArrayRef<unsigned> yields) {
  Block &body = fusion.getBody().front();
  auto domain = ks.domain;
  auto reduced = SmallVector<int64_t>(fusion.getReduced());
  bool lanesKept = ks.lanesKept;
  SmallVector<int64_t> keptShape = ks.keptShape;
  auto keptCoords = [&](const Coords &dc, ArrayRef<int64_t> shape) {
    return this->keptCoords(ks, dc, shape);
  };
  // A column kernel (lanes along kept dimensions) with one reduction whose
  // walk covers the domain: full-size results that read no reduction are
  // stored by that walk at the elements it computes, instead of by a second
  // walk computing them again (gelu's backward beside its bias gradient).
  // With one reduction, every element is read in that one walk before any
  // result is written there, as in-place results need.
  {
    SmallVector<Operation *> reductionOps;
    for (Operation &op : body.without_terminator())
      if (isReductionOp(&op))
        reductionOps.push_back(&op);
    Operation *yieldOp = body.getTerminator();
    SmallVector<unsigned> full;
    bool allFree = true;
    for (unsigned i : yields) {
      auto s = shapeOf(yieldOp->getOperand(i));
      if (squeezed(s) == squeezed(keptShape))
        continue;
      if (squeezed(s) == squeezed(domain) || numel(s) == numel(domain)) {
        full.push_back(i);
        allFree &= !readsReduction(yieldOp->getOperand(i));
      }
    }
    if (lanesKept && !ks.flat && reductionOps.size() == 1 && !full.empty() && allFree &&
        shapeOf(reductionOps[0]->getOperand(0)) == domain) {
      earlyStoresIn = reductionOps[0];
      earlyOutputs = full;
    }
  }
  // Reductions whose result is one per program are computed once, in body
  // order (each after the reductions it reads: a softmax's max before its
  // sum), before anything that reads them: the per-program results stored
  // next and the loop over the reduced dimensions that writes the full-size
  // ones. Computed lazily inside another reduction's loop, a row max would
  // be recomputed for every block of the row.
  for (const Coords &dc : programs)
    for (Operation &op : body.without_terminator())
      if (isReductionOp(&op) && !llvm::is_contained(columnSums, &op) &&
          squeezed(shapeOf(op.getResult(0))) == squeezed(keptShape))
        if (failed(value(op.getResult(0), keptCoords(dc, shapeOf(op.getResult(0))))))
          return failure();
  Operation *yield = body.getTerminator();
  SmallVector<unsigned> domainOutputs;
  // Every per-program result is computed before any is stored: a kernel
  // reads all its inputs at an element before it writes there, which is
  // what lets a result overwrite an input it reads only at that element
  // (inPlaceCandidates).
  SmallVector<std::tuple<unsigned, Coords, Value>> computed;
  for (unsigned i : yields) {
    auto s = shapeOf(yield->getOperand(i));
    if (squeezed(s) == squeezed(keptShape)) {
      for (const Coords &dc : programs) {
        Coords oc = keptCoords(dc, s);
        FailureOr<Value> v = value(yield->getOperand(i), oc);
        if (failed(v))
          return failure();
        computed.emplace_back(i, std::move(oc), *v);
      }
    } else if (squeezed(s) == squeezed(domain) || numel(s) == numel(domain)) {
      if (!earlyStored || !llvm::is_contained(earlyOutputs, i))
        domainOutputs.push_back(i);
    } else if (numel(s) == numel(keptShape)) {
      // A reshaped per-program result: same elements in row-major order.
      for (const Coords &dc : programs)
        if (failed(store(i, delinearize(linearize(keptCoords(dc, keptShape), keptShape), s))))
          return failure();
    } else {
      return fusion.emitOpError()
             << "result #" << i << " has shape [" << s
             << "], which is neither the kernel's domain nor its reduced shape";
    }
  }
  for (auto &[i, oc, v] : computed)
    if (failed(store(i, oc, v)))
      return failure();
  if (domainOutputs.empty() && columnSums.empty())
    return success();

  ReducedLoops loops = reducedLoops(reduced, domain, lanesKept);
  SmallVector<int64_t> outer = loops.outerDims, outerSizes = loops.outerSizes;
  int64_t laneDim = loops.laneDim;
  // At each block: the accumulator rows' blocks loaded once (indexed by
  // the innermost dimension, the one the lanes run along), then for each
  // program's row the results stored and the column sums' terms folded in
  // (those of valid rows), then the accumulators stored: one
  // read-modify-write for all the rows of a group.
  auto storeAll = [&](ArrayRef<Coords> blocks) -> LogicalResult {
    SmallVector<Value> acc;
    Value at;
    if (!columnSums.empty()) {
      const Coords &c = blocks.front();
      if (laneDim != int64_t(domain.size()) - 1 || c[laneDim].coef != 1 || !c[laneDim].isLinear())
        return fusion.emitOpError("internal error: column sums in a kernel whose lanes do not "
                                  "run along its rows");
      at = c[laneDim].scalar;
      for (Value accumulator : columnAccumulators) {
        Type t = llvm::cast<tile::PtrType>(accumulator.getType()).getPointee();
        acc.push_back(b.create<tile::LoadOp>(loc, vecType(t), accumulator, at, activeLimit,
                                             b.getI64IntegerAttr(1)));
      }
    }
    // The rows' terms are added in their compute type first, then
    // widened once: widening every term (an f32 sum accumulates in f64)
    // made the walk compute bound; a sum of a few terms adds an error of a
    // few units of roundoff, not one growing with the rows.
    SmallVector<Value> groupSum(columnSums.size());
    for (auto [r, c] : llvm::enumerate(blocks)) {
      for (auto [k, op] : llvm::enumerate(columnSums)) {
        FailureOr<Value> v = value(op->getOperand(0), c);
        if (failed(v))
          return failure();
        Value term = toBlock(*v);
        if (r < valid.size())
          term = b.create<arith::SelectOp>(
              loc, valid[r], term, splat(neutral(op, getElementTypeOrSelf(term.getType()))));
        groupSum[k] = groupSum[k] ? combine(op, groupSum[k], term) : term;
      }
      if (failed(storeDomainOutputs(domainOutputs, c)))
        return failure();
    }
    for (auto [k, accumulator] : llvm::enumerate(columnAccumulators))
      b.create<tile::StoreOp>(loc, accumulate(columnSums[k], acc[k], groupSum[k]), accumulator, at,
                              activeLimit, b.getI64IntegerAttr(1), b.getI64IntegerAttr(1),
                              UnitAttr());
    return success();
  };
  return forLoop(
      numel(outerSizes), ValueRange{},
      [&](Value o, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
        SmallVector<Coords> rows(programs.begin(), programs.end());
        for (Coords &cc : rows)
          scatterIndex(o, outer, outerSizes, cc);
        if (laneDim < 0)
          return storeAll(rows);
        int64_t n = domain[laneDim];
        return forLoop((n + block - 1) / block, ValueRange{},
                       [&](Value j, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
                         Value start = mulS(j, block);
                         for (Coords &c2 : rows)
                           c2[laneDim] = {start, 1, {}, block};
                         activeLimit = lanesLeft(n, start);
                         activeFirst = Value();
                         rowStart = start;
                         return storeAll(rows);
                       });
      });
}

FailureOr<func::FuncOp> tilefuse::lowerFusionToTile(FusionOp fusion,
                                                    ModuleOp module,
                                                    const TargetInfo &target,
                                                    StringRef name) {
  loadTileDialects(fusion.getContext());
  SmallVector<Type> args = pointersTo(fusion.getInputs());
  args.append(pointersTo(fusion.getResults()));
  auto domain = fusion.getDomain();
  // Lanes along a kept dimension (pointwise kernels, column reductions)
  // stream like a pointwise kernel; lanes along a reduced row loop over it.
  bool rowReduction = !domain.empty() &&
                      llvm::is_contained(fusion.getReduced(), int64_t(domain.size()) - 1);
  int64_t block = target.blockSize(domain.empty() ? 1 : domain.back(), rowReduction);
  // A pointwise kernel whose rows fill at most half the block they would
  // get runs its lanes across rows: a [65536, 3] kernel would otherwise be
  // 65,536 GPU blocks of 32 threads with 3 working.
  bool flat = fusion.getReduced().empty() && domain.size() >= 2 && 2 * domain.back() <= block;
  if (flat)
    block = target.blockSize(numel(domain), /*rowReduction=*/false);
  // Likewise a row reduction whose rows (all its reduced elements) fill at
  // most half the block: one lane per row instead, lanes along the
  // innermost kept dimension.
  int64_t rowElements = 1, keptInner = -1;
  for (int64_t d = 0; d < int64_t(domain.size()); ++d) {
    if (llvm::is_contained(fusion.getReduced(), d))
      rowElements *= domain[d];
    else
      keptInner = d;
  }
  bool keptLanes = rowReduction && keptInner >= 0 && 2 * rowElements <= block &&
                   domain[keptInner] > 1;
  if (keptLanes)
    block = target.blockSize(domain[keptInner], /*rowReduction=*/false);
  func::FuncOp kernel = createKernel(fusion, module, name, args, block);
  KernelEmitter emitter(fusion, kernel, block, target);
  emitter.flatLanes = flat;
  emitter.keptLanes = keptLanes;
  if (failed(emitter.emit())) {
    kernel.erase();
    return failure();
  }
  finishKernel(kernel);
  return kernel;
}

SmallVector<std::pair<unsigned, unsigned>> tilefuse::inPlaceCandidates(FusionOp fusion) {
  SmallVector<std::pair<unsigned, unsigned>> pairs;
  SmallVector<int64_t> domain(fusion.getDomain());
  // A reduction kernel whose programs own whole reductions (no split, no
  // column sums) folds every reduction before it stores a full-size
  // result, and stores each element right after its last read (in the
  // walk of the reduced dims after the reductions, or in the one walk
  // when its results read no reduction): a result may overwrite an input
  // its reductions read, as a pointwise kernel's may.
  bool reducing = fusion.getKind() == "reduction" && !fusion.getReduced().empty() &&
                  fusion::ownsWholeReductions(domain, fusion.getReduced()) &&
                  columnSumsOfRowKernel(fusion).empty();
  if (!reducing && (fusion.getKind() != "pointwise" || !fusion.getReduced().empty()))
    return pairs;
  Block &body = fusion.getBody().front();
  Operation *yield = body.getTerminator();
  for (BlockArgument arg : body.getArguments()) {
    auto argType = llvm::dyn_cast<RankedTensorType>(arg.getType());
    if (!argType || SmallVector<int64_t>(argType.getShape()) != domain)
      continue;
    // Every op that reads the input, directly or through other such ops,
    // must read its operands at the coordinates it computes.
    SmallVector<Value> work = {arg};
    llvm::SmallPtrSet<Operation *, 16> seen;
    bool sameIndex = true;
    while (!work.empty() && sameIndex) {
      Value v = work.pop_back_val();
      for (Operation *user : v.getUsers()) {
        if (user == yield || !seen.insert(user).second)
          continue;
        auto dims = user->getAttrOfType<DenseI64ArrayAttr>("dims");
        if (reducing && isReductionOp(user) && dims &&
            dims.asArrayRef() == fusion.getReduced())
          continue; // folded before any result is stored
        if (!readsOperandsInPlace(user) || user->getNumResults() != 1 ||
            shapeOf(user->getResult(0)) != domain) {
          sameIndex = false;
          break;
        }
        work.push_back(user->getResult(0));
      }
    }
    if (!sameIndex)
      continue;
    for (unsigned r = 0; r < yield->getNumOperands(); ++r)
      if (yield->getOperand(r).getType() == arg.getType())
        pairs.emplace_back(r, arg.getArgNumber());
  }
  return pairs;
}

void tilefuse::hoistDenseConstants(func::FuncOp func) {
  SmallVector<FusionOp> fusions;
  func.walk([&](FusionOp f) { fusions.push_back(f); });
  for (FusionOp f : fusions) {
    Block &body = f.getBody().front();
    SmallVector<ConstantOp> dense;
    for (auto k : body.getOps<ConstantOp>())
      if (!llvm::isa<SplatElementsAttr>(k.getValue()))
        dense.push_back(k);
    if (dense.empty())
      continue;
    OpBuilder b(f);
    SmallVector<Value> inputs(f.getInputs());
    for (ConstantOp k : dense) {
      auto outside = b.create<ConstantOp>(k.getLoc(), k.getValue());
      inputs.push_back(outside);
      BlockArgument arg = body.addArgument(k.getType(), k.getLoc());
      k.getResult().replaceAllUsesWith(arg);
      k.erase();
    }
    f.getInputsMutable().assign(inputs);
  }
}
