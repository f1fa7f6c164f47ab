//===- ShardParameters.cpp - ZeRO's sharded parameters as graph rewrites --===//
//
// A sharded training step keeps, per rank, one shard of the parameters and
// of their optimizer state. The loss is rewritten to take the shards and
// all-gather them; autodiff then gives each shard's gradient through the
// all-gather's VJP (a reduce-scatter), and the optimizer updates shards like
// any other parameters. ZeRO-3 gathers again in the backward pass.
//
//===----------------------------------------------------------------------===//
#include "passes/ShardParameters.h"

#include "ir/graph/GraphEmitter.h"
#include "passes/FusionGraph.h"

#include "llvm/ADT/SetVector.h"

#include <functional>

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;

namespace {

/// Marks the ops of a sharded loss (and, after cloning, the forward ops of
/// its value-and-grad function).
constexpr const char *kForwardMarker = "tilefuse.forward";

int64_t elements(Type t) { return llvm::cast<RankedTensorType>(t).getNumElements(); }

int64_t paddedElements(func::FuncOp loss, ArrayRef<unsigned> shard, int64_t ranks) {
  int64_t n = 0;
  for (unsigned i : shard)
    n += elements(loss.getArgument(i).getType());
  return (n + ranks - 1) / ranks * ranks;
}

} // namespace

std::vector<std::vector<unsigned>> tilefuse::shardLayout(func::FuncOp loss, unsigned numParams,
                                                         const OptimizerConfig &config) {
  std::vector<std::vector<unsigned>> layout;
  int64_t bytes = 0;
  for (unsigned i = 0; i < numParams; ++i) {
    auto type = llvm::cast<RankedTensorType>(loss.getArgument(i).getType());
    int64_t size = type.getNumElements() * std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
    bool fresh = layout.empty();
    if (!fresh) {
      unsigned first = layout.back().front();
      fresh = llvm::cast<RankedTensorType>(loss.getArgument(first).getType()).getElementType() !=
                  type.getElementType() ||
              config.groupOf(first) != config.groupOf(i) ||
              config.weightDecayOf(first) != config.weightDecayOf(i) ||
              bytes + size > config.parallel.bucketBytes;
    }
    if (fresh) {
      layout.push_back({});
      bytes = 0;
    }
    layout.back().push_back(i);
    bytes += size;
  }
  return layout;
}

func::FuncOp tilefuse::shardParameters(func::FuncOp loss, unsigned numParams,
                                       const std::vector<std::vector<unsigned>> &layout,
                                       const ParallelConfig &config, StringRef name) {
  MLIRContext *ctx = loss.getContext();
  OpBuilder b(loss);
  b.setInsertionPointAfter(loss);
  int64_t ranks = config.groupSize;
  SmallVector<Type> inputs;
  for (const std::vector<unsigned> &shard : layout) {
    Type element = llvm::cast<RankedTensorType>(loss.getArgument(shard.front()).getType())
                       .getElementType();
    inputs.push_back(RankedTensorType::get({paddedElements(loss, shard, ranks) / ranks}, element));
  }
  auto lossType = loss.getFunctionType();
  llvm::append_range(inputs, lossType.getInputs().drop_front(numParams));
  auto f = b.create<func::FuncOp>(loss.getLoc(), name,
                                  b.getFunctionType(inputs, lossType.getResults()));
  f.setAllResultAttrs(loss.getAllResultAttrs());
  Block *body = f.addEntryBlock();
  b.setInsertionPointToStart(body);
  GraphEmitter e(b, loss.getLoc());
  IRMapping map;
  SmallVector<Attribute> shardsAttr;
  std::vector<int> shardOf(numParams, -1);
  for (auto [index, shard] : llvm::enumerate(layout)) {
    for (unsigned i : shard)
      shardOf[i] = int(index);
    shardsAttr.push_back(b.getDenseI64ArrayAttr(SmallVector<int64_t>(shard.begin(), shard.end())));
  }
  for (unsigned i = numParams; i < loss.getNumArguments(); ++i)
    map.map(loss.getArgument(i), body->getArgument(unsigned(layout.size()) + i - numParams));
  // Each shard is gathered right before the first op that reads one of its
  // parameters, so gathered parameters live only as long as their uses.
  auto gather = [&](unsigned index) {
    const std::vector<unsigned> &shard = layout[index];
    Value full = e.wait(e.allGatherStart(body->getArgument(index), config.group, ranks));
    int64_t offset = 0, total = llvm::cast<RankedTensorType>(full.getType()).getNumElements();
    for (unsigned i : shard) {
      auto type = llvm::cast<RankedTensorType>(loss.getArgument(i).getType());
      int64_t n = type.getNumElements();
      // A parameter that fills its shard is a view of it, not a copy.
      Value flat = n == total ? full : e.slice(full, {offset}, {offset + n}, {1});
      map.map(loss.getArgument(i), e.reshape(flat, type.getShape()));
      offset += n;
    }
  };
  for (Operation &op : loss.getBody().front()) {
    for (Value v : op.getOperands())
      if (auto arg = llvm::dyn_cast<BlockArgument>(v);
          arg && arg.getOwner() == &loss.getBody().front() && arg.getArgNumber() < numParams &&
          !map.contains(v))
        gather(unsigned(shardOf[arg.getArgNumber()]));
    b.clone(op, map);
  }
  f->setAttr(kShardsAttrName, ArrayAttr::get(ctx, shardsAttr));
  for (Operation &op : body->without_terminator())
    op.setAttr(kForwardMarker, UnitAttr::get(ctx));
  return f;
}

void tilefuse::startReductionsEarly(func::FuncOp step) {
  Block &body = step.getBody().front();
  SmallVector<Operation *> starts;
  for (Operation &op : body)
    if (llvm::isa<ReduceScatterStartOp>(op))
      starts.push_back(&op);
  for (Operation *start : starts) {
    // The cheap ops that only feed this reduction (the all-gather's VJP:
    // reshapes, pads, the accumulation of a shard's gradients), producers
    // first.
    SmallVector<Operation *> cone;
    llvm::SetVector<Operation *> seen;
    std::function<void(Operation *)> visit = [&](Operation *op) {
      for (Value v : op->getOperands()) {
        Operation *def = v.getDefiningOp();
        if (!def || seen.contains(def) || def->getBlock() != &body ||
            fusion::isLibraryCall(def) || def->getNumResults() != 1 ||
            !llvm::all_of(def->getUsers(), [&](Operation *u) {
              return u == op || seen.contains(u) || u == start;
            }))
          continue;
        seen.insert(def);
        visit(def);
        cone.push_back(def);
      }
    };
    seen.insert(start);
    visit(start);
    cone.push_back(start);
    // Each right after the last of its operands: the reduction starts as
    // soon as the shard's last gradient exists.
    for (Operation *op : cone) {
      Operation *after = nullptr;
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp(); def && def->getBlock() == &body)
          if (!after || after->isBeforeInBlock(def))
            after = def;
      if (after && after->isBeforeInBlock(op))
        op->moveAfter(after);
      else if (!after)
        op->moveBefore(&body.front());
    }
  }
}

void tilefuse::dropForwardMarkers(func::FuncOp f) {
  f.walk([](Operation *op) { op->removeAttr(kForwardMarker); });
}

void tilefuse::regatherForBackward(func::FuncOp grad, unsigned numShards) {
  Block &body = grad.getBody().front();
  // Autodiff appends the backward pass after the cloned forward ops: the
  // first unmarked op starts it.
  DenseMap<Operation *, unsigned> position;
  unsigned boundary = ~0u, n = 0;
  for (Operation &op : body) {
    position[&op] = n;
    if (boundary == ~0u && !op.hasAttr(kForwardMarker))
      boundary = n;
    ++n;
  }
  auto inBackward = [&](Operation *op) { return position.lookup(op) >= boundary; };
  for (unsigned s = 0; s < numShards; ++s) {
    BlockArgument shard = grad.getArgument(s);
    // The forward chain: all_gather_start -> wait -> slices -> reshapes.
    Operation *start = nullptr;
    for (Operation *user : shard.getUsers())
      if (llvm::isa<AllGatherStartOp>(user) && !inBackward(user))
        start = user;
    if (!start)
      continue;
    SmallVector<Operation *> chain = {start};
    for (size_t i = 0; i < chain.size(); ++i)
      for (Operation *user : chain[i]->getUsers())
        if (!inBackward(user) &&
            (llvm::isa<CollectiveWaitOp>(user) ||
             (llvm::isa<SliceOp>(user) && llvm::isa<CollectiveWaitOp>(chain[i])) ||
             (llvm::isa<ReshapeOp>(user) && llvm::isa<SliceOp, CollectiveWaitOp>(chain[i]))))
          chain.push_back(user);
    // Backward readers of the chain's values, the earliest first.
    Operation *first = nullptr;
    SmallVector<OpOperand *> reads;
    for (Operation *op : chain)
      for (Value v : op->getResults())
        for (OpOperand &use : v.getUses())
          if (inBackward(use.getOwner())) {
            reads.push_back(&use);
            if (!first || position.lookup(use.getOwner()) < position.lookup(first))
              first = use.getOwner();
          }
    if (!first)
      continue;
    // The second gather waits for a value of the backward pass the first
    // reader also reads (its cotangent), so it cannot move earlier.
    Value token;
    for (Value v : first->getOperands())
      if (Operation *def = v.getDefiningOp(); def && inBackward(def))
        token = v;
    if (!token) {
      Operation *seed = nullptr;
      for (Operation &op : body)
        if (inBackward(&op) && op.getNumResults() == 1) {
          seed = &op;
          break;
        }
      if (!seed)
        continue;
      token = seed->getResult(0);
    }
    OpBuilder b(first);
    auto barrier = b.create<RecomputeBarrierOp>(first->getLoc(), shard, token);
    IRMapping map;
    map.map(Value(shard), barrier.getResult());
    for (Operation *op : chain)
      b.clone(*op, map);
    for (OpOperand *use : reads)
      use->set(map.lookup(use->get()));
  }
  dropForwardMarkers(grad);
}
