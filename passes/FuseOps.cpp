//===- FuseOps.cpp - group primitive graph ops into kernels ---------------===//
//
// Decides which ops run in one kernel and records each decision as a
// graph.fusion region; emitters later print those regions without a cost
// model of their own. The heuristics are greedy and documented in
// Passes.td; every refusal can be reported as a remark with its reason.
//
//===----------------------------------------------------------------------===//
#include "passes/FuseOps.h"

#include "ir/graph/GraphDialect.h"
#include "passes/PassUtils.h"
#include "passes/Passes.h"
#include "passes/TargetInfo.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetOperations.h"
#include "llvm/ADT/SetVector.h"

#include <functional>

#include <numeric>
#include <queue>

namespace tilefuse {
#define GEN_PASS_DEF_FUSEOPSPASS
#include "passes/Passes.h.inc"
} // namespace tilefuse

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;

namespace {

bool isGenerator(Operation *op) {
  return llvm::isa<FullOp, IotaOp, ConstantOp>(op);
}
bool isLibraryCall(Operation *op) {
  // A recompute barrier is no call, but like one it stays out of kernels
  // (ProgramBuilder gives it its operand's buffer): what reads it runs
  // after its `after` value, in the backward pass.
  return llvm::isa<MatmulOp, GatherOp, ScatterAddOp, RecomputeBarrierOp>(op);
}
bool isReduction(Operation *op) {
  return llvm::isa<ReduceSumOp, ReduceMaxOp, ReduceMinOp, ArgmaxOp>(op);
}
/// Cheap ops that, computed from kernel inputs alone, are recomputed inside
/// every kernel that reads them instead of being a kernel of their own (a
/// broadcast bias, a one-hot mask from labels, a cast of an input).
bool isCheapToRecompute(Operation *op) {
  return llvm::isa<BroadcastInDimOp, ReshapeOp, TransposeOp, SliceOp, ConcatOp,
                   CastOp, SelectOp, EqOp, NeOp, LtOp, LeOp, GtOp, GeOp, AddOp,
                   SubOp, MulOp, NegOp, AbsOp, MaximumOp, MinimumOp>(op);
}

/// Ops that read their operand at another index than they write.
bool isIndexRemap(Operation *op) {
  return llvm::isa<TransposeOp, SliceOp, ConcatOp>(op);
}

SmallVector<int64_t> shapeOf(Value v) {
  return SmallVector<int64_t>(llvm::cast<RankedTensorType>(v.getType()).getShape());
}
int64_t numel(ArrayRef<int64_t> s) {
  return std::accumulate(s.begin(), s.end(), int64_t(1), std::multiplies<>());
}

/// The loop nest an op runs in: its result shape, or for a reduction its
/// operand shape and the reduced dimensions.
struct Domain {
  SmallVector<int64_t> shape;
  SmallVector<int64_t> reduced;
};

Domain domainOf(Operation *op) {
  if (auto a = llvm::dyn_cast<ArgmaxOp>(op))
    return {shapeOf(a.getOperand()), {static_cast<int64_t>(a.getDim())}};
  if (isReduction(op)) {
    auto dims = op->getAttrOfType<DenseI64ArrayAttr>("dims").asArrayRef();
    return {shapeOf(op->getOperand(0)), SmallVector<int64_t>(dims)};
  }
  return {shapeOf(op->getResult(0)), {}};
}

/// `shape` with `dims` removed (or kept as 1).
SmallVector<int64_t> reducedShape(ArrayRef<int64_t> shape,
                                  ArrayRef<int64_t> dims, bool keepdim) {
  SmallVector<int64_t> out;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (!llvm::is_contained(dims, d))
      out.push_back(shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

/// Reduced dims are the innermost ones, and not all of them: each program
/// owns whole rows, so it can use a row's reduction on that row again
/// (softmax, layer_norm). A full reduction is not a row kernel: reading its
/// result back would serialise the kernel on one program.
bool isRowReduction(ArrayRef<int64_t> shape, ArrayRef<int64_t> dims) {
  int64_t rank = shape.size();
  if (static_cast<int64_t>(dims.size()) >= rank)
    return false;
  for (auto [i, d] : llvm::enumerate(dims))
    if (d != rank - static_cast<int64_t>(dims.size()) + static_cast<int64_t>(i))
      return false;
  return true;
}

/// Same elements, only size-1 dimensions added or removed.
bool onlyUnitDimsChange(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  SmallVector<int64_t> x, y;
  for (int64_t d : a) if (d != 1) x.push_back(d);
  for (int64_t d : b) if (d != 1) y.push_back(d);
  return x == y;
}


/// Recomputed chains (views, cheap ops of leaves) are cloned into every
/// kernel that reads them; past this depth the op is computed once in a
/// kernel instead. This also bounds every walk through recomputed ops.
constexpr unsigned kMaxRecomputeDepth = 16;

struct Group {
  SmallVector<Operation *> ops;
  Domain domain;
  bool hasReduction = false;
  bool library = false;   ///< a matmul / gather / scatter_add call
  bool epilogue = false;  ///< a library GEMM that absorbed an epilogue
  /// Ops whose value depends on a reduction of this group.
  llvm::DenseSet<Operation *> afterReduction;
  unsigned firstPosition = 0;
};

/// Index remaps that a consumer kernel can apply while reading its input.
bool isView(Operation *op) {
  return llvm::isa<BroadcastInDimOp, ReshapeOp, TransposeOp, SliceOp>(op);
}

/// A value must exist in memory when a library call or the return reads it.
bool needsMaterializing(Operation *op) {
  return llvm::any_of(op->getUsers(), [](Operation *user) {
    return isLibraryCall(user) || !llvm::isa<GraphDialect>(user->getDialect());
  });
}

class Fuser {
public:
  Fuser(func::FuncOp func, const TargetInfo &target, bool remarks)
      : func(func), target(target), remarks(remarks) {}

  LogicalResult run() {
    unsigned position = 0;
    for (Operation &op : func.getBody().front().without_terminator()) {
      positions[&op] = position++;
      if (isGenerator(&op))
        continue;
      bool ofLeaves = llvm::all_of(op.getOperands(),
                                   [&](Value v) { return isLeaf(v); });
      // A scalar computed from leaves (Adam's bias correction) is cheaper to
      // recompute in each kernel than to launch a kernel for.
      bool scalarOfLeaves = ofLeaves && !isReduction(&op) &&
                            !isLibraryCall(&op) &&
                            numel(shapeOf(op.getResult(0))) == 1;
      unsigned depth = recomputeDepth(&op);
      if (isBufferView(&op)) {
        bufferViews.insert(&op);
        recomputed.insert(&op);
        recomputeDepths[&op] = depth;
        continue;
      }
      if (!needsMaterializing(&op) && depth <= kMaxRecomputeDepth &&
          (isView(&op) || scalarOfLeaves ||
           (isCheapToRecompute(&op) && ofLeaves))) {
        recomputed.insert(&op);
        recomputeDepths[&op] = depth;
        continue;
      }
      place(&op);
    }
    mergeConsumerKernels();
    mergeColumnKernels();
    return materialize();
  }

private:
  /// A value any kernel can read or recompute: an argument, a constant, a
  /// cheap op of such values, or a view (its operand is read remapped).
  bool isLeaf(Value v) {
    Operation *def = v.getDefiningOp();
    return !def || isLeafOp(def);
  }
  bool isLeafOp(Operation *def) {
    return isGenerator(def) || recomputed.contains(def);
  }

  /// A row-major reshape of a value that exists in memory (an argument, a
  /// kernel's or a library call's result), read by matmuls and kernels
  /// only: the same bytes under another shape. The runtime gives
  /// it its operand's buffer, so it is no kernel (a copy) of its own;
  /// kernels that read it apply the reshape as any view. A reshape the
  /// function returns stays a kernel: the result needs its own buffer.
  bool isBufferView(Operation *op) {
    auto reshape = llvm::dyn_cast<ReshapeOp>(op);
    if (!reshape || !needsMaterializing(op))
      return false;
    // Only splits or merges of the leading dimensions: a GEMM reads its
    // operands' rows by the stored last dimension.
    SmallVector<int64_t> from = shapeOf(reshape.getOperand()), to = shapeOf(reshape);
    if (from.empty() || to.empty() || from.back() != to.back())
      return false;
    Operation *def = reshape.getOperand().getDefiningOp();
    if (def && (isGenerator(def) || recomputed.contains(def)))
      return false;
    // GEMM steps take their sizes from the graph's types; gathers and
    // scatters read their buffers' shapes, so those get a real reshape.
    return llvm::all_of(op->getUsers(), [](Operation *user) {
      return llvm::isa<GraphDialect>(user->getDialect()) &&
             (!isLibraryCall(user) || llvm::isa<MatmulOp>(user));
    });
  }

  /// 1 + the longest chain of recomputed ops `op` would read.
  unsigned recomputeDepth(Operation *op) {
    unsigned depth = 0;
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp())
        depth = std::max(depth, recomputeDepths.lookup(def));
    return depth + 1;
  }

  /// The other kernels whose results kernel `g` reads.
  llvm::SmallSetVector<unsigned, 4> kernelsRead(unsigned g) {
    llvm::SmallSetVector<unsigned, 4> deps;
    for (Operation *op : groups[g].ops)
      for (Value v : op->getOperands())
        producers(v, deps);
    deps.remove(g);
    return deps;
  }

  /// The kernels whose results `v` is computed from, looking through leaves.
  void producers(Value v, llvm::SmallSetVector<unsigned, 4> &out) {
    for (const Read &r : readsOfValue(v))
      out.insert(groupOf.lookup(r.producer));
  }

  /// How `op` reads one kernel result, summed over every path through
  /// recomputed ops (views, cheap elementwise ops).
  struct Read {
    Operation *producer;
    bool viaOps = false;        ///< some path goes through recomputed ops
    bool remapped = false;      ///< some path reads it at another index
    bool broadcastOnly = true;  ///< every remapping path is a broadcast
  };

  /// The reads of value `v`, memoised: recomputed chains share operands, so
  /// walking every path would be exponential.
  const SmallVector<Read> &readsOfValue(Value v) {
    auto it = readCache.find(v);
    if (it != readCache.end())
      return it->second;
    SmallVector<Read> reads;
    Operation *def = v.getDefiningOp();
    if (def && !isGenerator(def)) {
      if (!recomputed.contains(def)) {
        reads.push_back({def});
      } else {
        bool unitReshape = llvm::isa<ReshapeOp>(def) &&
                           onlyUnitDimsChange(shapeOf(def->getOperand(0)),
                                              shapeOf(def->getResult(0)));
        // A buffer view (a reshape of leading dimensions) keeps every
        // element's linear index: no remap.
        bool remaps = isView(def) && !unitReshape && !bufferViews.contains(def);
        for (Value operand : def->getOperands())
          for (Read r : readsOfValue(operand)) {
            r.viaOps = true;
            if (remaps) {
              r.remapped = true;
              r.broadcastOnly &= llvm::isa<BroadcastInDimOp>(def);
            }
            merge(reads, r);
          }
      }
    }
    return readCache[v] = std::move(reads);
  }

  static void merge(SmallVectorImpl<Read> &reads, const Read &r) {
    for (Read &existing : reads)
      if (existing.producer == r.producer) {
        existing.viaOps |= r.viaOps;
        if (r.remapped) {
          existing.broadcastOnly =
              (existing.remapped ? existing.broadcastOnly : true) &&
              r.broadcastOnly;
          existing.remapped = true;
        }
        return;
      }
    reads.push_back(r);
  }

  /// Every kernel result `op` reads, in operand order.
  SmallVector<Read> readsOf(Operation *op) {
    SmallVector<Read> reads;
    for (Value v : op->getOperands())
      for (const Read &r : readsOfValue(v))
        merge(reads, r);
    return reads;
  }

  /// Puts `op` into an existing kernel if one may take it, else a new one.
  void place(Operation *op) {
    if (!isLibraryCall(op)) {
      SmallVector<Read> reads = readsOf(op);
      llvm::SmallSetVector<unsigned, 4> tried;
      for (const Read &read : reads) {
        unsigned g = groupOf.lookup(read.producer);
        if (!tried.insert(g))
          continue;
        std::string why;
        if (canJoin(g, op, reads, why)) {
          mergeSiblings(g, op, reads);
          return join(g, op);
        }
        refuse(op, read.producer, why);
      }
      if (isReduction(op))
        for (unsigned g = groups.size(); g-- > 0 && groups.size() - g <= 8;) {
          std::string why;
          if (groups[g].hasReduction && groups[g].ops.size() < kMaxKernelOps &&
              (sameDomain(groups[g], op) || totalBesideColumns(g, op)) &&
              mergeDelaysNothing(g, op) && !createsCycle(g, op, why)) {
            // A column reduction turns a kernel of totals into a column
            // kernel (which also folds the totals).
            if (isColumnReduction(domainOf(op)))
              groups[g].domain = domainOf(op);
            return join(g, op);
          }
        }
    }
    Group group;
    group.domain = domainOf(op);
    group.library = isLibraryCall(op);
    group.firstPosition = positions[op];
    groups.push_back(group);
    join(groups.size() - 1, op);
  }

  /// `op` joins pointwise kernel `g` and also reads other pointwise kernels
  /// of the same size at the same index (Adam's m and v chains): those merge
  /// into `g`, when neither kernel depends on the other.
  void mergeSiblings(unsigned g, Operation *op, ArrayRef<Read> reads) {
    auto plainPointwise = [&](unsigned k) {
      return !groups[k].library && !groups[k].hasReduction;
    };
    if (!plainPointwise(g) || isReduction(op))
      return;
    for (const Read &read : reads) {
      unsigned h = groupOf.lookup(read.producer);
      if (h == g || !plainPointwise(h) ||
          groups[g].ops.size() + groups[h].ops.size() > kMaxKernelOps ||
          numel(groups[h].domain.shape) != numel(groups[g].domain.shape) ||
          read.remapped || dependsOn(h, g) || dependsOn(g, h) ||
          // A third kernel between them would close a cycle once merged.
          llvm::any_of(reads, [&](const Read &other) {
            unsigned k = groupOf.lookup(other.producer);
            return k != g && k != h && dependsOn(k, h);
          }))
        continue;
      for (Operation *moved : groups[h].ops) {
        groups[g].ops.push_back(moved);
        groupOf[moved] = g;
      }
      groups[h].ops.clear();
      groups[g].firstPosition =
          std::min(groups[g].firstPosition, groups[h].firstPosition);
    }
    // Members must stay in program order for cloning.
    llvm::sort(groups[g].ops, [&](Operation *a, Operation *b) {
      return positions[a] < positions[b];
    });
  }

  /// Whether `op` reads a reduction result of group `g` (or a value computed
  /// from one), directly or through recomputed ops.
  bool readsReduced(unsigned g, Operation *op) {
    for (const Read &read : readsOf(op))
      if (groupOf.lookup(read.producer) == g &&
          (isReduction(read.producer) ||
           groups[g].afterReduction.contains(read.producer)))
        return true;
    return false;
  }

  void join(unsigned g, Operation *op) {
    Group &group = groups[g];
    if (readsReduced(g, op) || (isReduction(op) && group.hasReduction))
      group.afterReduction.insert(op);
    if (isReduction(op) && !group.hasReduction) {
      group.hasReduction = true;
      group.domain = domainOf(op);
    }
    if (group.library && !isLibraryCall(op))
      group.epilogue = true;
    group.ops.push_back(op);
    groupOf[op] = g;
  }

  /// Reduced dims are all but the innermost (layer_norm's dgamma).
  static bool isColumnReduction(const Domain &d) {
    int64_t rank = d.shape.size();
    if (rank < 2 || int64_t(d.reduced.size()) != rank - 1)
      return false;
    for (int64_t i = 0; i + 1 < rank; ++i)
      if (d.reduced[i] != i)
        return false;
    return true;
  }
  static bool isTotal(Operation *op) {
    Domain d = domainOf(op);
    return llvm::isa<ReduceSumOp>(op) && !d.shape.empty() && d.reduced.size() == d.shape.size();
  }
  /// A sum over the whole domain (a loss's value) beside column sums of the
  /// same domain: the column kernel's walk over the rows folds it too, as
  /// column partials summed at the end, so the domain is read once for all
  /// (layer_norm's backward with its value: dgamma, dbeta and the sum). The
  /// kernel holds only these reductions and the elementwise ops they read.
  bool totalBesideColumns(unsigned g, Operation *op) {
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

  bool sameDomain(const Group &group, Operation *op) {
    Domain d = domainOf(op);
    return d.shape == group.domain.shape && d.reduced == group.domain.reduced;
  }

  /// Whether `op` may join group `g`, given every kernel result it reads.
  bool canJoin(unsigned g, Operation *op, ArrayRef<Read> reads,
               std::string &why) {
    Group &group = groups[g];
    if (group.ops.size() >= kMaxKernelOps) {
      why = "the kernel already has " + std::to_string(kMaxKernelOps) +
            " ops (longer kernels stop paying: LLVM time grows faster than the ops, and "
            "one more memory pass is cheap next to that many)";
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
      if (read.remapped) {
        broadcastRead = true;
        broadcastOnly &= read.broadcastOnly;
      }
    }
    if (group.library) {
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
    if (isIndexRemap(op)) {
      why = "it reads a value of that kernel at another index";
      return false;
    }
    if (broadcastRead) {
      // Only a row's own reduction result can be read back across the row.
      bool rowResult = group.hasReduction && broadcastOnly &&
                       isRowReduction(group.domain.shape, group.domain.reduced);
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
      if (readsReduced(g, op) && !isRowReduction(d.shape, d.reduced)) {
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
    bool atFull = onlyUnitDimsChange(d.shape, full);
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
        !isRowReduction(full, dims)) {
      why = "it needs a reduction result across programs (not a row reduction)";
      return false;
    }
    return !createsCycle(g, op, why);
  }

  /// Whether every operand of epilogue `op` of library kernel `g`, other
  /// than the kernel's own value, is a buffer the library can read: a
  /// broadcast (the library's own indexing) of an argument or of another
  /// kernel's result, not of a recomputed op (a cast, a sum of biases, a
  /// constant) that would have to run inside the library call.
  bool epilogueOperandsAreBuffers(unsigned g, Operation *op) {
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

  /// Whether sibling reduction `op` may merge into kernel `g` without
  /// delaying a result that other kernels wait for: a result merged into a
  /// kernel that waits for more kernels than it needs waits with it.
  /// (Cross-entropy's count of valid labels, read from the labels alone,
  /// merged into the kernel summing the per-row losses, would come too late
  /// for the row kernel to compute the gradient beside the loss.) Results
  /// that only leave the function can wait (layer_norm's dbeta beside
  /// dgamma: one walk over dy for both).
  bool mergeDelaysNothing(unsigned g, Operation *op) {
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

  /// Whether every reader of `op`'s results outside its side (`isSide`)
  /// waits for the other side (`isOther`) anyway: the function's return,
  /// or an op that also reads a value of the other side, directly or
  /// through views (the forward cross-entropy's mean divides the loss sum
  /// by the count). Readers are found through views (most readers are not
  /// placed yet: they come later in the function).
  bool delayIsHarmless(Operation *op, llvm::function_ref<bool(Operation *)> isSide,
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

  /// Whether `op` reads a value of an op `isOther` accepts, directly or
  /// through views. Not through readsOf: `op` may not be placed yet, and
  /// readsOf's cache would keep what it saw of ops not yet classified.
  bool readsFrom(Operation *op, llvm::function_ref<bool(Operation *)> isOther) {
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

  /// Second chance for kernels that formed apart: a row kernel (or a
  /// pointwise kernel over its domain) that reads another row kernel's
  /// values at the same elements, or its row results broadcast along the
  /// rows, joins it when nothing between them would close a cycle. Ops join
  /// the first kernel they read that takes them; when an op reads first a
  /// kernel that runs later (cross-entropy's gradient reads the count of
  /// valid labels before the exponentials of the forward row kernel), its
  /// kernel forms apart and would re-read what the row kernel wrote.
  void mergeConsumerKernels() {
    absorbReaders([&](unsigned b) { return !groups[b].library; },
                  [&](unsigned a, unsigned b, ArrayRef<unsigned> deps) {
                    return canAbsorb(a, b, deps);
                  });
  }

  /// Each kernel `b` that `wanted` accepts joins the first kernel it reads
  /// that `canMerge(a, b, kernels b reads)` accepts.
  template <typename Wanted, typename CanMerge>
  void absorbReaders(Wanted wanted, CanMerge canMerge) {
    for (unsigned b = 0; b < groups.size(); ++b) {
      if (groups[b].ops.empty() || !wanted(b))
        continue;
      llvm::SmallSetVector<unsigned, 4> deps = kernelsRead(b);
      for (unsigned a : deps)
        if (canMerge(a, b, deps.getArrayRef())) {
          absorb(a, b);
          break;
        }
    }
  }

  bool canAbsorb(unsigned a, unsigned b, ArrayRef<unsigned> bDeps) {
    Group &ga = groups[a], &gb = groups[b];
    if (ga.library || ga.ops.empty() || !ga.hasReduction ||
        !isRowReduction(ga.domain.shape, ga.domain.reduced) ||
        ga.ops.size() + gb.ops.size() > kMaxKernelOps)
      return false;
    if (gb.hasReduction ? (gb.domain.shape != ga.domain.shape ||
                           gb.domain.reduced != ga.domain.reduced)
                        : !onlyUnitDimsChange(gb.domain.shape, ga.domain.shape))
      return false;
    // b's own ops must be elementwise over the rows, as canJoin asks of an
    // op joining a row kernel: a materialised transpose, slice or concat,
    // or a reshape across rows, would read the row kernel's values across
    // programs (and recompute each row's reductions per lane).
    for (Operation *op : gb.ops)
      if (isIndexRemap(op) || llvm::isa<BroadcastInDimOp>(op) ||
          (llvm::isa<ReshapeOp>(op) &&
           !onlyUnitDimsChange(shapeOf(op->getOperand(0)), shapeOf(op->getResult(0)))))
        return false;
    // a's values read at their own elements, or a's row results broadcast.
    for (Operation *op : gb.ops)
      for (const Read &read : readsOf(op))
        if (groupOf.lookup(read.producer) == a && read.remapped &&
            (!read.broadcastOnly ||
             numel(shapeOf(read.producer->getResult(0))) == numel(ga.domain.shape)))
          return false;
    // b's other producers must not wait for a (a cycle once merged).
    return llvm::none_of(bDeps, [&](unsigned c) { return c != a && dependsOn(c, a); });
  }

  void absorb(unsigned a, unsigned b) {
    Group &ga = groups[a], &gb = groups[b];
    for (Operation *op : gb.ops)
      groupOf[op] = a;
    ga.ops.append(gb.ops.begin(), gb.ops.end());
    gb.ops.clear();
    // Members stay in program order for cloning. (No op joins after this
    // pass, so afterReduction, which guides joins, is not updated.)
    llvm::sort(ga.ops, [&](Operation *x, Operation *y) { return positions[x] < positions[y]; });
    ga.firstPosition = std::min(ga.firstPosition, gb.firstPosition);
  }

  /// Third chance, for column sums: a kernel of sums over every dimension
  /// but the innermost (and totals) of the domain of a row kernel it reads
  /// joins that row kernel, which then folds them while it walks its rows:
  /// layer_norm's dgamma, dbeta and loss need x and dy, which the row kernel
  /// computing dx has just read (one pass over both instead of two). Each
  /// program of the merged kernel keeps one accumulator row per sum, so the
  /// target must have the scratch (TargetInfo::rowScratchBytes; none on
  /// GPUs, where the column kernel stays apart).
  void mergeColumnKernels() {
    absorbReaders(
        [&](unsigned b) {
          return !groups[b].library && groups[b].hasReduction && isColumnReduction(groups[b].domain);
        },
        [&](unsigned a, unsigned b, ArrayRef<unsigned> deps) { return canTakeColumns(a, b, deps); });
  }

  /// Sums over every dimension but the innermost of `g`'s domain, or over
  /// all of them, in a kernel whose reduction is its innermost dimension.
  unsigned columnSumsIn(unsigned g) {
    unsigned count = 0;
    for (Operation *op : groups[g].ops)
      if (isReduction(op) && domainOf(op).reduced != groups[g].domain.reduced)
        ++count;
    return count;
  }

  /// Whether `op` of group `a` is, or reads, a sum over other dimensions
  /// than a's (a column sum a has taken).
  bool readsColumnSum(unsigned a, Operation *op) {
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

  bool canTakeColumns(unsigned a, unsigned b, ArrayRef<unsigned> bDeps) {
    Group &ga = groups[a], &gb = groups[b];
    int64_t rank = ga.domain.shape.size();
    if (ga.library || ga.ops.empty() || !ga.hasReduction || rank < 2 ||
        ga.domain.reduced != SmallVector<int64_t>{rank - 1} ||
        gb.domain.shape != ga.domain.shape || ga.ops.size() + gb.ops.size() > kMaxKernelOps)
      return false;
    // Rows long enough to hold the lanes (short rows put the lanes across
    // rows instead), and an f64 accumulator row per sum within half the
    // scratch (the rest stays for the row kernel's own rows).
    int64_t columns = ga.domain.shape.back();
    int64_t sums = columnSumsIn(a);
    for (Operation *op : gb.ops)
      if (isReduction(op))
        ++sums;
    if (2 * columns <= target.blockSize(columns, /*rowReduction=*/true) ||
        2 * sums * columns * 8 > target.rowScratchBytes())
      return false;
    for (Operation *op : gb.ops) {
      if (isReduction(op)) {
        // Sums of the domain that something reads, reading no other sum of
        // the kernel.
        if (!llvm::isa<ReduceSumOp>(op) || domainOf(op).shape != ga.domain.shape ||
            (!isColumnReduction(domainOf(op)) && !isTotal(op)) || readsReduced(b, op) ||
            op->use_empty())
          return false;
        continue;
      }
      // Elementwise over the domain, before the sums: nothing after a sum
      // (its value exists only once every row has been folded).
      if (gb.afterReduction.contains(op) || isIndexRemap(op) || llvm::isa<BroadcastInDimOp>(op) ||
          !onlyUnitDimsChange(shapeOf(op->getResult(0)), ga.domain.shape))
        return false;
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
      for (const Read &read : readsOf(op))
        if (groupOf.lookup(read.producer) == a && read.remapped &&
            (!read.broadcastOnly || ambiguous ||
             !onlyUnitDimsChange(shapeOf(read.producer->getResult(0)), rowShape) ||
             readsColumnSum(a, read.producer)))
          return false;
    // The row kernel waits for nothing more than before (so none of its
    // readers waits longer), and no cycle forms.
    llvm::SmallSetVector<unsigned, 4> aDeps = kernelsRead(a);
    return llvm::all_of(bDeps, [&](unsigned c) { return c == a || aDeps.contains(c); });
  }

  /// Joining `op` to `g` is a cycle if another operand's kernel depends on g.
  bool createsCycle(unsigned g, Operation *op, std::string &why) {
    llvm::SmallSetVector<unsigned, 4> from;
    for (Value v : op->getOperands())
      producers(v, from);
    for (unsigned h : from)
      if (h != g && dependsOn(h, g)) {
        why = "another operand's kernel depends on that kernel (a cycle)";
        return true;
      }
    return false;
  }

  /// Whether kernel `from` reads, transitively, from kernel `to`.
  bool dependsOn(unsigned from, unsigned to) {
    SmallVector<unsigned> work = {from};
    llvm::DenseSet<unsigned> seen = {from};
    while (!work.empty()) {
      unsigned g = work.pop_back_val();
      llvm::SmallSetVector<unsigned, 4> deps;
      for (Operation *op : groups[g].ops)
        for (Value v : op->getOperands())
          producers(v, deps);
      for (unsigned h : deps) {
        if (h == to)
          return true;
        if (seen.insert(h).second)
          work.push_back(h);
      }
    }
    return false;
  }

  void refuse(Operation *op, Operation *producer, const std::string &why) {
    if (remarks)
      op->emitRemark("not fused with '")
          << producer->getName() << "': " << why;
  }

  LogicalResult materialize();
  FusionOp buildKernel(unsigned index, Group &group, OpBuilder &b);

  func::FuncOp func;
  const TargetInfo &target;
  bool remarks;
  std::vector<Group> groups;
  llvm::DenseMap<Operation *, unsigned> groupOf;
  llvm::DenseMap<Operation *, unsigned> positions;
  /// Cheap ops of leaves and views, cloned into the kernels that read them.
  llvm::SetVector<Operation *> recomputed;
  /// Recomputed reshapes that library calls read too (isBufferView): each
  /// library call that reads one gets a copy of it.
  llvm::DenseSet<Operation *> bufferViews;

  /// Makes `op` read each buffer view among its operands through a copy of
  /// the view built at `b`'s insertion point.
  void readViewsOfTheirOwn(Operation *op, OpBuilder &b) {
    for (OpOperand &use : op->getOpOperands())
      if (Operation *view = use.get().getDefiningOp(); view && bufferViews.contains(view))
        use.set(b.clone(*view)->getResult(0));
  }
  llvm::DenseMap<Value, SmallVector<Read>> readCache;
  llvm::DenseMap<Operation *, unsigned> recomputeDepths;
};

FusionOp Fuser::buildKernel(unsigned index, Group &group, OpBuilder &b) {
  llvm::DenseSet<Operation *> members(group.ops.begin(), group.ops.end());
  SmallVector<Value> outputs;
  llvm::SetVector<Value> inputs;
  // Inputs: values from other kernels, arguments, library results; leaf
  // chains are walked down to the arguments they read.
  llvm::DenseSet<Value> visited;
  std::function<void(Value)> collect = [&](Value v) {
    Operation *def = v.getDefiningOp();
    if ((def && members.contains(def)) || !visited.insert(v).second)
      return;
    if (def && isLeafOp(def)) {
      for (Value operand : def->getOperands())
        collect(operand);
      return;
    }
    inputs.insert(v);
  };
  for (Operation *op : group.ops)
    for (Value v : op->getOperands())
      collect(v);
  // Outputs: values read by another kernel, a library call or the return,
  // directly or through ops recomputed there (not through ops recomputed
  // only inside this kernel).
  llvm::DenseMap<Value, bool> readElsewhere;
  std::function<bool(Value)> isReadOutside = [&](Value v) -> bool {
    auto it = readElsewhere.find(v);
    if (it != readElsewhere.end())
      return it->second;
    bool outside = false;
    for (Operation *user : v.getUsers()) {
      if (members.contains(user))
        continue;
      if (!recomputed.contains(user) || isReadOutside(user->getResult(0))) {
        outside = true;
        break;
      }
    }
    return readElsewhere[v] = outside;
  };
  for (Operation *op : group.ops)
    for (Value r : op->getResults())
      if (isReadOutside(r))
        outputs.push_back(r);

  StringRef kind = group.epilogue ? "matmul"
                   : group.hasReduction ? "reduction"
                                        : "pointwise";
  Location loc = group.ops.front()->getLoc();
  // A random op's stream becomes an input (a one-element constant buffer):
  // the dropout kernels of repeated layers then differ only in which
  // buffer they read, and are compiled once.
  llvm::DenseMap<Operation *, Value> streamOf;
  for (Operation *op : group.ops)
    if (auto rnd = llvm::dyn_cast<RandomUniformOp>(op); rnd && !rnd.getStreamValue()) {
      Value stream = b.create<FullOp>(rnd.getLoc(), RankedTensorType::get({}, b.getI64Type()),
                                      b.getF64FloatAttr(double(rnd.getStream())));
      inputs.insert(stream);
      streamOf[op] = stream;
    }
  auto fusion = b.create<FusionOp>(
      loc, ValueRange(outputs).getTypes(),
      b.getStringAttr("kernel" + std::to_string(index)), inputs.getArrayRef(),
      b.getStringAttr(kind), b.getDenseI64ArrayAttr(group.domain.shape),
      b.getDenseI64ArrayAttr(group.domain.reduced));
  Block *body = b.createBlock(&fusion.getBody());
  IRMapping map;
  for (Value in : inputs)
    map.map(in, body->addArgument(in.getType(), in.getLoc()));
  OpBuilder inner = OpBuilder::atBlockEnd(body);
  // Constants, fills and cheap ops of inputs are recomputed in every kernel
  // that reads them.
  std::function<void(Value)> recompute = [&](Value v) {
    Operation *def = v.getDefiningOp();
    if (map.contains(v) || !def || !isLeafOp(def))
      return;
    for (Value operand : def->getOperands())
      recompute(operand);
    inner.clone(*def, map);
  };
  for (Operation *op : group.ops) {
    for (Value v : op->getOperands())
      recompute(v);
    if (Value stream = streamOf.lookup(op)) {
      auto rnd = llvm::cast<RandomUniformOp>(op);
      map.map(rnd.getResult(), inner.create<RandomUniformOp>(
                                   rnd.getLoc(), rnd.getType(), map.lookupOrDefault(rnd.getSeed()),
                                   map.lookup(stream), inner.getI64IntegerAttr(0)));
      continue;
    }
    inner.clone(*op, map);
  }
  SmallVector<Value> yielded;
  for (Value v : outputs)
    yielded.push_back(map.lookup(v));
  inner.create<YieldOp>(loc, yielded);
  for (auto [v, r] : llvm::zip(outputs, fusion.getResults()))
    v.replaceUsesWithIf(r, [&](OpOperand &use) {
      Operation *owner = use.getOwner();
      return !members.contains(owner) &&
             (!recomputed.contains(owner) || isReadOutside(owner->getResult(0)));
    });
  return fusion;
}

LogicalResult Fuser::materialize() {
  Block &block = func.getBody().front();
  Operation *ret = block.getTerminator();
  // Generators first: they have no operands and library calls may use them.
  SmallVector<Operation *> generators;
  for (Operation &op : block.without_terminator())
    if (isGenerator(&op))
      generators.push_back(&op);
  for (Operation *op : llvm::reverse(generators))
    op->moveBefore(&block.front());

  // Kernels in a topological order, ties broken by original position.
  unsigned n = groups.size();
  std::vector<llvm::DenseSet<unsigned>> consumers(n);
  std::vector<unsigned> pending(n, 0);
  for (unsigned g = 0; g < n; ++g) {
    llvm::SmallSetVector<unsigned, 4> deps = kernelsRead(g);
    for (unsigned h : deps)
      consumers[h].insert(g);
    pending[g] = deps.size();
  }
  using Entry = std::pair<unsigned, unsigned>; // (position, group)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> ready;
  for (unsigned g = 0; g < n; ++g)
    if (pending[g] == 0)
      ready.push({groups[g].firstPosition, g});
  OpBuilder b(ret);
  unsigned kernelIndex = 0;
  SmallVector<Operation *> dead;
  unsigned scheduled = 0;
  while (!ready.empty()) {
    unsigned g = ready.top().second;
    ready.pop();
    ++scheduled;
    Group &group = groups[g];
    if (group.ops.empty()) {
      // Merged into another kernel.
    } else if (group.library && !group.epilogue) {
      // Each library call gets its own copy of a view it reads, right
      // before it: a view read in the forward and the backward pass then
      // does not keep its operand's readers in one place (later passes,
      // rematerialization, move each read on its own).
      Operation *call = group.ops.front();
      b.setInsertionPoint(ret);
      readViewsOfTheirOwn(call, b);
      call->moveBefore(ret);
    } else {
      b.setInsertionPoint(ret);
      // A GEMM with an epilogue reads its operands as kernel inputs: a view
      // it reads stays outside the kernel, in a copy of its own.
      if (group.epilogue)
        for (Operation *op : group.ops)
          if (llvm::isa<MatmulOp>(op))
            readViewsOfTheirOwn(op, b);
      buildKernel(kernelIndex++, group, b);
      dead.append(group.ops.begin(), group.ops.end());
    }
    for (unsigned c : consumers[g])
      if (--pending[c] == 0)
        ready.push({groups[c].firstPosition, c});
  }
  if (scheduled != n) {
    func.emitError("internal error: the fusion pass formed a cycle between "
                   "kernels; please report this graph");
    return failure();
  }
  // Kernel members and recomputed ops are now only read by each other: the
  // kernels hold their own copies.
  dead.append(recomputed.begin(), recomputed.end());
  for (Operation *op : dead)
    op->dropAllReferences();
  for (Operation *op : dead)
    op->erase();
  for (Operation *op : generators)
    if (op->use_empty())
      op->erase();
  return success();
}

struct FuseOpsPass : tilefuse::impl::FuseOpsPassBase<FuseOpsPass> {
  using FuseOpsPassBase::FuseOpsPassBase;
  void runOnOperation() override {
    std::unique_ptr<TargetInfo> info = TargetInfo::get(target);
    if (!info) {
      getOperation().emitError("unknown target '")
          << target << "'; expected cpu or cuda[:sm_XX]";
      return signalPassFailure();
    }
    for (auto func : llvm::to_vector(getOperation().getOps<func::FuncOp>()))
      if (failed(fuseFunction(func, *info, remarks)))
        return signalPassFailure();
  }
};

} // namespace

LogicalResult tilefuse::fuseFunction(func::FuncOp func, const TargetInfo &target,
                                     bool remarks) {
  if (failed(verifyGraphFunction(func)))
    return failure();
  // stop_gradient only matters to differentiation, which is done by now.
  SmallVector<StopGradientOp> identities(func.getBody().front().getOps<StopGradientOp>());
  for (StopGradientOp op : identities) {
    op.getResult().replaceAllUsesWith(op.getOperand());
    op.erase();
  }
  for (Operation &op : func.getBody().front().without_terminator()) {
    if (llvm::isa<FusionOp>(op))
      return op.emitOpError("is already fused; run the fusion pass once");
    if (op.getNumResults() != 1 || op.getDialect() != nullptr &&
                                       op.getDialect()->getNamespace() != "graph")
      return op.emitOpError("cannot be fused: the fusion pass expects primitive "
                            "graph ops with one result");
    if (llvm::isa<ReluOp, SiluOp, GeluOp, SoftmaxOp, LogSoftmaxOp, LayerNormOp,
                  LinearOp, DropoutOp, CrossEntropyOp, NllOp, MseOp, BceOp>(op))
      return op.emitOpError("is a composite; run decompose-composites before "
                            "fusion");
  }
  if (failed(Fuser(func, target, remarks).run()))
    return failure();
  return rematerializeFunction(func, target);
}

SmallVector<Operation *> tilefuse::columnSumsOfRowKernel(FusionOp fusion) {
  SmallVector<Operation *> sums;
  auto domain = fusion.getDomain();
  auto reduced = fusion.getReduced();
  int64_t rank = domain.size();
  if (fusion.getKind() != "reduction" || rank < 2 || reduced.size() != 1 || reduced[0] != rank - 1)
    return sums;
  for (Operation &op : fusion.getBody().front().without_terminator()) {
    if (!isReduction(&op) || domainOf(&op).reduced == SmallVector<int64_t>(reduced))
      continue;
    sums.push_back(&op);
  }
  return sums;
}
