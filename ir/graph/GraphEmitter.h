//===- GraphEmitter.h - terse construction of graph ops ----------*- C++ -*-===//
//
// Passes that expand one op into many (decomposition, autodiff) build long
// chains of graph ops. GraphEmitter keeps those rules readable: one call per
// op, scalars become graph.full of the right type, and keepdim broadcasts are
// one call. Operands must already be valid; the emitter does not check.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_IR_GRAPH_GRAPHEMITTER_H
#define TILEFUSE_IR_GRAPH_GRAPHEMITTER_H

#include "ir/graph/GraphDialect.h"
#include "mlir/IR/Builders.h"

namespace tilefuse::graph {

class GraphEmitter {
public:
  GraphEmitter(mlir::OpBuilder &builder, mlir::Location loc)
      : b(builder), loc(loc) {}

  static mlir::RankedTensorType typeOf(mlir::Value v) {
    return llvm::cast<mlir::RankedTensorType>(v.getType());
  }

  mlir::Value full(mlir::RankedTensorType type, double value);
  /// A tensor of `like`'s type filled with `value`.
  mlir::Value fullLike(mlir::Value like, double value) {
    return full(typeOf(like), value);
  }

  mlir::Value add(mlir::Value a, mlir::Value b_) { return b.create<AddOp>(loc, a, b_); }
  mlir::Value sub(mlir::Value a, mlir::Value b_) { return b.create<SubOp>(loc, a, b_); }
  mlir::Value mul(mlir::Value a, mlir::Value b_) { return b.create<MulOp>(loc, a, b_); }
  mlir::Value div(mlir::Value a, mlir::Value b_) { return b.create<DivOp>(loc, a, b_); }
  mlir::Value maximum(mlir::Value a, mlir::Value b_) { return b.create<MaximumOp>(loc, a, b_); }
  mlir::Value mulScalar(mlir::Value a, double s) { return mul(a, fullLike(a, s)); }
  mlir::Value addScalar(mlir::Value a, double s) { return add(a, fullLike(a, s)); }
  mlir::Value neg(mlir::Value a) { return b.create<NegOp>(loc, a); }
  mlir::Value exp(mlir::Value a) { return b.create<ExpOp>(loc, a); }
  mlir::Value log(mlir::Value a) { return b.create<LogOp>(loc, a); }
  mlir::Value tanh(mlir::Value a) { return b.create<TanhOp>(loc, a); }
  mlir::Value erf(mlir::Value a) { return b.create<ErfOp>(loc, a); }
  mlir::Value log1p(mlir::Value a) { return b.create<Log1pOp>(loc, a); }
  mlir::Value floor(mlir::Value a) { return b.create<FloorOp>(loc, a); }
  mlir::Value stopGradient(mlir::Value a) { return b.create<StopGradientOp>(loc, a); }
  mlir::Value rsqrt(mlir::Value a) { return b.create<RsqrtOp>(loc, a); }
  mlir::Value sigmoid(mlir::Value a) { return b.create<SigmoidOp>(loc, a); }
  mlir::Value select(mlir::Value c, mlir::Value t, mlir::Value f) {
    return b.create<SelectOp>(loc, c, t, f);
  }
  mlir::Value cast(mlir::Value a, mlir::Type elementType);
  mlir::Value sqrt(mlir::Value a) { return b.create<SqrtOp>(loc, a); }
  mlir::Value pow(mlir::Value a, mlir::Value b_) { return b.create<PowOp>(loc, a, b_); }
  mlir::Value minimum(mlir::Value a, mlir::Value b_) { return b.create<MinimumOp>(loc, a, b_); }
  mlir::Value gt(mlir::Value a, mlir::Value b_) { return b.create<GtOp>(loc, a, b_); }
  mlir::Value lt(mlir::Value a, mlir::Value b_) { return b.create<LtOp>(loc, a, b_); }
  mlir::Value eq(mlir::Value a, mlir::Value b_) { return b.create<EqOp>(loc, a, b_); }
  mlir::Value ne(mlir::Value a, mlir::Value b_) { return b.create<NeOp>(loc, a, b_); }
  mlir::Value le(mlir::Value a, mlir::Value b_) { return b.create<LeOp>(loc, a, b_); }
  mlir::Value transpose(mlir::Value a, llvm::ArrayRef<int64_t> perm);
  mlir::Value slice(mlir::Value a, llvm::ArrayRef<int64_t> start,
                    llvm::ArrayRef<int64_t> limit, llvm::ArrayRef<int64_t> stride);
  mlir::Value concat(mlir::ValueRange inputs, int64_t dim);
  /// A 0-d tensor broadcast to `shape` (or returned as is for rank 0).
  mlir::Value splat(mlir::Value scalar, llvm::ArrayRef<int64_t> shape) {
    return broadcast(scalar, shape, {});
  }

  mlir::Value reduceSum(mlir::Value a, llvm::ArrayRef<int64_t> dims, bool keepdim);
  mlir::Value reduceMax(mlir::Value a, llvm::ArrayRef<int64_t> dims, bool keepdim);
  /// Sum over every dimension into a 0-d tensor.
  mlir::Value sumAll(mlir::Value a);

  /// broadcast_in_dim of `a` to `shape`, operand dim i -> result dim dims[i].
  mlir::Value broadcast(mlir::Value a, llvm::ArrayRef<int64_t> shape,
                        llvm::ArrayRef<int64_t> dims);
  /// Broadcasts a keepdim-reduced value (same rank, 1s) back to `shape`.
  mlir::Value broadcastKeepdim(mlir::Value a, llvm::ArrayRef<int64_t> shape);
  mlir::Value reshape(mlir::Value a, llvm::ArrayRef<int64_t> shape);
  mlir::Value matmul(mlir::Value a, mlir::Value b_, bool transposeA,
                     bool transposeB);

  /// A collective's start over group (`group`, `size`); the pending value
  /// is finished by wait().
  mlir::Value allReduceStart(mlir::Value a, llvm::StringRef group, int64_t size,
                             llvm::StringRef reduce = "sum");
  mlir::Value reduceScatterStart(mlir::Value a, llvm::StringRef group, int64_t size);
  mlir::Value allGatherStart(mlir::Value a, llvm::StringRef group, int64_t size);
  mlir::Value broadcastStart(mlir::Value a, llvm::StringRef group, int64_t size, int64_t root);
  mlir::Value wait(mlir::Value pending) { return b.create<CollectiveWaitOp>(loc, pending); }

  mlir::OpBuilder &builder() { return b; }
  mlir::Location location() const { return loc; }
  /// Ops built from now on carry `l`.
  void setLocation(mlir::Location l) { loc = l; }

private:
  mlir::OpBuilder &b;
  mlir::Location loc;
};

/// 0, 1, ..., n-1.
llvm::SmallVector<int64_t> iotaDims(int64_t n, int64_t start = 0);

} // namespace tilefuse::graph

#endif // TILEFUSE_IR_GRAPH_GRAPHEMITTER_H
