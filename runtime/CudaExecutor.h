//===- CudaExecutor.h - runs a Program on an NVIDIA GPU -------------*- C++ -*-===//
//
// The driver (libcuda), cuBLAS and cuBLASLt are loaded at run time, never
// linked: a build with the CUDA toolkit runs on a machine without a driver
// and says why it cannot use the GPU. One stream, one device allocation
// (the arena) for every buffer of the Program, cubins loaded once. The
// first call with a set of buffer addresses runs eagerly, the second
// captures its whole sequence of launches into a CUDA graph, later ones
// replay the graph.
//
// No CUDA headers here: users of this header need none.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_CUDAEXECUTOR_H
#define TILEFUSE_RUNTIME_CUDAEXECUTOR_H

#include "runtime/Executor.h"

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tilefuse {

/// Name of the artifact blob holding the runtime's own kernels (embedding
/// gather, scatter-add, f16/bf16 widening), compiled with the program's.
constexpr const char *kCudaLibraryBlob = "tf_library";
/// A kernel blob holding this prefix and another kernel's symbol is that
/// kernel's code: kernels that repeat layer after layer compile once.
constexpr const char *kCudaAliasPrefix = "tilefuse-alias:";
/// The kernels that blob must define (codegen/cuda/CudaLibrary.cpp).
constexpr const char *kCudaLibraryKernels[] = {
    "tf_gather_i32",           "tf_gather_i64",
    "tf_scatter_add_f32_i32",  "tf_scatter_add_f32_i64",
    "tf_scatter_add_f64_i32",  "tf_scatter_add_f64_i64",
    "tf_scatter_add_i32_i32",  "tf_scatter_add_i32_i64",
    "tf_scatter_add_i64_i32",  "tf_scatter_add_i64_i64",
    "tf_scatter_add_f16_into_f32_i32",  "tf_scatter_add_f16_into_f32_i64",
    "tf_scatter_add_bf16_into_f32_i32", "tf_scatter_add_bf16_into_f32_i64",
    "tf_widen_f16",  "tf_widen_bf16", "tf_narrow_f16", "tf_narrow_bf16"};

struct CudaOptions {
  int device = 0;
  /// Capture each call into a CUDA graph and replay it.
  bool graphs = true;
  /// Let f32 GEMMs round their inputs to tf32 (faster, ~1e-3 relative).
  bool tf32 = false;
};

/// Whether CUDA programs can run here: "" when they can, else why not (no
/// driver, no GPU, no cuBLAS).
std::string cudaUnavailableReason();
/// "sm_XY" of GPU `device`; throws CompileError when CUDA is unavailable.
std::string cudaDeviceArch(int device = 0);

class CudaExecutor : public Executor {
public:
  /// `cubins`: (kernel name, cubin) for every kernel of `program`, plus
  /// kCudaLibraryBlob when the program gathers or scatters. Throws
  /// CompileError naming what is missing or what the driver refused (a
  /// cubin for another architecture, for instance).
  CudaExecutor(Program program, const std::vector<std::pair<std::string, std::string>> &cubins,
               CudaOptions options = {});
  ~CudaExecutor() override;
  CudaExecutor(const CudaExecutor &) = delete;
  CudaExecutor &operator=(const CudaExecutor &) = delete;

  std::string device() const override;
  const Program &program() const override { return prog; }
  void runThen(const std::vector<ArgRef> &args, const std::function<void()> &read) override;
  using Executor::run;
  const void *result(size_t i) override;
  void *deviceResult(size_t i) override;
  void makePersistent(size_t argument, const void *initial) override;
  void carry(size_t result, size_t argument) override;
  const void *persistent(size_t argument) override;
  void setProfiling(bool on) override;
  void setCommunicator(const std::string &group, std::shared_ptr<Communicator> comm) override;
  void setNcclCommunicator(const std::string &group, const std::string &uniqueId, int64_t rank,
                           int64_t size) override;
  const std::vector<double> &stepSeconds() const override { return seconds; }
  int64_t profiledCalls() const override { return calls; }

  /// A new device allocation holding result i of the last run (what a
  /// DLPack consumer may keep after the next run overwrites the arena).
  std::shared_ptr<void> copyResult(size_t i);
  /// The stream every launch goes to (a CUstream), for DLPack producers
  /// that order their work before ours.
  void *stream() const;
  /// The CUDA device ordinal this executor runs on.
  int deviceIndex() const { return options.device; }
  /// Calls that replayed a captured graph, and graphs captured.
  int64_t graphReplays() const { return replays; }
  int64_t graphsCaptured() const { return captured; }

  struct State; ///< driver objects (CudaExecutor.cpp)

private:
  /// The constructor's work: context, stream, modules, handles, arena.
  void acquire(const std::vector<std::pair<std::string, std::string>> &cubins);
  /// Gives back everything acquire() took, whatever it got to.
  void releaseResources() noexcept;
  void enqueueSteps(bool timed);
  void enqueueAttention(const Step &step);
  void enqueueCollective(const Step &step);
  void launchAll();
  uint64_t resultPointer(size_t i) const;

  Program prog;
  CudaOptions options;
  std::unique_ptr<State> state;
  std::vector<uint64_t> pointers; ///< device address of every buffer
  std::vector<uint64_t> slots;    ///< per argument: its own place in the arena
  std::vector<bool> written;      ///< per argument: a kernel writes it in place
  std::vector<uint64_t> kept;     ///< per argument: its value if persistent
  std::vector<std::pair<size_t, size_t>> carries;
  /// poisonSchedule(prog) when poisoning dead buffers (steps then run
  /// eagerly, with a memset after each), else empty.
  std::vector<std::vector<int>> poison;
  std::vector<std::vector<char>> hostResults, hostPersistent;
  std::vector<bool> resultFresh, persistentFresh;
  std::mutex runMutex;
  bool profiling = false;
  std::vector<double> seconds;
  int64_t calls = 0, replays = 0, captured = 0;
};

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_CUDAEXECUTOR_H
