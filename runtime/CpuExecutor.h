//===- CpuExecutor.h - runs a Program on the CPU --------------------*- C++ -*-===//
//
// Owns the buffers of one Program (allocated once, reused by every call)
// and the compiled kernels' entry points. Arguments are read in place from
// the caller's memory; results are copied out.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_CPUEXECUTOR_H
#define TILEFUSE_RUNTIME_CPUEXECUTOR_H

#include "runtime/Program.h"

#include <functional>
#include <memory>
#include <mutex>

namespace tilefuse {

/// Entry point of a CPU kernel: runs programs [first, end).
using CpuKernelFn = void (*)(void **buffers, int64_t first, int64_t end);

class CpuExecutor {
public:
  /// `kernels[i]` runs `program.kernels[i]`; `keepAlive` owns the code.
  CpuExecutor(Program program, std::vector<CpuKernelFn> kernels,
              std::shared_ptr<void> keepAlive);
  ~CpuExecutor();
  CpuExecutor(const CpuExecutor &) = delete;
  CpuExecutor &operator=(const CpuExecutor &) = delete;

  /// Runs with argument i at args[i] (row-major, of the argument's dtype and
  /// shape; the caller checks). Results stay in the executor until the
  /// next call: see result(). Calls from several threads take turns (the
  /// buffers are shared).
  void run(const std::vector<const void *> &args);
  /// run(args), then `read` (which may call result()), with no other call
  /// of this executor in between.
  void runThen(const std::vector<const void *> &args, const std::function<void()> &read);
  /// Checks dtypes and shapes, runs, returns copies of the results.
  std::vector<HostTensor> run(const std::vector<HostTensor> &args);
  /// Pointer to result i of the last run.
  const void *result(size_t i) const;

  /// Argument `argument` lives in the executor from now on, starting as a
  /// copy of `initial`; run() then takes nullptr in its place.
  void makePersistent(size_t argument, const void *initial);
  /// After every run, result `result` becomes the value of persistent
  /// argument `argument` (the buffers swap: no copy). A training step's
  /// new parameters and optimizer state stay in place this way.
  void carry(size_t result, size_t argument);
  /// Current value of a persistent argument.
  const void *persistent(size_t argument) const;

  const Program &program() const { return prog; }

  /// When on, run() adds each step's wall time to stepSeconds().
  void setProfiling(bool on) {
    profiling = on;
    seconds.assign(prog.steps.size(), 0.0);
    calls = 0;
  }
  const std::vector<double> &stepSeconds() const { return seconds; }
  int64_t profiledCalls() const { return calls; }

private:
  void *allocate(const BufferInfo &info);
  void runLocked(const std::vector<const void *> &args);

  Program prog;
  std::vector<CpuKernelFn> kernels;
  std::shared_ptr<void> keepAlive;
  std::vector<void *> pointers;  ///< current address of every buffer
  std::vector<void *> kept;      ///< per argument: its storage if persistent
  std::vector<std::pair<size_t, size_t>> carries; ///< (result, argument)
  std::vector<void *> owned;     ///< allocations of non-argument buffers
  std::mutex runMutex;
  bool profiling = false;
  std::vector<double> seconds;
  int64_t calls = 0;
};

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_CPUEXECUTOR_H
