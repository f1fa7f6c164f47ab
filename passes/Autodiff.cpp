//===- Autodiff.cpp - reverse-mode autodiff with one VJP rule per op ------===//
//
// The primal function is cloned and its ops are visited in reverse, each
// adding its operands' cotangents (vector-Jacobian products) to an adjoint
// map. Forward values are reused, never recomputed; in particular a dropout
// mask (graph.random_uniform + select) is the same SSA value in the backward
// pass, so it is never drawn again. Composites are differentiated through
// their decompositions (the fusion pass later merges the resulting chains).
//
// Derivative conventions are PyTorch's: maximum/minimum split the cotangent
// evenly between tied operands and give it to both where either is NaN;
// reduce_max/reduce_min split it evenly between the elements equal to the
// result (NaN elements when the result is NaN); abs'(0) = 0; floor' = 0.
// relu, clamp and the softmax family get theirs from how they decompose
// (DecomposeComposites.cpp: relu'(0) = 0, clamp passes the cotangent at its
// bounds, the max shift is a stop_gradient).
//
//===----------------------------------------------------------------------===//
#include "passes/Autodiff.h"
#include "passes/FuseOps.h"

#include "ir/graph/GraphEmitter.h"
#include "passes/PassUtils.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <map>

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;

namespace {

bool isFloatTensor(Value v) {
  auto t = llvm::dyn_cast<RankedTensorType>(v.getType());
  return t && llvm::isa<FloatType>(t.getElementType());
}

SmallVector<int64_t> shapeOf(Value v) {
  return SmallVector<int64_t>(GraphEmitter::typeOf(v).getShape());
}

/// Shape of `operand` reduced over `dims` with keepdim.
SmallVector<int64_t> keepdimShape(Value operand, ArrayRef<int64_t> dims) {
  SmallVector<int64_t> shape = shapeOf(operand);
  for (int64_t d : dims)
    shape[d] = 1;
  return shape;
}

/// Builds the cotangents of one function body.
class ReverseBuilder {
public:
  ReverseBuilder(OpBuilder &b, Location loc) : e(b, loc) {}

  /// Whether a cotangent of `v` can reach an argument: not for integers
  /// and constants. Rules that build a library call (scatter_add, which DCE
  /// does not remove) ask first.
  static bool needsCotangent(Value v) {
    return isFloatTensor(v) && !v.getDefiningOp<FullOp>() && !v.getDefiningOp<ConstantOp>();
  }

  void accumulate(Value v, Value g) {
    // A recomputed value's cotangent belongs to the value it recomputes.
    for (auto it = recomputes.find(v); it != recomputes.end(); it = recomputes.find(v))
      v = it->second;
    if (!needsCotangent(v))
      return;
    auto it = adjoints.find(v);
    if (it == adjoints.end())
      adjoints[v] = g;
    else
      it->second = e.add(it->second, g);
  }
  Value adjoint(Value v) const { return adjoints.lookup(v); }
  /// `copy` recomputes `value` (a checkpointed region's op rerun in the
  /// backward pass, or a recompute barrier's result).
  void noteRecomputed(Value copy, Value value) { recomputes[copy] = value; }
  /// The backward ops of a forward op carry its location (the user's line).
  void at(Location l) { e.setLocation(l); }

  /// Adds the VJP of `op` given its result's cotangent `g`.
  LogicalResult visit(Operation *op, Value g);

private:
  /// graph.conv and its gradient ops with `like`'s window attributes.
  template <typename OpTy> Value conv(OpTy like, Value input, Value weight) {
    return e.builder().create<ConvOp>(e.location(), input, weight, like.getStridesAttr(),
                                      like.getPaddingLowAttr(), like.getPaddingHighAttr(),
                                      like.getDilationAttr(), like.getGroupsAttr());
  }
  /// The cotangent of input `x` (its spatial size) from the output's `gy`.
  template <typename OpTy> Value convGradInput(OpTy like, Value gy, Value weight, Value x) {
    auto spatial = llvm::cast<RankedTensorType>(x.getType()).getShape().drop_front(2);
    return e.builder().create<ConvGradInputOp>(
        e.location(), gy, weight, like.getStridesAttr(), like.getPaddingLowAttr(),
        like.getPaddingHighAttr(), like.getDilationAttr(), like.getGroupsAttr(),
        e.builder().getDenseI64ArrayAttr(spatial), e.builder().getBoolAttr(false));
  }
  /// The cotangent of weight `w` (its kernel size) from input `x` and `gy`.
  template <typename OpTy> Value convGradWeight(OpTy like, Value x, Value gy, Value w) {
    auto kernel = llvm::cast<RankedTensorType>(w.getType()).getShape().drop_front(2);
    return e.builder().create<ConvGradWeightOp>(
        e.location(), x, gy, like.getStridesAttr(), like.getPaddingLowAttr(),
        like.getPaddingHighAttr(), like.getDilationAttr(), like.getGroupsAttr(),
        e.builder().getDenseI64ArrayAttr(kernel), e.builder().getBoolAttr(false));
  }

public:

private:
  Value zerosLike(Value v) { return e.fullLike(v, 0.0); }
  /// Cotangent of a strided slice: `g` placed into zeros of `operandShape`.
  Value unslice(Value g, ArrayRef<int64_t> start, ArrayRef<int64_t> stride,
                ArrayRef<int64_t> operandShape);
  /// Cotangent of an elementwise max/min: g to the winner, half on ties.
  void minMax(Value a, Value b, Value g, bool isMax);
  /// Cotangent of graph.sort's values: g[.., k] added at [.., indices[.., k]]
  /// (one scatter_add over the flattened rows).
  Value unsortRows(Value g, Value indices);

  GraphEmitter e;
  llvm::DenseMap<Value, Value> adjoints;
  llvm::DenseMap<Value, Value> recomputes;
};

Value ReverseBuilder::unsortRows(Value g, Value indices) {
  auto type = llvm::cast<RankedTensorType>(g.getType());
  int64_t n = type.getShape().back(), total = type.getNumElements();
  int64_t rows = n ? total / n : 0;
  OpBuilder &b = e.builder();
  auto i64 = RankedTensorType::get({rows, n}, b.getI64Type());
  Value rowStart = e.mul(b.create<IotaOp>(e.location(), i64, b.getI64IntegerAttr(0)),
                         e.full(i64, double(n)));
  Value flat = e.reshape(e.add(e.reshape(indices, {rows, n}), rowStart), {total});
  Value zeros = e.full(RankedTensorType::get({total}, type.getElementType()), 0.0);
  Value placed = b.create<ScatterAddOp>(e.location(), zeros, flat, e.reshape(g, {total}));
  return e.reshape(placed, type.getShape());
}

void ReverseBuilder::minMax(Value a, Value b, Value g, bool isMax) {
  // PyTorch: where(a == b, g/2, g), zeroed where the operand strictly loses
  // (so a NaN on either side passes g to both).
  Value zero = zerosLike(g), half = e.mulScalar(g, 0.5);
  Value tie = e.eq(a, b);
  Value aLoses = isMax ? e.lt(a, b) : e.gt(a, b);
  Value bLoses = isMax ? e.gt(a, b) : e.lt(a, b);
  accumulate(a, e.select(tie, half, e.select(aLoses, zero, g)));
  accumulate(b, e.select(tie, half, e.select(bLoses, zero, g)));
}

Value ReverseBuilder::unslice(Value g, ArrayRef<int64_t> start,
                              ArrayRef<int64_t> stride,
                              ArrayRef<int64_t> operandShape) {
  auto elem = GraphEmitter::typeOf(g).getElementType();
  auto zeros = [&](SmallVector<int64_t> shape) {
    return e.full(RankedTensorType::get(shape, elem), 0.0);
  };
  if (GraphEmitter::typeOf(g).getNumElements() == 0)
    return zeros(SmallVector<int64_t>(operandShape));
  // Along each dim, g's element o goes to position start + s*o = s*(a + o)
  // + r (a = start / s, r = start % s): g shifted by a zeros, then each
  // element put at place r of a group of s (r zeros before it, s-1-r
  // after), then cut or padded to n. The groups start at position 0 of the
  // operand, as the kernel's blocks do: lanes along this dim then read g
  // at (l / s), a contiguous load spread over the lanes, not a gather.
  auto padAlong = [&](Value v, size_t d, int64_t before, int64_t after) {
    SmallVector<Value> parts;
    SmallVector<int64_t> shape = shapeOf(v);
    if (before > 0) {
      shape[d] = before;
      parts.push_back(zeros(shape));
    }
    parts.push_back(v);
    if (after > 0) {
      shape[d] = after;
      parts.push_back(zeros(shape));
    }
    return parts.size() == 1 ? v : e.concat(parts, d);
  };
  for (size_t d = 0; d < operandShape.size(); ++d) {
    int64_t n = operandShape[d], s = stride[d];
    int64_t a = start[d] / s, r = start[d] % s;
    if (s > 1) {
      g = padAlong(g, d, a, 0);
      SmallVector<int64_t> shape = shapeOf(g);
      int64_t m = shape[d];
      SmallVector<int64_t> split(shape);
      split[d] = 1;
      split.insert(split.begin() + d, m);
      g = padAlong(e.reshape(g, split), d + 1, r, s - 1 - r);
      shape[d] = m * s;
      g = e.reshape(g, shape);
    } else {
      g = padAlong(g, d, start[d], 0);
    }
    SmallVector<int64_t> shape = shapeOf(g);
    if (shape[d] > n) {
      SmallVector<int64_t> lo(shape.size(), 0), hi(shape), st(shape.size(), 1);
      hi[d] = n;
      g = e.slice(g, lo, hi, st);
    } else {
      g = padAlong(g, d, 0, n - shape[d]);
    }
  }
  return g;
}

LogicalResult ReverseBuilder::visit(Operation *op, Value g) {
  // The rules below are written for channels-first convolutions; the
  // channels-last form is a layout fusion chooses after differentiation.
  if (auto last = op->getAttrOfType<BoolAttr>("channels_last"); last && last.getValue())
    return op->emitOpError("has channels-last activations, a layout fusion chooses after "
                           "differentiation; differentiate the channels-first form");
  bool handled = true;
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](AddOp o) {
        accumulate(o.getLhs(), g);
        accumulate(o.getRhs(), g);
      })
      .Case([&](SubOp o) {
        accumulate(o.getLhs(), g);
        accumulate(o.getRhs(), e.neg(g));
      })
      .Case([&](MulOp o) {
        accumulate(o.getLhs(), e.mul(g, o.getRhs()));
        accumulate(o.getRhs(), e.mul(g, o.getLhs()));
      })
      .Case([&](DivOp o) {
        accumulate(o.getLhs(), e.div(g, o.getRhs()));
        accumulate(o.getRhs(),
                   e.neg(e.div(e.mul(g, o.getResult()), o.getRhs())));
      })
      .Case([&](PowOp o) {
        Value a = o.getLhs(), b = o.getRhs(), y = o.getResult();
        accumulate(a, e.mul(g, e.mul(b, e.pow(a, e.addScalar(b, -1.0)))));
        // d/db a^b = a^b log a, taken as 0 where a <= 0 (no real log).
        Value logA = e.select(e.gt(a, zerosLike(a)), e.log(a), zerosLike(a));
        accumulate(b, e.mul(g, e.mul(y, logA)));
      })
      .Case([&](MaximumOp o) { minMax(o.getLhs(), o.getRhs(), g, true); })
      .Case([&](MinimumOp o) { minMax(o.getLhs(), o.getRhs(), g, false); })
      .Case([&](SelectOp o) {
        Value zero = zerosLike(g);
        accumulate(o.getOnTrue(), e.select(o.getCond(), g, zero));
        accumulate(o.getOnFalse(), e.select(o.getCond(), zero, g));
      })
      .Case([&](NegOp o) { accumulate(o.getOperand(), e.neg(g)); })
      .Case([&](AbsOp o) {
        Value a = o.getOperand(), zero = zerosLike(a);
        accumulate(a, e.select(e.gt(a, zero), g,
                               e.select(e.lt(a, zero), e.neg(g), zero)));
      })
      .Case([&](ExpOp o) { accumulate(o.getOperand(), e.mul(g, o.getResult())); })
      .Case([&](LogOp o) { accumulate(o.getOperand(), e.div(g, o.getOperand())); })
      .Case([&](TanhOp o) {
        Value y = o.getResult();
        accumulate(o.getOperand(),
                   e.mul(g, e.sub(e.fullLike(y, 1.0), e.mul(y, y))));
      })
      .Case([&](SqrtOp o) {
        accumulate(o.getOperand(), e.div(e.mulScalar(g, 0.5), o.getResult()));
      })
      .Case([&](RsqrtOp o) {
        Value y = o.getResult();
        accumulate(o.getOperand(),
                   e.mul(e.mulScalar(g, -0.5), e.mul(e.mul(y, y), y)));
      })
      .Case([&](SigmoidOp o) {
        Value y = o.getResult();
        accumulate(o.getOperand(),
                   e.mul(g, e.mul(y, e.sub(e.fullLike(y, 1.0), y))));
      })
      .Case([&](Log1pOp o) {
        Value x = o.getOperand();
        accumulate(x, e.div(g, e.addScalar(x, 1.0)));
      })
      .Case([&](Expm1Op o) {
        accumulate(o.getOperand(), e.mul(g, e.addScalar(o.getResult(), 1.0)));
      })
      .Case([&](RemOp o) {
        // fmod(a, b) = a - trunc(a / b) b (PyTorch's fmod derivative).
        Value a = o.getLhs(), b = o.getRhs();
        accumulate(a, g);
        if (isFloatTensor(b)) {
          Value q = e.div(a, b);
          Value truncated = e.select(e.lt(q, zerosLike(q)), e.neg(e.floor(e.neg(q))), e.floor(q));
          accumulate(b, e.neg(e.mul(g, truncated)));
        }
      })
      .Case([&](ErfOp o) {
        Value a = o.getOperand();
        Value density = e.exp(e.neg(e.mul(a, a)));
        accumulate(a, e.mul(e.mulScalar(g, 2.0 / std::sqrt(M_PI)), density));
      })
      .Case([&](CastOp o) {
        if (isFloatTensor(o.getOperand()))
          accumulate(o.getOperand(),
                     e.cast(g, GraphEmitter::typeOf(o.getOperand())
                                   .getElementType()));
      })
      .Case([&](BroadcastInDimOp o) {
        auto in = o.getOperand().getType();
        auto out = o.getType();
        ArrayRef<int64_t> dims = o.getDims();
        SmallVector<int64_t> reduced;
        for (int64_t d = 0; d < out.getRank(); ++d) {
          auto it = llvm::find(dims, d);
          if (it == dims.end() ||
              (in.getDimSize(it - dims.begin()) == 1 && out.getDimSize(d) != 1))
            reduced.push_back(d);
        }
        Value summed = reduced.empty() ? g : e.reduceSum(g, reduced, false);
        accumulate(o.getOperand(), e.reshape(summed, in.getShape()));
      })
      .Case([&](ReshapeOp o) {
        accumulate(o.getOperand(), e.reshape(g, o.getOperand().getType().getShape()));
      })
      .Case([&](TransposeOp o) {
        ArrayRef<int64_t> perm = o.getPerm();
        SmallVector<int64_t> inverse(perm.size());
        for (auto [i, p] : llvm::enumerate(perm))
          inverse[p] = i;
        accumulate(o.getOperand(), e.transpose(g, inverse));
      })
      .Case([&](SliceOp o) {
        if (isFloatTensor(o.getOperand()))
          accumulate(o.getOperand(),
                     unslice(g, o.getStart(), o.getStride(),
                             o.getOperand().getType().getShape()));
      })
      .Case([&](ConcatOp o) {
        int64_t dim = o.getDim(), offset = 0;
        SmallVector<int64_t> shape = shapeOf(g);
        for (Value in : o.getInputs()) {
          int64_t size = GraphEmitter::typeOf(in).getDimSize(dim);
          SmallVector<int64_t> lo(shape.size(), 0), hi(shape),
              st(shape.size(), 1);
          lo[dim] = offset;
          hi[dim] = offset + size;
          if (isFloatTensor(in))
            accumulate(in, e.slice(g, lo, hi, st));
          offset += size;
        }
      })
      .Case([&](ReduceSumOp o) {
        Value x = o.getOperand();
        Value gk = e.reshape(g, keepdimShape(x, o.getDims()));
        accumulate(x, e.broadcastKeepdim(gk, shapeOf(x)));
      })
      .Case<ReduceMaxOp, ReduceMinOp>([&](auto o) {
        Value x = o.getOperand();
        SmallVector<int64_t> kshape = keepdimShape(x, o.getDims());
        SmallVector<int64_t> shape = shapeOf(x);
        Value extreme = e.broadcastKeepdim(e.reshape(o.getResult(), kshape), shape);
        // The elements equal to the result, or the NaNs where it is NaN.
        Value hit = e.select(e.ne(extreme, extreme), e.ne(x, x), e.eq(x, extreme));
        auto elem = GraphEmitter::typeOf(x).getElementType();
        Value count = e.reduceSum(e.cast(hit, elem), o.getDims(), true);
        Value share = e.div(e.reshape(g, kshape), count);
        accumulate(x, e.select(hit, e.broadcastKeepdim(share, shape),
                               zerosLike(x)));
      })
      .Case([&](MatmulOp o) {
        Value a = o.getLhs(), b = o.getRhs();
        bool ta = o.getTransposeLhs(), tb = o.getTransposeRhs();
        accumulate(a, ta ? e.matmul(b, g, tb, true) : e.matmul(g, b, false, !tb));
        accumulate(b, tb ? e.matmul(g, a, true, ta) : e.matmul(a, g, !ta, false));
      })
      // Bilinear in the rows and the groups' matrices, like matmul: row r's
      // cotangent is g[r] times its group's matrix transposed, the
      // matrices' the grouped products of the rows with g.
      // (With the matrices stored transposed, [G, N, K], the same with the
      // flag flipped and the weight gradient's operands swapped.)
      .Case([&](GroupedMatmulOp o) {
        Value x = o.getLhs(), w = o.getRhs(), offsets = o.getOffsets();
        bool t = o.getTransposeRhs();
        if (needsCotangent(x))
          accumulate(x, e.builder().create<GroupedMatmulOp>(e.location(), g, w, offsets, !t));
        if (needsCotangent(w))
          accumulate(w, e.builder().create<GroupedMatmulWeightGradOp>(
                            e.location(), t ? g : x, t ? x : g, offsets));
      })
      .Case([&](GroupedMatmulWeightGradOp o) {
        Value x = o.getLhs(), gy = o.getGrad(), offsets = o.getOffsets();
        if (needsCotangent(x))
          accumulate(x, e.builder().create<GroupedMatmulOp>(e.location(), gy, g, offsets,
                                                            /*transpose_rhs=*/true));
        if (needsCotangent(gy))
          accumulate(gy, e.builder().create<GroupedMatmulOp>(e.location(), x, g, offsets,
                                                             /*transpose_rhs=*/false));
      })
      .Case([&](RecomputeBarrierOp o) { accumulate(o.getOperand(), g); })
      // The sorted values are the operand's elements moved within their
      // rows: each goes back to where it came from (a scatter by row).
      .Case([&](SortOp o) { accumulate(o.getOperand(), unsortRows(g, o.getIndices())); })
      // A convolution is linear in each operand: its input's cotangent is
      // the transposed convolution of g, its weight's the correlation of
      // the input with g; the gradient ops' own rules follow from the same
      // bilinear form, so second derivatives need nothing more.
      .Case([&](ConvOp o) {
        Value x = o.getLhs(), w = o.getRhs();
        if (needsCotangent(x))
          accumulate(x, convGradInput(o, g, w, x));
        if (needsCotangent(w))
          accumulate(w, convGradWeight(o, x, g, w));
      })
      .Case([&](ConvGradInputOp o) {
        Value gy = o.getLhs(), w = o.getRhs();
        if (needsCotangent(gy))
          accumulate(gy, conv(o, g, w));
        if (needsCotangent(w))
          accumulate(w, convGradWeight(o, g, gy, w));
      })
      .Case([&](ConvGradWeightOp o) {
        Value x = o.getLhs(), gy = o.getRhs();
        if (needsCotangent(x))
          accumulate(x, convGradInput(o, gy, g, x));
        if (needsCotangent(gy))
          accumulate(gy, conv(o, x, g));
      })
      .Case([&](AttentionOp o) {
        // FlashAttention-2's backward: reads the forward's output and
        // log-sum-exp instead of any saved probabilities.
        auto grads = e.builder().create<AttentionGradOp>(
            e.location(), o.getQuery(), o.getKey(), o.getValue(), o.getResult(),
            o.getLogsumexp(), g, o.getMask(), o.getSeed(), o.getScaleAttr(),
            o.getCausalAttr(), o.getDropoutPAttr(), o.getStreamAttr());
        accumulate(o.getQuery(), grads.getGradQuery());
        accumulate(o.getKey(), grads.getGradKey());
        accumulate(o.getValue(), grads.getGradValue());
        // The mask needs no cotangent: buildValueAndGrad wrote out every
        // attention whose mask a differentiated argument reaches.
      })
      // Collectives: an all-reduce sum is its own adjoint, all-gather and
      // reduce-scatter are each other's; the wait passes cotangents through.
      .Case([&](CollectiveWaitOp o) { accumulate(o.getPending(), g); })
      .Case<AllReduceStartOp, ReduceScatterStartOp, AllGatherStartOp>([&](Operation *o) {
        auto reduce = o->getAttrOfType<StringAttr>("reduce");
        if (reduce && reduce.getValue() != "sum") { // max and min have no rule
          handled = false;
          return;
        }
        auto [group, size] = collectiveGroupOf(o);
        Value back = llvm::isa<AllReduceStartOp>(o)       ? e.allReduceStart(g, group, size)
                     : llvm::isa<ReduceScatterStartOp>(o) ? e.allGatherStart(g, group, size)
                                                          : e.reduceScatterStart(g, group, size);
        accumulate(o->getOperand(0), e.wait(back));
      })
      .Case([&](GatherOp o) {
        Value table = o.getTable();
        if (needsCotangent(table))
          accumulate(table, e.builder().create<ScatterAddOp>(
                                e.location(), zerosLike(table), o.getIndices(), g));
      })
      .Case([&](ScatterAddOp o) {
        accumulate(o.getBase(), g);
        if (needsCotangent(o.getUpdates()))
          accumulate(o.getUpdates(), e.builder().create<GatherOp>(
                                         e.location(), g, o.getIndices()));
      })
      // No cotangent flows through these: their results are integer, boolean
      // or independent of every input.
      .Case<EqOp, NeOp, LtOp, LeOp, GtOp, GeOp, ArgmaxOp, ConstantOp, FullOp,
            IotaOp, RandomUniformOp, FloorOp, StopGradientOp>([](Operation *) {})
      .Default([&](Operation *) { handled = false; });
  if (!handled)
    return op->emitOpError("has no differentiation rule")
           << (op->getDialect() && op->getDialect()->getNamespace() == "graph"
                   ? "; composites are differentiated through their "
                     "decomposition: run decompose-composites first"
                   : "");
  return success();
}

/// Reruns the ops of a checkpointed region at `b`'s insertion point (where
/// the backward pass reaches the region, `token` being the cotangent that
/// got there), so their VJPs read recomputed values and the forward ones
/// die in the forward pass (torch.utils.checkpoint). The region's inputs
/// pass through recompute barriers after `token`: canonicalization and CSE
/// cannot merge the rerun back, nor fusion move it into the forward pass.
void recomputeRegion(OpBuilder &b, ArrayRef<Operation *> ops, Value token,
                     ReverseBuilder &reverse, llvm::DenseMap<Operation *, Operation *> &rerun) {
  llvm::DenseSet<Operation *> inRegion(ops.begin(), ops.end());
  IRMapping map;
  for (Operation *op : ops) {
    for (Value v : op->getOperands()) {
      Operation *def = v.getDefiningOp();
      if (map.contains(v) || (def && inRegion.contains(def)) ||
          (def && llvm::isa<FullOp, ConstantOp, IotaOp>(def)))
        continue; // recomputed already, or a constant used as it is
      auto barrier = b.create<RecomputeBarrierOp>(v.getLoc(), v, token);
      reverse.noteRecomputed(barrier.getResult(), v);
      map.map(v, barrier.getResult());
    }
    Operation *copy = b.clone(*op, map);
    rerun[op] = copy;
    for (auto [c, o] : llvm::zip(copy->getResults(), op->getResults()))
      reverse.noteRecomputed(c, o);
  }
}

} // namespace

FailureOr<func::FuncOp> tilefuse::buildValueAndGrad(func::FuncOp primal,
                                                    ArrayRef<unsigned> wrt,
                                                    StringRef name,
                                                    bool seedArgument) {
  if (failed(verifyGraphFunction(primal)))
    return failure();
  auto fnType = primal.getFunctionType();
  if (fnType.getNumResults() == 0 ||
      !isFloatTensor(primal.getBody().front().getTerminator()->getOperand(0)) ||
      llvm::cast<RankedTensorType>(fnType.getResult(0)).getRank() != 0)
    return primal.emitError("value_and_grad: the first result of @")
           << primal.getSymName()
           << " must be a 0-d floating-point loss, got "
           << (fnType.getNumResults() ? fnType.getResult(0) : Type());
  for (unsigned i : wrt) {
    if (i >= fnType.getNumInputs())
      return primal.emitError("value_and_grad: argument index ")
             << i << " is out of range: @" << primal.getSymName() << " has "
             << fnType.getNumInputs() << " arguments";
    if (!isFloatTensor(primal.getArgument(i)))
      return primal.emitError("value_and_grad: cannot differentiate with "
                              "respect to argument ")
             << i << " of type " << fnType.getInput(i)
             << ": only floating-point inputs have gradients";
  }

  OpBuilder b(primal);
  b.setInsertionPointAfter(primal);
  auto grad = llvm::cast<func::FuncOp>(b.clone(*primal));
  grad.setSymName(name);
  Block &body = grad.getBody().front();
  auto ret = llvm::cast<func::ReturnOp>(body.getTerminator());
  b.setInsertionPoint(ret);

  ReverseBuilder reverse(b, grad.getLoc());
  Value loss = ret.getOperand(0);
  Value seed;
  if (seedArgument) {
    unsigned n = grad.getNumArguments();
    grad.insertArgument(n, loss.getType(), {}, grad.getLoc());
    seed = grad.getArgument(n);
  } else {
    seed = GraphEmitter(b, loss.getLoc()).fullLike(loss, 1.0);
  }
  reverse.accumulate(loss, seed);
  {
    // An attention whose mask a differentiated argument reaches (a learned
    // bias) needs the mask's cotangent, the L x S score gradient the fused
    // kernels never build: it is differentiated written out.
    llvm::DenseSet<Value> varied;
    for (unsigned i : wrt)
      varied.insert(grad.getArgument(i));
    SmallVector<Operation *> learnedMasks;
    for (Operation &op : body.without_terminator()) {
      if (llvm::any_of(op.getOperands(), [&](Value v) { return varied.contains(v); }))
        varied.insert(op.getResults().begin(), op.getResults().end());
      if (auto attention = llvm::dyn_cast<AttentionOp>(op);
          attention && attention.getMask() && varied.contains(attention.getMask()))
        learnedMasks.push_back(&op);
    }
    for (Operation *op : learnedMasks)
      expandAttentionOp(op);
  }
  SmallVector<Operation *> forward;
  std::map<int64_t, SmallVector<Operation *>> regions; // checkpointed ops, in order
  for (Operation &op : body.without_terminator()) {
    forward.push_back(&op);
    int64_t region = checkpointRegionOf(op.getLoc());
    if (region >= 0)
      regions[region].push_back(&op);
  }
  // Forward op of a checkpointed region -> its copy in the backward pass.
  llvm::DenseMap<Operation *, Operation *> rerun;
  for (Operation *op : llvm::reverse(forward)) {
    if (auto attention = llvm::dyn_cast<AttentionOp>(op);
        attention && reverse.adjoint(attention.getLogsumexp()))
      return op->emitOpError("has no differentiation rule for its logsumexp result; "
                             "only its attention output can be differentiated");
    if (llvm::isa<AttentionGradOp>(op) &&
        llvm::any_of(op->getResults(), [&](Value r) { return bool(reverse.adjoint(r)); }))
      return op->emitOpError("has no differentiation rule: second derivatives through "
                             "fused attention are not computed (PyTorch's flash attention "
                             "has none either)");
    if (auto sort = llvm::dyn_cast<SortOp>(op); sort && reverse.adjoint(sort.getIndices()))
      return op->emitOpError("has no differentiation rule for its indices (integers)");
    if (op->getNumResults() != 1 && !llvm::isa<AttentionOp, AttentionGradOp, SortOp>(op))
      return op->emitOpError("has no differentiation rule");
    Value g = reverse.adjoint(op->getResult(0));
    if (!g)
      continue;
    b.setInsertionPoint(ret);
    reverse.at(op->getLoc());
    int64_t region = checkpointRegionOf(op->getLoc());
    if (region >= 0 && !rerun.count(op))
      recomputeRegion(b, regions[region], g, reverse, rerun);
    if (failed(reverse.visit(region >= 0 ? rerun.lookup(op) : op, g))) {
      grad.erase();
      return failure();
    }
  }

  SmallVector<Value> results(ret.getOperands());
  for (unsigned i : wrt) {
    Value arg = grad.getArgument(i);
    Value g = reverse.adjoint(arg);
    results.push_back(g ? g : GraphEmitter(b, grad.getLoc()).fullLike(arg, 0.0));
  }
  b.create<func::ReturnOp>(ret.getLoc(), results);
  ret.erase();
  grad.setFunctionType(
      b.getFunctionType(body.getArgumentTypes(), ValueRange(results).getTypes()));
  // The primal results keep their attributes; the gradients have none.
  SmallVector<DictionaryAttr> resultAttrs;
  for (unsigned i = 0; i < results.size(); ++i)
    resultAttrs.push_back(i < fnType.getNumResults()
                              ? primal.getResultAttrDict(i)
                              : DictionaryAttr::get(b.getContext()));
  grad.setAllResultAttrs(resultAttrs);
  return grad;
}

namespace tilefuse {
#define GEN_PASS_DEF_AUTODIFFPASS
#include "passes/Passes.h.inc"
} // namespace tilefuse


namespace {
struct AutodiffPass : tilefuse::impl::AutodiffPassBase<AutodiffPass> {
  using AutodiffPassBase::AutodiffPassBase;
  void runOnOperation() override {
    func::FuncOp primal = findFunction(getOperation(), function);
    SmallVector<unsigned> indices(wrt.begin(), wrt.end());
    if (!primal ||
        failed(buildValueAndGrad(primal, indices,
                                 (primal.getSymName() + "_value_and_grad").str())))
      signalPassFailure();
  }
};
} // namespace
