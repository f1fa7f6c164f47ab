//===- FusionRules.cpp - which ops and kernels may become one -------------===//
//
// The fusion rules (see FusionRules.h); each refusal says why.
//
//===----------------------------------------------------------------------===//
#include "passes/FusionRules.h"

#include "ir/graph/GraphDialect.h"
#include "passes/FuseOps.h"
#include "passes/TargetInfo.h"

#include "llvm/ADT/SetOperations.h"
#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::fusion;
using namespace tilefuse::graph;

/// Why a kernel stops at kMaxKernelOps ops.
static const char *const kWhyOpLimit =
    "longer kernels stop paying: LLVM time grows faster than the ops, and one more memory "
    "pass is cheap next to that many";

std::string FusionRules::tooManyOps() {
  return "the kernel already has " + std::to_string(kMaxKernelOps) + " ops (" + kWhyOpLimit + ")";
}

/// What a merge of two kernels beyond the size limit is refused with.
static std::string mergedTooLarge() {
  return "the two kernels together would have more than " + std::to_string(kMaxKernelOps) +
         " ops (" + kWhyOpLimit + ")";
}

// --- producer-consumer ---------------------------------------------------------

bool FusionRules::canJoin(unsigned g, Operation *op, ArrayRef<Read> reads,
                          std::string &why) {
  Group &group = groups[g];
  if (group.ops.size() >= kMaxKernelOps) {
    why = tooManyOps();
    return false;
  }
  Domain d = domainOf(op);
  // Reads of this kernel's own values through recomputed ops: an index
  // remap is only possible for a row's reduction result read back across
  // its row (a broadcast of a keepdim value).
  bool broadcastRead = false, broadcastOnly = true, viaOps = false;
  for (const Read &read : reads) {
    if (groupOf.lookup(read.producer) != g)
      continue;
    viaOps |= read.viaOps;
    // A value that reads no reduction is its inputs' at the same linear
    // index, computed at whatever coordinates a reader asks: a row-major
    // reshape of it reads it in place (a GEMM's [B*T, N] result reshaped to
    // [B, T, N] for GELU and back for the next GEMM; GELU's backward beside
    // its bias gradient's column sums).
    if (read.remapped && read.reshapeOnly && !group.library &&
        !group.afterReduction.contains(read.producer))
      continue;
    if (read.remapped) {
      broadcastRead = true;
      // Across the row only: a broadcast along a kept dimension reads
      // other rows' results (each lane would recompute a whole row).
      broadcastOnly &= read.broadcastOnly &&
                       llvm::all_of(read.broadcastDims, [&](int64_t d) {
                         return llvm::is_contained(group.domain.reduced, d);
                       });
    }
  }
  if (group.library)
    return canTakeEpilogue(g, op, viaOps, why);
  if (isIndexRemap(op)) {
    why = "it reads a value of that kernel at another index";
    return false;
  }
  if (broadcastRead) {
    // Only a row's own reduction result can be read back across the row.
    bool rowResult = group.hasReduction && broadcastOnly &&
                     ownsWholeReductions(group.domain.shape, group.domain.reduced);
    if (!rowResult || d.shape != group.domain.shape) {
      why = "it reads a value of that kernel at another index";
      return false;
    }
    // The row rules below still apply.
  }
  if (isReduction(op)) {
    if (d.shape != group.domain.shape &&
        (group.hasReduction || numel(d.shape) != numel(group.domain.shape))) {
      why = "its domain differs from the kernel's";
      return false;
    }
    if (group.hasReduction && d.reduced != group.domain.reduced) {
      why = "it reduces other dimensions than the kernel";
      return false;
    }
    if (readsReduced(g, op) && !ownsWholeReductions(d.shape, d.reduced)) {
      why = "it needs a reduction result across programs (not a row reduction)";
      return false;
    }
    return !createsCycle(g, op, why);
  }
  if (!group.hasReduction) {
    if (numel(d.shape) != numel(group.domain.shape) ||
        llvm::isa<BroadcastInDimOp>(op)) {
      why = "its domain differs from the kernel's";
      return false;
    }
    return !createsCycle(g, op, why);
  }
  // A reduction kernel: epilogue at the reduced shape, or at the full
  // domain when the kernel owns whole rows.
  ArrayRef<int64_t> full = group.domain.shape;
  ArrayRef<int64_t> dims = group.domain.reduced;
  // At the full size: the domain, or (values that read no reduction, each
  // element on its own) the domain's elements in another shape.
  bool atFull = onlyUnitDimsChange(d.shape, full) ||
                (numel(d.shape) == numel(full) && !isReduction(op) && !readsReduced(g, op));
  bool atReduced = onlyUnitDimsChange(d.shape, reducedShape(full, dims, false));
  if (llvm::isa<ReshapeOp>(op) &&
      !onlyUnitDimsChange(shapeOf(op->getOperand(0)), d.shape)) {
    why = "it reshapes a value of that kernel across rows";
    return false;
  }
  if (!atFull && !atReduced) {
    why = "its domain differs from the kernel's";
    return false;
  }
  if (atFull && !atReduced &&
      (readsReduced(g, op) || llvm::isa<BroadcastInDimOp>(op)) &&
      !ownsWholeReductions(full, dims)) {
    why = "it needs a reduction result across programs (not a row reduction)";
    return false;
  }
  return !createsCycle(g, op, why);
}

// --- epilogues -------------------------------------------------------------------

bool FusionRules::canTakeEpilogue(unsigned g, Operation *op, bool viaOps, std::string &why) {
  Group &group = groups[g];
  Domain d = domainOf(op);
  if (viaOps || !llvm::isa<MatmulOp>(group.ops.front()) ||
      isReduction(op) ||
      d.shape != shapeOf(group.ops.front()->getResult(0)) ||
      !target.canFuseMatmulEpilogue(op)) {
    why = "its producer is a library call that the " + target.name() +
          " target runs without this epilogue";
    return false;
  }
  if (!epilogueOperandsAreBuffers(g, op)) {
    why = "the GEMM library reads its epilogue's operands from memory, and one is "
          "computed (recomputed ops cannot run inside the library call)";
    return false;
  }
  return !createsCycle(g, op, why);
}

bool FusionRules::epilogueOperandsAreBuffers(unsigned g, Operation *op) {
  for (Value v : op->getOperands()) {
    Operation *def = v.getDefiningOp();
    if (def && groupOf.count(def) && groupOf.lookup(def) == g)
      continue;
    if (def && llvm::isa<BroadcastInDimOp>(def)) {
      v = def->getOperand(0);
      def = v.getDefiningOp();
    }
    if (def && isLeafOp(def))
      return false;
  }
  return true;
}

// --- siblings --------------------------------------------------------------------

bool FusionRules::canMergeSiblings(unsigned g, unsigned h, const Read &read, ArrayRef<Read> reads,
                                   std::string &why) {
  auto plainPointwise = [&](unsigned k) {
    return !groups[k].library && !groups[k].hasReduction;
  };
  // Another pointwise kernel of as many elements, read at the same index.
  if (h == g || !plainPointwise(h) ||
      numel(groups[h].domain.shape) != numel(groups[g].domain.shape) || read.remapped)
    return false;
  if (groups[g].ops.size() + groups[h].ops.size() > kMaxKernelOps) {
    why = mergedTooLarge();
    return false;
  }
  if (dependsOn(h, g) || dependsOn(g, h)) {
    why = "one of the two kernels reads the other's results";
    return false;
  }
  // A third kernel between them would close a cycle once merged.
  if (llvm::any_of(reads, [&](const Read &other) {
        unsigned k = groupOf.lookup(other.producer);
        return k != g && k != h && dependsOn(k, h);
      })) {
    why = "a kernel between the two would close a cycle once they merge";
    return false;
  }
  return true;
}

bool FusionRules::canJoinSiblingReduction(unsigned g, Operation *op, std::string &why) {
  Group &group = groups[g];
  if (!group.hasReduction)
    return false;
  if (group.ops.size() >= kMaxKernelOps) {
    if (sameDomain(group, op))
      why = tooManyOps();
    return false;
  }
  if (!sameDomain(group, op) && !totalBesideColumns(g, op))
    return false;
  if (!mergeDelaysNothing(g, op)) {
    why = "merged, the kernel would wait for kernels only one of the two reads, and delay a "
          "kernel that waits for the other's result";
    return false;
  }
  return !createsCycle(g, op, why);
}

bool FusionRules::sameDomain(const Group &group, Operation *op) {
  Domain d = domainOf(op);
  return d.shape == group.domain.shape && d.reduced == group.domain.reduced;
}

bool FusionRules::totalBesideColumns(unsigned g, Operation *op) {
  const Group &group = groups[g];
  Domain d = domainOf(op);
  if (d.shape != group.domain.shape)
    return false;
  bool joinsColumns = isTotal(op) && isColumnReduction(group.domain);
  bool columnsJoinTotals = isColumnReduction(d) && llvm::isa<ReduceSumOp, ReduceMaxOp, ReduceMinOp>(op) &&
                           llvm::all_of(group.ops, [](Operation *m) { return !isReduction(m) || isTotal(m); });
  if (!joinsColumns && !columnsJoinTotals)
    return false;
  // The kernel's values are read by its reductions alone: a column kernel
  // folding a total writes no full-size result (the split that folds the
  // total writes only kept-shaped ones).
  auto readInside = [&](Operation *m) {
    return isReduction(m) || llvm::all_of(m->getUsers(), [&](Operation *u) {
             return u == op || (groupOf.count(u) && groupOf.lookup(u) == g);
           });
  };
  if (!llvm::all_of(group.ops, readInside))
    return false;
  // Nothing in the kernel reads a reduction's result: every reduction
  // folds independently in the one walk.
  auto readsAReduction = [&](Operation *m) {
    return llvm::any_of(readsOf(m), [&](const Read &r) {
      return groupOf.lookup(r.producer) == g && isReduction(r.producer);
    });
  };
  return !readsAReduction(op) && llvm::none_of(group.ops, readsAReduction);
}

bool FusionRules::mergeDelaysNothing(unsigned g, Operation *op) {
  llvm::SmallSetVector<unsigned, 4> mine, theirs = kernelsRead(g);
  for (Value v : op->getOperands())
    producers(v, mine);
  bool opWaits = !llvm::set_is_subset(theirs, mine);
  bool groupWaits = !llvm::set_is_subset(mine, theirs);
  auto inGroup = [&](Operation *x) { return groupOf.count(x) && groupOf.lookup(x) == g; };
  auto isOp = [&](Operation *x) { return x == op; };
  if (opWaits && !delayIsHarmless(op, isOp, inGroup))
    return false;
  if (groupWaits)
    for (Operation *member : groups[g].ops)
      if (!delayIsHarmless(member, inGroup, isOp))
        return false;
  return true;
}

bool FusionRules::delayIsHarmless(Operation *op, llvm::function_ref<bool(Operation *)> isSide,
                                  llvm::function_ref<bool(Operation *)> isOther) {
  SmallVector<Operation *> work = {op};
  llvm::SmallPtrSet<Operation *, 8> seen;
  while (!work.empty()) {
    Operation *cur = work.pop_back_val();
    if (!seen.insert(cur).second)
      continue;
    for (Operation *user : cur->getUsers()) {
      if (user->hasTrait<OpTrait::IsTerminator>() || isSide(user))
        continue;
      if (recomputed.contains(user) || isView(user)) {
        if (seen.size() > kMaxRecomputeDepth * 4)
          return false;
        work.push_back(user);
        continue;
      }
      if (!readsFrom(user, isOther))
        return false;
    }
  }
  return true;
}

bool FusionRules::readsFrom(Operation *op, llvm::function_ref<bool(Operation *)> isOther) {
  SmallVector<Operation *> work = {op};
  llvm::SmallPtrSet<Operation *, 8> seen;
  while (!work.empty() && seen.size() <= kMaxRecomputeDepth) {
    Operation *cur = work.pop_back_val();
    if (!seen.insert(cur).second)
      continue;
    for (Value v : cur->getOperands()) {
      Operation *def = v.getDefiningOp();
      if (!def)
        continue;
      if (isOther(def))
        return true;
      if (isView(def))
        work.push_back(def);
    }
  }
  return false;
}

// --- consumer kernels ------------------------------------------------------------

bool FusionRules::canAbsorb(unsigned a, unsigned b, ArrayRef<unsigned> bDeps, std::string &why) {
  Group &ga = groups[a], &gb = groups[b];
  // A row kernel, and a kernel over its rows (or pointwise over its domain).
  if (ga.library || ga.ops.empty() || !ga.hasReduction ||
      !isRowReduction(ga.domain.shape, ga.domain.reduced))
    return false;
  if (gb.hasReduction ? (gb.domain.shape != ga.domain.shape ||
                         gb.domain.reduced != ga.domain.reduced)
                      : !onlyUnitDimsChange(gb.domain.shape, ga.domain.shape))
    return false;
  if (ga.ops.size() + gb.ops.size() > kMaxKernelOps) {
    why = mergedTooLarge();
    return false;
  }
  // b's own ops must be elementwise over the rows, as canJoin asks of an
  // op joining a row kernel: a materialised transpose, slice or concat,
  // or a reshape across rows, would read the row kernel's values across
  // programs (and recompute each row's reductions per lane).
  for (Operation *op : gb.ops)
    if (isIndexRemap(op) || llvm::isa<BroadcastInDimOp>(op) ||
        (llvm::isa<ReshapeOp>(op) &&
         !onlyUnitDimsChange(shapeOf(op->getOperand(0)), shapeOf(op->getResult(0))))) {
      why = "it holds a transpose, slice, concat, broadcast or reshape across rows, which would "
            "read the row kernel's values across programs";
      return false;
    }
  // b's values read through a reshape of b's own (see canJoin) would be
  // recomputed at other rows, and with them a's row results there.
  for (Operation *op : gb.ops)
    for (const Read &read : readsOf(op))
      if (groupOf.lookup(read.producer) == b && read.remapped && read.reshapeOnly) {
        why = "it reads its own values through a reshape, which in a row kernel would "
              "recompute the row kernel's values at other rows";
        return false;
      }
  // a's values read at their own elements, or a's row results broadcast.
  for (Operation *op : gb.ops)
    for (const Read &read : readsOf(op))
      if (groupOf.lookup(read.producer) == a && read.remapped &&
          (!read.broadcastOnly ||
           numel(shapeOf(read.producer->getResult(0))) == numel(ga.domain.shape) ||
           llvm::any_of(read.broadcastDims, [&](int64_t d) {
             return !llvm::is_contained(ga.domain.reduced, d);
           }))) {
        why = "it reads the row kernel's values at other elements than their own (only row "
              "results broadcast along their rows can be read so)";
        return false;
      }
  // b's other producers must not wait for a (a cycle once merged).
  if (llvm::any_of(bDeps, [&](unsigned c) { return c != a && dependsOn(c, a); })) {
    why = "another kernel it reads waits for the row kernel (a cycle once merged)";
    return false;
  }
  return true;
}

// --- row absorbs column ----------------------------------------------------------

unsigned FusionRules::columnSumsIn(unsigned g) {
  unsigned count = 0;
  for (Operation *op : groups[g].ops)
    if (isReduction(op) && domainOf(op).reduced != groups[g].domain.reduced)
      ++count;
  return count;
}

bool FusionRules::readsColumnSum(unsigned a, Operation *op) {
  SmallVector<Operation *> work = {op};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!work.empty()) {
    Operation *cur = work.pop_back_val();
    if (!seen.insert(cur).second)
      continue;
    if (isReduction(cur) && groupOf.lookup(cur) == a &&
        domainOf(cur).reduced != groups[a].domain.reduced)
      return true;
    for (Value v : cur->getOperands())
      if (Operation *def = v.getDefiningOp();
          def && (recomputed.contains(def) || (groupOf.count(def) && groupOf.lookup(def) == a)))
        work.push_back(def);
  }
  return false;
}

bool FusionRules::canTakeColumns(unsigned a, unsigned b, ArrayRef<unsigned> bDeps,
                                 std::string &why) {
  Group &ga = groups[a], &gb = groups[b];
  int64_t rank = ga.domain.shape.size();
  // A row kernel (reducing its innermost dimension) over b's domain.
  if (ga.library || ga.ops.empty() || !ga.hasReduction || rank < 2 ||
      ga.domain.reduced != SmallVector<int64_t>{rank - 1} || gb.domain.shape != ga.domain.shape)
    return false;
  if (ga.ops.size() + gb.ops.size() > kMaxKernelOps) {
    why = mergedTooLarge();
    return false;
  }
  // Rows long enough to hold the lanes (short rows put the lanes across
  // rows instead), and an f64 accumulator row per sum within half the
  // scratch (the rest stays for the row kernel's own rows).
  int64_t columns = ga.domain.shape.back();
  int64_t sums = columnSumsIn(a);
  for (Operation *op : gb.ops)
    if (isReduction(op))
      ++sums;
  if (2 * columns <= target.blockSize(columns, /*rowReduction=*/true)) {
    why = "rows of " + std::to_string(columns) +
          " elements are too short: the row kernel runs its lanes across rows, not along them";
    return false;
  }
  if (2 * sums * columns * 8 > target.rowScratchBytes()) {
    why = "its accumulator rows (" + std::to_string(sums) + " x " + std::to_string(columns) +
          " f64) need " + std::to_string(sums * columns * 8) + " bytes of scratch; " +
          (target.rowScratchBytes() == 0
               ? "a row kernel of the " + target.name() + " target has none"
               : "a row kernel of the " + target.name() + " target may use half of its " +
                     std::to_string(target.rowScratchBytes()) + " for them");
    return false;
  }
  for (Operation *op : gb.ops) {
    if (isReduction(op)) {
      // Sums of the domain that something reads, reading no other sum of
      // the kernel.
      if (!llvm::isa<ReduceSumOp>(op) || domainOf(op).shape != ga.domain.shape ||
          (!isColumnReduction(domainOf(op)) && !isTotal(op))) {
        why = "it holds a reduction other than a sum over every dimension but the innermost, or "
              "over all, of the domain";
        return false;
      }
      if (readsReduced(b, op)) {
        why = "one of its sums reads another reduction of its kernel";
        return false;
      }
      if (op->use_empty()) {
        why = "one of its sums has no reader";
        return false;
      }
      continue;
    }
    // Elementwise over the domain, before the sums: nothing after a sum
    // (its value exists only once every row has been folded).
    if (gb.afterReduction.contains(op)) {
      why = "it computes on a sum, which exists only once every row has been folded";
      return false;
    }
    if (isIndexRemap(op) || llvm::isa<BroadcastInDimOp>(op) ||
        !onlyUnitDimsChange(shapeOf(op->getResult(0)), ga.domain.shape)) {
      why = "it holds an op that is not elementwise over the domain";
      return false;
    }
  }
  // a's values read at their own elements, or a's row results (one value
  // per row, computed from no column sum) broadcast along their rows. A
  // column sum read back would be recomputed over every row at every
  // element. Where a column is as long as one of the row dimensions, a
  // broadcast of a row result may run along the columns, which the reads
  // seen here do not tell: no merge.
  SmallVector<int64_t> rowShape(ga.domain.shape.begin(), ga.domain.shape.end() - 1);
  bool ambiguous = llvm::is_contained(rowShape, columns);
  for (Operation *op : gb.ops)
    for (const Read &read : readsOf(op)) {
      if (groupOf.lookup(read.producer) != a || !read.remapped)
        continue;
      if (!read.broadcastOnly)
        why = "it reads the row kernel's values at other elements than their own";
      else if (ambiguous)
        why = "the rows are as long (" + std::to_string(columns) +
              ") as another dimension of the domain, so a row result it reads broadcast may "
              "run along the columns";
      else if (!onlyUnitDimsChange(shapeOf(read.producer->getResult(0)), rowShape))
        why = "it reads a value of the row kernel broadcast that is not one value per row";
      else if (readsColumnSum(a, read.producer))
        why = "it reads a column sum of the row kernel back, which would be recomputed at "
              "every element";
      else
        continue;
      return false;
    }
  // The row kernel waits for nothing more than before (so none of its
  // readers waits longer), and no cycle forms.
  llvm::SmallSetVector<unsigned, 4> aDeps = kernelsRead(a);
  if (!llvm::all_of(bDeps, [&](unsigned c) { return c == a || aDeps.contains(c); })) {
    why = "it reads a kernel the row kernel does not wait for, so the row kernel's readers "
          "would wait longer";
    return false;
  }
  return true;
}
