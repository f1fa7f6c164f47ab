//===- CudaEmu.h - the CUDA execution model on the CPU, for tests ----------===//
//
// Force-included before tilefuse's emitted CUDA C, which then compiles as
// host C++ (g++ -std=c++20 -include CudaEmu.h -x c++ kernels.cu) into a
// shared library that the CPU double of the driver (tests/unit/fakecuda)
// loads as a "module". The kernels then run through the real CudaExecutor.
//
// Model: the blocks of a launch run one after another; the threads of a
// block are fibers (ucontext) that run until their next synchronisation
// point (__syncthreads, a warp shuffle, the end), so `__shared__` can be a
// static and atomics are plain read-modify-writes. The emulator reports,
// as test failures, what a GPU would leave undefined or silently wrong:
//  - __syncthreads not reached by every live thread of the block;
//  - a shuffle whose mask is not exactly the warp's live threads (a full
//    mask in a partial warp), or threads of a warp at different points;
//  - a launch with more threads than the kernel's __launch_bounds__;
//  - a load or store (tf_load/tf_store, through the TF_CHECK_ACCESS hook of
//    the prelude) outside every device allocation, or a vector access that
//    is not aligned to its size;
//  - an index past a __shared__ array (the harness compiles kernels with
//    -fsanitize=bounds; the arrays are statics of known size here), or past
//    an array of a layout placed in dynamic shared memory;
//  - a kernel whose dynamic shared memory layout (TF_DYNAMIC_SHARED) is
//    larger than the launch gave it;
//  - the misuse of warp matrix operations listed with nvcuda::wmma below.
// Dynamic shared memory starts every block all ones (NaN in every float
// type), so a result that reads what no thread wrote shows as NaN.
// Not detected: a read of shared memory another thread wrote without a
// barrier between (the accesses are plain array accesses in the emitted
// code).
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_TESTS_CUDA_EMU_CUDAEMU_H
#define TILEFUSE_TESTS_CUDA_EMU_CUDAEMU_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <ucontext.h>
#include <utility>
#include <vector>

// CUDA's qualifiers mean nothing on the host; a __shared__ array is one
// per block, and blocks run one at a time.
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(n)

struct tf_emu_dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline tf_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace tf_emu {

/// Where a fiber stopped.
enum class Stop { Running, Barrier, ShuffleWrite, ShuffleRead, Finished };

inline const char *stopName(Stop s) {
  switch (s) {
  case Stop::Running: return "running";
  case Stop::Barrier: return "__syncthreads";
  case Stop::ShuffleWrite:
  case Stop::ShuffleRead: return "a warp shuffle";
  case Stop::Finished: return "the end of the kernel";
  }
  return "?";
}

struct Fiber {
  ucontext_t context;
  std::vector<char> stack;
  Stop stop = Stop::Running;
};

/// Dynamic shared memory in 128-byte lines, so it is aligned as a GPU's is
/// (warp matrix loads need 32 bytes).
struct alignas(128) SharedLine {
  unsigned char bytes[128];
};

struct State {
  ucontext_t scheduler;
  std::vector<Fiber> fibers;
  unsigned current = 0;
  uint64_t exchange[1024] = {}; ///< one shuffle slot per thread
  std::vector<std::string> errors;
  /// Set by the driver double: whether [p, p + bytes) lies in one device
  /// allocation.
  bool (*inAllocation)(const void *p, size_t bytes) = nullptr;
  void (*body)(void **) = nullptr;
  void **params = nullptr;
  /// Per thread, a hash of the warp matrix operations it made in this block
  /// (operation, address, leading dimension): the lanes of a warp must
  /// agree at every stop.
  uint64_t matrixOps[1024] = {};
  /// The launch's dynamic shared memory: one block's, blocks run in turn.
  std::vector<SharedLine> dynamicShared;
  size_t dynamicSharedBytes = 0;
};
inline State state;

inline void fail(const std::string &what) {
  if (state.errors.size() < 16)
    state.errors.push_back("block " + std::to_string(blockIdx.x) + ", thread " +
                           std::to_string(threadIdx.x) + ": " + what);
}

/// Back to the scheduler until every thread of the block got here.
inline void stopAt(Stop s) {
  Fiber &f = state.fibers[state.current];
  f.stop = s;
  swapcontext(&f.context, &state.scheduler);
}

inline void checkAccess(const void *p, size_t bytes, size_t alignment) {
  if (alignment > 1 && reinterpret_cast<uintptr_t>(p) % alignment != 0)
    fail("a " + std::to_string(bytes) + "-byte vector access at an address not aligned to " +
         std::to_string(alignment));
  if (state.inAllocation && !state.inAllocation(p, bytes))
    fail("a " + std::to_string(bytes) + "-byte access outside every device allocation");
}

inline void fiberEntry() {
  state.body(state.params);
  state.fibers[state.current].stop = Stop::Finished;
  // Returning resumes uc_link: the scheduler.
}

template <typename... A, size_t... I>
void callKernel(void (*kernel)(A...), void **params, std::index_sequence<I...>) {
  kernel(*static_cast<std::remove_reference_t<A> *>(params[I])...);
}
template <typename... A> struct Entry {
  static inline void (*kernel)(A...) = nullptr;
  static void run(void **params) {
    callKernel(kernel, params, std::index_sequence_for<A...>{});
  }
};

template <typename... A> constexpr int arity(void (*)(A...)) { return int(sizeof...(A)); }
/// Bytes of parameter `i` (a struct passed by value is more than 8).
template <typename... A> int paramBytes(void (*)(A...), int i) {
  constexpr size_t bytes[] = {sizeof(A)..., 0};
  return i >= 0 && i < int(sizeof...(A)) ? int(bytes[i]) : 0;
}

/// The lanes of every warp made the same warp matrix operations on the
/// same addresses (on a GPU each is one operation of the whole warp).
inline bool sameMatrixOps(unsigned threads) {
  for (unsigned t = 0; t < threads; ++t)
    if (state.matrixOps[t] != state.matrixOps[t - t % 32]) {
      threadIdx.x = t;
      fail("made other warp matrix operations than thread " + std::to_string(t - t % 32) +
           " of its warp (a wmma call under a lane-dependent condition or on a lane-dependent "
           "address)");
      return false;
    }
  return true;
}

/// Every live thread of a block stopped: the points must agree. Returns
/// false (after reporting) when they do not, which ends the launch.
inline bool consistent(unsigned threads) {
  if (!sameMatrixOps(threads))
    return false;
  std::vector<Fiber> &f = state.fibers;
  bool anyBarrier = false;
  for (unsigned t = 0; t < threads; ++t)
    anyBarrier |= f[t].stop == Stop::Barrier;
  if (anyBarrier) {
    for (unsigned t = 0; t < threads; ++t)
      if (f[t].stop != Stop::Barrier) {
        threadIdx.x = t;
        fail(std::string("is at ") + stopName(f[t].stop) +
             " while other threads of its block wait at __syncthreads (a divergent barrier)");
        return false;
      }
    return true;
  }
  // Shuffles: a warp's threads are all at the same point (finished threads
  // are allowed only when no thread of the warp shuffles).
  for (unsigned w = 0; w < threads; w += 32) {
    unsigned end = std::min(threads, w + 32);
    Stop first = f[w].stop;
    for (unsigned t = w + 1; t < end; ++t)
      if (f[t].stop != first) {
        threadIdx.x = t;
        fail(std::string("is at ") + stopName(f[t].stop) + ", thread " + std::to_string(w) +
             " of its warp at " + stopName(first) + " (divergent warp)");
        return false;
      }
  }
  return true;
}

/// Runs `kernel` over `grid` blocks of `threads` threads; params[i] points
/// at argument i, as cuLaunchKernel takes them. Returns the errors found.
/// The block's dynamic shared memory for a layout of `bytes`: reported when
/// the launch gave less (the memory is there, so the run goes on to the
/// report).
inline unsigned char *dynamicShared(size_t bytes) {
  if (bytes > state.dynamicSharedBytes) {
    if (bytes > state.dynamicShared.size() * sizeof(SharedLine)) // once per launch
      fail("its dynamic shared memory layout takes " + std::to_string(bytes) +
           " bytes; the launch gave " + std::to_string(state.dynamicSharedBytes));
    // Every thread asks before the block's first barrier, so growing it
    // here moves nothing another thread holds.
    size_t words = (bytes + sizeof(SharedLine) - 1) / sizeof(SharedLine);
    if (state.dynamicShared.size() < words)
      state.dynamicShared.resize(words);
  }
  return reinterpret_cast<unsigned char *>(state.dynamicShared.data());
}

template <typename... A>
std::vector<std::string> launch(void (*kernel)(A...), unsigned grid, unsigned threads,
                                unsigned sharedBytes, void **params, unsigned launchBounds) {
  state.errors.clear();
  if (threads == 0 || threads > 1024 || threads > launchBounds) {
    state.errors.push_back("launched with " + std::to_string(threads) +
                           " threads per block; the kernel allows at most " +
                           std::to_string(std::min(launchBounds, 1024u)));
    return state.errors;
  }
  Entry<A...>::kernel = kernel;
  state.body = &Entry<A...>::run;
  state.dynamicSharedBytes = sharedBytes;
  state.dynamicShared.assign((sharedBytes + sizeof(SharedLine) - 1) / sizeof(SharedLine),
                             SharedLine{});
  state.params = params;
  gridDim = {grid, 1, 1};
  blockDim = {threads, 1, 1};
  state.fibers.resize(threads);
  for (Fiber &f : state.fibers)
    f.stack.resize(128 << 10);
  for (unsigned b = 0; b < grid && state.errors.empty(); ++b) {
    blockIdx = {b, 0, 0};
    // A block's shared memory holds whatever was there: all ones (NaN as
    // f32, bf16 and f16) makes a read of what no thread wrote show.
    std::memset(static_cast<void *>(state.dynamicShared.data()), 0xff,
                state.dynamicShared.size() * sizeof(SharedLine));
    std::fill(state.matrixOps, state.matrixOps + threads, uint64_t(0));
    for (unsigned t = 0; t < threads; ++t) {
      Fiber &f = state.fibers[t];
      getcontext(&f.context);
      f.context.uc_stack.ss_sp = f.stack.data();
      f.context.uc_stack.ss_size = f.stack.size();
      f.context.uc_link = &state.scheduler;
      makecontext(&f.context, fiberEntry, 0);
      f.stop = Stop::Running;
    }
    // Rounds: every unfinished thread runs to its next stop.
    for (bool live = true; live && state.errors.empty();) {
      live = false;
      for (unsigned t = 0; t < threads; ++t) {
        if (state.fibers[t].stop == Stop::Finished)
          continue;
        live = true;
        state.current = t;
        threadIdx = {t, 0, 0};
        swapcontext(&state.scheduler, &state.fibers[t].context);
      }
      if (live && !consistent(threads))
        break;
    }
    if (state.errors.empty())
      sameMatrixOps(threads);
  }
  threadIdx = blockIdx = {0, 0, 0};
  return state.errors;
}

} // namespace tf_emu

// --- the CUDA builtins the emitted code uses ------------------------------

inline void __syncthreads() { tf_emu::stopAt(tf_emu::Stop::Barrier); }

template <typename T> T __shfl_xor_sync(unsigned mask, T value, int laneMask, int = 32) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "a shuffle of a type wider than 64 bits");
  unsigned t = threadIdx.x, lane = t % 32, warp = t - lane;
  unsigned lanes = std::min(32u, blockDim.x - warp);
  unsigned live = 0;
  for (unsigned l = 0; l < lanes; ++l)
    if (tf_emu::state.fibers[warp + l].stop != tf_emu::Stop::Finished)
      live |= 1u << l;
  if (mask != live)
    tf_emu::fail("__shfl_xor_sync with mask " + std::to_string(mask) +
                 " in a warp whose live threads are " + std::to_string(live) +
                 " (undefined on the GPU)");
  std::memcpy(&tf_emu::state.exchange[t], &value, sizeof(T));
  tf_emu::stopAt(tf_emu::Stop::ShuffleWrite);
  unsigned source = lane ^ unsigned(laneMask);
  T result = value;
  if (source < lanes)
    std::memcpy(&result, &tf_emu::state.exchange[warp + source], sizeof(T));
  else
    tf_emu::fail("a shuffle reads lane " + std::to_string(source) + " of a " +
                 std::to_string(lanes) + "-thread warp");
  tf_emu::stopAt(tf_emu::Stop::ShuffleRead);
  return result;
}

// --- warp matrix operations (mma.h's nvcuda::wmma, 16 x 16 x 16) -----------
//
// On a GPU a fragment is spread over the warp's 32 threads in a layout the
// API keeps opaque, so code may only load, store, fill and multiply whole
// fragments. Here every thread holds the whole 16 x 16 tile and computes
// every operation itself (f32 products and sums, the tensor cores' f32
// accumulation; 16-bit operands are exact in f32): the same values as any
// distribution, at 32 times the work. The warp's threads run one after
// another between stops, so only its first thread stores a fragment: the
// others may have loaded what it stored (a tile read, updated and stored
// back, as an accumulator kept in shared memory is), where on a GPU the
// warp's loads all come before its stores. Reported: an operation while
// some threads of the warp have finished (on a GPU the whole warp must take
// part), lanes of a warp that made different operations (or on different
// addresses) by a stop, a pointer not aligned to 32 bytes, a leading
// dimension that is not a multiple of 16 bytes.
#ifndef TF_ATTENTION_MMA // -DTF_ATTENTION_MMA=0: the kernels of GPUs before sm_80
#define TF_ATTENTION_MMA 1
#endif
namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulation has the 16 x 16 x 16 shape only");
  static constexpr int num_elements = 256;
  float x[256]; ///< row-major, whatever the memory layout it came from
};

namespace detail {
inline void wholeWarp(const char *what) {
  unsigned t = threadIdx.x, warp = t - t % 32;
  unsigned lanes = std::min(32u, blockDim.x - warp);
  for (unsigned l = 0; l < lanes; ++l)
    if (tf_emu::state.fibers[warp + l].stop == tf_emu::Stop::Finished)
      tf_emu::fail(std::string("wmma::") + what + " while thread " + std::to_string(warp + l) +
                   " of its warp has finished (the whole warp must take part)");
}
/// Adds an operation to this thread's hash of its warp matrix operations.
inline void record(const char *what, const void *p, unsigned ldm) {
  uint64_t &h = tf_emu::state.matrixOps[threadIdx.x];
  for (uint64_t word : {uint64_t(reinterpret_cast<uintptr_t>(what)),
                        uint64_t(reinterpret_cast<uintptr_t>(p)), uint64_t(ldm)})
    h = (h ^ word) * 1099511628211ull;
}
template <typename T> void checkPointer(const char *what, const T *p, unsigned ldm) {
  wholeWarp(what);
  record(what, p, ldm);
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    tf_emu::fail(std::string("wmma::") + what + " at an address not aligned to 32 bytes");
  if (ldm * sizeof(T) % 16 != 0)
    tf_emu::fail(std::string("wmma::") + what + " with leading dimension " +
                 std::to_string(ldm) + ", not a multiple of 16 bytes");
}
inline float wide(float x) { return x; }
inline float wide(__half x) { return __half2float(x); }
inline float wide(__nv_bfloat16 x) { return __bfloat162float(x); }
} // namespace detail

template <typename Use, typename T, typename Layout, typename E>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const E *p, unsigned ldm) {
  detail::checkPointer("load_matrix_sync", p, ldm);
  constexpr bool colMajor = std::is_same_v<Layout, col_major>;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = detail::wide(colMajor ? p[c * ldm + r] : p[r * ldm + c]);
}
template <typename T>
void load_matrix_sync(fragment<accumulator, 16, 16, 16, T> &f, const T *p, unsigned ldm,
                      layout_t layout) {
  detail::checkPointer("load_matrix_sync", p, ldm);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c];
}
template <typename T>
void store_matrix_sync(T *p, const fragment<accumulator, 16, 16, 16, T> &f, unsigned ldm,
                       layout_t layout) {
  detail::checkPointer("store_matrix_sync", p, ldm);
  if (threadIdx.x % 32 != 0)
    return;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      (layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.x[r * 16 + c];
}
template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, float value) {
  detail::wholeWarp("fill_fragment");
  detail::record("fill_fragment", nullptr, 0);
  std::fill(f.x, f.x + 256, value);
}
template <typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
              const fragment<matrix_a, 16, 16, 16, T, LA> &a,
              const fragment<matrix_b, 16, 16, 16, T, LB> &b,
              const fragment<accumulator, 16, 16, 16, float> &c) {
  detail::wholeWarp("mma_sync");
  detail::record("mma_sync", nullptr, 0);
  float out[256];
  for (int r = 0; r < 16; ++r)
    for (int col = 0; col < 16; ++col) {
      float sum = c.x[r * 16 + col];
      for (int k = 0; k < 16; ++k)
        sum += a.x[r * 16 + k] * b.x[k * 16 + col];
      out[r * 16 + col] = sum;
    }
  std::copy(out, out + 256, d.x);
}
} // namespace nvcuda::wmma

inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}
inline double __longlong_as_double(long long i) {
  double d;
  std::memcpy(&d, &i, sizeof d);
  return d;
}
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((uint64_t(a) * b) >> 32); }

// `name`: the block's dynamic shared memory (the launch's sharedMemBytes),
// which a layout of `bytes` must fit.
#define TF_DYNAMIC_SHARED(name, bytes) unsigned char *name = tf_emu::dynamicShared(bytes)

// One block runs at a time and its threads only switch at stops, so a
// read-modify-write is atomic here.
template <typename T> T atomicCAS(T *p, T compare, T value) {
  T old = *p;
  if (old == compare)
    *p = value;
  return old;
}
template <typename T> T atomicAdd(T *p, T value) {
  T old = *p;
  *p = old + value;
  return old;
}

// The prelude's tf_load/tf_store call this for every access they make.
#define TF_CHECK_ACCESS(pointer, bytes, alignment)                                                 \
  tf_emu::checkAccess((pointer), (bytes), (alignment))

/// The driver double's entry points for kernel `name` (appended after the
/// kernels by the test harness, with the kernel's __launch_bounds__).
#define TF_EMU_ENTRY(name, bounds)                                                                 \
  extern "C" int tf_emu_launch_##name(unsigned grid, unsigned threads, unsigned sharedBytes,      \
                                      void **params, char *errors, int size) {                    \
    std::string all;                                                                               \
    for (const std::string &e : tf_emu::launch(&name, grid, threads, sharedBytes, params, bounds)) \
      all += e + "\n";                                                                             \
    std::snprintf(errors, size_t(size), "%s", all.c_str());                                        \
    return int(all.size());                                                                        \
  }                                                                                                \
  extern "C" int tf_emu_arity_##name() { return tf_emu::arity(&name); }                        \
  extern "C" int tf_emu_param_bytes_##name(int i) { return tf_emu::paramBytes(&name, i); }

/// How the driver double tells the kernels where device memory is.
extern "C" void tf_emu_set_allocation_check(bool (*check)(const void *, size_t)) {
  tf_emu::state.inAllocation = check;
}

#endif // TILEFUSE_TESTS_CUDA_EMU_CUDAEMU_H
