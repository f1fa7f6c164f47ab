//===- CpuLibrary.cpp -----------------------------------------------------===//
#include "runtime/CpuLibrary.h"

#include "runtime/ThreadPool.h"

#include <cstring>

#ifdef TILEFUSE_HAVE_CBLAS
#include <cblas.h>
#endif

using namespace tilefuse;

namespace {

int64_t indexAt(const BufferInfo &indices, const void *p, int64_t q) {
  if (indices.dtype == DType::I32)
    return static_cast<const int32_t *>(p)[q];
  return static_cast<const int64_t *>(p)[q];
}

int64_t checkedRow(int64_t id, int64_t rows, const char *op) {
  if (id < 0 || id >= rows)
    throw CompileError(std::string(op) + ": index " + std::to_string(id) +
                       " is out of range for a table of " +
                       std::to_string(rows) + " rows");
  return id;
}

template <typename T>
void gemmLoop(const Step &s, const T *a, const T *b, T *c) {
  for (int64_t i = 0; i < s.batch; ++i) {
    const T *pa = a + i * s.m * s.k, *pb = b + i * s.k * s.n;
    T *pc = c + i * s.m * s.n;
    for (int64_t r = 0; r < s.m; ++r) {
      T *row = pc + r * s.n;
      std::fill(row, row + s.n, T(0));
      for (int64_t p = 0; p < s.k; ++p) {
        T av = s.transposeA ? pa[p * s.m + r] : pa[r * s.k + p];
        if (s.transposeB)
          for (int64_t j = 0; j < s.n; ++j)
            row[j] += av * pb[j * s.k + p];
        else
          for (int64_t j = 0; j < s.n; ++j)
            row[j] += av * pb[p * s.n + j];
      }
    }
  }
}

void gemmF32(const Step &s, const float *a, const float *b, float *c) {
#ifdef TILEFUSE_HAVE_CBLAS
  for (int64_t i = 0; i < s.batch; ++i)
    cblas_sgemm(CblasRowMajor, s.transposeA ? CblasTrans : CblasNoTrans,
                s.transposeB ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f,
                a + i * s.m * s.k, s.transposeA ? s.m : s.k,
                b + i * s.k * s.n, s.transposeB ? s.k : s.n, 0.0f,
                c + i * s.m * s.n, s.n);
#else
  gemmLoop(s, a, b, c);
#endif
}

void gemmF64(const Step &s, const double *a, const double *b, double *c) {
#ifdef TILEFUSE_HAVE_CBLAS
  for (int64_t i = 0; i < s.batch; ++i)
    cblas_dgemm(CblasRowMajor, s.transposeA ? CblasTrans : CblasNoTrans,
                s.transposeB ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0,
                a + i * s.m * s.k, s.transposeA ? s.m : s.k,
                b + i * s.k * s.n, s.transposeB ? s.k : s.n, 0.0,
                c + i * s.m * s.n, s.n);
#else
  gemmLoop(s, a, b, c);
#endif
}

std::vector<float> widen(DType t, const void *p, int64_t n) {
  std::vector<float> out(n);
  auto *h = static_cast<const uint16_t *>(p);
  for (int64_t i = 0; i < n; ++i)
    out[i] = t == DType::F16 ? halfToFloat(h[i]) : bf16ToFloat(h[i]);
  return out;
}

} // namespace

bool cpu::haveBlas() {
#ifdef TILEFUSE_HAVE_CBLAS
  return true;
#else
  return false;
#endif
}

void cpu::gemm(const Step &s, DType dtype, const void *a, const void *b, void *c) {
  switch (dtype) {
  case DType::F32:
    return gemmF32(s, static_cast<const float *>(a), static_cast<const float *>(b),
                   static_cast<float *>(c));
  case DType::F64:
    return gemmF64(s, static_cast<const double *>(a), static_cast<const double *>(b),
                   static_cast<double *>(c));
  case DType::F16:
  case DType::BF16: {
    auto wa = widen(dtype, a, s.batch * s.m * s.k);
    auto wb = widen(dtype, b, s.batch * s.k * s.n);
    std::vector<float> wc(s.batch * s.m * s.n);
    gemmF32(s, wa.data(), wb.data(), wc.data());
    auto *out = static_cast<uint16_t *>(c);
    for (size_t i = 0; i < wc.size(); ++i)
      out[i] = dtype == DType::F16 ? floatToHalf(wc[i]) : floatToBF16(wc[i]);
    return;
  }
  default:
    throw CompileError(std::string("graph.matmul: no CPU GEMM for ") + dtypeName(dtype));
  }
}

void cpu::gather(const BufferInfo &table, const BufferInfo &indices,
                 const void *tablePtr, const void *indexPtr, void *out) {
  int64_t rows = table.shape.empty() ? 1 : table.shape[0];
  size_t rowBytes = rows ? table.byteSize() / size_t(rows) : 0;
  int64_t n = numElements(indices.shape);
  // Validate first: a bad index must not leave half a result behind.
  for (int64_t q = 0; q < n; ++q)
    checkedRow(indexAt(indices, indexPtr, q), rows, "graph.gather");
  ThreadPool::global().parallelFor(n, 64, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q)
      std::memcpy(static_cast<char *>(out) + q * rowBytes,
                  static_cast<const char *>(tablePtr) +
                      indexAt(indices, indexPtr, q) * rowBytes,
                  rowBytes);
  });
}

void cpu::scatterAdd(const BufferInfo &base, const BufferInfo &indices,
                     const void *basePtr, const void *indexPtr,
                     const void *updatesPtr, void *out) {
  int64_t rows = base.shape.empty() ? 1 : base.shape[0];
  int64_t rowSize = rows ? numElements(base.shape) / rows : 0;
  int64_t n = numElements(indices.shape);
  for (int64_t q = 0; q < n; ++q)
    checkedRow(indexAt(indices, indexPtr, q), rows, "graph.scatter_add");
  if (base.dtype == DType::F16 || base.dtype == DType::BF16) {
    // Accumulate in f32 and round once, as the reference does.
    std::vector<float> acc = widen(base.dtype, basePtr, numElements(base.shape));
    std::vector<float> upd = widen(base.dtype, updatesPtr, n * rowSize);
    for (int64_t q = 0; q < n; ++q) {
      int64_t r = indexAt(indices, indexPtr, q);
      for (int64_t c = 0; c < rowSize; ++c)
        acc[r * rowSize + c] += upd[q * rowSize + c];
    }
    auto *d = static_cast<uint16_t *>(out);
    for (size_t i = 0; i < acc.size(); ++i)
      d[i] = base.dtype == DType::F16 ? floatToHalf(acc[i]) : floatToBF16(acc[i]);
    return;
  }
  if (out != basePtr)
    std::memcpy(out, basePtr, base.byteSize());
  // Columns split across threads: rows that repeat never race.
  ThreadPool::global().parallelFor(rowSize, 256, [&](int64_t c0, int64_t c1) {
    for (int64_t q = 0; q < n; ++q) {
      int64_t r = indexAt(indices, indexPtr, q);
      for (int64_t c = c0; c < c1; ++c) {
        int64_t o = r * rowSize + c, u = q * rowSize + c;
        switch (base.dtype) {
        case DType::F32:
          static_cast<float *>(out)[o] += static_cast<const float *>(updatesPtr)[u];
          break;
        case DType::F64:
          static_cast<double *>(out)[o] += static_cast<const double *>(updatesPtr)[u];
          break;
        case DType::F16:
        case DType::BF16:
          break; // handled above
        case DType::I32:
          static_cast<int32_t *>(out)[o] = int32_t(
              uint32_t(static_cast<int32_t *>(out)[o]) +
              uint32_t(static_cast<const int32_t *>(updatesPtr)[u]));
          break;
        case DType::I64:
          static_cast<int64_t *>(out)[o] = int64_t(
              uint64_t(static_cast<int64_t *>(out)[o]) +
              uint64_t(static_cast<const int64_t *>(updatesPtr)[u]));
          break;
        case DType::I1:
          static_cast<uint8_t *>(out)[o] |= static_cast<const uint8_t *>(updatesPtr)[u];
          break;
        }
      }
    }
  });
}
