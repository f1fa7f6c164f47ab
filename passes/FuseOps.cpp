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
  return llvm::isa<MatmulOp, GatherOp, ScatterAddOp>(op);
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

/// Reduced dims are the innermost ones: one program owns whole rows, so it
/// can use a row's reduction on that row again (softmax, layer_norm).
bool isRowReduction(ArrayRef<int64_t> shape, ArrayRef<int64_t> dims) {
  int64_t rank = shape.size();
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

class Fuser {
public:
  Fuser(func::FuncOp func, const TargetInfo &target, bool remarks)
      : func(func), target(target), remarks(remarks) {}

  void run() {
    unsigned position = 0;
    for (Operation &op : func.getBody().front().without_terminator()) {
      positions[&op] = position++;
      if (isGenerator(&op))
        continue;
      if (isCheapToRecompute(&op) &&
          llvm::all_of(op.getOperands(), [&](Value v) { return isLeaf(v); })) {
        recomputed.insert(&op);
        continue;
      }
      place(&op);
    }
    materialize();
  }

  /// A value every kernel can read or recompute: an argument, a constant, or
  /// a cheap op of such values.
  bool isLeaf(Value v) {
    Operation *def = v.getDefiningOp();
    return !def || isGenerator(def) || recomputed.contains(def);
  }
  bool isLeafOp(Operation *def) {
    return isGenerator(def) || recomputed.contains(def);
  }

private:
  /// Puts `op` into an existing kernel if one may take it, else a new one.
  void place(Operation *op) {
    if (!isLibraryCall(op)) {
      for (Value v : op->getOperands()) {
        Operation *def = v.getDefiningOp();
        if (!def || isLeafOp(def))
          continue;
        unsigned g = groupOf.lookup(def);
        std::string why;
        if (canJoin(g, op, why))
          return join(g, op);
        refuse(op, def, why);
      }
      if (isReduction(op))
        for (unsigned g = groups.size(); g-- > 0 && groups.size() - g <= 8;) {
          std::string why;
          if (groups[g].hasReduction && sameDomain(groups[g], op) &&
              !createsCycle(g, op, why))
            return join(g, op);
        }
    }
    Group group;
    group.domain = domainOf(op);
    group.library = isLibraryCall(op);
    group.firstPosition = positions[op];
    groups.push_back(group);
    join(groups.size() - 1, op);
  }

  void join(unsigned g, Operation *op) {
    Group &group = groups[g];
    bool after = isReduction(op) && group.hasReduction;
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp())
        if (groupOf.count(def) && groupOf[def] == g &&
            (isReduction(def) || group.afterReduction.contains(def)))
          after = true;
    if (after || (isReduction(op) && hasInGroupOperand(g, op)))
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

  bool hasInGroupOperand(unsigned g, Operation *op) {
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp())
        if (groupOf.count(def) && groupOf[def] == g)
          return true;
    return false;
  }

  bool sameDomain(const Group &group, Operation *op) {
    Domain d = domainOf(op);
    return d.shape == group.domain.shape && d.reduced == group.domain.reduced;
  }

  /// Whether `op` may join group `g`, which produces one of its operands.
  bool canJoin(unsigned g, Operation *op, std::string &why) {
    Group &group = groups[g];
    Domain d = domainOf(op);
    auto readsReduced = [&] {
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp())
          if (groupOf.count(def) && groupOf[def] == g &&
              (isReduction(def) || group.afterReduction.contains(def)))
            return true;
      return false;
    };
    if (group.library) {
      if (!llvm::isa<MatmulOp>(group.ops.front()) || isReduction(op) ||
          d.shape != shapeOf(group.ops.front()->getResult(0)) ||
          !target.canFuseMatmulEpilogue(op)) {
        why = "its producer is a library call that the " + target.name() +
              " target runs without this epilogue";
        return false;
      }
      return !createsCycle(g, op, why);
    }
    if (isIndexRemap(op)) {
      why = "it reads a value of that kernel at another index";
      return false;
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
      if (readsReduced() && !isRowReduction(d.shape, d.reduced)) {
        why = "it needs a reduction result across programs (not a row reduction)";
        return false;
      }
      return !createsCycle(g, op, why);
    }
    bool isReshape = llvm::isa<ReshapeOp>(op);
    bool isBroadcast = llvm::isa<BroadcastInDimOp>(op);
    if (!group.hasReduction) {
      if (numel(d.shape) != numel(group.domain.shape) || isBroadcast) {
        why = "its domain differs from the kernel's";
        return false;
      }
      return !createsCycle(g, op, why);
    }
    // A reduction kernel: epilogue at the reduced shape, or at the full
    // domain when the kernel owns whole rows.
    ArrayRef<int64_t> full = group.domain.shape;
    ArrayRef<int64_t> dims = group.domain.reduced;
    bool atFull = d.shape == SmallVector<int64_t>(full);
    bool atReduced = d.shape == reducedShape(full, dims, true) ||
                     d.shape == reducedShape(full, dims, false);
    if (isReshape && !onlyUnitDimsChange(shapeOf(op->getOperand(0)), d.shape)) {
      why = "it reshapes a value of that kernel across rows";
      return false;
    }
    if (!atFull && !atReduced) {
      why = "its domain differs from the kernel's";
      return false;
    }
    if (atFull && (readsReduced() || isBroadcast) &&
        !isRowReduction(full, dims)) {
      why = "it needs a reduction result across programs (not a row reduction)";
      return false;
    }
    return !createsCycle(g, op, why);
  }

  /// Joining `op` to `g` is a cycle if another operand's kernel depends on g.
  bool createsCycle(unsigned g, Operation *op, std::string &why) {
    for (Value v : op->getOperands()) {
      Operation *def = v.getDefiningOp();
      if (!def || isLeafOp(def) || groupOf.lookup(def) == g)
        continue;
      if (dependsOn(groupOf[def], g)) {
        why = "another operand's kernel depends on that kernel (a cycle)";
        return true;
      }
    }
    return false;
  }

  /// Whether kernel `from` reads, transitively, from kernel `to`.
  bool dependsOn(unsigned from, unsigned to) {
    SmallVector<unsigned> work = {from};
    llvm::DenseSet<unsigned> seen = {from};
    while (!work.empty()) {
      unsigned g = work.pop_back_val();
      for (Operation *op : groups[g].ops)
        for (Value v : op->getOperands()) {
          Operation *def = v.getDefiningOp();
          if (!def || !groupOf.count(def))
            continue;
          unsigned h = groupOf[def];
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

  void materialize();
  FusionOp buildKernel(unsigned index, Group &group, OpBuilder &b);

  func::FuncOp func;
  const TargetInfo &target;
  bool remarks;
  std::vector<Group> groups;
  llvm::DenseMap<Operation *, unsigned> groupOf;
  llvm::DenseMap<Operation *, unsigned> positions;
  /// Cheap ops of leaves, cloned into the kernels that read them.
  llvm::SetVector<Operation *> recomputed;
};

FusionOp Fuser::buildKernel(unsigned index, Group &group, OpBuilder &b) {
  llvm::DenseSet<Operation *> members(group.ops.begin(), group.ops.end());
  SmallVector<Value> outputs;
  llvm::SetVector<Value> inputs;
  // Inputs: values from other kernels, arguments, library results; leaf
  // chains are walked down to the arguments they read.
  std::function<void(Value)> collect = [&](Value v) {
    Operation *def = v.getDefiningOp();
    if (def && members.contains(def))
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
  for (Operation *op : group.ops)
    for (Value r : op->getResults())
      if (llvm::any_of(r.getUsers(),
                       [&](Operation *u) { return !members.contains(u); }))
        outputs.push_back(r);

  StringRef kind = group.epilogue ? "matmul"
                   : group.hasReduction ? "reduction"
                                        : "pointwise";
  Location loc = group.ops.front()->getLoc();
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
    inner.clone(*op, map);
  }
  SmallVector<Value> yielded;
  for (Value v : outputs)
    yielded.push_back(map.lookup(v));
  inner.create<YieldOp>(loc, yielded);
  for (auto [v, r] : llvm::zip(outputs, fusion.getResults()))
    v.replaceUsesWithIf(r, [&](OpOperand &use) {
      return !members.contains(use.getOwner());
    });
  return fusion;
}

void Fuser::materialize() {
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
    llvm::DenseSet<unsigned> deps;
    for (Operation *op : groups[g].ops)
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp(); def && groupOf.count(def))
          if (unsigned h = groupOf[def]; h != g && deps.insert(h).second)
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
  while (!ready.empty()) {
    unsigned g = ready.top().second;
    ready.pop();
    Group &group = groups[g];
    if (group.library && !group.epilogue) {
      group.ops.front()->moveBefore(ret);
    } else {
      b.setInsertionPoint(ret);
      buildKernel(kernelIndex++, group, b);
      dead.append(group.ops.begin(), group.ops.end());
    }
    for (unsigned c : consumers[g])
      if (--pending[c] == 0)
        ready.push({groups[c].firstPosition, c});
  }
  for (Operation *op : llvm::reverse(dead))
    op->erase();
  // A recomputed op still read by a library call or the return is computed
  // once, by a kernel of its own, before everything else.
  b.setInsertionPoint(block.getTerminator());
  Operation *firstNonGenerator = nullptr;
  for (Operation &op : block.without_terminator())
    if (!isGenerator(&op) && !recomputed.contains(&op)) {
      firstNonGenerator = &op;
      break;
    }
  for (Operation *op : recomputed) {
    bool outsideUse = llvm::any_of(op->getUsers(), [&](Operation *u) {
      return !recomputed.contains(u);
    });
    if (!outsideUse)
      continue;
    if (firstNonGenerator)
      b.setInsertionPoint(firstNonGenerator);
    Group single;
    single.ops = {op};
    single.domain = domainOf(op);
    // Its own operands stay leaves, cloned into the kernel.
    recomputed.remove(op);
    buildKernel(kernelIndex++, single, b);
    recomputed.insert(op);
  }
  for (Operation *op : llvm::reverse(recomputed.getArrayRef()))
    if (op->use_empty())
      op->erase();
  for (Operation *op : generators)
    if (op->use_empty())
      op->erase();
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
  Fuser(func, target, remarks).run();
  return success();
}
