//===- FuseOps.cpp - group primitive graph ops into kernels ---------------===//
//
// Decides which ops run in one kernel and records each decision as a
// graph.fusion region; emitters later print those regions without a cost
// model of their own. This file is the driver: the order in which ops and
// kernels are offered to each other, and the regions built at the end. The
// rules it asks are in FusionRules.cpp, each refusal with its reason (a
// remark under `remarks=true`); Passes.td sums up the heuristics.
//
//===----------------------------------------------------------------------===//
#include "passes/FuseOps.h"

#include "ir/graph/GraphDialect.h"
#include "passes/FusionRules.h"
#include "passes/PassUtils.h"
#include "passes/Passes.h"
#include "passes/TargetInfo.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

#include <cstdlib>
#include <functional>
#include <queue>

namespace tilefuse {
#define GEN_PASS_DEF_FUSEOPSPASS
#include "passes/Passes.h.inc"
} // namespace tilefuse

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::fusion;
using namespace tilefuse::graph;

namespace {

/// Offers each op to the kernels it reads (then to sibling reductions),
/// then kernels to the row kernels they read, asking the fusion rules each
/// time; builds one graph.fusion per kernel.
class Fuser : public FusionRules {
public:
  Fuser(func::FuncOp func, const TargetInfo &target, bool remarks)
      : FusionRules(func, target), remarks(remarks) {}

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
          (isView(&op) || isPadding(&op) || scalarOfLeaves ||
           (isCheapToRecompute(&op) && (ofLeaves || remappedOfBuffers(&op))))) {
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
  /// A cheap op of leaves and library results (in memory already) that is
  /// read only through index remaps: no reader can join its kernel, so as a
  /// kernel it would only copy its operands at another dtype or with a bias
  /// added; each reader computes it from the operands instead (the bias of
  /// a QKV product read as three head-major slices, attention gradients
  /// widened to f32 and transposed back into one gradient). Not where the
  /// target's GEMM would take the op as its epilogue.
  bool remappedOfBuffers(Operation *op) {
    bool readsLibrary = false;
    for (Value v : op->getOperands()) {
      Operation *def = v.getDefiningOp();
      if (!def || isLeafOp(def))
        continue;
      if (!isLibraryCall(def) || (llvm::isa<MatmulOp>(def) && target.canFuseMatmulEpilogue(op)))
        return false;
      readsLibrary = true;
    }
    if (!readsLibrary)
      return false;
    // Read through reshapes and further cheap ops (the bias add after a
    // widening cast), ending in index remaps.
    SmallVector<Operation *> work(op->getUsers().begin(), op->getUsers().end());
    llvm::SmallPtrSet<Operation *, 16> seen;
    while (!work.empty()) {
      Operation *user = work.pop_back_val();
      if (!seen.insert(user).second)
        continue;
      if (seen.size() > 64 || needsMaterializing(user))
        return false;
      if (isIndexRemap(user))
        continue;
      if (llvm::isa<BroadcastInDimOp>(user) || !isCheapToRecompute(user))
        return false;
      work.append(user->getUsers().begin(), user->getUsers().end());
    }
    return true;
  }

  /// A row-major reshape of a value that exists in memory (an argument, a
  /// kernel's or a library call's result), read by matmuls and kernels
  /// only: the same bytes under another shape. The runtime gives
  /// it its operand's buffer, so it is no kernel (a copy) of its own;
  /// kernels that read it apply the reshape as any view. A reshape the
  /// function returns is one only of a library call's result the function
  /// does not return itself (a language model's logits): the result is the
  /// library's buffer under the returned shape; of a kernel's result it
  /// joins that kernel, which writes the returned shape.
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
    // GEMM, attention and convolution steps take their sizes from the
    // graph's types; gathers and scatters read their buffers' shapes, so
    // those get a real reshape.
    bool operandReturned = llvm::any_of(reshape.getOperand().getUsers(), [](Operation *user) {
      return llvm::isa<func::ReturnOp>(user);
    });
    bool returnable = def && isLibraryCall(def) && !operandReturned;
    return llvm::all_of(op->getUsers(), [&](Operation *user) {
      if (llvm::isa<func::ReturnOp>(user))
        return returnable;
      return llvm::isa<GraphDialect>(user->getDialect()) &&
             (!isLibraryCall(user) ||
              llvm::isa<MatmulOp, GroupedMatmulOp, GroupedMatmulWeightGradOp, SortOp, AttentionOp,
                        AttentionGradOp, ConvOp, ConvBiasActOp, ConvGradInputOp,
                        ConvGradWeightOp>(user));
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
        refuse(op, "not fused with", read.producer, why);
      }
      if (isReduction(op))
        for (unsigned g = groups.size(); g-- > 0 && groups.size() - g <= 8;) {
          std::string why;
          if (canJoinSiblingReduction(g, op, why)) {
            // A column reduction turns a kernel of totals into a column
            // kernel (which also folds the totals).
            if (isColumnReduction(domainOf(op)))
              groups[g].domain = domainOf(op);
            return join(g, op);
          }
          refuse(op, "not fused with sibling", g, why);
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
    if (groups[g].library || groups[g].hasReduction || isReduction(op))
      return;
    for (const Read &read : reads) {
      unsigned h = groupOf.lookup(read.producer);
      std::string why;
      if (!canMergeSiblings(g, h, read, reads, why)) {
        refuse(op, "not fused with sibling", read.producer, why);
        continue;
      }
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

  /// Second chance for kernels that formed apart: a row kernel (or a
  /// pointwise kernel over its domain) that reads another row kernel's
  /// values at the same elements, or its row results broadcast along the
  /// rows, joins it when nothing between them would close a cycle. Ops join
  /// the first kernel they read that takes them; when an op reads first a
  /// kernel that runs later (cross-entropy's gradient reads the count of
  /// valid labels before the exponentials of the forward row kernel), its
  /// kernel forms apart and would re-read what the row kernel wrote.
  void mergeConsumerKernels() {
    absorbReaders("its kernel not merged into the row kernel of",
                  [&](unsigned b) { return !groups[b].library; },
                  [&](unsigned a, unsigned b, ArrayRef<unsigned> deps, std::string &why) {
                    return canAbsorb(a, b, deps, why);
                  });
  }

  /// Each kernel `b` that `wanted` accepts joins the first kernel it reads
  /// that `canMerge(a, b, kernels b reads, why)` accepts; refusals are
  /// reported at b's first op as "<what> '<a's op>': <why>".
  template <typename Wanted, typename CanMerge>
  void absorbReaders(StringRef what, Wanted wanted, CanMerge canMerge) {
    for (unsigned b = 0; b < groups.size(); ++b) {
      if (groups[b].ops.empty() || !wanted(b))
        continue;
      llvm::SmallSetVector<unsigned, 4> deps = kernelsRead(b);
      for (unsigned a : deps) {
        std::string why;
        if (canMerge(a, b, deps.getArrayRef(), why)) {
          absorb(a, b);
          break;
        }
        refuse(groups[b].ops.front(), what, a, why);
      }
    }
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
        "its column sums not merged into the row kernel of",
        [&](unsigned b) {
          return !groups[b].library && groups[b].hasReduction &&
                 isColumnReduction(groups[b].domain);
        },
        [&](unsigned a, unsigned b, ArrayRef<unsigned> deps, std::string &why) {
          return canTakeColumns(a, b, deps, why);
        });
  }

  /// With remarks on, reports at `at` a rule's refusal as "<what> '<other
  /// op>': <why>". A rule that does not apply gives no reason: nothing.
  void refuse(Operation *at, StringRef what, Operation *other, const std::string &why) {
    if (remarks && !why.empty())
      at->emitRemark(what) << " '" << other->getName() << "': " << why;
  }

  /// The same for a refusal by kernel `g`, named by its first reduction
  /// (else its first op).
  void refuse(Operation *at, StringRef what, unsigned g, const std::string &why) {
    if (!remarks || why.empty())
      return;
    auto reduction = llvm::find_if(groups[g].ops, [](Operation *op) { return isReduction(op); });
    refuse(at, what, reduction != groups[g].ops.end() ? *reduction : groups[g].ops.front(), why);
  }

  LogicalResult materialize();
  FusionOp buildKernel(unsigned index, Group &group, OpBuilder &b);

  bool remarks;

  /// Makes `op` read each buffer view among its operands through a copy of
  /// the view built at `b`'s insertion point.
  void readViewsOfTheirOwn(Operation *op, OpBuilder &b) {
    for (OpOperand &use : op->getOpOperands())
      if (Operation *view = use.get().getDefiningOp(); view && bufferViews.contains(view))
        use.set(b.clone(*view)->getResult(0));
  }
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
  // A returned view (of a library result) is read there in a copy of its own.
  b.setInsertionPoint(ret);
  readViewsOfTheirOwn(ret, b);
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
  widenAttention(func, [&](Type t) { return target.fusedAttentionTakes16Bit(t); });
  expandAttention(func, target.fusedAttentionMaxDim());
  // TILEFUSE_GROUPED_GEMM=0 writes grouped products densely here too (to
  // compare).
  const char *grouped = std::getenv("TILEFUSE_GROUPED_GEMM");
  if (!target.hasGroupedGemm() || (grouped && std::string(grouped) == "0"))
    expandGroupedMatmuls(func);
  if (target.convolutionPadsSymmetrically())
    padConvolutionsSymmetrically(func);
  if (target.convolutionAppliesEpilogues())
    foldConvolutionEpilogues(func, target);
  // TILEFUSE_CHANNELS_LAST=0 keeps the graph's layouts (to compare).
  const char *channelsLast = std::getenv("TILEFUSE_CHANNELS_LAST");
  if (target.convolutionPrefersChannelsLast() &&
      !(channelsLast && std::string(channelsLast) == "0"))
    layOutChannelsLast(func);
  // stop_gradient only matters to differentiation, which is done by now.
  SmallVector<StopGradientOp> identities(func.getBody().front().getOps<StopGradientOp>());
  for (StopGradientOp op : identities) {
    op.getResult().replaceAllUsesWith(op.getOperand());
    op.erase();
  }
  for (Operation &op : func.getBody().front().without_terminator()) {
    if (llvm::isa<FusionOp>(op))
      return op.emitOpError("is already fused; run the fusion pass once");
    if (llvm::isa<SortOp>(op) && !target.hasLibrarySort())
      return op.emitOpError("has no kernel on target '")
             << target.name() << "' (rows of more than 4096 elements are sorted by a CPU "
             << "library step; sort shorter rows, or compile for the CPU)";
    bool multiResultCall = llvm::isa<AttentionOp, AttentionGradOp, SortOp>(op);
    if ((op.getNumResults() != 1 && !multiResultCall) ||
        (op.getDialect() != nullptr && op.getDialect()->getNamespace() != "graph"))
      return op.emitOpError("cannot be fused: the fusion pass expects primitive "
                            "graph ops with one result");
    if (llvm::isa<ReluOp, SiluOp, GeluOp, SoftmaxOp, LogSoftmaxOp, LayerNormOp,
                  LinearOp, DropoutOp, CrossEntropyOp, NllOp, MseOp, BceOp>(op))
      return op.emitOpError("is a composite; run decompose-composites before "
                            "fusion");
    if (llvm::isa<ConvBiasActOp>(op) && !target.convolutionAppliesEpilogues())
      return op.emitOpError("has no library call for ")
             << target.name()
             << ", whose convolutions apply no epilogue; write graph.conv followed by the "
                "bias and activation ops (fusion runs them as a kernel)";
    if (llvm::isa<ConvOp, ConvBiasActOp, ConvGradInputOp, ConvGradWeightOp>(op)) {
      auto last = op.getAttrOfType<BoolAttr>("channels_last");
      if (last && last.getValue() &&
          !target.convolutionPrefersChannelsLast())
        return op.emitOpError("has channels-last activations, which ")
               << target.name()
               << "'s convolutions do not take; write it channels-first (fusion chooses the "
                  "layout each target runs best)";
      if (!target.hasLibraryConvolution())
        return op.emitOpError("has no kernels for ")
               << target.name()
               << " (convolutions run through oneDNN on the CPU, cuDNN on CUDA); compile for "
                  "the CPU, or trace with TILEFUSE_LIBRARY_CONV=0 to write convolutions out "
                  "(im2col gathers and matmuls)";
    }
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
