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
//    larger than the launch gave it.
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
  /// The launch's dynamic shared memory: one block's, blocks run in turn.
  std::vector<std::max_align_t> dynamicShared;
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

/// Every live thread of a block stopped: the points must agree. Returns
/// false (after reporting) when they do not, which ends the launch.
inline bool consistent(unsigned threads) {
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
    if (bytes > state.dynamicShared.size() * sizeof(std::max_align_t)) // once per launch
      fail("its dynamic shared memory layout takes " + std::to_string(bytes) +
           " bytes; the launch gave " + std::to_string(state.dynamicSharedBytes));
    // Every thread asks before the block's first barrier, so growing it
    // here moves nothing another thread holds.
    size_t words = (bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
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
  state.dynamicShared.assign((sharedBytes + sizeof(std::max_align_t) - 1) /
                                 sizeof(std::max_align_t),
                             std::max_align_t{});
  state.params = params;
  gridDim = {grid, 1, 1};
  blockDim = {threads, 1, 1};
  state.fibers.resize(threads);
  for (Fiber &f : state.fibers)
    f.stack.resize(128 << 10);
  for (unsigned b = 0; b < grid && state.errors.empty(); ++b) {
    blockIdx = {b, 0, 0};
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
