//===- Rematerialize.cpp - recompute saved kernel outputs where they are read -===//
//
// A training step saves forward values for backward. When a forward kernel
// F and a later kernel B iterate over the same domain, B can compute F's
// body itself from F's inputs instead of reading F's saved outputs; F's
// outputs then die in the forward pass. Done where that shortens live
// ranges by more bytes than it lengthens F's inputs': attention's softmax
// saves exp(s - max) and the probabilities, two [B, H, T, T] tensors, where
// its backward kernel can recompute both from the scores alone. No kernel
// is added, and what F and B move beyond their bytes before comes out of a
// budget of 5% of the step's bytes moved.
//
//===----------------------------------------------------------------------===//
#include "passes/FuseOps.h"
#include "passes/FusionGraph.h"

#include "ir/graph/GraphDialect.h"
#include "passes/Passes.h"
#include "passes/TargetInfo.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <cstdlib>
#include <cstring>

namespace tilefuse {
#define GEN_PASS_DEF_REMATERIALIZEPASS
#include "passes/Passes.h.inc"
} // namespace tilefuse

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;

namespace {

int64_t bytesOf(Value v) {
  auto t = llvm::cast<RankedTensorType>(v.getType());
  int64_t n = 1;
  for (int64_t d : t.getShape())
    n *= d;
  unsigned bits = t.getElementType().getIntOrFloatBitWidth();
  return n * std::max<int64_t>(1, bits / 8);
}

/// One rematerialization of F into B, planned before anything changes.
struct Plan {
  FusionOp f, b;
  /// Ops (outside F and B) that read F's outputs before B without feeding
  /// B: they move after B and read B's recomputed values.
  SmallVector<Operation *> sink;
  int64_t gain = 0;
  /// Bytes F and B move beyond what they moved before.
  int64_t extraBytes = 0;
};

/// The share of a step's bytes moved that rematerialization may add,
/// unless TILEFUSE_REMATERIALIZE says another.
constexpr int64_t kBandwidthBudgetPercent = 5;

/// The most bytes live at once over `block`'s op order: every value a
/// top-level op defines lives from its op to its last reader (a recompute
/// barrier's result and a top-level reshape -- a buffer view -- are their
/// operand's bytes), the function's results to the end unless
/// `countResults` is false. The Program's lower bound before scheduling,
/// in small. Without the results it is the step's own memory: results go
/// to the caller's buffers, or to parameters and optimizer state updated in
/// place (counted, they put a training step's peak at its end, where no
/// saved activation is live any more).
int64_t livePeak(Block &block, bool countResults) {
  llvm::DenseMap<Operation *, unsigned> position;
  unsigned n = 0;
  for (Operation &op : block)
    position[&op] = n++;
  std::vector<int64_t> delta(n + 2, 0);
  llvm::DenseSet<Value> returned;
  if (!countResults)
    returned.insert(block.getTerminator()->operand_begin(), block.getTerminator()->operand_end());
  for (Operation &op : block.without_terminator()) {
    if (llvm::isa<RecomputeBarrierOp, ReshapeOp>(op))
      continue;
    for (Value v : op.getResults()) {
      if (returned.contains(v))
        continue;
      unsigned last = position[&op];
      SmallVector<Value> aliases = {v};
      while (!aliases.empty()) {
        Value a = aliases.pop_back_val();
        for (Operation *user : a.getUsers()) {
          last = std::max(last, position[user]);
          if (auto barrier = llvm::dyn_cast<RecomputeBarrierOp>(user))
            if (barrier.getOperand() == a)
              aliases.push_back(barrier.getResult());
          if (auto view = llvm::dyn_cast<ReshapeOp>(user))
            aliases.push_back(view.getResult());
        }
      }
      delta[position[&op]] += bytesOf(v);
      delta[last + 1] -= bytesOf(v);
    }
  }
  int64_t live = 0, most = 0;
  for (int64_t d : delta)
    most = std::max(most, live += d);
  return most;
}

/// Bytes every kernel and library call of `block` reads and writes.
int64_t traffic(Block &block) {
  int64_t total = 0;
  for (Operation &op : block.without_terminator())
    if (llvm::isa<FusionOp, MatmulOp, GroupedMatmulOp, GroupedMatmulWeightGradOp, SortOp, GatherOp,
                  ScatterAddOp, AttentionOp, AttentionGradOp, ConvOp, ConvBiasActOp,
                  ConvGradInputOp, ConvGradWeightOp>(op)) {
      for (Value v : op.getOperands())
        total += bytesOf(v);
      for (Value v : op.getResults())
        total += bytesOf(v);
    }
  return total;
}

/// The inputs of B rebuilt to compute F: B's own except F's outputs, then
/// F's.
llvm::SetVector<Value> mergedInputs(FusionOp f, FusionOp b) {
  llvm::SetVector<Value> inputs;
  for (Value in : b.getInputs())
    if (in.getDefiningOp() != f.getOperation())
      inputs.insert(in);
  inputs.insert(f.getInputs().begin(), f.getInputs().end());
  return inputs;
}

/// Clones the ops of a fusion body (its arguments mapped in `map`
/// already) at `b`; returns the values it yields.
SmallVector<Value> cloneBody(Block &body, IRMapping &map, OpBuilder &b) {
  for (Operation &op : body.without_terminator())
    b.clone(op, map);
  SmallVector<Value> yields;
  for (Value y : body.getTerminator()->getOperands())
    yields.push_back(map.lookupOrDefault(y));
  return yields;
}

/// Whether fusion `f` draws random numbers (a Philox rerun per element).
bool drawsRandomNumbers(FusionOp f) {
  bool draws = false;
  f.getBody().walk([&](RandomUniformOp) { draws = true; });
  return draws;
}

FusionOp kernelNamed(Block &block, StringRef name) {
  for (FusionOp f : block.getOps<FusionOp>())
    if (f.getKernelName() == name)
      return f;
  return {};
}

/// F without the outputs nobody reads any more (or gone entirely).
void shrink(FusionOp f) {
  SmallVector<unsigned> live;
  for (auto [i, r] : llvm::enumerate(f.getResults()))
    if (!r.use_empty())
      live.push_back(unsigned(i));
  if (live.empty()) {
    f.erase();
    return;
  }
  if (live.size() == f.getNumResults())
    return;
  OpBuilder builder(f);
  SmallVector<Type> types;
  for (unsigned i : live)
    types.push_back(f.getResult(i).getType());
  auto smaller = builder.create<FusionOp>(f.getLoc(), types, f.getKernelNameAttr(),
                                          f.getInputs(), f.getKindAttr(), f.getDomainAttr(),
                                          f.getReducedAttr());
  smaller.getBody().takeBody(f.getBody());
  Operation *yield = smaller.getBody().front().getTerminator();
  SmallVector<Value> kept;
  for (unsigned i : live)
    kept.push_back(yield->getOperand(i));
  OpBuilder atYield(yield);
  atYield.create<YieldOp>(yield->getLoc(), kept);
  yield->erase();
  for (auto [k, i] : llvm::enumerate(live))
    f.getResult(i).replaceAllUsesWith(smaller.getResult(unsigned(k)));
  f.erase();
}

class Rematerializer {
public:
  /// `reductions`: whether kernels that reduce may be recomputed.
  Rematerializer(Block &block, bool reductions) : block(block), reductions(reductions) {}

  /// `plan` (made for this block) for the same ops of `other`, a clone of
  /// this block's function.
  Plan mapTo(const Plan &plan, Block &other) {
    number();
    std::vector<Operation *> ops;
    for (Operation &op : other)
      ops.push_back(&op);
    Plan mapped = plan;
    mapped.f = llvm::cast<FusionOp>(ops[position[plan.f]]);
    mapped.b = llvm::cast<FusionOp>(ops[position[plan.b]]);
    for (Operation *&op : mapped.sink)
      op = ops[position[op]];
    return mapped;
  }

  void number() {
    position.clear();
    unsigned i = 0;
    for (Operation &op : block)
      position[&op] = i++;
  }

  /// Whether B can compute F's body: the same iteration space, and B reads
  /// F's outputs only at the element it computes (no view remaps them; a
  /// per-row value broadcast over its row counts as read in place), so F's
  /// body runs at B's own coordinates (a row reduction once per row).
  static bool compatible(FusionOp f, FusionOp b) {
    if (f.getKind() == "matmul" || b.getKind() == "matmul")
      return false;
    if (f.getDomain() != b.getDomain())
      return false;
    if (f.getKind() != "pointwise" && f.getReduced() != b.getReduced())
      return false;
    // Column sums fold across programs: their kernel is split in two by
    // codegen and cannot run inside another.
    if (!columnSumsOfRowKernel(f).empty())
      return false;
    Block &body = b.getBody().front();
    if (f.getBody().front().getOperations().size() + body.getOperations().size() >
        kMaxKernelOps)
      return false;
    // A per-row value (keepdim shape: the domain with the reduced
    // dimensions 1) broadcast back over its row is read at its own row.
    SmallVector<int64_t> rowShape(f.getDomain());
    for (int64_t d : f.getReduced())
      rowShape[size_t(d)] = 1;
    auto readsOwnRow = [&](BroadcastInDimOp bc) {
      auto in = llvm::cast<RankedTensorType>(bc.getOperand().getType()).getShape();
      if (SmallVector<int64_t>(in) != rowShape ||
          llvm::cast<RankedTensorType>(bc.getType()).getShape() != f.getDomain())
        return false;
      for (auto [i, d] : llvm::enumerate(bc.getDims()))
        if (int64_t(i) != d)
          return false;
      return true;
    };
    // A pointwise F's values are its inputs' at the same linear index, so
    // B computes them at any coordinates a row-major reshape maps its own
    // to (whether B reduces or not).
    bool pointwise = f.getKind() == "pointwise" && f.getReduced().empty();
    for (auto [arg, in] : llvm::zip(body.getArguments(), b.getInputs()))
      if (in.getDefiningOp() == f.getOperation())
        for (Operation *user : arg.getUsers()) {
          auto bc = llvm::dyn_cast<BroadcastInDimOp>(user);
          if ((bc && !readsOwnRow(bc)) || llvm::isa<TransposeOp, SliceOp, ConcatOp>(user) ||
              (llvm::isa<ReshapeOp>(user) && !pointwise))
            return false;
        }
    return true;
  }

  /// The ops B depends on (its backward slice in this block).
  llvm::DenseSet<Operation *> sliceOf(Operation *b) {
    llvm::DenseSet<Operation *> slice;
    SmallVector<Operation *> work = {b};
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp())
          if (def->getBlock() == &block && slice.insert(def).second)
            work.push_back(def);
    }
    return slice;
  }

  /// What rematerializing F would do, if it is worth it and `budget`
  /// bytes moved pay for it.
  std::optional<Plan> planFor(FusionOp f, int64_t budget) {
    if (f.getKind() == "matmul")
      return std::nullopt;
    if (!reductions && f.getKind() != "pointwise")
      return std::nullopt;
    number();
    // B: the last kernel reading F's outputs over the same space.
    FusionOp b;
    for (Value r : f.getResults())
      for (Operation *user : r.getUsers())
        if (auto k = llvm::dyn_cast<FusionOp>(user))
          if (compatible(f, k) && (!b || position[k] > position[b]))
            b = k;
    if (!b)
      return std::nullopt;
    unsigned at = position[b];
    llvm::DenseSet<Operation *> slice = sliceOf(b);
    Plan plan{f, b, {}, 0};
    llvm::SetVector<Operation *> sink;
    // Each output: which reads stay on F, and whether it is then free
    // before B.
    for (Value r : f.getResults()) {
      bool longLived = false;
      for (Operation *user : r.getUsers()) {
        if (position[user] >= at)
          longLived = true;
        if (user == b || position[user] > at)
          continue; // B recomputes it; later reads take B's value
        if (slice.contains(user))
          continue; // B needs what this read produces: it stays on F
        longLived = true;
        // This read and everything before B that reads its results move
        // after B; none of them may feed B.
        SmallVector<Operation *> work = {user};
        while (!work.empty()) {
          Operation *op = work.pop_back_val();
          if (position[op] > at || !sink.insert(op))
            continue;
          if (slice.contains(op) || llvm::isa<func::ReturnOp>(op))
            return std::nullopt;
          for (Operation *next : op->getUsers())
            work.push_back(next);
        }
      }
      if (longLived)
        plan.gain += bytesOf(r);
    }
    // F's inputs that died before B now live until B.
    for (Value in : f.getInputs()) {
      bool readAtOrAfterB = llvm::any_of(in.getUsers(), [&](Operation *user) {
        return user->getBlock() == &block && position[user] >= at;
      });
      bool argument = llvm::isa<BlockArgument>(in);
      if (!readAtOrAfterB && !argument)
        plan.gain -= bytesOf(in);
    }
    if (plan.gain <= 0)
      return std::nullopt;
    // Bytes moved: what F and B read and write more than before comes out
    // of the step's budget.
    auto bytes = [](ValueRange values) {
      int64_t total = 0;
      for (Value v : values)
        total += bytesOf(v);
      return total;
    };
    int64_t before = bytes(f.getInputs()) + bytes(f.getResults()) + bytes(b.getInputs()) +
                     bytes(b.getResults());
    int64_t after = bytes(b.getResults());
    for (Value in : mergedInputs(f, b))
      after += bytesOf(in);
    bool fStays = false;
    for (Value r : f.getResults()) {
      bool staysOnF = false, leaves = false;
      for (Operation *user : r.getUsers()) {
        if (user != b.getOperation() && position[user] < at && !sink.contains(user))
          staysOnF = true;
        if (user != b.getOperation() && (position[user] > at || sink.contains(user)))
          leaves = true;
      }
      if (staysOnF)
        after += bytesOf(r);
      if (leaves)
        after += bytesOf(r); // B writes it too
      fStays |= staysOnF;
    }
    if (fStays)
      after += bytes(f.getInputs());
    plan.extraBytes = std::max<int64_t>(0, after - before);
    if (plan.extraBytes > budget)
      return std::nullopt;
    plan.sink.assign(sink.begin(), sink.end());
    llvm::sort(plan.sink, [&](Operation *x, Operation *y) { return position[x] < position[y]; });
    return plan;
  }

  /// Rebuilds B to recompute F, moves the reads after it, shrinks F.
  void apply(Plan &plan) {
    FusionOp f = plan.f, b = plan.b;
    // Inputs of the new B: B's own except F's outputs, then F's.
    llvm::SetVector<Value> inputs = mergedInputs(f, b);
    // F's outputs read after B (or by reads that move there) come out of B.
    SmallVector<unsigned> reexported;
    llvm::DenseSet<Operation *> moving(plan.sink.begin(), plan.sink.end());
    number();
    unsigned at = position[b];
    for (auto [i, r] : llvm::enumerate(f.getResults()))
      if (llvm::any_of(r.getUsers(), [&](Operation *user) {
            return user != b.getOperation() && (position[user] > at || moving.contains(user));
          }))
        reexported.push_back(unsigned(i));

    OpBuilder builder(b);
    SmallVector<Type> types(b.getResultTypes());
    for (unsigned i : reexported)
      types.push_back(f.getResult(i).getType());
    auto fused = builder.create<FusionOp>(b.getLoc(), types, b.getKernelNameAttr(),
                                          inputs.getArrayRef(), b.getKindAttr(),
                                          b.getDomainAttr(), b.getReducedAttr());
    Block *body = builder.createBlock(&fused.getBody());
    IRMapping outer; // value outside -> block argument
    for (Value in : inputs)
      outer.map(in, body->addArgument(in.getType(), in.getLoc()));
    OpBuilder inner = OpBuilder::atBlockEnd(body);
    // F's body on F's inputs.
    IRMapping fMap;
    Block &fBody = f.getBody().front();
    for (auto [arg, in] : llvm::zip(fBody.getArguments(), f.getInputs()))
      fMap.map(arg, outer.lookup(in));
    SmallVector<Value> fValues = cloneBody(fBody, fMap, inner);
    // B's body, reading F's values where it read F's outputs.
    IRMapping bMap;
    Block &bBody = b.getBody().front();
    for (auto [arg, in] : llvm::zip(bBody.getArguments(), b.getInputs())) {
      if (in.getDefiningOp() == f.getOperation())
        bMap.map(arg, fValues[llvm::cast<OpResult>(in).getResultNumber()]);
      else
        bMap.map(arg, outer.lookup(in));
    }
    SmallVector<Value> yielded = cloneBody(bBody, bMap, inner);
    for (unsigned i : reexported)
      yielded.push_back(fValues[i]);
    inner.create<YieldOp>(b.getLoc(), yielded);

    // Reads that moved go after the new B, in their order.
    Operation *insertAfter = fused.getOperation();
    for (Operation *op : plan.sink) {
      op->moveAfter(insertAfter);
      insertAfter = op;
    }
    for (unsigned i = 0; i < b.getNumResults(); ++i)
      b.getResult(i).replaceAllUsesWith(fused.getResult(i));
    number();
    unsigned newAt = position[fused];
    for (auto [k, i] : llvm::enumerate(reexported))
      f.getResult(i).replaceUsesWithIf(fused.getResult(b.getNumResults() + k),
                                       [&](OpOperand &use) {
                                         Operation *owner = use.getOwner();
                                         return owner != b.getOperation() &&
                                                position[owner] > newAt;
                                       });
    b.erase();
    shrink(f);
  }

private:
  Block &block;
  bool reductions;
  llvm::DenseMap<Operation *, unsigned> position;
};


/// How a kernel F's output is computed from values a reader can have: the
/// cheap pointwise ops of F's body (in body order) from F's other outputs,
/// F's inputs, and values at F's reduced shape that F does not yield yet
/// (a layer norm's mean beside x and x - mean).
struct Derivation {
  SmallVector<Operation *> chain;
  SmallVector<unsigned> outputs; ///< F's other results read
  SmallVector<unsigned> inputs;  ///< F's operands read (block argument numbers)
  SmallVector<Value> exported;   ///< values of F's body F would yield as well
};

/// The derivation of F's output `i`; nullopt when it reads anything else (a
/// full-size value F does not yield, a reduction, a transcendental).
std::optional<Derivation> derivation(FusionOp f, unsigned i) {
  Block &body = f.getBody().front();
  Operation *yield = body.getTerminator();
  Value derived = yield->getOperand(i);
  llvm::DenseMap<Value, unsigned> outputOf;
  for (auto [j, v] : llvm::enumerate(yield->getOperands()))
    if (j != i)
      outputOf.try_emplace(v, unsigned(j));
  // Per-row (or per-column) values of a reduction kernel: its reduced shape.
  SmallVector<int64_t> reduced;
  bool reduces = f.getKind() == "reduction";
  if (reduces)
    reduced = fusion::reducedShape(f.getDomain(), f.getReduced(), false);
  int64_t derivedElements = fusion::numel(fusion::shapeOf(derived));
  llvm::SetVector<Operation *> chain;
  llvm::SetVector<unsigned> outputs, inputs;
  llvm::SetVector<Value> exported;
  SmallVector<Value> work = {derived};
  while (!work.empty()) {
    Value x = work.pop_back_val();
    if (auto it = outputOf.find(x); it != outputOf.end() && x != derived) {
      outputs.insert(it->second);
      continue;
    }
    if (auto arg = llvm::dyn_cast<BlockArgument>(x)) {
      if (arg.getOwner() != &body)
        return std::nullopt;
      inputs.insert(arg.getArgNumber());
      continue;
    }
    Operation *def = x.getDefiningOp();
    if (reduces && x != derived && !llvm::isa_and_nonnull<FullOp>(def) &&
        fusion::numel(fusion::shapeOf(x)) * 8 <= derivedElements &&
        fusion::onlyUnitDimsChange(fusion::shapeOf(x), reduced)) {
      exported.insert(x);
      continue;
    }
    if (!def || chain.size() > 8)
      return std::nullopt;
    if (!llvm::isa<MulOp, AddOp, SubOp, NegOp, BroadcastInDimOp, CastOp, FullOp>(def))
      return std::nullopt;
    if (chain.insert(def))
      work.append(def->operand_begin(), def->operand_end());
  }
  // A derivation from nothing but inputs is the reader's own pointwise
  // work on them, which fusion already weighed.
  if (outputs.empty())
    return std::nullopt;
  Derivation d;
  d.chain.assign(chain.begin(), chain.end());
  llvm::sort(d.chain, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  d.outputs.assign(outputs.begin(), outputs.end());
  d.inputs.assign(inputs.begin(), inputs.end());
  d.exported.assign(exported.begin(), exported.end());
  return d;
}

/// F with `extra` (values of its body) yielded after its results; F's uses
/// move to the new kernel, which replaces it.
FusionOp yieldAlso(FusionOp f, ArrayRef<Value> extra) {
  OpBuilder builder(f);
  SmallVector<Type> types(f.getResultTypes());
  for (Value v : extra)
    types.push_back(v.getType());
  auto grown = builder.create<FusionOp>(f.getLoc(), types, f.getKernelNameAttr(), f.getInputs(),
                                        f.getKindAttr(), f.getDomainAttr(), f.getReducedAttr());
  grown.getBody().takeBody(f.getBody());
  Operation *yield = grown.getBody().front().getTerminator();
  SmallVector<Value> values(yield->getOperands());
  values.append(extra.begin(), extra.end());
  OpBuilder atYield(yield);
  atYield.create<YieldOp>(yield->getLoc(), values);
  yield->erase();
  for (unsigned i = 0; i < f.getNumResults(); ++i)
    f.getResult(i).replaceAllUsesWith(grown.getResult(i));
  f.erase();
  return grown;
}

/// Outputs of a kernel F that are cheap pointwise functions of F's other
/// outputs, its inputs and its per-row values (a layer norm's x-hat =
/// (x - mean) * rstd beside x - mean and rstd, and x - mean beside x and the
/// mean, all read by the backward): each kernel reading such an output
/// computes it instead, and F stops writing it (yielding the per-row values
/// it needs, if it did not). GPT-2 small: 24 x 3 MB of x-hat and 25 x 3 MB of
/// x - mean written in the forward and read in the backward. Only where
/// every reader is a kernel, and every value a reader did not read yet is
/// at most 1/8 of the derived one (the per-row values), so no large value
/// lives longer.
void recomputeDerivedOutputs(Block &block) {
  SmallVector<FusionOp> kernels(block.getOps<FusionOp>());
  for (FusionOp f : kernels) {
    bool changed = false;
    // Outputs computed last first: one derived from another derived output
    // (x-hat from x - mean) hands its readers that output, which is then
    // derived in turn (x - mean from x and the mean).
    SmallVector<unsigned> order;
    for (unsigned i = 0; i < f.getNumResults(); ++i)
      order.push_back(i);
    Operation *fYield0 = f.getBody().front().getTerminator();
    auto definedAt = [&](unsigned i) { return fYield0->getOperand(i).getDefiningOp(); };
    llvm::stable_sort(order, [&](unsigned x, unsigned y) {
      Operation *a = definedAt(x), *b = definedAt(y);
      return a && (!b || b->isBeforeInBlock(a));
    });
    for (unsigned i : order) {
      Value out = f.getResult(i);
      if (out.use_empty())
        continue;
      std::optional<Derivation> d = derivation(f, i);
      if (!d)
        continue;
      int64_t bytes = bytesOf(out);
      // What a reader does not read yet: per-row values (at most 1/8 of the
      // derived output), and at most the derived output's bytes of larger
      // ones, which then replace it (x for x - mean: the reader reads no
      // more, and x lives on in place of x - mean, which is never written).
      bool readersOk = llvm::all_of(out.getUsers(), [&](Operation *user) {
        auto b = llvm::dyn_cast<FusionOp>(user);
        if (!b || b == f || user->getBlock() != &block)
          return false;
        int64_t added = 0;
        auto count = [&](Value v) {
          if (!llvm::is_contained(b.getInputs(), v) && bytesOf(v) * 8 > bytes)
            added += bytesOf(v);
        };
        for (unsigned j : d->outputs)
          count(f.getResult(j));
        for (unsigned k : d->inputs)
          count(f.getInputs()[k]);
        return added <= bytes;
      });
      if (!readersOk)
        continue;
      // The per-row values the derivation reads become F's outputs.
      if (!d->exported.empty()) {
        unsigned first = f.getNumResults();
        f = yieldAlso(f, d->exported);
        out = f.getResult(i);
        for (unsigned k = 0; k < d->exported.size(); ++k)
          d->outputs.push_back(first + k);
      }
      Block &fBody = f.getBody().front();
      Operation *fYield = fBody.getTerminator();
      // Outer values the derivation reads, each with F's value for it.
      SmallVector<std::pair<Value, Value>> sources;
      for (unsigned j : d->outputs)
        sources.push_back({f.getResult(j), fYield->getOperand(j)});
      for (unsigned k : d->inputs)
        sources.push_back({f.getInputs()[k], fBody.getArgument(k)});
      SmallVector<Operation *> readers(out.getUsers().begin(), out.getUsers().end());
      llvm::SetVector<Operation *> unique(readers.begin(), readers.end());
      for (Operation *user : unique) {
        auto b = llvm::cast<FusionOp>(user);
        Block &bBody = b.getBody().front();
        // B's block arguments for the values the derivation reads.
        IRMapping map;
        for (auto [outer, inner] : sources) {
          Value arg;
          for (auto [k, in] : llvm::enumerate(b.getInputs()))
            if (in == outer) {
              arg = bBody.getArgument(unsigned(k));
              break;
            }
          if (!arg) {
            b->insertOperands(b->getNumOperands(), outer);
            arg = bBody.addArgument(outer.getType(), outer.getLoc());
          }
          map.map(inner, arg);
        }
        OpBuilder inner = OpBuilder::atBlockBegin(&bBody);
        for (Operation *op : d->chain)
          inner.clone(*op, map);
        Value recomputed = map.lookup(fYield->getOperand(i));
        // B's arguments that were F's output i now read the recomputed value.
        for (int k = int(b.getInputs().size()) - 1; k >= 0; --k) {
          if (b.getInputs()[k] != out)
            continue;
          bBody.getArgument(unsigned(k)).replaceAllUsesWith(recomputed);
          bBody.eraseArgument(unsigned(k));
          b->eraseOperand(unsigned(k));
        }
      }
      changed = true;
    }
    if (changed)
      shrink(f);
  }
}

struct RematerializePass : tilefuse::impl::RematerializePassBase<RematerializePass> {
  using RematerializePassBase::RematerializePassBase;
  void runOnOperation() override {
    std::unique_ptr<TargetInfo> info = TargetInfo::get(target);
    if (!info) {
      getOperation().emitError("unknown target '") << target << "'; expected cpu or cuda[:sm_XX]";
      return signalPassFailure();
    }
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (failed(rematerializeFunction(func, *info)))
        return signalPassFailure();
  }
};

} // namespace

LogicalResult tilefuse::rematerializeFunction(func::FuncOp func, const TargetInfo &target) {
  int64_t percent = kBandwidthBudgetPercent;
  if (const char *v = std::getenv("TILEFUSE_REMATERIALIZE"); v && *v) {
    char *end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 0 || n > 1000)
      return emitError(func.getLoc())
             << "TILEFUSE_REMATERIALIZE=" << v
             << " is not a share of the bytes moved in percent (0: off, 0..1000; unset: "
             << kBandwidthBudgetPercent << ")";
    percent = n;
  }
  if (percent == 0)
    return success();
  bool reductions = target.rematerializesReductions() || percent > kBandwidthBudgetPercent;
  int64_t budget = traffic(func.getBody().front()) / 100 * percent;
  SmallVector<std::string> names;
  for (FusionOp f : func.getBody().front().getOps<FusionOp>())
    names.push_back(f.getKernelName().str());
  for (const std::string &name : names) {
    Block &block = func.getBody().front();
    FusionOp f = kernelNamed(block, name);
    if (!f)
      continue; // folded into a later kernel already
    Rematerializer here(block, reductions);
    std::optional<Plan> plan = here.planFor(f, budget);
    if (!plan)
      continue;
    // Tried on a copy first. Kept where the most bytes live at once drop
    // (live ranges that shrink elsewhere can still meet at a new peak: the
    // recomputing kernel's inputs, outputs and operands), or do not grow
    // and F is gone (B computes what F did: nothing is computed twice), or
    // where they do not grow and the step's own memory (results aside)
    // drops: a training step's saved activations (GELU's f32 tanh terms,
    // recomputed in its backward kernel from the bf16 GEMM result).
    // Recomputing for nothing costs time: a dropout mask's Philox rerun
    // cost mlp_mnist's CPU step 5%, so a kernel that draws random numbers
    // is recomputed only under the first two rules.
    OwningOpRef<func::FuncOp> trial(func.clone());
    Block &trialBlock = trial->getBody().front();
    Plan mapped = here.mapTo(*plan, trialBlock);
    Rematerializer(trialBlock, reductions).apply(mapped);
    int64_t before = livePeak(block, true), after = livePeak(trialBlock, true);
    bool folded = !kernelNamed(trialBlock, name);
    if (after > before)
      continue;
    if (after == before && !folded &&
        (drawsRandomNumbers(plan->f) || livePeak(trialBlock, false) >= livePeak(block, false)))
      continue;
    func.getBody().takeBody(trial->getBody());
    budget -= plan->extraBytes;
  }
  recomputeDerivedOutputs(func.getBody().front());
  return success();
}
