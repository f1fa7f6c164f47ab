//===- CpuDnnl.cpp - GEMMs through oneDNN, loaded at run time -------------===//
//
// OpenBLAS has no bf16 GEMM; oneDNN's matmul uses AVX512-BF16 where the CPU
// has it (383 GFLOP/s on a 2-core Zen 4 for 2048^3, against 146 for the
// widen-to-f32 path). Its f32 GEMM (dnnl_sgemm) also beats Debian's
// OpenBLAS on most of the row slabs tilefuse's pool gives each thread (see
// dnnlSgemmSlab and cpu::f32GemmPrefersDnnl). libdnnl
// is loaded with dlopen like the BLAS: no link dependency, and the BLAS or
// widening path where it is missing, where its matmul would be a reference
// implementation, or with TILEFUSE_DNNL=none.
//
//===----------------------------------------------------------------------===//
#include "runtime/CpuDnnl.h"
#include "runtime/ThreadPool.h"

#ifdef TILEFUSE_HAVE_DNNL_HEADERS
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <tuple>
#include <vector>

#include <dlfcn.h>

using namespace tilefuse;

namespace {

/// dnnl_fpmath_mode_strict (oneDNN 2.7+; absent from older headers).
constexpr int kFpmathStrict = 0;

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
  decltype(&dnnl_primitive_attr_create) attrCreate = nullptr;
  decltype(&dnnl_primitive_attr_destroy) attrDestroy = nullptr;
  decltype(&dnnl_primitive_attr_set_scratchpad_mode) attrSetScratchpadMode = nullptr;
  decltype(&dnnl_primitive_desc_query_md) primitiveDescQueryMd = nullptr;
  decltype(&dnnl_memory_desc_get_size) memoryDescGetSize = nullptr;
  // Convolutions (optional: GEMMs work without them).
  decltype(&dnnl_memory_desc_init_by_tag) memoryDescInitByTag = nullptr;
  decltype(&dnnl_memory_desc_equal) memoryDescEqual = nullptr;
  decltype(&dnnl_reorder_primitive_desc_create) reorderDescCreate = nullptr;
  decltype(&dnnl_dilated_convolution_forward_desc_init) convForwardInit = nullptr;
  decltype(&dnnl_dilated_convolution_backward_data_desc_init) convBackwardDataInit = nullptr;
  decltype(&dnnl_dilated_convolution_backward_weights_desc_init) convBackwardWeightsInit =
      nullptr;
  // Post-ops (a forward convolution's activation; optional).
  decltype(&dnnl_post_ops_create) postOpsCreate = nullptr;
  decltype(&dnnl_post_ops_destroy) postOpsDestroy = nullptr;
  decltype(&dnnl_post_ops_append_eltwise) postOpsAppendEltwise = nullptr;
  decltype(&dnnl_post_ops_append_sum) postOpsAppendSum = nullptr;
  decltype(&dnnl_primitive_attr_set_post_ops) attrSetPostOps = nullptr;
  /// oneDNN's BLAS-like f32 GEMM (its own blocked kernels, no primitive).
  decltype(&dnnl_sgemm) sgemm = nullptr;
  // OpenMP (oneDNN's threading): an f32 slab runs on one thread of
  // tilefuse's pool with a team of one.
  int (*ompGetMaxThreads)() = nullptr;
  void (*ompSetNumThreads)(int) = nullptr;

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

  /// An f32 matmul for one slab shape (rows, n, k, transposes, leading
  /// dimensions), executed by several pool threads at once: each brings
  /// its own memories and scratchpad (user scratchpad mode; oneDNN's own
  /// is shared between threads).
  struct SlabMatmul {
    dnnl_primitive_t primitive = nullptr;
    dnnl_memory_desc_t a, b, c, scratch;
    size_t scratchBytes = 0;
    bool usable = false;
  };
  /// rows, n, k, transposes, leading dimensions, then whether A and B are
  /// bf16 (else f32) and whether C accumulates (a sum post-op).
  using SlabKey = std::tuple<int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t,
                             bool, bool>;
  std::map<SlabKey, SlabMatmul> slabs;
  bool f32 = false; ///< the f32 slab path is available
  bool team = false; ///< a slab can run with an OpenMP team of one
  std::atomic<int64_t> f32Slabs{0}; ///< f32 slabs oneDNN ran
  /// Optional (oneDNN 2.7 and later): f32 primitives keep f32 arithmetic
  /// whatever ONEDNN_DEFAULT_FPMATH_MODE says.
  dnnl_status_t (*attrSetFpmathMode)(dnnl_primitive_attr_t, int) = nullptr;

  static Dnnl &get() {
    // Never destroyed: pool threads may still run slabs while the process
    // exits.
    static Dnnl *d = new Dnnl;
    return *d;
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
    sym(attrCreate, "dnnl_primitive_attr_create");
    sym(attrDestroy, "dnnl_primitive_attr_destroy");
    sym(attrSetScratchpadMode, "dnnl_primitive_attr_set_scratchpad_mode");
    sym(primitiveDescQueryMd, "dnnl_primitive_desc_query_md");
    sym(memoryDescGetSize, "dnnl_memory_desc_get_size");
    memoryDescInitByTag = reinterpret_cast<decltype(memoryDescInitByTag)>(
        dlsym(lib, "dnnl_memory_desc_init_by_tag"));
    memoryDescEqual =
        reinterpret_cast<decltype(memoryDescEqual)>(dlsym(lib, "dnnl_memory_desc_equal"));
    reorderDescCreate = reinterpret_cast<decltype(reorderDescCreate)>(
        dlsym(lib, "dnnl_reorder_primitive_desc_create"));
    convForwardInit = reinterpret_cast<decltype(convForwardInit)>(
        dlsym(lib, "dnnl_dilated_convolution_forward_desc_init"));
    convBackwardDataInit = reinterpret_cast<decltype(convBackwardDataInit)>(
        dlsym(lib, "dnnl_dilated_convolution_backward_data_desc_init"));
    convBackwardWeightsInit = reinterpret_cast<decltype(convBackwardWeightsInit)>(
        dlsym(lib, "dnnl_dilated_convolution_backward_weights_desc_init"));
    postOpsCreate =
        reinterpret_cast<decltype(postOpsCreate)>(dlsym(lib, "dnnl_post_ops_create"));
    postOpsDestroy =
        reinterpret_cast<decltype(postOpsDestroy)>(dlsym(lib, "dnnl_post_ops_destroy"));
    postOpsAppendEltwise = reinterpret_cast<decltype(postOpsAppendEltwise)>(
        dlsym(lib, "dnnl_post_ops_append_eltwise"));
    postOpsAppendSum =
        reinterpret_cast<decltype(postOpsAppendSum)>(dlsym(lib, "dnnl_post_ops_append_sum"));
    attrSetPostOps = reinterpret_cast<decltype(attrSetPostOps)>(
        dlsym(lib, "dnnl_primitive_attr_set_post_ops"));
    attrSetFpmathMode = reinterpret_cast<dnnl_status_t (*)(dnnl_primitive_attr_t, int)>(
        dlsym(lib, "dnnl_primitive_attr_set_fpmath_mode"));
    sgemm = reinterpret_cast<decltype(sgemm)>(dlsym(lib, "dnnl_sgemm"));
    ompGetMaxThreads = reinterpret_cast<int (*)()>(dlsym(lib, "omp_get_max_threads"));
    ompSetNumThreads = reinterpret_cast<void (*)(int)>(dlsym(lib, "omp_set_num_threads"));
    if (!ok || engineCreate(&engine, dnnl_cpu, 0) != dnnl_success ||
        streamCreate(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
      status = "libdnnl.so.2 lacks the matmul API this build expects";
      engine = nullptr;
      return;
    }
    status = "loaded";
    // Without a way to give a slab a team of one thread, oneDNN's OpenMP
    // threads would compete with the pool's: f32 stays with the BLAS.
    const char *f32Off = std::getenv("TILEFUSE_DNNL_F32");
    team = ompGetMaxThreads && ompSetNumThreads;
    f32 = team && !(f32Off && std::strcmp(f32Off, "0") == 0);
  }

  /// The f32 matmul of one slab, made on first use (under `mutex`, on a
  /// thread whose OpenMP team is one: oneDNN sizes its blocking for it).
  SlabMatmul &slabFor(const SlabKey &key) {
    auto it = slabs.find(key);
    if (it != slabs.end())
      return it->second;
    SlabMatmul &mm = slabs[key];
    auto [rows, n, k, ta, tb, lda, ldb, ldc, bf16, accumulate] = key;
    auto desc = [&](dnnl_memory_desc_t &md, int64_t r, int64_t c, int64_t ld, bool transposed,
                    dnnl_data_type_t type) {
      dnnl_dims_t dims = {r, c};
      dnnl_dims_t strides = {transposed ? 1 : ld, transposed ? ld : 1};
      return memoryDescInit(&md, 2, dims, type, strides) == dnnl_success;
    };
    dnnl_data_type_t in = bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_matmul_desc_t op;
    dnnl_primitive_attr_t attr = nullptr;
    dnnl_post_ops_t sum = nullptr;
    dnnl_primitive_desc_t pd = nullptr;
    bool ok = desc(mm.a, rows, k, lda, ta, in) && desc(mm.b, k, n, ldb, tb, in) &&
              desc(mm.c, rows, n, ldc, false, dnnl_f32) &&
              matmulDescInit(&op, &mm.a, &mm.b, nullptr, &mm.c) == dnnl_success &&
              attrCreate(&attr) == dnnl_success &&
              attrSetScratchpadMode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
              (!attrSetFpmathMode || bf16 ||
               attrSetFpmathMode(attr, kFpmathStrict) == dnnl_success);
    // C += A B: a sum post-op adds what C held.
    if (ok && accumulate)
      ok = postOpsCreate && postOpsAppendSum && attrSetPostOps &&
           postOpsCreate(&sum) == dnnl_success && postOpsAppendSum(sum, 1.f) == dnnl_success &&
           attrSetPostOps(attr, sum) == dnnl_success;
    ok = ok && primitiveDescCreate(&pd, &op, attr, engine, nullptr) == dnnl_success;
    if (sum)
      postOpsDestroy(sum);
    if (attr)
      attrDestroy(attr);
    if (!ok)
      return mm;
    const char *impl = nullptr;
    primitiveDescQuery(pd, dnnl_query_impl_info_str, 0, &impl);
    bool reference = !impl || std::strncmp(impl, "ref", 3) == 0;
    if (const dnnl_memory_desc_t *md = primitiveDescQueryMd(pd, dnnl_query_scratchpad_md, 0)) {
      mm.scratch = *md;
      mm.scratchBytes = memoryDescGetSize(md);
    }
    mm.usable = !reference && primitiveCreate(&mm.primitive, pd) == dnnl_success;
    primitiveDescDestroy(pd);
    return mm;
  }

  /// One operand of a convolution: the step's buffer (plain row-major
  /// layout) and, where the primitive wants its own layout (oneDNN's
  /// blocked ones: nChw16c, Goihw16g, ...), a buffer in that layout and the
  /// reorder between the two.
  struct ConvOperand {
    dnnl_memory_t user = nullptr, inner = nullptr;
    dnnl_primitive_t reorder = nullptr;
    int arg = 0;
    /// Bytes of the blocked copy (0 when the primitive takes the plain
    /// layout); its memory is in convScratch while the convolution runs.
    size_t innerBytes = 0;
    dnnl_memory_desc_t innerDesc{};
  };
  /// A convolution primitive for one shape and direction: operands a and b
  /// in, out out.
  struct Conv {
    dnnl_primitive_t primitive = nullptr;
    ConvOperand a, b, out;
    /// A forward convolution's bias ([O] f32, read in place), or null.
    dnnl_memory_t bias = nullptr;
    bool usable = false;
  };
  std::map<std::vector<int64_t>, Conv> convs;
  /// The blocked copies of the running convolution's operands. One buffer
  /// for all (convolutions run one at a time, under `mutex`), grown to the
  /// largest: a copy per primitive, kept for the process's life, took
  /// ~240 MiB beside the U-Net step's 480 MiB arena.
  void *convScratch = nullptr;
  size_t convScratchBytes = 0;
  /// Numbers every oneDNN convolution call (ConvChain).
  uint64_t convCalls = 0;
  /// What sits at the start of convScratch after the last call: the
  /// blocked copy of a backward convolution's output gradient (its plain
  /// buffer and blocked layout), or nothing.
  const void *blockedGradient = nullptr;
  dnnl_memory_desc_t blockedGradientDesc{};
  std::atomic<int64_t> reordersReused{0};

  /// Points `conv`'s blocked operands into convScratch (grown if needed),
  /// `first` (if any) at its start: the operand a chained call finds there.
  bool bindConvScratch(Conv &conv, ConvOperand *first) {
    auto rounded = [](size_t n) { return (n + 63) / 64 * 64; };
    size_t need = rounded(conv.a.innerBytes) + rounded(conv.b.innerBytes) +
                  rounded(conv.out.innerBytes);
    if (need > convScratchBytes) {
      void *grown = std::aligned_alloc(64, need);
      if (!grown)
        return false;
      std::free(convScratch);
      convScratch = grown;
      convScratchBytes = need;
      blockedGradient = nullptr; // the copy is gone with the old buffer
    }
    char *at = static_cast<char *>(convScratch);
    auto place = [&](ConvOperand *o) {
      if (!o->inner)
        return true;
      bool ok = memorySetDataHandle(o->inner, at) == dnnl_success;
      at += rounded(o->innerBytes);
      return ok;
    };
    if (first && !place(first))
      return false;
    for (ConvOperand *o : {&conv.a, &conv.b, &conv.out})
      if (o != first && !place(o))
        return false;
    return true;
  }

  /// `operand`'s memories for the primitive's layout `chosen` of the step's
  /// plain layout `plain`; `in`: it is read (else written).
  bool bindOperand(ConvOperand &operand, int arg, const dnnl_memory_desc_t &plain,
                   const dnnl_memory_desc_t &chosen, bool in) {
    operand.arg = arg;
    if (memoryCreate(&operand.user, &plain, engine, DNNL_MEMORY_NONE) != dnnl_success)
      return false;
    if (memoryDescEqual(&plain, &chosen))
      return true;
    dnnl_primitive_desc_t pd = nullptr;
    operand.innerBytes = memoryDescGetSize(&chosen);
    operand.innerDesc = chosen;
    bool ok = memoryCreate(&operand.inner, &chosen, engine, DNNL_MEMORY_NONE) ==
                  dnnl_success &&
              reorderDescCreate(&pd, in ? &plain : &chosen, engine, in ? &chosen : &plain,
                                engine, nullptr) == dnnl_success &&
              primitiveCreate(&operand.reorder, pd) == dnnl_success;
    if (pd)
      primitiveDescDestroy(pd);
    return ok;
  }

  /// The convolution primitive descriptor for `direction`, with operand
  /// layouts `src`, `weights`, `dst` (format "any" lets oneDNN choose);
  /// null where oneDNN has none or only its reference kernel.
  dnnl_primitive_desc_t convDesc(ConvDirection direction, const ConvParams &p,
                                 const dnnl_memory_desc_t &src, const dnnl_memory_desc_t &weights,
                                 const dnnl_memory_desc_t &dst,
                                 const dnnl_memory_desc_t *bias = nullptr,
                                 dnnl_primitive_attr_t attr = nullptr) {
    dnnl_dims_t strides = {}, dilates = {}, padLow = {}, padHigh = {};
    for (int i = 0; i < p.spatial; ++i) {
      strides[i] = p.stride[size_t(i)], dilates[i] = p.dilation[size_t(i)] - 1;
      padLow[i] = p.padLow[size_t(i)], padHigh[i] = p.padHigh[size_t(i)];
    }
    // The forward's descriptor is the backward ones' hint.
    dnnl_convolution_desc_t forward, backward;
    dnnl_primitive_desc_t hint = nullptr, pd = nullptr;
    if (convForwardInit(&forward, dnnl_forward_training, dnnl_convolution_direct, &src, &weights,
                        bias, &dst, strides, dilates, padLow, padHigh) != dnnl_success ||
        primitiveDescCreate(&hint, &forward, attr, engine, nullptr) != dnnl_success)
      return nullptr;
    if (direction == ConvDirection::Forward) {
      pd = hint, hint = nullptr;
    } else if (direction == ConvDirection::GradInput) {
      if (convBackwardDataInit(&backward, dnnl_convolution_direct, &src, &weights, &dst, strides,
                               dilates, padLow, padHigh) == dnnl_success)
        primitiveDescCreate(&pd, &backward, nullptr, engine, hint);
    } else if (convBackwardWeightsInit(&backward, dnnl_convolution_direct, &src, &weights,
                                       nullptr, &dst, strides, dilates, padLow,
                                       padHigh) == dnnl_success) {
      primitiveDescCreate(&pd, &backward, nullptr, engine, hint);
    }
    if (hint)
      primitiveDescDestroy(hint);
    const char *impl = nullptr;
    if (pd && (primitiveDescQuery(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
               !impl || std::strncmp(impl, "ref", 3) == 0)) {
      primitiveDescDestroy(pd);
      pd = nullptr;
    }
    return pd;
  }

  /// Primitive attributes applying silu as an eltwise post-op (swish, whose
  /// alpha scales sigmoid's argument: x * sigmoid(1 x)); null where this
  /// oneDNN lacks post-ops.
  dnnl_primitive_attr_t siluAttr() {
    if (!postOpsCreate || !postOpsDestroy || !postOpsAppendEltwise || !attrSetPostOps)
      return nullptr;
    dnnl_primitive_attr_t attr = nullptr;
    dnnl_post_ops_t ops = nullptr;
    bool ok = attrCreate(&attr) == dnnl_success && postOpsCreate(&ops) == dnnl_success &&
              postOpsAppendEltwise(ops, 1.f, dnnl_eltwise_swish, 1.f, 0.f) == dnnl_success &&
              attrSetPostOps(attr, ops) == dnnl_success &&
              (!attrSetFpmathMode || attrSetFpmathMode(attr, kFpmathStrict) == dnnl_success);
    if (ops)
      postOpsDestroy(ops);
    if (!ok && attr) {
      attrDestroy(attr);
      attr = nullptr;
    }
    return attr;
  }

  /// The convolution for `p` in `direction`, made on first use: in the
  /// layouts oneDNN chooses (with reorders from and to the steps' plain
  /// ones: a depthwise convolution ran 10-20x faster blocked than on plain
  /// layouts), else on the plain layouts; unusable where oneDNN lacks the
  /// API or has only its reference kernel.
  Conv &convFor(ConvDirection direction, const ConvParams &p, dnnl_data_type_t type,
                const ConvEpilogue &epilogue) {
    bool withBias = epilogue.bias != nullptr;
    std::vector<int64_t> key = {int64_t(direction), int64_t(type), p.spatial, p.batch,
                                p.channels, p.outChannels, p.groups, withBias,
                                int64_t(epilogue.activation), p.channelsLast};
    for (const std::array<int64_t, 3> *a3 :
         {&p.input, &p.kernel, &p.output, &p.stride, &p.padLow, &p.padHigh, &p.dilation})
      key.insert(key.end(), a3->begin(), a3->begin() + p.spatial);
    auto it = convs.find(key);
    if (it != convs.end())
      return it->second;
    Conv &conv = convs[key];
    if (!convForwardInit || !convBackwardDataInit || !convBackwardWeightsInit ||
        !memoryDescInitByTag || !memoryDescEqual || !reorderDescCreate)
      return conv;
    int n = p.spatial;
    // Plain row-major layouts: [N, C, S...], [N, O, Q...], and the weight
    // [O, C/g, K...], which is [g, O/g, C/g, K...] when grouped.
    auto withSpatial = [&](std::vector<int64_t> lead, const std::array<int64_t, 3> &s) {
      lead.insert(lead.end(), s.begin(), s.begin() + n);
      return lead;
    };
    std::vector<int64_t> weightLead =
        p.groups == 1 ? std::vector<int64_t>{p.outChannels, p.channels}
                      : std::vector<int64_t>{p.groups, p.outChannels / p.groups,
                                             p.channels / p.groups};
    std::vector<int64_t> dims[3] = {withSpatial({p.batch, p.channels}, p.input),
                                    withSpatial(weightLead, p.kernel),
                                    withSpatial({p.batch, p.outChannels}, p.output)};
    dnnl_memory_desc_t plain[3], any[3];
    for (int i = 0; i < 3; ++i) {
      dnnl_dims_t d = {}, strides = {};
      // Row-major over the dimensions in storage order: [N, C, S...], or
      // [N, S..., C] for channels-last activations (the weight's is always
      // its own order).
      std::vector<size_t> order(dims[i].size());
      for (size_t k = 0; k < order.size(); ++k)
        order[k] = k;
      if (p.channelsLast && i != 1)
        std::rotate(order.begin() + 1, order.begin() + 2, order.end());
      int64_t stride = 1;
      for (size_t k = order.size(); k-- > 0;) {
        d[order[k]] = dims[i][order[k]];
        strides[order[k]] = stride;
        stride *= dims[i][order[k]];
      }
      if (memoryDescInit(&plain[i], int(dims[i].size()), d, type, strides) != dnnl_success ||
          memoryDescInitByTag(&any[i], int(dims[i].size()), d, type, dnnl_format_tag_any) !=
              dnnl_success)
        return conv;
    }
    // A 1x1 convolution of stride 1 is a GEMM on the plain layouts, where
    // reorders would only add passes (0.2 against 0.44 ms for 8x24x32x32
    // -> 96 channels).
    bool pointwise = p.groups == 1;
    for (int i = 0; i < n; ++i)
      pointwise &= p.kernel[size_t(i)] == 1 && p.stride[size_t(i)] == 1 &&
                   p.padLow[size_t(i)] == 0 && p.padHigh[size_t(i)] == 0;
    // The epilogue: the bias as the primitive's bias argument ([O], plain),
    // silu as an eltwise post-op. Not relu: oneDNN's vector relu is
    // max(x, 0), which makes a NaN 0 where relu keeps it; the caller applies
    // relu after the convolution.
    if (epilogue.activation == ConvActivation::Relu)
      return conv;
    dnnl_memory_desc_t biasDesc;
    if (withBias) {
      dnnl_dims_t d = {p.outChannels}, strides = {1};
      if (memoryDescInit(&biasDesc, 1, d, dnnl_f32, strides) != dnnl_success ||
          memoryCreate(&conv.bias, &biasDesc, engine, DNNL_MEMORY_NONE) != dnnl_success)
        return conv;
    }
    dnnl_primitive_attr_t attr = nullptr;
    if (epilogue.activation == ConvActivation::Silu && !(attr = siluAttr()))
      return conv;
    const dnnl_memory_desc_t *bias = withBias ? &biasDesc : nullptr;
    // Channels-last activations are what oneDNN's direct kernels read and
    // write as they are (no reorder around the call: 1.2-3x faster than
    // channels-first with reorders on the U-Net's convolutions); only the
    // weight goes to oneDNN's layout.
    dnnl_primitive_desc_t pd =
        p.channelsLast ? convDesc(direction, p, plain[0], any[1], plain[2], bias, attr)
        : pointwise    ? nullptr
                       : convDesc(direction, p, any[0], any[1], any[2], bias, attr);
    if (!pd)
      pd = convDesc(direction, p, plain[0], plain[1], plain[2], bias, attr);
    if (attr)
      attrDestroy(attr);
    if (!pd)
      return conv;
    // Which of src (0), weights (1), dst (2) each operand is, with its
    // oneDNN argument and layout query.
    struct Role {
      int tensor, arg;
      dnnl_query_t query;
    };
    Role roles[3];
    if (direction == ConvDirection::Forward)
      roles[0] = {0, DNNL_ARG_SRC, dnnl_query_src_md},
      roles[1] = {1, DNNL_ARG_WEIGHTS, dnnl_query_weights_md},
      roles[2] = {2, DNNL_ARG_DST, dnnl_query_dst_md};
    else if (direction == ConvDirection::GradInput)
      roles[0] = {2, DNNL_ARG_DIFF_DST, dnnl_query_diff_dst_md},
      roles[1] = {1, DNNL_ARG_WEIGHTS, dnnl_query_weights_md},
      roles[2] = {0, DNNL_ARG_DIFF_SRC, dnnl_query_diff_src_md};
    else
      roles[0] = {0, DNNL_ARG_SRC, dnnl_query_src_md},
      roles[1] = {2, DNNL_ARG_DIFF_DST, dnnl_query_diff_dst_md},
      roles[2] = {1, DNNL_ARG_DIFF_WEIGHTS, dnnl_query_diff_weights_md};
    ConvOperand *operands[3] = {&conv.a, &conv.b, &conv.out};
    bool ok = primitiveCreate(&conv.primitive, pd) == dnnl_success;
    for (int i = 0; i < 3 && ok; ++i) {
      const dnnl_memory_desc_t *chosen = primitiveDescQueryMd(pd, roles[i].query, 0);
      ok = chosen && bindOperand(*operands[i], roles[i].arg, plain[roles[i].tensor], *chosen,
                                 /*in=*/i < 2);
    }
    primitiveDescDestroy(pd);
    conv.usable = ok;
    return conv;
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

/// This thread's OpenMP team at one thread while it lives.
struct TeamOfOne {
  Dnnl &d;
  int before;
  explicit TeamOfOne(Dnnl &d) : d(d), before(d.ompGetMaxThreads()) { d.ompSetNumThreads(1); }
  ~TeamOfOne() { d.ompSetNumThreads(before); }
};
} // namespace

bool tilefuse::cpu::dnnlGemm(const Step &s, DType dtype, const void *a, const void *b,
                             void *c) {
  Dnnl &d = Dnnl::get();
  if (!d.engine || !dnnlTakesGemm(dtype))
    return false;
  // oneDNN's bf16 matmuls keep the thread count they were made with, and
  // an OpenMP team cannot start in a child forked after the parent ran one:
  // there the GEMM takes the f32 path.
  if (ThreadPool::forked())
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

bool tilefuse::cpu::dnnlConv(ConvDirection direction, const ConvParams &p, DType dtype,
                             const void *a, const void *b, void *out, ConvChain *chain,
                             const ConvEpilogue &epilogue) {
  Dnnl &d = Dnnl::get();
  // As for bf16 GEMMs: no OpenMP team in a child forked after the parent
  // ran one.
  if (!d.engine || ThreadPool::forked() || (dtype != DType::F32 && dtype != DType::BF16) ||
      (!epilogue.empty() && (direction != ConvDirection::Forward || dtype != DType::F32)))
    return false;
  std::lock_guard<std::mutex> lock(d.mutex);
  Dnnl::Conv &conv =
      d.convFor(direction, p, dtype == DType::BF16 ? dnnl_bf16 : dnnl_f32, epilogue);
  if (!conv.usable)
    return false;
  if (conv.bias)
    d.memorySetDataHandle(conv.bias, const_cast<float *>(epilogue.bias));
  d.memorySetDataHandle(conv.a.user, const_cast<void *>(a));
  d.memorySetDataHandle(conv.b.user, const_cast<void *>(b));
  d.memorySetDataHandle(conv.out.user, out);
  // The two backward convolutions of one output gradient, run one right
  // after the other (in either order, as the schedule has them): the second
  // finds the first's blocked copy of the gradient at the start of the
  // shared buffer. Safe only when no other convolution ran since (this
  // executor's chain names the last call), on the same buffer, in the same
  // layout.
  Dnnl::ConvOperand *gradient = direction == ConvDirection::GradInput    ? &conv.a
                                : direction == ConvDirection::GradWeight ? &conv.b
                                                                         : nullptr;
  const void *gradientData = direction == ConvDirection::GradInput ? a : b;
  if (gradient && !gradient->inner)
    gradient = nullptr; // plain layout: nothing to keep
  bool reuseGradient = chain && gradient && chain->lastCall != 0 &&
                       chain->lastCall == d.convCalls && d.blockedGradient == gradientData &&
                       d.memoryDescEqual(&d.blockedGradientDesc, &gradient->innerDesc);
  if (!d.bindConvScratch(conv, gradient))
    throw CompileError("graph.conv: cannot allocate oneDNN's blocked copies of a convolution's "
                       "operands; TILEFUSE_DNNL=none runs the reference loops");
  // (a grown buffer lost the copy)
  reuseGradient = reuseGradient && d.blockedGradient == gradientData;
  d.blockedGradient = nullptr;
  if (chain)
    chain->lastCall = ++d.convCalls;
  else
    ++d.convCalls;
  // Operands into the primitive's layouts, the result back into the step's.
  auto reorder = [&](const Dnnl::ConvOperand &o, bool in) {
    if (!o.reorder)
      return true;
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, in ? o.user : o.inner},
                               {DNNL_ARG_TO, in ? o.inner : o.user}};
    return d.primitiveExecute(o.reorder, d.stream, 2, args) == dnnl_success;
  };
  auto inner = [](const Dnnl::ConvOperand &o) { return o.inner ? o.inner : o.user; };
  dnnl_exec_arg_t args[4] = {{conv.a.arg, inner(conv.a)},
                             {conv.b.arg, inner(conv.b)},
                             {conv.out.arg, inner(conv.out)},
                             {DNNL_ARG_BIAS, conv.bias}};
  if (reuseGradient)
    d.reordersReused.fetch_add(1, std::memory_order_relaxed);
  auto reorderIn = [&](Dnnl::ConvOperand &o) {
    return (reuseGradient && &o == gradient) || reorder(o, true);
  };
  if (!reorderIn(conv.a) || !reorderIn(conv.b) ||
      d.primitiveExecute(conv.primitive, d.stream, conv.bias ? 4 : 3, args) != dnnl_success ||
      !reorder(conv.out, false) || d.streamWait(d.stream) != dnnl_success)
    throw CompileError(std::string(direction == ConvDirection::Forward     ? "graph.conv"
                                   : direction == ConvDirection::GradInput ? "graph.conv_grad_input"
                                                                           : "graph.conv_grad_weight") +
                       ": oneDNN failed to run a convolution it accepted; TILEFUSE_DNNL=none "
                       "runs the reference loops");
  if (gradient) {
    d.blockedGradient = gradientData;
    d.blockedGradientDesc = gradient->innerDesc;
    if (chain) {
      chain->gradient = static_cast<const char *>(gradientData);
      chain->gradientBytes = size_t(p.outputElements()) * (dtype == DType::BF16 ? 2 : 4);
    }
  }
  return true;
}

int64_t tilefuse::cpu::dnnlConvReordersReused() { return Dnnl::get().reordersReused.load(); }

std::string tilefuse::cpu::dnnlStatus() { return Dnnl::get().status; }

size_t tilefuse::cpu::dnnlConvScratchBytes() {
  Dnnl &d = Dnnl::get();
  std::lock_guard<std::mutex> lock(d.mutex);
  return d.convScratchBytes;
}

int64_t tilefuse::cpu::dnnlF32SlabsRun() {
  Dnnl &d = Dnnl::get();
  return d.f32 ? d.f32Slabs.load() : -1;
}

namespace {
/// What one pool thread keeps for the f32 slabs it runs: its stream, and
/// per slab matmul its memories and scratchpad.
struct SlabThread {
  dnnl_stream_t stream = nullptr;
  struct Memories {
    dnnl_memory_t a = nullptr, b = nullptr, c = nullptr, scratch = nullptr;
    std::vector<char> scratchBytes;
    bool ready = false;
  };
  std::map<const void *, Memories> memories;
  // The oneDNN handles are not destroyed when the thread ends: a thread of
  // an OpenMP team can end while the process exits and oneDNN shuts down.
  // A thread that ends leaves its stream and memories (a few small objects
  // per slab shape).
};

} // namespace

namespace {
/// Runs the slab matmul of `key` on this thread with a team of one (see
/// dnnlSgemmSlab); false where it is unusable or failed.
bool runSlab(const Dnnl::SlabKey &key, const void *a, const void *b, float *c) {
  Dnnl &d = Dnnl::get();
  TeamOfOne team(d);
  // A slab runs on a pool thread, where an exception would end the process:
  // running out of memory for this thread's handles leaves it to the BLAS.
  try {
    Dnnl::SlabMatmul *mm;
    {
      std::lock_guard<std::mutex> lock(d.mutex);
      mm = &d.slabFor(key);
    }
    if (!mm->usable)
      return false;
    thread_local SlabThread mine;
    if (!mine.stream && d.streamCreate(&mine.stream, d.engine, dnnl_stream_default_flags) !=
                            dnnl_success)
      return false;
    SlabThread::Memories &m = mine.memories[mm];
    if (!m.ready) {
      m.scratchBytes.resize(mm->scratchBytes);
      m.ready = d.memoryCreate(&m.a, &mm->a, d.engine, DNNL_MEMORY_NONE) == dnnl_success &&
                d.memoryCreate(&m.b, &mm->b, d.engine, DNNL_MEMORY_NONE) == dnnl_success &&
                d.memoryCreate(&m.c, &mm->c, d.engine, DNNL_MEMORY_NONE) == dnnl_success &&
                (!mm->scratchBytes || d.memoryCreate(&m.scratch, &mm->scratch, d.engine,
                                                     m.scratchBytes.data()) == dnnl_success);
      if (!m.ready) {
        mine.memories.erase(mm); // tried again next time; the caller runs this one
        return false;
      }
    }
    d.memorySetDataHandle(m.a, const_cast<void *>(a));
    d.memorySetDataHandle(m.b, const_cast<void *>(b));
    d.memorySetDataHandle(m.c, c);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, m.a}, {DNNL_ARG_WEIGHTS, m.b},
                               {DNNL_ARG_DST, m.c}, {DNNL_ARG_SCRATCHPAD, m.scratch}};
    // A slab runs on a pool thread, where an exception cannot be carried
    // to the caller: a failure leaves the slab to the caller, which writes
    // all of C again. (An accumulating slab, C += A B, that fails after
    // oneDNN wrote part of C would then add those rows twice; oneDNN fails
    // a primitive it made and ran before only for want of memory, and the
    // scratchpad is the caller's, allocated up front.)
    return d.primitiveExecute(mm->primitive, mine.stream, m.scratch ? 4 : 3, args) ==
               dnnl_success &&
           d.streamWait(mine.stream) == dnnl_success;
  } catch (const std::bad_alloc &) {
    return false;
  }
}
} // namespace

bool tilefuse::cpu::dnnlSgemmSlab(bool transA, bool transB, int64_t rows, int64_t n, int64_t k,
                                  const float *a, int64_t lda, const float *b, int64_t ldb,
                                  float *c, int64_t ldc, bool accumulate) {
  Dnnl &d = Dnnl::get();
  if (!d.engine || !d.f32 || rows <= 0 || n <= 0 || k <= 0)
    return false;
  if (accumulate) {
    // The sum post-op needs the primitive.
    if (!runSlab({rows, n, k, transA, transB, lda, ldb, ldc, false, true}, a, b, c))
      return false;
  } else {
    // C = op(A) op(B) through dnnl_sgemm: as fast as the slab primitive
    // where that is fast, and 0.45x its time where it is not (1024x768 @
    // 768x3072: the primitive took 2.2x the BLAS's time, dnnl_sgemm 0.97x).
    return dnnlSgemm(transA, transB, rows, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  }
  d.f32Slabs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool tilefuse::cpu::dnnlSgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                              float alpha, const float *a, int64_t lda, const float *b,
                              int64_t ldb, float beta, float *c, int64_t ldc) {
  Dnnl &d = Dnnl::get();
  if (!d.engine || !d.f32 || !d.sgemm || m <= 0 || n <= 0 || k <= 0)
    return false;
  // Row-major with the same leading dimensions as the BLAS call.
  TeamOfOne team(d);
  if (d.sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c,
              ldc) != dnnl_success)
    return false;
  d.f32Slabs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool tilefuse::cpu::dnnlBf16GemmSlab(bool transA, bool transB, int64_t rows, int64_t n,
                                     int64_t k, const uint16_t *a, int64_t lda,
                                     const uint16_t *b, int64_t ldb, float *c, int64_t ldc,
                                     bool accumulate) {
  Dnnl &d = Dnnl::get();
  if (!d.engine || !d.team || rows <= 0 || n <= 0 || k <= 0)
    return false;
  return runSlab({rows, n, k, transA, transB, lda, ldb, ldc, true, accumulate}, a, b, c);
}

#else

bool tilefuse::cpu::dnnlGemm(const Step &, DType, const void *, const void *, void *) {
  return false;
}

bool tilefuse::cpu::dnnlBf16GemmSlab(bool, bool, int64_t, int64_t, int64_t, const uint16_t *,
                                     int64_t, const uint16_t *, int64_t, float *, int64_t, bool) {
  return false;
}

std::string tilefuse::cpu::dnnlStatus() {
  return "not built (oneDNN's headers were not found when tilefuse was built)";
}

bool tilefuse::cpu::dnnlSgemmSlab(bool, bool, int64_t, int64_t, int64_t, const float *, int64_t,
                                  const float *, int64_t, float *, int64_t, bool) {
  return false;
}

bool tilefuse::cpu::dnnlSgemm(bool, bool, int64_t, int64_t, int64_t, float, const float *,
                              int64_t, const float *, int64_t, float, float *, int64_t) {
  return false;
}

int64_t tilefuse::cpu::dnnlF32SlabsRun() { return -1; }

bool tilefuse::cpu::dnnlConv(ConvDirection, const ConvParams &, DType, const void *,
                             const void *, void *, ConvChain *, const ConvEpilogue &) {
  return false;
}

size_t tilefuse::cpu::dnnlConvScratchBytes() { return 0; }

int64_t tilefuse::cpu::dnnlConvReordersReused() { return 0; }

#endif

bool tilefuse::cpu::dnnlTakesGemm(DType dtype) { return dtype == DType::BF16; }
