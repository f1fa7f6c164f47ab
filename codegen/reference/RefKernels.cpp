//===- RefKernels.cpp - reference kernels ---------------------------------===//
//
// Deliberately simple loops over multi-indices: these are the oracle, so
// clarity wins over speed everywhere except the matmul's loop order.
//
//===----------------------------------------------------------------------===//
#include "codegen/reference/RefKernels.h"

#include "codegen/reference/Philox.h"
#include "runtime/GroupedGemm.h"
#include "runtime/SortOrder.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tilefuse::ref {
namespace {

/// Wraps an integer result to the width of `t`.
int64_t wrapInt(int64_t v, DType t) {
  if (t == DType::I32)
    return static_cast<int32_t>(static_cast<uint32_t>(v));
  if (t == DType::I1)
    return v != 0;
  return v;
}

std::vector<int64_t> stridesOf(const Shape &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape[d + 1];
  return s;
}

/// Linear index -> multi-index of `shape`.
void unravel(int64_t linear, const Shape &shape, std::vector<int64_t> &idx) {
  idx.resize(shape.size());
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    idx[d] = linear % shape[d];
    linear /= shape[d];
  }
}

/// out[k] = in[map(k)] for every output element, keeping dtype.
template <typename IndexFn>
RefTensor gatherElements(const RefTensor &in, const Shape &outShape,
                         IndexFn sourceIndex) {
  RefTensor out = RefTensor::make(in.dtype, outShape);
  std::vector<int64_t> idx;
  for (int64_t k = 0, n = out.size(); k < n; ++k) {
    unravel(k, outShape, idx);
    int64_t src = sourceIndex(idx);
    if (in.isFloat())
      out.f[k] = in.f[src];
    else
      out.i[k] = in.i[src];
  }
  return out;
}

double applyBinary(BinaryKind kind, double a, double b) {
  switch (kind) {
  case BinaryKind::Add: return a + b;
  case BinaryKind::Sub: return a - b;
  case BinaryKind::Mul: return a * b;
  case BinaryKind::Div: return a / b;
  case BinaryKind::Pow: return std::pow(a, b);
  case BinaryKind::Rem: return std::fmod(a, b);
  case BinaryKind::Max: return (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b);
  case BinaryKind::Min: return (std::isnan(a) || std::isnan(b)) ? NAN : std::min(a, b);
  case BinaryKind::Eq: return a == b;
  case BinaryKind::Ne: return a != b;
  case BinaryKind::Lt: return a < b;
  case BinaryKind::Le: return a <= b;
  case BinaryKind::Gt: return a > b;
  case BinaryKind::Ge: return a >= b;
  }
  return 0;
}

int64_t applyBinaryInt(BinaryKind kind, int64_t a, int64_t b) {
  // Unsigned arithmetic: wrap-around instead of signed-overflow UB.
  uint64_t ua = uint64_t(a), ub = uint64_t(b);
  switch (kind) {
  case BinaryKind::Add: return int64_t(ua + ub);
  case BinaryKind::Sub: return int64_t(ua - ub);
  case BinaryKind::Mul: return int64_t(ua * ub);
  case BinaryKind::Div:
    if (b == 0)
      throw CompileError("graph.div: integer division by zero at run time");
    if (a == std::numeric_limits<int64_t>::min() && b == -1)
      return a;
    return a / b;
  case BinaryKind::Pow:
    throw CompileError("graph.pow: integer operands are not supported");
  case BinaryKind::Rem:
    if (b == 0)
      throw CompileError("graph.rem: integer remainder by zero at run time");
    if (b == -1)
      return 0;
    return a % b;
  case BinaryKind::Max: return std::max(a, b);
  case BinaryKind::Min: return std::min(a, b);
  case BinaryKind::Eq: return a == b;
  case BinaryKind::Ne: return a != b;
  case BinaryKind::Lt: return a < b;
  case BinaryKind::Le: return a <= b;
  case BinaryKind::Gt: return a > b;
  case BinaryKind::Ge: return a >= b;
  }
  return 0;
}

bool isCompare(BinaryKind k) { return k >= BinaryKind::Eq; }

} // namespace

RefTensor RefTensor::make(DType dtype, Shape shape) {
  RefTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  if (t.isFloat())
    t.f.assign(t.size(), 0.0);
  else
    t.i.assign(t.size(), 0);
  return t;
}

RefTensor fromHost(const HostTensor &h) {
  RefTensor t = RefTensor::make(h.dtype, h.shape);
  for (int64_t k = 0, n = t.size(); k < n; ++k) {
    if (t.isFloat())
      t.f[k] = h.getDouble(k);
    else
      t.i[k] = h.getInt(k);
  }
  return t;
}

HostTensor toHost(const RefTensor &t) {
  HostTensor h(t.dtype, t.shape);
  for (int64_t k = 0, n = t.size(); k < n; ++k) {
    if (t.isFloat())
      h.setDouble(k, t.f[k]);
    else
      h.setInt(k, t.i[k]);
  }
  return h;
}

RefTensor binary(BinaryKind kind, const RefTensor &a, const RefTensor &b) {
  DType outType = isCompare(kind) ? DType::I1 : a.dtype;
  RefTensor out = RefTensor::make(outType, a.shape);
  for (int64_t k = 0, n = a.size(); k < n; ++k) {
    if (a.isFloat()) {
      double v = applyBinary(kind, a.f[k], b.f[k]);
      if (out.isFloat())
        out.f[k] = roundToDType(v, outType);
      else
        out.i[k] = int64_t(v);
    } else {
      out.i[k] = wrapInt(applyBinaryInt(kind, a.i[k], b.i[k]), outType);
    }
  }
  return out;
}

RefTensor unary(UnaryKind kind, const RefTensor &a) {
  RefTensor out = RefTensor::make(a.dtype, a.shape);
  for (int64_t k = 0, n = a.size(); k < n; ++k) {
    if (!a.isFloat()) {
      int64_t v = a.i[k];
      out.i[k] = wrapInt(kind == UnaryKind::Neg ? int64_t(0 - uint64_t(v))
                                                : (v < 0 ? int64_t(0 - uint64_t(v)) : v),
                         a.dtype);
      continue;
    }
    double x = a.f[k], y = 0;
    switch (kind) {
    case UnaryKind::Neg: y = -x; break;
    case UnaryKind::Abs: y = std::fabs(x); break;
    case UnaryKind::Exp: y = std::exp(x); break;
    case UnaryKind::Log: y = std::log(x); break;
    case UnaryKind::Tanh: y = std::tanh(x); break;
    case UnaryKind::Sqrt: y = std::sqrt(x); break;
    case UnaryKind::Rsqrt: y = 1.0 / std::sqrt(x); break;
    case UnaryKind::Sigmoid:
      // Both branches avoid exp overflow.
      y = x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
      break;
    case UnaryKind::Erf: y = std::erf(x); break;
    case UnaryKind::Log1p: y = std::log1p(x); break;
    case UnaryKind::Expm1: y = std::expm1(x); break;
    case UnaryKind::Floor: y = std::floor(x); break;
    }
    out.f[k] = roundToDType(y, a.dtype);
  }
  return out;
}

RefTensor select(const RefTensor &cond, const RefTensor &t, const RefTensor &f) {
  RefTensor out = RefTensor::make(t.dtype, t.shape);
  for (int64_t k = 0, n = t.size(); k < n; ++k) {
    const RefTensor &src = cond.i[k] ? t : f;
    if (out.isFloat())
      out.f[k] = src.f[k];
    else
      out.i[k] = src.i[k];
  }
  return out;
}

RefTensor cast(const RefTensor &a, DType to) {
  RefTensor out = RefTensor::make(to, a.shape);
  for (int64_t k = 0, n = a.size(); k < n; ++k) {
    if (out.isFloat() && !a.isFloat() && to == DType::F32) {
      // Straight from the integer: via double would round twice above 2^53.
      out.f[k] = static_cast<float>(a.i[k]);
    } else if (out.isFloat()) {
      out.f[k] = roundToDType(a.num(k), to);
    } else if (to == DType::I1) {
      out.i[k] = a.num(k) != 0;
    } else if (a.isFloat()) {
      double v = std::trunc(a.f[k]);
      if (!(v >= -9.2233720368547758e18 && v < 9.2233720368547758e18))
        throw CompileError("graph.cast: " + std::to_string(a.f[k]) +
                           " (NaN, infinite or too large) cannot be "
                           "converted to " + dtypeName(to));
      out.i[k] = wrapInt(int64_t(v), to);
    } else {
      out.i[k] = wrapInt(a.i[k], to);
    }
  }
  return out;
}

RefTensor full(DType dtype, const Shape &shape, double value) {
  RefTensor out = RefTensor::make(dtype, shape);
  if (out.isFloat())
    std::fill(out.f.begin(), out.f.end(), roundToDType(value, dtype));
  else
    std::fill(out.i.begin(), out.i.end(), wrapInt(int64_t(value), dtype));
  return out;
}

RefTensor iota(DType dtype, const Shape &shape, int64_t dim) {
  RefTensor out = RefTensor::make(dtype, shape);
  std::vector<int64_t> idx;
  for (int64_t k = 0, n = out.size(); k < n; ++k) {
    unravel(k, shape, idx);
    if (out.isFloat())
      out.f[k] = roundToDType(double(idx[dim]), dtype);
    else
      out.i[k] = wrapInt(idx[dim], dtype);
  }
  return out;
}

RefTensor broadcastInDim(const RefTensor &a, const Shape &shape,
                         const std::vector<int64_t> &dims) {
  auto inStrides = stridesOf(a.shape);
  return gatherElements(a, shape, [&](const std::vector<int64_t> &idx) {
    int64_t src = 0;
    for (size_t d = 0; d < dims.size(); ++d)
      if (a.shape[d] != 1)
        src += idx[dims[d]] * inStrides[d];
    return src;
  });
}

RefTensor reshape(const RefTensor &a, const Shape &shape) {
  RefTensor out = a;
  out.shape = shape;
  return out;
}

RefTensor transpose(const RefTensor &a, const std::vector<int64_t> &perm) {
  Shape shape;
  for (int64_t p : perm)
    shape.push_back(a.shape[p]);
  auto inStrides = stridesOf(a.shape);
  return gatherElements(a, shape, [&](const std::vector<int64_t> &idx) {
    int64_t src = 0;
    for (size_t d = 0; d < perm.size(); ++d)
      src += idx[d] * inStrides[perm[d]];
    return src;
  });
}

RefTensor slice(const RefTensor &a, const std::vector<int64_t> &start,
                const std::vector<int64_t> &limit,
                const std::vector<int64_t> &stride) {
  Shape shape;
  for (size_t d = 0; d < start.size(); ++d)
    shape.push_back(limit[d] == start[d]
                        ? 0
                        : (limit[d] - start[d] - 1) / stride[d] + 1);
  auto inStrides = stridesOf(a.shape);
  return gatherElements(a, shape, [&](const std::vector<int64_t> &idx) {
    int64_t src = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      src += (start[d] + idx[d] * stride[d]) * inStrides[d];
    return src;
  });
}

RefTensor concat(const std::vector<const RefTensor *> &inputs, int64_t dim) {
  Shape shape = inputs[0]->shape;
  shape[dim] = 0;
  for (auto *t : inputs)
    shape[dim] += t->shape[dim];
  RefTensor out = RefTensor::make(inputs[0]->dtype, shape);
  std::vector<int64_t> idx;
  for (int64_t k = 0, n = out.size(); k < n; ++k) {
    unravel(k, shape, idx);
    int64_t pos = idx[dim];
    size_t which = 0;
    while (pos >= inputs[which]->shape[dim])
      pos -= inputs[which++]->shape[dim];
    const RefTensor &in = *inputs[which];
    auto st = stridesOf(in.shape);
    int64_t src = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      src += (int64_t(d) == dim ? pos : idx[d]) * st[d];
    if (out.isFloat())
      out.f[k] = in.f[src];
    else
      out.i[k] = in.i[src];
  }
  return out;
}

namespace {
/// Output shape and, for every input element, its output slot.
Shape reducedShape(const Shape &in, const std::vector<int64_t> &dims,
                   bool keepdim) {
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    bool r = std::find(dims.begin(), dims.end(), int64_t(d)) != dims.end();
    if (!r)
      out.push_back(in[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

int64_t reducedSlot(const std::vector<int64_t> &idx, const Shape &in,
                    const std::vector<int64_t> &dims) {
  int64_t slot = 0;
  for (size_t d = 0; d < in.size(); ++d)
    if (std::find(dims.begin(), dims.end(), int64_t(d)) == dims.end())
      slot = slot * in[d] + idx[d];
  return slot;
}
} // namespace

RefTensor reduce(ReduceKind kind, const RefTensor &a,
                 const std::vector<int64_t> &dims, bool keepdim) {
  Shape shape = reducedShape(a.shape, dims, keepdim);
  int64_t n = numElements(shape);
  double init = kind == ReduceKind::Sum ? 0.0
                : kind == ReduceKind::Max ? -INFINITY
                                          : INFINITY;
  std::vector<double> acc(n, init);
  std::vector<int64_t> iacc(n, kind == ReduceKind::Sum ? 0
                               : kind == ReduceKind::Max
                                   ? std::numeric_limits<int64_t>::min()
                                   : std::numeric_limits<int64_t>::max());
  std::vector<int64_t> idx;
  for (int64_t k = 0, m = a.size(); k < m; ++k) {
    unravel(k, a.shape, idx);
    int64_t s = reducedSlot(idx, a.shape, dims);
    if (a.isFloat()) {
      double v = a.f[k];
      if (kind == ReduceKind::Sum)
        acc[s] += v;
      else if (std::isnan(v) || std::isnan(acc[s]))
        acc[s] = NAN;
      else
        acc[s] = kind == ReduceKind::Max ? std::max(acc[s], v) : std::min(acc[s], v);
    } else {
      int64_t v = a.i[k];
      iacc[s] = kind == ReduceKind::Sum ? int64_t(uint64_t(iacc[s]) + uint64_t(v))
                : kind == ReduceKind::Max ? std::max(iacc[s], v)
                                          : std::min(iacc[s], v);
    }
  }
  RefTensor out = RefTensor::make(a.dtype, shape);
  for (int64_t s = 0; s < n; ++s) {
    if (out.isFloat())
      out.f[s] = roundToDType(acc[s], a.dtype);
    else
      out.i[s] = wrapInt(iacc[s], a.dtype);
  }
  return out;
}

RefTensor argmax(const RefTensor &a, int64_t dim, bool keepdim) {
  Shape shape = reducedShape(a.shape, {dim}, keepdim);
  int64_t n = numElements(shape);
  std::vector<double> best(n, -INFINITY);
  RefTensor out = RefTensor::make(DType::I64, shape);
  std::vector<bool> seen(n, false);
  std::vector<int64_t> idx;
  for (int64_t k = 0, m = a.size(); k < m; ++k) {
    unravel(k, a.shape, idx);
    int64_t s = reducedSlot(idx, a.shape, {dim});
    double v = a.num(k);
    // First maximum wins; a NaN is the maximum (as numpy).
    if (!seen[s] || (!std::isnan(best[s]) && (v > best[s] || std::isnan(v)))) {
      best[s] = v;
      out.i[s] = idx[dim];
      seen[s] = true;
    }
  }
  return out;
}

RefTensor matmul(const RefTensor &a, const RefTensor &b, bool transposeA,
                 bool transposeB) {
  size_t r = a.shape.size();
  int64_t m = transposeA ? a.shape[r - 1] : a.shape[r - 2];
  int64_t k = transposeA ? a.shape[r - 2] : a.shape[r - 1];
  int64_t n = transposeB ? b.shape[r - 2] : b.shape[r - 1];
  int64_t batch = 1;
  Shape shape;
  for (size_t d = 0; d + 2 < r; ++d) {
    batch *= a.shape[d];
    shape.push_back(a.shape[d]);
  }
  shape.push_back(m);
  shape.push_back(n);
  RefTensor out = RefTensor::make(a.dtype, shape);
  std::vector<double> row(n);
  for (int64_t bi = 0; bi < batch; ++bi) {
    const double *pa = a.f.data() + bi * m * k;
    const double *pb = b.f.data() + bi * k * n;
    for (int64_t i = 0; i < m; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t p = 0; p < k; ++p) {
        double av = transposeA ? pa[p * m + i] : pa[i * k + p];
        if (transposeB)
          for (int64_t j = 0; j < n; ++j)
            row[j] += av * pb[j * k + p];
        else
          for (int64_t j = 0; j < n; ++j)
            row[j] += av * pb[p * n + j];
      }
      for (int64_t j = 0; j < n; ++j)
        out.f[(bi * m + i) * n + j] = roundToDType(row[j], a.dtype);
    }
  }
  return out;
}


std::pair<RefTensor, RefTensor> sortRows(const RefTensor &a, bool descending) {
  int64_t n = a.shape.empty() ? 1 : a.shape.back();
  int64_t rows = n ? a.size() / n : 0;
  RefTensor values = RefTensor::make(a.dtype, a.shape);
  RefTensor indices = RefTensor::make(DType::I64, a.shape);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    std::iota(order.begin(), order.end(), int64_t(0));
    auto key = [&](int64_t i) { return a.num(r * n + i); };
    std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
      if (!a.isFloat()) // int64 keys compared exactly
        return descending ? a.i[size_t(r * n + j)] < a.i[size_t(r * n + i)]
                          : a.i[size_t(r * n + i)] < a.i[size_t(r * n + j)];
      return sortsBefore(key(i), key(j), descending);
    });
    for (int64_t k = 0; k < n; ++k) {
      size_t to = size_t(r * n + k), from = size_t(r * n + order[size_t(k)]);
      if (a.isFloat())
        values.f[to] = a.f[from];
      else
        values.i[to] = a.i[from];
      indices.i[to] = order[size_t(k)];
    }
  }
  return {values, indices};
}

RefTensor groupedMatmul(const RefTensor &a, const RefTensor &b, const RefTensor &offsets,
                        bool weightGrad, bool transposeB) {
  int64_t rows = a.shape[0], k = a.shape[1], groups = offsets.size();
  int64_t n = transposeB ? b.shape[1] : b.shape.back();
  Shape shape = weightGrad ? Shape{groups, k, n} : Shape{rows, n};
  RefTensor out = RefTensor::make(a.dtype, shape); // zeros: rows in no group, empty groups
  auto ranges = groupRowRanges(offsets.i.data(), DType::I64, groups, rows);
  for (int64_t g = 0; g < groups; ++g) {
    auto [begin, end] = ranges[size_t(g)];
    if (weightGrad) {
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t r = begin; r < end; ++r)
            acc += a.f[size_t(r * k + p)] * b.f[size_t(r * n + j)];
          out.f[size_t((g * k + p) * n + j)] = roundToDType(acc, a.dtype);
        }
      continue;
    }
    for (int64_t r = begin; r < end; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += a.f[size_t(r * k + p)] *
                 b.f[size_t(transposeB ? (g * n + j) * k + p : (g * k + p) * n + j)];
        out.f[size_t(r * n + j)] = roundToDType(acc, a.dtype);
      }
  }
  return out;
}

RefTensor gather(const RefTensor &table, const RefTensor &indices, const std::string &what) {
  int64_t rows = table.shape[0];
  int64_t rowSize = table.size() / std::max<int64_t>(rows, 1);
  Shape shape = indices.shape;
  shape.insert(shape.end(), table.shape.begin() + 1, table.shape.end());
  RefTensor out = RefTensor::make(table.dtype, shape);
  for (int64_t q = 0, n = indices.size(); q < n; ++q) {
    int64_t r = checkedRow(indices.i[q], rows, what.c_str());
    for (int64_t c = 0; c < rowSize; ++c) {
      if (out.isFloat())
        out.f[q * rowSize + c] = table.f[r * rowSize + c];
      else
        out.i[q * rowSize + c] = table.i[r * rowSize + c];
    }
  }
  return out;
}

RefTensor scatterAdd(const RefTensor &base, const RefTensor &indices,
                     const RefTensor &updates) {
  int64_t rows = base.shape[0];
  int64_t rowSize = base.size() / std::max<int64_t>(rows, 1);
  RefTensor out = base;
  // Accumulate in double, round once: the order of updates to one row must
  // not change the answer beyond the final rounding.
  std::vector<double> acc(base.isFloat() ? base.f : std::vector<double>());
  for (int64_t q = 0, n = indices.size(); q < n; ++q) {
    int64_t r = checkedRow(indices.i[q], rows, "graph.scatter_add");
    for (int64_t c = 0; c < rowSize; ++c) {
      if (out.isFloat())
        acc[r * rowSize + c] += updates.f[q * rowSize + c];
      else
        out.i[r * rowSize + c] = wrapInt(
            out.i[r * rowSize + c] + updates.i[q * rowSize + c], out.dtype);
    }
  }
  if (out.isFloat())
    for (size_t k = 0; k < acc.size(); ++k)
      out.f[k] = roundToDType(acc[k], out.dtype);
  return out;
}

RefTensor randomUniform(const RefTensor &seed, int64_t stream, DType dtype,
                        const Shape &shape) {
  RefTensor out = RefTensor::make(dtype, shape);
  int bits = dtype == DType::F64 ? 32 : dtype == DType::F32 ? 24
             : dtype == DType::F16 ? 11 : 8;
  uint64_t s = uint64_t(seed.i[0]);
  for (int64_t k = 0, n = out.size(); k < n; ++k)
    out.f[k] = uniformFromBits(philoxBits(s, uint64_t(stream), uint64_t(k)), bits);
  return out;
}

} // namespace tilefuse::ref
