//===- LayOutChannelsLast.cpp - convolutions on channels-innermost data ---===//
//
// oneDNN's direct convolutions read and write activations with their
// channels innermost ([N, S..., C]) as they are; channels-first ones
// ([N, C, S...], PyTorch's layout and the graph's) cost a reorder on each
// side of every call (1.2-3x the call's time on the U-Net's shapes). This
// rewrite gives every convolution channels-last activations and carries
// that layout through the ops around them, so the batch norms, activations,
// pooling and losses between convolutions read and write the same layout
// and transposes remain only where a value enters or leaves such a region.
//
// Two phases. The first chooses a layout per value: a permutation `p`
// (the value is held as transpose(v, p)), seeded by the convolutions'
// activations and spread along def-use edges through the ops that can run
// on permuted operands as they are. The second rewrites each op in place
// for the layouts of its operands and result, and asks for any operand it
// needs in another layout through one cached transpose.
//
//===----------------------------------------------------------------------===//
#include "passes/FuseOps.h"
#include "passes/Passes.h"

#include "ir/graph/GraphDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"

#include <map>

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;

namespace tilefuse {
#define GEN_PASS_DEF_LAYOUTCHANNELSLASTPASS
#include "passes/Passes.h.inc"
} // namespace tilefuse

namespace {

/// A layout: the value is held as transpose(value, perm). Empty: as it is.
using Perm = SmallVector<int64_t, 6>;

bool isIdentity(ArrayRef<int64_t> p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != int64_t(i))
      return false;
  return true;
}

Perm inverse(ArrayRef<int64_t> p) {
  Perm inv(p.size());
  for (size_t i = 0; i < p.size(); ++i)
    inv[size_t(p[i])] = int64_t(i);
  return inv;
}

/// [0, 2, ..., rank - 1, 1]: channels (dimension 1) moved innermost.
Perm channelsLast(int64_t rank) {
  Perm p = {0};
  for (int64_t d = 2; d < rank; ++d)
    p.push_back(d);
  p.push_back(1);
  return p;
}

/// `p`, or the identity of `rank` dimensions where `p` is empty.
Perm full(ArrayRef<int64_t> p, int64_t rank) {
  Perm out(p);
  if (out.empty())
    for (int64_t d = 0; d < rank; ++d)
      out.push_back(d);
  return out;
}

RankedTensorType typeOf(Value v) { return llvm::dyn_cast<RankedTensorType>(v.getType()); }

RankedTensorType permuted(RankedTensorType t, ArrayRef<int64_t> p) {
  if (p.empty())
    return t;
  SmallVector<int64_t> shape;
  for (int64_t d : p)
    shape.push_back(t.getDimSize(d));
  return RankedTensorType::get(shape, t.getElementType());
}

/// Ops computing each element from the elements at the same index of
/// operands of the result's shape.
bool isElementwise(Operation *op) {
  if (!llvm::isa<AddOp, SubOp, MulOp, DivOp, PowOp, RemOp, MaximumOp, MinimumOp, EqOp, NeOp,
                 LtOp, LeOp, GtOp, GeOp, NegOp, AbsOp, ExpOp, LogOp, TanhOp, SqrtOp, RsqrtOp,
                 SigmoidOp, ErfOp, Log1pOp, Expm1Op, FloorOp, StopGradientOp,
                 RecomputeBarrierOp, SelectOp, CastOp>(op) ||
      op->getNumResults() != 1)
    return false;
  RankedTensorType result = typeOf(op->getResult(0));
  return result && llvm::all_of(op->getOperands(), [&](Value v) {
           RankedTensorType t = typeOf(v);
           return t && t.getShape() == result.getShape();
         });
}

bool isReduction(Operation *op) {
  return llvm::isa<ReduceSumOp, ReduceMaxOp, ReduceMinOp, ArgmaxOp>(op);
}

/// The reduced dimensions of a reduction (argmax: its one dimension).
SmallVector<int64_t> reducedDims(Operation *op) {
  if (auto a = llvm::dyn_cast<ArgmaxOp>(op))
    return {int64_t(a.getDim())};
  return SmallVector<int64_t>(op->getAttrOfType<DenseI64ArrayAttr>("dims").asArrayRef());
}

bool keepsDims(Operation *op) {
  return llvm::TypeSwitch<Operation *, bool>(op)
      .Case<ReduceSumOp, ReduceMaxOp, ReduceMinOp, ArgmaxOp>(
          [](auto r) { return r.getKeepdim(); })
      .Default([](Operation *) { return false; });
}

bool isConvolution(Operation *op) {
  return llvm::isa<ConvOp, ConvBiasActOp, ConvGradInputOp, ConvGradWeightOp>(op);
}

/// Whether convolution `op` already has channels-last activations.
bool hasChannelsLast(Operation *op) {
  return llvm::TypeSwitch<Operation *, bool>(op)
      .Case<ConvOp, ConvBiasActOp, ConvGradInputOp, ConvGradWeightOp>(
          [](auto c) { return c.getChannelsLast(); })
      .Default([](Operation *) { return false; });
}

void setChannelsLast(Operation *op) {
  llvm::TypeSwitch<Operation *>(op)
      .Case<ConvOp, ConvBiasActOp, ConvGradInputOp, ConvGradWeightOp>(
          [](auto c) { c.setChannelsLast(true); });
}

/// The layout of a reduction's result when its operand is held in `p`:
/// the kept dimensions in the order `p` holds them.
Perm reducedLayout(Operation *op, ArrayRef<int64_t> p) {
  if (keepsDims(op))
    return Perm(p);
  SmallVector<int64_t> dims = reducedDims(op);
  // Result index of each kept operand dimension.
  SmallVector<int64_t> index(p.size(), -1);
  int64_t next = 0;
  for (int64_t d = 0; d < int64_t(p.size()); ++d)
    if (!llvm::is_contained(dims, d))
      index[size_t(d)] = next++;
  Perm out;
  for (int64_t d : p)
    if (index[size_t(d)] >= 0)
      out.push_back(index[size_t(d)]);
  return out;
}

/// The layout a broadcast's operand is read in when its result is held in
/// `p`: operand dimension i lands at held position p^-1[dims[i]], so the
/// operand is read in the order of those positions.
Perm broadcastOperandLayout(ArrayRef<int64_t> dims, ArrayRef<int64_t> p) {
  Perm inv = inverse(p), order;
  for (size_t i = 0; i < dims.size(); ++i)
    order.push_back(int64_t(i));
  llvm::sort(order, [&](int64_t x, int64_t y) {
    return inv[size_t(dims[size_t(x)])] < inv[size_t(dims[size_t(y)])];
  });
  return order;
}

/// The layout of a broadcast's result (of `rank` dimensions) when its
/// operand is held in `p`: each operand dimension's result dimension,
/// with the new dimensions that follow it, moves as one group in the order
/// `p` gives (a [N, C, H, 2, W, 2] upsampling broadcast of channels-last
/// [N, H, W, C] is held [N, H, 2, W, 2, C]); new leading ones stay first.
Perm broadcastResultLayout(ArrayRef<int64_t> dims, int64_t rank, ArrayRef<int64_t> p) {
  Perm out;
  int64_t lead = dims.empty() ? rank : dims.front();
  for (int64_t d = 0; d < lead; ++d)
    out.push_back(d);
  for (int64_t i : p) {
    int64_t end = size_t(i) + 1 < dims.size() ? dims[size_t(i) + 1] : rank;
    for (int64_t d = dims[size_t(i)]; d < end; ++d)
      out.push_back(d);
  }
  return out;
}

/// The groups of a reshape: consecutive operand dimensions and consecutive
/// result dimensions of equal products, as [begin, end) pairs; unit
/// dimensions join the group before them (or the first).
struct ReshapeGroups {
  SmallVector<std::pair<int64_t, int64_t>> from, to;
};

std::optional<ReshapeGroups> groupsOf(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  ReshapeGroups g;
  size_t i = 0, j = 0;
  while (i < from.size() || j < to.size()) {
    size_t i0 = i, j0 = j;
    int64_t a = 1, b = 1;
    if (i < from.size())
      a *= from[i++];
    if (j < to.size())
      b *= to[j++];
    while (a != b) {
      if (a < b && i < from.size())
        a *= from[i++];
      else if (b < a && j < to.size())
        b *= to[j++];
      else
        return std::nullopt;
    }
    // Trailing unit dimensions belong to this group.
    while (i < from.size() && from[i] == 1 && (j >= to.size() || to[j] != 1))
      ++i;
    while (j < to.size() && to[j] == 1 && (i >= from.size() || from[i] != 1))
      ++j;
    if (i == i0 || j == j0)
      return std::nullopt; // a unit dimension on one side only, at the start
    g.from.push_back({int64_t(i0), int64_t(i)});
    g.to.push_back({int64_t(j0), int64_t(j)});
  }
  return g;
}

/// The layout of a reshape's result when its operand (of shape `from`) is
/// held in `p`: possible when `p` moves whole groups, each kept in order;
/// the result then holds the same groups in the same order. nullopt
/// otherwise.
std::optional<Perm> reshapedLayout(ArrayRef<int64_t> from, ArrayRef<int64_t> to,
                                   ArrayRef<int64_t> p) {
  std::optional<ReshapeGroups> g = groupsOf(from, to);
  if (!g)
    return std::nullopt;
  Perm out;
  size_t k = 0;
  while (k < p.size()) {
    // The group starting at p[k] must follow in order.
    auto *group = llvm::find_if(g->from, [&](auto r) { return r.first == p[k]; });
    if (group == g->from.end())
      return std::nullopt;
    for (int64_t d = group->first; d < group->second; ++d, ++k)
      if (k >= p.size() || p[k] != d)
        return std::nullopt;
    auto target = g->to[size_t(group - g->from.begin())];
    for (int64_t d = target.first; d < target.second; ++d)
      out.push_back(d);
  }
  return out;
}

/// What a tile kernel's transpose costs per element against a oneDNN
/// reorder's: the U-Net's logits, [8, 128, 128, 151] to [8, 151, 128, 128],
/// took 25.6 ms (1.3 ns an element); the reorders the channels-first
/// convolutions of that call make, ~6.7 ms for 25M elements (0.27 ns).
constexpr int64_t kTransposeCost = 4;

int64_t elementsOf(Value v) {
  RankedTensorType t = typeOf(v);
  return t ? t.getNumElements() : 0;
}

/// Whether the channels-first path reorders `conv`'s activations: all but
/// 1x1 convolutions of stride 1, no padding and one group, which oneDNN
/// runs on the plain layouts (runtime/CpuDnnl.cpp).
bool reordersChannelsFirst(Operation *conv) {
  auto attr = [&](StringRef name) {
    return conv->getAttrOfType<DenseI64ArrayAttr>(name).asArrayRef();
  };
  auto weight = typeOf(conv->getOperand(1));
  if (llvm::isa<ConvGradWeightOp>(conv))
    weight = typeOf(conv->getResult(0));
  auto groups = conv->getAttrOfType<IntegerAttr>("groups");
  bool pointwise = !groups || groups.getInt() == 1;
  for (int64_t d = 2; d < weight.getRank(); ++d)
    pointwise &= weight.getDimSize(d) == 1;
  for (int64_t v : attr("strides"))
    pointwise &= v == 1;
  for (StringRef pad : {"padding_low", "padding_high"})
    for (int64_t v : attr(pad))
      pointwise &= v == 0;
  return !pointwise;
}

/// Whether `op` reads and writes values in the layouts the pass chooses
/// (the rest read them channels-first, through a transpose).
bool carries(Operation *op) {
  return isElementwise(op) || isConvolution(op) || isReduction(op) ||
         llvm::isa<BroadcastInDimOp, SliceOp, ConcatOp, TransposeOp, ReshapeOp>(op);
}

/// Phase one: a layout per value.
class LayoutChoice {
public:
  llvm::DenseMap<Value, Perm> layout;

  /// Convolution `conv`'s activations channels-last.
  void seed(Operation *conv) {
    Perm last = channelsLast(typeOf(conv->getOperand(0)).getRank());
    Value in = conv->getOperand(0);
    Value other = llvm::isa<ConvGradWeightOp>(conv) ? conv->getOperand(1) : conv->getResult(0);
    from = in;
    assign(in, last);
    assign(other, last);
    convs.push_back(conv);
  }

  void spread() {
    while (!work.empty()) {
      Value v = work.pop_back_val();
      Perm p = layout[v];
      from = v;
      if (Operation *def = v.getDefiningOp())
        spreadUp(def, p);
      for (OpOperand &use : v.getUses())
        spreadDown(use.getOwner(), p);
    }
  }

  /// Keeps the regions (values connected through layout-carrying ops) that
  /// pay: at least two convolutions, and the elements transposed where
  /// values enter or leave the region (function arguments and results,
  /// values other ops read channels-first), each kTransposeCost times an
  /// element reordered, below the elements the channels-first path
  /// reorders around its convolutions (their activations, except those of
  /// 1x1 convolutions, which it runs on plain layouts). A lone convolution
  /// gains nothing: its transposes in and out cost at least what the
  /// reorders cost. Neither does the U-Net's inference, which returns
  /// logits of 151 channels, 20M elements to transpose against 25M
  /// reordered (75.8 against 59.1 ms a call channels-last). Returns the
  /// convolutions kept.
  llvm::DenseSet<Operation *> keepRegionsThatPay(bool weighCosts) {
    llvm::DenseMap<Value, int64_t> count, reordered, transposed;
    for (Operation *conv : convs) {
      Value region = find(conv->getOperand(0));
      ++count[region];
      if (!reordersChannelsFirst(conv))
        continue;
      bool weightGrad = llvm::isa<ConvGradWeightOp>(conv);
      reordered[region] += elementsOf(conv->getOperand(0)) +
                           elementsOf(weightGrad ? conv->getOperand(1) : conv->getResult(0));
    }
    for (auto &[v, p] : layout) {
      bool crosses = llvm::isa<BlockArgument>(v) ||
                     llvm::any_of(v.getUsers(), [](Operation *user) { return !carries(user); });
      if (crosses)
        transposed[find(v)] += elementsOf(v);
    }
    auto pays = [&](Value region) {
      return count.lookup(region) >= 2 &&
             (!weighCosts || kTransposeCost * transposed.lookup(region) < reordered.lookup(region));
    };
    llvm::DenseSet<Operation *> kept;
    for (Operation *conv : convs)
      if (pays(find(conv->getOperand(0))))
        kept.insert(conv);
    SmallVector<Value> dropped;
    for (auto &[v, p] : layout)
      if (!pays(find(v)))
        dropped.push_back(v);
    for (Value v : dropped)
      layout.erase(v);
    return kept;
  }

private:
  SmallVector<Value> work;
  SmallVector<Operation *> convs;
  /// The value whose layout is spreading (joins the region of what it
  /// reaches).
  Value from;
  llvm::DenseMap<Value, Value> parent;

  Value find(Value v) {
    auto it = parent.find(v);
    if (it == parent.end() || it->second == v)
      return v;
    Value root = find(it->second);
    parent[v] = root;
    return root;
  }

  void assign(Value v, Perm p) {
    RankedTensorType t = typeOf(v);
    if (!t || t.getRank() != int64_t(p.size()) || isIdentity(p))
      return;
    if (layout.count(v)) {
      if (from && layout.count(from)) // regions that meet are one
        parent[find(v)] = find(from);
      return;
    }
    layout[v] = std::move(p);
    if (from && from != v)
      parent[find(v)] = find(from);
    work.push_back(v);
  }

  /// `def`'s result is held in `p`: its operands follow where `def` reads
  /// them at the same indices.
  void spreadUp(Operation *def, ArrayRef<int64_t> p) {
    if (isElementwise(def) || llvm::isa<SliceOp, ConcatOp>(def)) {
      for (Value v : def->getOperands())
        assign(v, Perm(p));
    } else if (auto b = llvm::dyn_cast<BroadcastInDimOp>(def)) {
      assign(b.getOperand(), broadcastOperandLayout(b.getDims(), p));
    } else if (isReduction(def) && keepsDims(def)) {
      assign(def->getOperand(0), Perm(p));
    } else if (auto t = llvm::dyn_cast<TransposeOp>(def)) {
      Perm q;
      for (int64_t d : p)
        q.push_back(t.getPerm()[size_t(d)]);
      assign(t.getOperand(), q);
    } else if (auto r = llvm::dyn_cast<ReshapeOp>(def)) {
      if (auto q = reshapedLayout(typeOf(r.getResult()).getShape(),
                                  typeOf(r.getOperand()).getShape(), p))
        assign(r.getOperand(), *q);
    }
  }

  /// An operand of `user` is held in `p`: its result follows where the op
  /// can run on that layout as it is.
  void spreadDown(Operation *user, ArrayRef<int64_t> p) {
    if (isElementwise(user) || llvm::isa<SliceOp, ConcatOp>(user)) {
      assign(user->getResult(0), Perm(p));
    } else if (auto b = llvm::dyn_cast<BroadcastInDimOp>(user)) {
      assign(b.getResult(), broadcastResultLayout(b.getDims(), typeOf(b.getResult()).getRank(), p));
    } else if (isReduction(user)) {
      assign(user->getResult(0), reducedLayout(user, p));
    } else if (auto t = llvm::dyn_cast<TransposeOp>(user)) {
      Perm inv = inverse(t.getPerm()), q;
      for (int64_t d : p)
        q.push_back(inv[size_t(d)]);
      assign(t.getResult(), q);
    } else if (auto r = llvm::dyn_cast<ReshapeOp>(user)) {
      if (auto q = reshapedLayout(typeOf(r.getOperand()).getShape(),
                                  typeOf(r.getResult()).getShape(), p))
        assign(r.getResult(), *q);
    }
  }
};

/// Phase two: each op rewritten for the chosen layouts.
class Rewriter {
public:
  Rewriter(func::FuncOp func, const llvm::DenseMap<Value, Perm> &layout,
           const llvm::DenseSet<Operation *> &convolutions)
      : func(func), layout(layout), convolutions(convolutions) {}

  void run() {
    Block &body = func.getBody().front();
    for (BlockArgument arg : body.getArguments())
      held[arg] = {arg, {}};
    // What the rules ask of the graph as it was: rewriting changes result
    // types in place.
    SmallVector<Operation *> ops;
    for (Operation &op : body) {
      ops.push_back(&op);
      if (isElementwise(&op))
        elementwise.insert(&op);
      for (Value r : op.getResults())
        if (RankedTensorType t = typeOf(r))
          original[r] = t;
    }
    for (Operation *op : ops)
      rewrite(op);
    for (Operation *op : llvm::reverse(dropped))
      op->erase();
  }

private:
  /// Where an original value now is, and in which layout.
  struct Held {
    Value value;
    Perm perm;
  };
  func::FuncOp func;
  const llvm::DenseMap<Value, Perm> &layout;
  const llvm::DenseSet<Operation *> &convolutions;
  llvm::DenseMap<Value, Held> held;
  llvm::DenseSet<Operation *> elementwise;
  llvm::DenseMap<Value, RankedTensorType> original;
  std::map<std::pair<void *, SmallVector<int64_t>>, Value> cache;
  SmallVector<Operation *> dropped;

  Perm chosen(Value v) const {
    auto it = layout.find(v);
    return it == layout.end() ? Perm() : it->second;
  }

  /// Original value `v` in layout `want` (empty: as it is), a transpose
  /// built before `at` where it is held otherwise.
  Value get(Value v, ArrayRef<int64_t> want, Operation *at) {
    auto it = held.find(v);
    if (it == held.end())
      return v; // not a tensor this pass tracks
    const Held &h = it->second;
    RankedTensorType t = typeOf(v);
    if (!t)
      return h.value;
    Perm from = full(h.perm, t.getRank()), to = full(want, t.getRank());
    if (from == to)
      return h.value;
    auto key = std::make_pair(v.getAsOpaquePointer(), SmallVector<int64_t>(to));
    if (auto c = cache.find(key); c != cache.end())
      return c->second;
    // held = transpose(v, from); wanted = transpose(v, to) =
    // transpose(held, from^-1 o to).
    Perm inv = inverse(from), perm;
    for (int64_t d : to)
      perm.push_back(inv[size_t(d)]);
    OpBuilder b(at);
    RankedTensorType type = permuted(typeOf(h.value), perm);
    // A permutation that keeps the dimensions of more than one element in
    // order moves no element: a reshape (a per-channel [1, C, 1, 1] held
    // as [1, 1, 1, C]).
    SmallVector<int64_t> moved;
    for (int64_t d : perm)
      if (typeOf(h.value).getDimSize(d) != 1)
        moved.push_back(d);
    Value out = llvm::is_sorted(moved)
                    ? Value(b.create<ReshapeOp>(v.getLoc(), type, h.value))
                    : Value(b.create<TransposeOp>(v.getLoc(), type, h.value,
                                                  b.getDenseI64ArrayAttr(perm)));
    cache[key] = out;
    return out;
  }

  /// Operand `i` of `op` replaced by its value in layout `want`.
  void use(Operation *op, unsigned i, ArrayRef<int64_t> want) {
    op->setOperand(i, get(op->getOperand(i), want, op));
  }

  /// `op`'s result now holds its value in layout `p` (its type permuted).
  void produces(Operation *op, ArrayRef<int64_t> p) {
    Value r = op->getResult(0);
    if (!p.empty() && !isIdentity(p))
      r.setType(permuted(typeOf(r), p));
    held[r] = {r, isIdentity(p) ? Perm() : Perm(p)};
  }

  /// Dimension-indexed attribute `name` of `op` reordered for layout `p`.
  void permuteArray(Operation *op, StringRef name, ArrayRef<int64_t> p) {
    auto values = op->getAttrOfType<DenseI64ArrayAttr>(name).asArrayRef();
    SmallVector<int64_t> out;
    for (int64_t d : p)
      out.push_back(values[size_t(d)]);
    op->setAttr(name, DenseI64ArrayAttr::get(op->getContext(), out));
  }

  void rewrite(Operation *op) {
    auto opaque = [&] {
      for (unsigned i = 0; i < op->getNumOperands(); ++i)
        use(op, i, {});
      for (Value r : op->getResults())
        if (typeOf(r))
          held[r] = {r, {}};
    };
    if (op->getNumResults() != 1 && !llvm::isa<func::ReturnOp>(op))
      return opaque();
    if (llvm::isa<func::ReturnOp>(op))
      return opaque();
    Value result = op->getResult(0);
    Perm p = chosen(result);
    int64_t rank = typeOf(result) ? typeOf(result).getRank() : 0;

    if (isConvolution(op)) {
      if (!convolutions.contains(op))
        return opaque();
      Perm last = channelsLast(rank);
      // Activations: conv's input (and result), conv_grad_input's gradient
      // (and result), conv_grad_weight's input and gradient.
      bool weightGrad = llvm::isa<ConvGradWeightOp>(op);
      use(op, 0, last);
      use(op, 1, weightGrad ? ArrayRef<int64_t>(last) : ArrayRef<int64_t>());
      for (unsigned i = 2; i < op->getNumOperands(); ++i)
        use(op, i, {}); // the bias
      setChannelsLast(op);
      produces(op, weightGrad ? Perm() : last);
      return;
    }
    if (elementwise.contains(op) || llvm::isa<SliceOp, ConcatOp>(op)) {
      for (unsigned i = 0; i < op->getNumOperands(); ++i)
        use(op, i, p);
      if (!p.empty()) {
        if (llvm::isa<SliceOp>(op))
          for (StringRef name : {"start", "limit", "stride"})
            permuteArray(op, name, p);
        if (auto c = llvm::dyn_cast<ConcatOp>(op))
          c.setDim(uint64_t(inverse(p)[size_t(c.getDim())]));
      }
      return produces(op, p);
    }
    if (auto b = llvm::dyn_cast<BroadcastInDimOp>(op)) {
      if (p.empty())
        return opaque();
      Perm inv = inverse(p);
      ArrayRef<int64_t> dims = b.getDims();
      Perm order = broadcastOperandLayout(dims, p);
      SmallVector<int64_t> newDims;
      for (int64_t i : order)
        newDims.push_back(inv[size_t(dims[size_t(i)])]);
      use(op, 0, isIdentity(order) ? Perm() : Perm(order));
      b.setDims(newDims);
      return produces(op, p);
    }
    if (isReduction(op)) {
      // Reduced as the operand is held (no transpose of a large input).
      Value in = op->getOperand(0);
      auto it = held.find(in);
      Perm q = it == held.end() ? Perm() : it->second.perm;
      use(op, 0, q);
      if (q.empty())
        return produces(op, {});
      Perm inv = inverse(q);
      Perm out = reducedLayout(op, q);
      if (auto a = llvm::dyn_cast<ArgmaxOp>(op)) {
        a.setDim(uint64_t(inv[size_t(a.getDim())]));
      } else {
        SmallVector<int64_t> dims;
        for (int64_t d : reducedDims(op))
          dims.push_back(inv[size_t(d)]);
        llvm::sort(dims);
        op->setAttr("dims", DenseI64ArrayAttr::get(op->getContext(), dims));
      }
      // The result's type: the held operand's with the reduced dimensions
      // (now in held positions) removed, or 1.
      SmallVector<int64_t> reducedHeld = reducedDims(op);
      RankedTensorType heldIn = typeOf(op->getOperand(0));
      SmallVector<int64_t> shape;
      for (int64_t d = 0; d < heldIn.getRank(); ++d)
        if (!llvm::is_contained(reducedHeld, d))
          shape.push_back(heldIn.getDimSize(d));
        else if (keepsDims(op))
          shape.push_back(1);
      result.setType(RankedTensorType::get(shape, typeOf(result).getElementType()));
      held[result] = {result, isIdentity(out) ? Perm() : out};
      return;
    }
    if (auto t = llvm::dyn_cast<TransposeOp>(op)) {
      Value in = t.getOperand();
      auto it = held.find(in);
      Perm h = it == held.end() ? Perm() : it->second.perm;
      if (h.empty() && p.empty())
        return opaque();
      // held(in) = transpose(in, h); result in layout p is
      // transpose(held(in), c) with c[j] = h^-1[perm[p[j]]].
      int64_t r = int64_t(t.getPerm().size());
      Perm hn = full(h, r), pn = full(p, r);
      Perm hinv = inverse(hn), c;
      for (int64_t j = 0; j < r; ++j)
        c.push_back(hinv[size_t(t.getPerm()[size_t(pn[size_t(j)])])]);
      Value source = it == held.end() ? in : it->second.value;
      if (isIdentity(c)) {
        held[result] = {source, p};
        dropped.push_back(op);
        return;
      }
      op->setOperand(0, source);
      t.setPerm(c);
      result.setType(permuted(typeOf(source), c));
      held[result] = {result, p};
      return;
    }
    if (auto r = llvm::dyn_cast<ReshapeOp>(op)) {
      Value in = r.getOperand();
      auto it = held.find(in);
      Perm h = it == held.end() ? Perm() : it->second.perm;
      RankedTensorType from = original.count(in) ? original[in] : typeOf(in);
      if (!h.empty())
        if (auto q = reshapedLayout(from.getShape(), typeOf(result).getShape(), h)) {
          use(op, 0, h);
          return produces(op, *q);
        }
      return opaque();
    }
    if (llvm::isa<FullOp>(op) && !p.empty())
      return produces(op, p);
    if (auto iota = llvm::dyn_cast<IotaOp>(op); iota && !p.empty()) {
      iota.setDim(uint64_t(inverse(p)[size_t(iota.getDim())]));
      return produces(op, p);
    }
    if (auto c = llvm::dyn_cast<ConstantOp>(op); c && !p.empty()) {
      if (auto splat = llvm::dyn_cast<SplatElementsAttr>(c.getValue())) {
        RankedTensorType t = permuted(typeOf(result), p);
        c.setValueAttr(SplatElementsAttr::get(t, splat.getSplatValue<Attribute>()));
        return produces(op, p);
      }
    }
    opaque();
  }
};

} // namespace

int tilefuse::layOutChannelsLast(func::FuncOp func, bool weighCosts) {
  LayoutChoice choice;
  func.walk([&](Operation *op) {
    if (isConvolution(op) && !hasChannelsLast(op))
      choice.seed(op);
  });
  choice.spread();
  llvm::DenseSet<Operation *> convolutions = choice.keepRegionsThatPay(weighCosts);
  if (convolutions.empty())
    return 0;
  Rewriter(func, choice.layout, convolutions).run();
  return int(convolutions.size());
}

namespace {
struct LayOutChannelsLastPass
    : tilefuse::impl::LayOutChannelsLastPassBase<LayOutChannelsLastPass> {
  using LayOutChannelsLastPassBase::LayOutChannelsLastPassBase;
  void runOnOperation() override {
    for (auto func : llvm::to_vector(getOperation().getOps<func::FuncOp>()))
      layOutChannelsLast(func, weighCosts);
  }
};
} // namespace
