//===- CpuDnnl.cpp - bf16 GEMMs through oneDNN, loaded at run time --------===//
//
// OpenBLAS has no bf16 GEMM; oneDNN's matmul uses AVX512-BF16 where the CPU
// has it (383 GFLOP/s on a 2-core Zen 4 for 2048^3, against 146 for the
// widen-to-f32 path). libdnnl is loaded with dlopen like the BLAS: no link
// dependency, and the widening path where it is missing, where its matmul
// would be a reference implementation, or with TILEFUSE_DNNL=none.
//
//===----------------------------------------------------------------------===//
#include "runtime/CpuDnnl.h"

#ifdef TILEFUSE_HAVE_DNNL_HEADERS
#include <oneapi/dnnl/dnnl.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include <dlfcn.h>

using namespace tilefuse;

namespace {

/// The oneDNN entry points tilefuse calls.
struct Dnnl {
  decltype(&dnnl_engine_create) engineCreate = nullptr;
  decltype(&dnnl_stream_create) streamCreate = nullptr;
  decltype(&dnnl_stream_wait) streamWait = nullptr;
  decltype(&dnnl_memory_desc_init_by_strides) memoryDescInit = nullptr;
  decltype(&dnnl_matmul_desc_init) matmulDescInit = nullptr;
  decltype(&dnnl_primitive_desc_create) primitiveDescCreate = nullptr;
  decltype(&dnnl_primitive_desc_query) primitiveDescQuery = nullptr;
  decltype(&dnnl_primitive_desc_destroy) primitiveDescDestroy = nullptr;
  decltype(&dnnl_primitive_create) primitiveCreate = nullptr;
  decltype(&dnnl_primitive_execute) primitiveExecute = nullptr;
  decltype(&dnnl_memory_create) memoryCreate = nullptr;
  decltype(&dnnl_memory_set_data_handle) memorySetDataHandle = nullptr;

  dnnl_engine_t engine = nullptr;
  dnnl_stream_t stream = nullptr;
  std::string status = "not loaded";

  /// A matmul for one GEMM shape: the primitive and its three memories,
  /// whose data handles each call points at the step's buffers.
  struct Matmul {
    dnnl_primitive_t primitive = nullptr;
    dnnl_memory_t a = nullptr, b = nullptr, c = nullptr;
    bool usable = false;
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool>;
  std::map<Key, Matmul> matmuls;
  std::mutex mutex;

  static Dnnl &get() {
    static Dnnl d;
    return d;
  }

  Dnnl() {
    const char *off = std::getenv("TILEFUSE_DNNL");
    if (off && std::strcmp(off, "none") == 0) {
      status = "off (TILEFUSE_DNNL=none)";
      return;
    }
    void *lib = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      status = "libdnnl.so.2 not found";
      return;
    }
    bool ok = true;
    auto sym = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      ok &= fn != nullptr;
    };
    sym(engineCreate, "dnnl_engine_create");
    sym(streamCreate, "dnnl_stream_create");
    sym(streamWait, "dnnl_stream_wait");
    sym(memoryDescInit, "dnnl_memory_desc_init_by_strides");
    sym(matmulDescInit, "dnnl_matmul_desc_init");
    sym(primitiveDescCreate, "dnnl_primitive_desc_create");
    sym(primitiveDescQuery, "dnnl_primitive_desc_query");
    sym(primitiveDescDestroy, "dnnl_primitive_desc_destroy");
    sym(primitiveCreate, "dnnl_primitive_create");
    sym(primitiveExecute, "dnnl_primitive_execute");
    sym(memoryCreate, "dnnl_memory_create");
    sym(memorySetDataHandle, "dnnl_memory_set_data_handle");
    if (!ok || engineCreate(&engine, dnnl_cpu, 0) != dnnl_success ||
        streamCreate(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
      status = "libdnnl.so.2 lacks the matmul API this build expects";
      engine = nullptr;
      return;
    }
    status = "loaded";
  }

  /// The matmul of `s` (bf16 operands and result, f32 accumulation), made
  /// on first use; unusable where oneDNN has only its reference kernel.
  Matmul &matmulFor(const Step &s) {
    Key key{s.batch, s.m, s.n, s.k, s.transposeA, s.transposeB};
    auto it = matmuls.find(key);
    if (it != matmuls.end())
      return it->second;
    Matmul &mm = matmuls[key];
    // Row-major [batch, rows, cols]; a transposed operand is stored
    // [batch, cols, rows] and read through swapped strides.
    auto desc = [&](dnnl_memory_desc_t &md, int64_t rows, int64_t cols, bool transposed) {
      dnnl_dims_t dims = {s.batch, rows, cols};
      dnnl_dims_t strides = {rows * cols, transposed ? 1 : cols, transposed ? rows : 1};
      return memoryDescInit(&md, 3, dims, dnnl_bf16, strides) == dnnl_success;
    };
    dnnl_memory_desc_t a, b, c;
    dnnl_matmul_desc_t op;
    dnnl_primitive_desc_t pd = nullptr;
    if (!desc(a, s.m, s.k, s.transposeA) || !desc(b, s.k, s.n, s.transposeB) ||
        !desc(c, s.m, s.n, false) || matmulDescInit(&op, &a, &b, nullptr, &c) != dnnl_success ||
        primitiveDescCreate(&pd, &op, nullptr, engine, nullptr) != dnnl_success)
      return mm;
    const char *impl = nullptr;
    primitiveDescQuery(pd, dnnl_query_impl_info_str, 0, &impl);
    bool reference = !impl || std::strncmp(impl, "ref", 3) == 0;
    mm.usable = !reference && primitiveCreate(&mm.primitive, pd) == dnnl_success &&
                memoryCreate(&mm.a, &a, engine, DNNL_MEMORY_NONE) == dnnl_success &&
                memoryCreate(&mm.b, &b, engine, DNNL_MEMORY_NONE) == dnnl_success &&
                memoryCreate(&mm.c, &c, engine, DNNL_MEMORY_NONE) == dnnl_success;
    primitiveDescDestroy(pd);
    return mm;
  }
};

} // namespace

bool tilefuse::cpu::dnnlGemm(const Step &s, DType dtype, const void *a, const void *b,
                             void *c) {
  Dnnl &d = Dnnl::get();
  if (!d.engine || dtype != DType::BF16)
    return false;
  std::lock_guard<std::mutex> lock(d.mutex);
  Dnnl::Matmul &mm = d.matmulFor(s);
  if (!mm.usable)
    return false;
  d.memorySetDataHandle(mm.a, const_cast<void *>(a));
  d.memorySetDataHandle(mm.b, const_cast<void *>(b));
  d.memorySetDataHandle(mm.c, c);
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, mm.a}, {DNNL_ARG_WEIGHTS, mm.b}, {DNNL_ARG_DST, mm.c}};
  if (d.primitiveExecute(mm.primitive, d.stream, 3, args) != dnnl_success ||
      d.streamWait(d.stream) != dnnl_success)
    throw CompileError("graph.matmul: oneDNN failed to run a bf16 GEMM of " +
                       std::to_string(s.m) + "x" + std::to_string(s.k) + " by " +
                       std::to_string(s.k) + "x" + std::to_string(s.n) +
                       "; TILEFUSE_DNNL=none uses the f32 path");
  return true;
}

std::string tilefuse::cpu::dnnlStatus() { return Dnnl::get().status; }

#else

bool tilefuse::cpu::dnnlGemm(const Step &, DType, const void *, const void *, void *) {
  return false;
}

std::string tilefuse::cpu::dnnlStatus() {
  return "not built (oneDNN's headers were not found when tilefuse was built)";
}

#endif
