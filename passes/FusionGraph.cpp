//===- FusionGraph.cpp - the kernels the fusion pass forms ----------------===//
//
// Op classes, domains, and what a kernel reads from which kernels (see
// FusionGraph.h).
//
//===----------------------------------------------------------------------===//
#include "passes/FusionGraph.h"

#include "ir/graph/GraphDialect.h"

#include <numeric>

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::fusion;
using namespace tilefuse::graph;

bool fusion::isGenerator(Operation *op) {
  return llvm::isa<FullOp, IotaOp, ConstantOp>(op);
}
bool fusion::isLibraryCall(Operation *op) {
  // A recompute barrier is no call, but like one it stays out of kernels
  // (ProgramBuilder gives it its operand's buffer): what reads it runs
  // after its `after` value, in the backward pass.
  // Collectives are barriers: their bytes are in flight between start and
  // wait, so no kernel may take either.
  return llvm::isa<MatmulOp, GroupedMatmulOp, GroupedMatmulWeightGradOp, SortOp, GatherOp,
                   ScatterAddOp,
                   AttentionOp, AttentionGradOp, ConvOp, ConvBiasActOp, ConvGradInputOp,
                   ConvGradWeightOp, RecomputeBarrierOp, CollectiveWaitOp>(op) ||
         isCollectiveStart(op);
}
bool fusion::isReduction(Operation *op) {
  return llvm::isa<ReduceSumOp, ReduceMaxOp, ReduceMinOp, ArgmaxOp>(op);
}
bool fusion::isCheapToRecompute(Operation *op) {
  return llvm::isa<BroadcastInDimOp, ReshapeOp, TransposeOp, SliceOp, ConcatOp,
                   CastOp, SelectOp, EqOp, NeOp, LtOp, LeOp, GtOp, GeOp, AddOp,
                   SubOp, MulOp, NegOp, AbsOp, MaximumOp, MinimumOp>(op);
}

bool fusion::isIndexRemap(Operation *op) {
  return llvm::isa<TransposeOp, SliceOp, ConcatOp>(op);
}

SmallVector<int64_t> fusion::shapeOf(Value v) {
  return SmallVector<int64_t>(llvm::cast<RankedTensorType>(v.getType()).getShape());
}
int64_t fusion::numel(ArrayRef<int64_t> s) {
  return std::accumulate(s.begin(), s.end(), int64_t(1), std::multiplies<>());
}

Domain fusion::domainOf(Operation *op) {
  if (auto a = llvm::dyn_cast<ArgmaxOp>(op))
    return {shapeOf(a.getOperand()), {static_cast<int64_t>(a.getDim())}};
  if (isReduction(op)) {
    auto dims = op->getAttrOfType<DenseI64ArrayAttr>("dims").asArrayRef();
    return {shapeOf(op->getOperand(0)), SmallVector<int64_t>(dims)};
  }
  return {shapeOf(op->getResult(0)), {}};
}

SmallVector<int64_t> fusion::reducedShape(ArrayRef<int64_t> shape, ArrayRef<int64_t> dims,
                                          bool keepdim) {
  SmallVector<int64_t> out;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (!llvm::is_contained(dims, d))
      out.push_back(shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

bool fusion::isRowReduction(ArrayRef<int64_t> shape, ArrayRef<int64_t> dims) {
  int64_t rank = shape.size();
  if (static_cast<int64_t>(dims.size()) >= rank)
    return false;
  for (auto [i, d] : llvm::enumerate(dims))
    if (d != rank - static_cast<int64_t>(dims.size()) + static_cast<int64_t>(i))
      return false;
  return true;
}

bool fusion::ownsWholeReductions(ArrayRef<int64_t> shape, ArrayRef<int64_t> dims) {
  if (isRowReduction(shape, dims))
    return true;
  int64_t rank = shape.size();
  if (rank == 0 || dims.empty() || llvm::is_contained(dims, rank - 1))
    return false;
  // Lanes run along the innermost dim: at least half a CPU block of them;
  // and as many kept elements as 512 such programs, so no split is needed.
  constexpr int64_t kMinInner = 32, kMinKept = 512 * 64;
  int64_t kept = 1;
  for (int64_t d = 0; d < rank; ++d)
    if (!llvm::is_contained(dims, d))
      kept *= shape[size_t(d)];
  return shape.back() >= kMinInner && kept >= kMinKept;
}

bool fusion::onlyUnitDimsChange(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  SmallVector<int64_t> x, y;
  for (int64_t d : a) if (d != 1) x.push_back(d);
  for (int64_t d : b) if (d != 1) y.push_back(d);
  return x == y;
}

bool fusion::isView(Operation *op) {
  return llvm::isa<BroadcastInDimOp, ReshapeOp, TransposeOp, SliceOp>(op);
}

bool fusion::isPadding(Operation *op) {
  auto concat = llvm::dyn_cast<ConcatOp>(op);
  if (!concat)
    return false;
  // The one value the non-constant inputs are views of (an input, or the
  // operand its chain of views starts from).
  Value source;
  for (Value v : concat.getInputs()) {
    Operation *def = v.getDefiningOp();
    if (def && isGenerator(def))
      continue;
    while (def && isView(def)) {
      v = def->getOperand(0);
      def = v.getDefiningOp();
    }
    if (source && v != source)
      return false;
    source = v;
  }
  return true;
}

bool fusion::needsMaterializing(Operation *op) {
  return llvm::any_of(op->getUsers(), [](Operation *user) {
    return isLibraryCall(user) || !llvm::isa<GraphDialect>(user->getDialect());
  });
}

bool fusion::isColumnReduction(const Domain &d) {
  int64_t rank = d.shape.size();
  if (rank < 2 || int64_t(d.reduced.size()) != rank - 1)
    return false;
  for (int64_t i = 0; i + 1 < rank; ++i)
    if (d.reduced[i] != i)
      return false;
  return true;
}

bool fusion::isTotal(Operation *op) {
  Domain d = domainOf(op);
  return llvm::isa<ReduceSumOp>(op) && !d.shape.empty() && d.reduced.size() == d.shape.size();
}

bool FusionGraph::isLeaf(Value v) {
  Operation *def = v.getDefiningOp();
  return !def || isLeafOp(def);
}

bool FusionGraph::isLeafOp(Operation *def) {
  return isGenerator(def) || recomputed.contains(def);
}

llvm::SmallSetVector<unsigned, 4> FusionGraph::kernelsRead(unsigned g) {
  llvm::SmallSetVector<unsigned, 4> deps;
  for (Operation *op : groups[g].ops)
    for (Value v : op->getOperands())
      producers(v, deps);
  deps.remove(g);
  return deps;
}

void FusionGraph::producers(Value v, llvm::SmallSetVector<unsigned, 4> &out) {
  for (const Read &r : readsOfValue(v))
    out.insert(groupOf.lookup(r.producer));
}

/// Whether dimension numbers recorded before a reshape from `from` to `to`
/// still name the same dimensions after it: only when it changes nothing
/// (a reshape after a broadcast that moves a unit dimension, even at the
/// same rank, would move the broadcast's dimensions too).
static bool keepsDimPositions(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  return from == to;
}

/// Appends to `to` the dimensions of `from` it lacks.
static void addDims(SmallVectorImpl<int64_t> &to, ArrayRef<int64_t> from) {
  for (int64_t d : from)
    if (!llvm::is_contained(to, d))
      to.push_back(d);
}

/// The result dimensions broadcast `b` expands: those no operand dimension
/// maps to, and those an operand dimension of 1 maps to.
static SmallVector<int64_t, 4> expandedDims(BroadcastInDimOp b) {
  ArrayRef<int64_t> in = llvm::cast<RankedTensorType>(b.getOperand().getType()).getShape();
  ArrayRef<int64_t> out = llvm::cast<RankedTensorType>(b.getType()).getShape();
  ArrayRef<int64_t> dims = b.getDims();
  SmallVector<int64_t, 4> expanded;
  for (int64_t d = 0; d < int64_t(out.size()); ++d) {
    if (out[size_t(d)] == 1)
      continue; // a new dimension of 1 expands nothing
    auto at = llvm::find(dims, d);
    if (at == dims.end() || in[size_t(at - dims.begin())] == 1)
      expanded.push_back(d);
  }
  return expanded;
}

const SmallVector<FusionGraph::Read> &FusionGraph::readsOfValue(Value v) {
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
      // A padding reads its value at other indices, as a view does.
      bool remaps = (isView(def) || isPadding(def)) && !unitReshape && !bufferViews.contains(def);
      bool movesDims = llvm::isa<ReshapeOp>(def) &&
                       !keepsDimPositions(shapeOf(def->getOperand(0)), shapeOf(def->getResult(0)));
      for (Value operand : def->getOperands())
        for (Read r : readsOfValue(operand)) {
          r.viaOps = true;
          if (movesDims && !r.broadcastDims.empty())
            r.broadcastDims = {-1};
          if (remaps) {
            r.remapped = true;
            r.broadcastOnly &= llvm::isa<BroadcastInDimOp>(def);
            r.reshapeOnly &= llvm::isa<ReshapeOp>(def);
            if (auto b = llvm::dyn_cast<BroadcastInDimOp>(def))
              addDims(r.broadcastDims, expandedDims(b));
          }
          merge(reads, r);
        }
    }
  }
  return readCache[v] = std::move(reads);
}

void FusionGraph::merge(SmallVectorImpl<Read> &reads, const Read &r) {
  for (Read &existing : reads)
    if (existing.producer == r.producer) {
      existing.viaOps |= r.viaOps;
      addDims(existing.broadcastDims, r.broadcastDims);
      if (r.remapped) {
        existing.broadcastOnly =
            (existing.remapped ? existing.broadcastOnly : true) &&
            r.broadcastOnly;
        existing.reshapeOnly =
            (existing.remapped ? existing.reshapeOnly : true) && r.reshapeOnly;
        existing.remapped = true;
      }
      return;
    }
  reads.push_back(r);
}

SmallVector<FusionGraph::Read> FusionGraph::readsOf(Operation *op) {
  SmallVector<Read> reads;
  for (Value v : op->getOperands())
    for (const Read &r : readsOfValue(v))
      merge(reads, r);
  return reads;
}

bool FusionGraph::readsReduced(unsigned g, Operation *op) {
  for (const Read &read : readsOf(op))
    if (groupOf.lookup(read.producer) == g &&
        (isReduction(read.producer) ||
         groups[g].afterReduction.contains(read.producer)))
      return true;
  return false;
}

bool FusionGraph::createsCycle(unsigned g, Operation *op, std::string &why) {
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

bool FusionGraph::dependsOn(unsigned from, unsigned to) {
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
