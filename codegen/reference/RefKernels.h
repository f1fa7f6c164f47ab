//===- RefKernels.h - reference kernels of the interpreter -------*- C++ -*-===//
//
// One plain loop per primitive graph op, on RefTensor (double or int64
// storage). No MLIR here: Interpreter.cpp maps ops to these functions.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_CODEGEN_REFERENCE_REFKERNELS_H
#define TILEFUSE_CODEGEN_REFERENCE_REFKERNELS_H

#include "runtime/HostTensor.h"

#include <utility>
#include <vector>

namespace tilefuse::ref {

/// Floats are held as double (already rounded to `dtype`), integers and i1
/// as int64 (already wrapped to their width).
struct RefTensor {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<double> f;
  std::vector<int64_t> i;

  static RefTensor make(DType dtype, Shape shape);
  bool isFloat() const { return isFloatDType(dtype); }
  int64_t size() const { return numElements(shape); }
  double num(int64_t k) const { return isFloat() ? f[k] : double(i[k]); }
};

RefTensor fromHost(const HostTensor &t);
HostTensor toHost(const RefTensor &t);

enum class BinaryKind { Add, Sub, Mul, Div, Pow, Rem, Max, Min, Eq, Ne, Lt, Le, Gt, Ge };
enum class UnaryKind { Neg, Abs, Exp, Log, Tanh, Sqrt, Rsqrt, Sigmoid, Erf, Log1p, Expm1, Floor };
enum class ReduceKind { Sum, Max, Min };

RefTensor binary(BinaryKind kind, const RefTensor &a, const RefTensor &b);
RefTensor unary(UnaryKind kind, const RefTensor &a);
RefTensor select(const RefTensor &cond, const RefTensor &t, const RefTensor &f);
RefTensor cast(const RefTensor &a, DType to);
RefTensor full(DType dtype, const Shape &shape, double value);
RefTensor iota(DType dtype, const Shape &shape, int64_t dim);
RefTensor broadcastInDim(const RefTensor &a, const Shape &shape,
                         const std::vector<int64_t> &dims);
RefTensor reshape(const RefTensor &a, const Shape &shape);
RefTensor transpose(const RefTensor &a, const std::vector<int64_t> &perm);
RefTensor slice(const RefTensor &a, const std::vector<int64_t> &start,
                const std::vector<int64_t> &limit,
                const std::vector<int64_t> &stride);
RefTensor concat(const std::vector<const RefTensor *> &inputs, int64_t dim);
RefTensor reduce(ReduceKind kind, const RefTensor &a,
                 const std::vector<int64_t> &dims, bool keepdim);
RefTensor argmax(const RefTensor &a, int64_t dim, bool keepdim);
RefTensor matmul(const RefTensor &a, const RefTensor &b, bool transposeA,
                 bool transposeB);
/// graph.grouped_matmul (weightGrad false: a [S, K], b [G, K, N] -> [S, N])
/// and graph.grouped_matmul_weight_grad (a [S, K], b [S, N] -> [G, K, N]),
/// the groups of runtime/GroupedGemm.h.
RefTensor groupedMatmul(const RefTensor &a, const RefTensor &b, const RefTensor &offsets,
                        bool weightGrad, bool transposeB = false);
/// graph.sort: {values, i64 indices} of each last-dimension row sorted
/// stably (NaN above every number).
std::pair<RefTensor, RefTensor> sortRows(const RefTensor &a, bool descending);
/// `what` names the op whose indices these are, in errors.
RefTensor gather(const RefTensor &table, const RefTensor &indices,
                 const std::string &what = "graph.gather");
RefTensor scatterAdd(const RefTensor &base, const RefTensor &indices,
                     const RefTensor &updates);
RefTensor randomUniform(const RefTensor &seed, int64_t stream, DType dtype,
                        const Shape &shape);

} // namespace tilefuse::ref

#endif // TILEFUSE_CODEGEN_REFERENCE_REFKERNELS_H
