//===- Tracer.h - build a graph-dialect function from tensor calls -*- C++ -*-===//
//
// The C++ tracing API. Each call appends one or more graph ops to the
// function being traced and returns the id of the resulting value. The
// tracer applies numpy's rules so the IR does not have to: implicit
// broadcasts become graph.broadcast_in_dim, mixed dtypes are promoted with
// graph.cast. Every shape rule is checked by the op's own inference and
// verifier; a violation throws CompileError naming the op, the operand
// types and the user's source location when one was set.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_FRONTEND_TRACER_H
#define TILEFUSE_FRONTEND_TRACER_H

#include "frontend/Graph.h"

#include <memory>
#include <string>
#include <vector>

namespace tilefuse {

/// A traced value: an index into the tracer's value table.
using ValueId = int;

class Tracer {
public:
  explicit Tracer(const std::string &functionName = "main");
  ~Tracer();
  Tracer(const Tracer &) = delete;
  Tracer &operator=(const Tracer &) = delete;

  /// Location attached to the ops built from now on (the user's source).
  void setLocation(const std::string &file, int line);
  void clearLocation();
  /// Ops built between beginCheckpoint() and the matching endCheckpoint()
  /// form a checkpointed region: differentiation recomputes them in the
  /// backward pass instead of keeping their results (tilefuse.checkpoint).
  /// Regions nest: the outermost marks the ops (the inner ones rerun as
  /// part of it).
  void beginCheckpoint();
  void endCheckpoint();
  /// Whether the ops built from now on follow the autocast policy; false
  /// inside `tilefuse.autocast(False)`, whose ops autocast keeps in f32.
  void setAutocast(bool enabled);

  ValueId argument(DType dtype, const Shape &shape);
  DType dtype(ValueId v) const;
  Shape shape(ValueId v) const;

  /// A constant holding `data` (copied).
  ValueId constant(const HostTensor &data);
  /// A tensor filled with `value`.
  ValueId full(double value, DType dtype, const Shape &shape);

  /// add sub mul div pow rem maximum minimum eq ne lt le gt ge, with numpy
  /// broadcasting and dtype promotion (div of integers is true division in
  /// f32; trunc_div divides integers rounding toward zero).
  ValueId binary(const std::string &op, ValueId a, ValueId b);
  /// neg abs exp log tanh sqrt rsqrt sigmoid erf log1p expm1 floor relu
  /// silu stop_gradient; integer inputs of float-only ops are promoted to f32.
  ValueId unary(const std::string &op, ValueId a);
  ValueId gelu(ValueId a, const std::string &approximate);
  ValueId where(ValueId cond, ValueId a, ValueId b);
  ValueId cast(ValueId a, DType to);

  ValueId broadcastTo(ValueId a, const Shape &shape);
  ValueId reshape(ValueId a, const Shape &shape);
  ValueId transpose(ValueId a, const std::vector<int64_t> &perm);
  ValueId slice(ValueId a, const std::vector<int64_t> &start,
                const std::vector<int64_t> &limit,
                const std::vector<int64_t> &stride);
  ValueId concat(const std::vector<ValueId> &inputs, int64_t dim);

  /// sum, max or min over `dims` (negative dims count from the end).
  ValueId reduce(const std::string &op, ValueId a, std::vector<int64_t> dims,
                 bool keepdim);
  ValueId argmax(ValueId a, int64_t dim, bool keepdim);
  /// numpy matmul: 1-d operands, broadcast batch dimensions.
  ValueId matmul(ValueId a, ValueId b);
  /// graph.matmul with explicit transposes (same-rank operands).
  ValueId matmulTransposed(ValueId a, ValueId b, bool transposeA,
                           bool transposeB);
  ValueId gather(ValueId table, ValueId indices);
  /// graph.grouped_matmul: rows [S, K] times their group's [G, K, N]
  /// matrix, the groups ending at `offsets` [G].
  ValueId groupedMatmul(ValueId lhs, ValueId rhs, ValueId offsets);
  /// graph.sort along the last dimension: {values, i64 indices}.
  std::vector<ValueId> sort(ValueId x, bool descending);
  /// graph.grouped_matmul_weight_grad: per group, its rows of lhs [S, K]
  /// transposed times its rows of grad [S, N] -> [G, K, N].
  ValueId groupedMatmulWeightGrad(ValueId lhs, ValueId grad, ValueId offsets);
  /// graph.conv (`kind` "conv") of input a and weight b, or its gradient
  /// ops: "grad_input" (a the output's cotangent, b the weight, `size` the
  /// input's spatial size) and "grad_weight" (a the input, b the output's
  /// cotangent, `size` the kernel's).
  ValueId conv(const std::string &kind, ValueId a, ValueId b, const Shape &strides,
               const Shape &padLow, const Shape &padHigh, const Shape &dilation,
               int64_t groups, const Shape &size = {});
  ValueId scatterAdd(ValueId base, ValueId indices, ValueId updates);
  ValueId randomUniform(ValueId seed, DType dtype, const Shape &shape,
                        int64_t stream);
  /// graph.attention: {result, logsumexp}; `mask` < 0 means no mask,
  /// `seed` < 0 no dropout (else dropoutP > 0 and the Philox stream).
  std::vector<ValueId> attention(ValueId q, ValueId k, ValueId v, ValueId mask, double scale,
                                 bool causal, ValueId seed = -1, double dropoutP = 0.0,
                                 int64_t stream = 0);
  /// graph.attention_grad: {dq, dk, dv}; mask and seed as attention's.
  std::vector<ValueId> attentionGrad(ValueId q, ValueId k, ValueId v, ValueId out,
                                     ValueId lse, ValueId grad, ValueId mask, double scale,
                                     bool causal, ValueId seed = -1, double dropoutP = 0.0,
                                     int64_t stream = 0);

  ValueId softmax(ValueId a, int64_t dim);
  ValueId logSoftmax(ValueId a, int64_t dim);
  ValueId layerNorm(ValueId x, ValueId weight, ValueId bias, double epsilon);
  /// `bias` < 0 means no bias.
  ValueId linear(ValueId x, ValueId weight, ValueId bias);
  /// Each dropout call of one trace draws from its own stream.
  ValueId dropout(ValueId x, ValueId seed, double p);
  ValueId crossEntropy(ValueId logits, ValueId target, int64_t ignoreIndex);
  ValueId nll(ValueId logp, ValueId target, int64_t ignoreIndex);
  ValueId mse(ValueId input, ValueId target);
  ValueId bce(ValueId input, ValueId target);

  /// Ends the trace with `outputs` as results; the tracer is spent after.
  std::shared_ptr<Graph> finish(const std::vector<ValueId> &outputs);

  struct Impl;

private:
  std::unique_ptr<Impl> impl_;
};

/// numpy result dtype of combining `a` and `b`.
DType promoteDTypes(DType a, DType b);
/// numpy broadcast of two shapes; throws CompileError naming `op`.
Shape broadcastShapes(const Shape &a, const Shape &b, const std::string &op);

} // namespace tilefuse

#endif // TILEFUSE_FRONTEND_TRACER_H
