//===- DataParallel.cpp - DDP's bucketed gradient all-reduce in the graph ===//
//
// Communication overlaps the rest of the backward pass because each bucket
// starts as soon as its last gradient exists and is waited for only where
// the optimizer reads it; the memory planner and the step scheduler keep
// that order (runtime/MemoryPlan.cpp: starts as early, waits as late as
// their dependences allow).
//
//===----------------------------------------------------------------------===//
#include "passes/DataParallel.h"

#include "ir/graph/GraphEmitter.h"

#include <algorithm>

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;

namespace {

int64_t bytesOf(Value v) {
  auto type = llvm::cast<RankedTensorType>(v.getType());
  int64_t bits = std::max<int64_t>(8, type.getElementTypeBitWidth());
  return type.getNumElements() * bits / 8;
}

/// Gradient indices grouped into buckets, in production order.
SmallVector<SmallVector<unsigned>> bucketsOf(ArrayRef<Value> grads,
                                             const DenseMap<Operation *, unsigned> &position,
                                             int64_t cap) {
  SmallVector<unsigned> order;
  for (unsigned i = 0; i < grads.size(); ++i)
    order.push_back(i);
  auto producedAt = [&](unsigned i) -> int64_t {
    Operation *def = grads[i].getDefiningOp();
    return def ? int64_t(position.lookup(def)) : -1;
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](unsigned a, unsigned b) { return producedAt(a) < producedAt(b); });
  SmallVector<SmallVector<unsigned>> buckets;
  // Open bucket per dtype, and its bytes.
  DenseMap<Type, std::pair<unsigned, int64_t>> open;
  for (unsigned i : order) {
    Type element = llvm::cast<RankedTensorType>(grads[i].getType()).getElementType();
    auto it = open.find(element);
    int64_t bytes = bytesOf(grads[i]);
    // The first bucket is small (PyTorch DDP's first_bucket_bytes, 1 MiB):
    // the first all-reduce starts early in the backward pass.
    int64_t limit = buckets.size() <= 1 ? std::min<int64_t>(cap, int64_t(1) << 20) : cap;
    if (it == open.end() || it->second.second + bytes > limit) {
      buckets.push_back({});
      it = open.insert_or_assign(element, std::make_pair(unsigned(buckets.size() - 1), int64_t(0)))
               .first;
    }
    buckets[it->second.first].push_back(i);
    it->second.second += bytes;
  }
  return buckets;
}

} // namespace

unsigned tilefuse::averageGradients(OpBuilder &b, Block &body, MutableArrayRef<Value> grads,
                                    const ParallelConfig &config) {
  if (grads.empty())
    return 0;
  DenseMap<Operation *, unsigned> position;
  unsigned n = 0;
  for (Operation &op : body)
    position[&op] = n++;
  SmallVector<SmallVector<unsigned>> buckets = bucketsOf(grads, position, config.bucketBytes);
  OpBuilder::InsertPoint optimizer = b.saveInsertionPoint();
  Location loc = b.getInsertionPoint() != b.getInsertionBlock()->end()
                     ? b.getInsertionPoint()->getLoc()
                     : body.getParentOp()->getLoc();
  GraphEmitter e(b, loc);
  SmallVector<std::pair<SmallVector<unsigned>, Value>> started;
  for (const SmallVector<unsigned> &bucket : buckets) {
    // Right after the bucket's last gradient (or at the top of the body
    // for gradients that are arguments or constants hoisted there).
    Operation *last = nullptr;
    for (unsigned i : bucket)
      if (Operation *def = grads[i].getDefiningOp())
        if (!last || position.lookup(def) > position.lookup(last))
          last = def;
    if (last)
      b.setInsertionPointAfter(last);
    else
      b.setInsertionPointToStart(&body);
    SmallVector<Value> flat;
    for (unsigned i : bucket)
      flat.push_back(e.reshape(grads[i], {llvm::cast<RankedTensorType>(grads[i].getType())
                                              .getNumElements()}));
    Value joined = flat.size() == 1 ? flat.front() : e.concat(flat, 0);
    started.push_back({bucket, e.allReduceStart(joined, config.group, config.groupSize)});
  }
  b.restoreInsertionPoint(optimizer);
  for (auto &[bucket, pending] : started) {
    Value sum = e.wait(pending);
    int64_t offset = 0;
    for (unsigned i : bucket) {
      auto type = llvm::cast<RankedTensorType>(grads[i].getType());
      int64_t count = type.getNumElements();
      Value piece = e.reshape(e.slice(sum, {offset}, {offset + count}, {1}), type.getShape());
      offset += count;
      grads[i] = e.mulScalar(piece, 1.0 / double(config.groupSize));
    }
  }
  return unsigned(buckets.size());
}
