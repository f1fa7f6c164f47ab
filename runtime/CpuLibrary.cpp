//===- CpuLibrary.cpp -----------------------------------------------------===//
#include "runtime/CpuLibrary.h"

#include "runtime/CpuDnnl.h"
#include "runtime/GroupedGemm.h"
#include "runtime/SortOrder.h"
#include "runtime/ThreadPool.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include <cstdlib>
#include <dlfcn.h>
#include <string>
#include <type_traits>

using namespace tilefuse;

namespace {

int64_t indexAt(const BufferInfo &indices, const void *p, int64_t q) {
  if (indices.dtype == DType::I32)
    return static_cast<const int32_t *>(p)[q];
  return static_cast<const int64_t *>(p)[q];
}


template <typename T>
void gemmLoop(const Step &s, int64_t rows, const T *a, int64_t lda, const T *b,
              T *c) {
  for (int64_t r = 0; r < rows; ++r) {
    T *row = c + r * s.n;
    std::fill(row, row + s.n, T(0));
    for (int64_t p = 0; p < s.k; ++p) {
      T av = s.transposeA ? a[p * lda + r] : a[r * lda + p];
      if (s.transposeB)
        for (int64_t j = 0; j < s.n; ++j)
          row[j] += av * b[j * s.k + p];
      else
        for (int64_t j = 0; j < s.n; ++j)
          row[j] += av * b[p * s.n + j];
    }
  }
}

/// Whether the CPU has the AVX-512 subsets (F, BW, VL, DQ) OpenBLAS's
/// AVX-512 kernels use.
bool cpuHasAvx512() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

/// OpenBLAS's x86 kernel families with AVX-512 GEMM kernels (its
/// openblas_get_corename names).
bool isAvx512Core(const std::string &core) {
  std::string lower;
  for (char ch : core)
    lower += char(std::tolower(static_cast<unsigned char>(ch)));
  return lower == "skylakex" || lower == "cooperlake" || lower == "sapphirerapids";
}

/// A CBLAS found at run time. Loading it here rather than linking it keeps
/// the runtime free of build-time BLAS dependencies, and lets us configure
/// it first: OpenBLAS 0.3.21 (Debian 12) does not recognise some recent
/// Xeons and falls back to its slowest kernels, so the core type is set
/// from the CPU's features unless the user chose one; its own threads are
/// switched off because GEMMs are split across tilefuse's thread pool
/// (two sets of spinning threads on the same cores slow both). A core type
/// the environment chose is kept, and noted: OpenBLAS's AVX2 kernels on a
/// CPU with full-width AVX-512 (OPENBLAS_CORETYPE=Haswell on a Zen 5) run
/// f32 GEMMs at half oneDNN's speed, so cpu::f32GemmPrefersDnnl sends them
/// to oneDNN, which picks its kernels from the CPU itself.
struct Blas {
  using Sgemm = void (*)(int, int, int, int, int, int, float, const float *, int,
                         const float *, int, float, float *, int);
  using Dgemm = void (*)(int, int, int, int, int, int, double, const double *, int,
                         const double *, int, double, double *, int);
  Sgemm sgemm = nullptr;
  Dgemm dgemm = nullptr;
  std::string name = "built-in loop";
  /// OpenBLAS's kernel family ("Haswell", "SkylakeX"); empty for others.
  std::string core;
  /// Whether those kernels use narrower vectors than the CPU has.
  bool narrowerThanCpu = false;

  static const Blas &get() {
    static Blas blas = load();
    return blas;
  }

private:
  static Blas load() {
    Blas b;
    if (const char *off = std::getenv("TILEFUSE_BLAS"); off && std::string(off) == "none")
      return b;
#if defined(__x86_64__)
    if (!std::getenv("OPENBLAS_CORETYPE")) {
      if (__builtin_cpu_supports("avx512f"))
        setenv("OPENBLAS_CORETYPE", "SkylakeX", 0);
      else if (__builtin_cpu_supports("avx2"))
        setenv("OPENBLAS_CORETYPE", "Haswell", 0);
    }
#endif
    struct Candidate { const char *file, *threads; };
    for (Candidate c : {Candidate{"libopenblas.so.0", "openblas_set_num_threads"},
                        Candidate{"libblis.so.4", "bli_thread_set_num_threads"}}) {
      void *h = dlopen(c.file, RTLD_NOW | RTLD_LOCAL);
      if (!h)
        continue;
      auto s = reinterpret_cast<Sgemm>(dlsym(h, "cblas_sgemm"));
      auto d = reinterpret_cast<Dgemm>(dlsym(h, "cblas_dgemm"));
      if (!s || !d)
        continue;
      if (auto setThreads = reinterpret_cast<void (*)(int)>(dlsym(h, c.threads)))
        setThreads(1);
      b.sgemm = s;
      b.dgemm = d;
      b.name = c.file;
      if (auto corename = reinterpret_cast<char *(*)()>(dlsym(h, "openblas_get_corename")))
        if (const char *core = corename())
          b.core = core;
      b.narrowerThanCpu = !b.core.empty() && cpuHasAvx512() && !isAvx512Core(b.core);
      return b;
    }
    return b;
  }
};

constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

/// One GEMM split into slabs of rows of C (or, for batched GEMMs, into
/// batch entries) across the thread pool.
template <typename T, typename Fn>
void gemmParallel(const Step &s, const T *a, const T *b, T *c, Fn blas) {
  ThreadPool &pool = ThreadPool::global();
  bool dnnlFirst = cpu::f32GemmPrefersDnnl(s.transposeA, s.transposeB, s.m, s.n, s.k);
  bool blasNarrower = cpu::blasNarrowerThanCpu();
  int64_t slabsPerMatrix = 1;
  if (s.batch < int64_t(pool.size()))
    slabsPerMatrix = std::max<int64_t>(1, std::min<int64_t>(int64_t(pool.size()), s.m / 32));
  int64_t work = s.batch * slabsPerMatrix;
  // Below ~1 MFLOP a second thread costs more than it saves.
  int64_t minItems = std::max<int64_t>(1, 1000000 / std::max<int64_t>(1, 2 * s.m * s.n * s.k / slabsPerMatrix));
  pool.parallelFor(work, minItems, [&](int64_t first, int64_t end) {
    for (int64_t w = first; w < end; ++w) {
      int64_t i = w / slabsPerMatrix, slab = w % slabsPerMatrix;
      int64_t r0 = s.m * slab / slabsPerMatrix, r1 = s.m * (slab + 1) / slabsPerMatrix;
      if (r1 <= r0)
        continue;
      const T *pa = a + i * s.m * s.k + (s.transposeA ? r0 : r0 * s.k);
      int64_t lda = s.transposeA ? s.m : s.k;
      const T *pb = b + i * s.k * s.n;
      T *pc = c + i * s.m * s.n + r0 * s.n;
      // 2-D f32 GEMMs: oneDNN's slab kernels where it is loaded and
      // faster for the shape (batched ones stay with the BLAS, oneDNN being
      // slower on transposed batches, unless the BLAS's kernels are
      // narrower than the CPU's).
      if constexpr (std::is_same_v<T, float>)
        if ((s.batch == 1 || blasNarrower) && dnnlFirst &&
            cpu::dnnlSgemmSlab(s.transposeA, s.transposeB, r1 - r0, s.n, s.k, pa, lda, pb,
                               s.transposeB ? s.k : s.n, pc, s.n))
          continue;
      if (blas)
        blas(kRowMajor, s.transposeA ? kTrans : kNoTrans, s.transposeB ? kTrans : kNoTrans,
             int(r1 - r0), int(s.n), int(s.k), T(1), pa, int(lda), pb,
             int(s.transposeB ? s.k : s.n), T(0), pc, int(s.n));
      else
        gemmLoop(s, r1 - r0, pa, lda, pb, pc);
    }
  });
}

void gemmF32(const Step &s, const float *a, const float *b, float *c) {
  gemmParallel(s, a, b, c, Blas::get().sgemm);
}

void gemmF64(const Step &s, const double *a, const double *b, double *c) {
  gemmParallel(s, a, b, c, Blas::get().dgemm);
}

/// f16/bf16 -> f32 over the thread pool (a GEMM's operands are large).
void widen(DType t, const void *p, int64_t n, float *out) {
  auto *h = static_cast<const uint16_t *>(p);
  ThreadPool::global().parallelFor(n, 1 << 16, [&](int64_t first, int64_t end) {
    if (t == DType::F16)
      for (int64_t i = first; i < end; ++i)
        out[i] = halfToFloat(h[i]);
    else
      for (int64_t i = first; i < end; ++i)
        out[i] = bf16ToFloat(h[i]);
  });
}

std::vector<float> widen(DType t, const void *p, int64_t n) {
  std::vector<float> out(size_t(std::max<int64_t>(0, n)));
  widen(t, p, n, out.data());
  return out;
}

/// Scratch of at least `n` floats, kept per thread between calls (a step
/// runs the same GEMMs every call: no allocation, no page faults), up to
/// kKeptScratch floats: larger ones are given back after the call.
constexpr int64_t kKeptScratch = int64_t(1) << 24; // 64 MiB
float *scratch(std::vector<float> &buffer, int64_t n) {
  if (int64_t(buffer.size()) < n)
    buffer.resize(size_t(n));
  return buffer.data();
}
void trim(std::vector<float> &buffer) {
  if (int64_t(buffer.size()) > kKeptScratch)
    std::vector<float>().swap(buffer);
}

} // namespace

std::string cpu::blasName() {
  const Blas &b = Blas::get();
  return b.core.empty() ? b.name : b.name + " (" + b.core + " kernels)";
}

bool cpu::blasNarrowerThanCpu() { return Blas::get().narrowerThanCpu; }

void cpu::sgemmOnThisThread(bool transposeA, bool transposeB, int64_t m, int64_t n, int64_t k,
                             float alpha, const float *a, int64_t lda, const float *b,
                             int64_t ldb, float beta, float *c, int64_t ldc) {
  if (m <= 0 || n <= 0)
    return;
  // The attention's block products: oneDNN where the BLAS's kernels are
  // narrower than the CPU's (see f32GemmRule).
  if (blasNarrowerThanCpu() &&
      dnnlSgemm(transposeA, transposeB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
    return;
  if (auto sgemm = Blas::get().sgemm) {
    sgemm(kRowMajor, transposeA ? kTrans : kNoTrans, transposeB ? kTrans : kNoTrans, int(m),
          int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
    return;
  }
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0;
      for (int64_t p = 0; p < k; ++p)
        acc += (transposeA ? a[p * lda + r] : a[r * lda + p]) *
               (transposeB ? b[j * ldb + p] : b[p * ldb + j]);
      c[r * ldc + j] = alpha * acc + (beta == 0.0f ? 0.0f : beta * c[r * ldc + j]);
    }
}

bool cpu::f32GemmPrefersDnnl(bool transposeA, bool transposeB, int64_t m, int64_t n,
                             int64_t k) {
  // TILEFUSE_DNNL_F32=all: oneDNN whatever the shape, =0: the BLAS. Read
  // at every GEMM step (a lookup beside a GEMM's microseconds), so that one
  // process can time the libraries in turn (bench/f32_gemm_library.py).
  const char *library = std::getenv("TILEFUSE_DNNL_F32");
  if (library && std::string(library) == "0")
    return false;
  if (library && std::string(library) == "all")
    return true;
  return f32GemmRule(blasNarrowerThanCpu(), transposeA, transposeB, m, n, k);
}

bool cpu::f32GemmRule(bool blasNarrower, bool transposeA, bool /*transposeB*/, int64_t m,
                      int64_t n, int64_t k) {
  // A BLAS running narrower kernels than the CPU's (AVX2 on full-width
  // AVX-512) is oneDNN's equal nowhere: oneDNN takes 0.46-0.85x its time
  // (0.53x the median) on gpt2_mini's and GPT-2 small's GEMMs, every
  // transpose, on a 2-core Zen 5 with OPENBLAS_CORETYPE=Haswell; against
  // OpenBLAS's AVX-512 kernels there, 0.92-1.03x.
  if (blasNarrower || !transposeA)
    return true;
  // Untransposed A: oneDNN's dnnl_sgemm, 0.72-1.14x OpenBLAS's time on
  // gpt2_mini's and GPT-2 small's GEMMs, 0.86x the median (0.87x on the LM
  // head's 1024x50257 @ 50257x768). A transposed (weight gradients): oneDNN up to ~0.5 GFLOP
  // (0.74-0.89x OpenBLAS's time at gpt2_mini's sizes), OpenBLAS above
  // (oneDNN 0.94-1.27x its time at GPT-2 small's, no better on the whole).
  // Measured on a 2-core Intel Xeon (AVX-512) in one process, the libraries taking turns:
  // bench/f32_gemm_library.py.
  constexpr double kSmallTransposedAFlops = 5e8;
  return 2.0 * double(m) * double(n) * double(k) <= kSmallTransposedAFlops;
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
    if (dnnlGemm(s, dtype, a, b, c))
      return;
    // No f16/bf16 GEMM in the BLAS: operands widened to f32, sgemm (f32
    // accumulation), the product rounded once.
    thread_local std::vector<float> bufA, bufB, bufC;
    int64_t na = s.batch * s.m * s.k, nb = s.batch * s.k * s.n, nc = s.batch * s.m * s.n;
    float *wa = scratch(bufA, na), *wb = scratch(bufB, nb), *wc = scratch(bufC, nc);
    widen(dtype, a, na, wa);
    widen(dtype, b, nb, wb);
    gemmF32(s, wa, wb, wc);
    auto *out = static_cast<uint16_t *>(c);
    ThreadPool::global().parallelFor(nc, 1 << 16, [&](int64_t first, int64_t end) {
      if (dtype == DType::F16)
        for (int64_t i = first; i < end; ++i)
          out[i] = floatToHalf(wc[i]);
      else
        for (int64_t i = first; i < end; ++i)
          out[i] = floatToBF16(wc[i]);
    });
    trim(bufA), trim(bufB), trim(bufC);
    return;
  }
  default:
    throw CompileError(std::string("graph.matmul: no CPU GEMM for ") + dtypeName(dtype));
  }
}

void cpu::groupedGemm(const Step &s, DType dtype, DType offsetType, const void *a,
                      const void *b, const void *offsets, void *c) {
  if (dtype == DType::F16 || dtype == DType::BF16) {
    // Widened once to f32 (f32 accumulation, the product rounded once): a
    // 16-bit GEMM per group would build a oneDNN primitive for every group
    // size the data brings, and keep them all.
    int64_t na = s.m * s.k, nb = s.transposeA ? s.m * s.n : s.batch * s.k * s.n;
    int64_t nc = s.transposeA ? s.batch * s.k * s.n : s.m * s.n;
    std::vector<float> wa = widen(dtype, a, na), wb = widen(dtype, b, nb);
    std::vector<float> wc(size_t(std::max<int64_t>(0, nc)));
    groupedGemm(s, DType::F32, offsetType, wa.data(), wb.data(), offsets, wc.data());
    auto *out = static_cast<uint16_t *>(c);
    for (int64_t i = 0; i < nc; ++i)
      out[i] = dtype == DType::F16 ? floatToHalf(wc[size_t(i)]) : floatToBF16(wc[size_t(i)]);
    return;
  }
  size_t bytes = dtypeSize(dtype);
  auto at = [&](const void *p, int64_t elements) {
    return static_cast<const char *>(p) + size_t(elements) * bytes;
  };
  auto *out = static_cast<char *>(c);
  int64_t covered = 0;
  auto ranges = groupRowRanges(offsets, offsetType, s.batch, s.m);
  for (int64_t g = 0; g < int64_t(ranges.size()); ++g) {
    auto [begin, end] = ranges[size_t(g)];
    int64_t rows = end - begin;
    Step one = s;
    one.batch = 1;
    if (s.transposeA) { // c[g] [k, n] = a[rows]^T [k, rows] b[rows] [rows, n]
      one.m = s.k, one.k = rows;
      if (rows == 0)
        std::memset(out + size_t(g * s.k * s.n) * bytes, 0, size_t(s.k * s.n) * bytes);
      else
        gemm(one, dtype, at(a, begin * s.k), at(b, begin * s.n),
             out + size_t(g * s.k * s.n) * bytes);
    } else if (rows > 0) { // c[rows] = a[rows] [rows, k] b[g] [k, n]
      one.m = rows;
      gemm(one, dtype, at(a, begin * s.k), at(b, g * s.k * s.n), out + size_t(begin * s.n) * bytes);
    }
    covered = end;
  }
  if (!s.transposeA) // rows past the last group belong to none
    std::memset(out + size_t(covered * s.n) * bytes, 0, size_t((s.m - covered) * s.n) * bytes);
}

void cpu::sort(const Step &s, DType dtype, const void *x, void *values, int64_t *indices) {
  size_t bytes = dtypeSize(dtype);
  ThreadPool::global().parallelFor(s.m, 1, [&](int64_t first, int64_t end) {
    std::vector<char> copy(size_t(s.n) * bytes);
    for (int64_t r = first; r < end; ++r) {
      // A copy of the row: the values may be planned over the input.
      const char *source = static_cast<const char *>(x) + size_t(r * s.n) * bytes;
      std::copy(source, source + copy.size(), copy.begin());
      const char *row = copy.data();
      int64_t *order = indices + r * s.n;
      auto element = [&](int64_t i) -> double {
        const char *p = row + size_t(i) * bytes;
        switch (dtype) {
        case DType::F32: return *reinterpret_cast<const float *>(p);
        case DType::F64: return *reinterpret_cast<const double *>(p);
        case DType::F16: return halfToFloat(*reinterpret_cast<const uint16_t *>(p));
        case DType::BF16: return bf16ToFloat(*reinterpret_cast<const uint16_t *>(p));
        case DType::I32: return *reinterpret_cast<const int32_t *>(p);
        default: return 0.0;
        }
      };
      if (dtype == DType::I64) { // beyond 2^53 a double would merge neighbours
        auto *v = reinterpret_cast<const int64_t *>(row);
        std::iota(order, order + s.n, int64_t(0));
        std::stable_sort(order, order + s.n, [&](int64_t i, int64_t j) {
          return s.descending ? v[j] < v[i] : v[i] < v[j];
        });
      } else {
        std::iota(order, order + s.n, int64_t(0));
        std::stable_sort(order, order + s.n, [&](int64_t i, int64_t j) {
          return sortsBefore(element(i), element(j), s.descending);
        });
      }
      char *out = static_cast<char *>(values) + size_t(r * s.n) * bytes;
      for (int64_t i = 0; i < s.n; ++i)
        std::memcpy(out + size_t(i) * bytes, row + size_t(order[i]) * bytes, bytes);
    }
  });
}

void cpu::conv(const Step &s, DType dtype, const void *a, const void *b, void *out,
               ConvChain *chain, const void *bias) {
  ConvDirection direction = convDirection(s);
  ConvEpilogue epilogue;
  for (const std::string &op : s.epilogue)
    if (op == "bias")
      epilogue.bias = static_cast<const float *>(bias);
    else
      epilogue.activation = *convActivationNamed(op);
  if (!epilogue.empty() && dtype != DType::F32)
    throw CompileError(s.source + ": a convolution epilogue runs in f32 only, got " +
                       dtypeName(dtype));
  if (dnnlConv(direction, s.conv, dtype, a, b, out, chain, epilogue))
    return;
  const ConvParams &p = s.conv;
  if (!epilogue.empty()) {
    // This oneDNN applies no epilogue (or runs no convolution here): the
    // convolution, then the epilogue, one image per task.
    Step plain = s;
    plain.epilogue.clear();
    conv(plain, dtype, a, b, out, chain);
    ThreadPool::global().parallelFor(p.batch, 1, [&](int64_t begin, int64_t end) {
      convEpilogue(p, epilogue.bias, epilogue.activation, static_cast<float *>(out), begin,
                   end - begin);
    });
    return;
  }
  if (dtype == DType::F32) { // the definition's loops, on one thread
    convReference<float>(direction, p, static_cast<const float *>(a),
                         static_cast<const float *>(b), static_cast<float *>(out));
    return;
  }
  if (dtype != DType::F16 && dtype != DType::BF16)
    throw CompileError(s.source + ": no CPU convolution for " + dtypeName(dtype));
  int64_t in = p.inputElements(), w = p.weightElements(), o = p.outputElements();
  int64_t na = direction == ConvDirection::GradInput ? o : in;
  int64_t nb = direction == ConvDirection::GradWeight ? o : w;
  int64_t nout = direction == ConvDirection::Forward ? o : direction == ConvDirection::GradInput ? in : w;
  std::vector<float> wa = widen(dtype, a, na), wb = widen(dtype, b, nb);
  std::vector<float> wout(static_cast<size_t>(nout));
  conv(s, DType::F32, wa.data(), wb.data(), wout.data());
  auto *dst = static_cast<uint16_t *>(out);
  for (int64_t i = 0; i < nout; ++i)
    dst[i] = dtype == DType::F16 ? floatToHalf(wout[size_t(i)]) : floatToBF16(wout[size_t(i)]);
}

void cpu::gather(const BufferInfo &table, const BufferInfo &indices,
                 const void *tablePtr, const void *indexPtr, void *out,
                 const std::string &what) {
  int64_t rows = table.shape.empty() ? 1 : table.shape[0];
  size_t rowBytes = rows ? table.byteSize() / size_t(rows) : 0;
  int64_t n = numElements(indices.shape);
  // Validate first: a bad index must not leave half a result behind.
  for (int64_t q = 0; q < n; ++q)
    checkedRow(indexAt(indices, indexPtr, q), rows, what.c_str());
  ThreadPool::global().parallelFor(n, 64, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q)
      copyBytes(static_cast<char *>(out) + q * rowBytes,
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
    std::vector<float> acc = basePtr ? widen(base.dtype, basePtr, numElements(base.shape))
                                     : std::vector<float>(size_t(numElements(base.shape)), 0.0f);
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
  if (!basePtr) {
    // Cleared in slices by the pool: one thread writes ~10 GB/s, a fraction
    // of the machine's bandwidth (a GPT-2 token table's gradient is 154 MB).
    int64_t bytes = int64_t(base.byteSize());
    ThreadPool::global().parallelFor(bytes, 1 << 20, [&](int64_t begin, int64_t end) {
      std::memset(static_cast<char *>(out) + begin, 0, size_t(end - begin));
    });
  } else if (out != basePtr) {
    copyBytes(out, basePtr, base.byteSize());
  }
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
