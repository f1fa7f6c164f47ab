//===- CpuExecutor.h - runs a Program on the CPU --------------------*- C++ -*-===//
//
// Owns the buffers of one Program (allocated once, reused by every call)
// and the compiled kernels' entry points. Arguments are read in place from
// the caller's memory; every other buffer lives in one arena laid out by
// the program's memory plan; results are copied out.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_CPUEXECUTOR_H
#define TILEFUSE_RUNTIME_CPUEXECUTOR_H

#include "runtime/Communicator.h"
#include "runtime/CpuDnnl.h"
#include "runtime/Executor.h"

#include <functional>
#include <memory>
#include <mutex>

namespace tilefuse {

/// Entry point of a CPU kernel: runs programs [first, end).
using CpuKernelFn = void (*)(void **buffers, int64_t first, int64_t end);

class CpuExecutor : public Executor {
public:
  /// `kernels[i]` runs `program.kernels[i]`; `keepAlive` owns the code.
  CpuExecutor(Program program, std::vector<CpuKernelFn> kernels,
              std::shared_ptr<void> keepAlive);
  ~CpuExecutor();
  CpuExecutor(const CpuExecutor &) = delete;
  CpuExecutor &operator=(const CpuExecutor &) = delete;

  std::string device() const override { return "cpu"; }
  const Program &program() const override { return prog; }
  void runThen(const std::vector<ArgRef> &args, const std::function<void()> &read) override;
  /// As runThen, with result i computed straight into `targets[i]` where
  /// that is non-null (the caller's memory: 64-byte aligned, the result's
  /// size, only for results where redirectable(i)), so it needs no copy.
  void runInto(const std::vector<ArgRef> &args, const std::vector<void *> &targets,
               const std::function<void()> &read);
  /// Whether result i can be computed into the caller's memory: a buffer
  /// the program computes (not an argument or constant), neither carried
  /// nor returned twice.
  bool redirectable(size_t i) const;
  using Executor::run;
  const void *result(size_t i) override;
  void *deviceResult(size_t i) override { return const_cast<void *>(result(i)); }
  void makePersistent(size_t argument, const void *initial) override;
  void carry(size_t result, size_t argument) override;
  const void *persistent(size_t argument) override;

  void setProfiling(bool on) override {
    profiling = on;
    seconds.assign(prog.steps.size(), 0.0);
    calls = 0;
  }
  const std::vector<double> &stepSeconds() const override { return seconds; }
  void setCommunicator(const std::string &group, std::shared_ptr<Communicator> comm) override;
  int64_t profiledCalls() const override { return calls; }

private:
  /// `bytes` (rounded up to 64, at least 64), 64-byte aligned, owned.
  void *allocate(uint64_t bytes, const std::string &what);
  void runLocked(const std::vector<ArgRef> &args);
  /// Fills the buffers' bytes with 0xFF (TILEFUSE_POISON_ARENA).
  void poisonBuffers(const std::vector<int> &dead);
  /// An attention step (forward or backward) through runtime/CpuAttention.h.
  void runAttention(const Step &s, const std::vector<void *> &pointers);
  void runSteps();

  Program prog;
  std::vector<CpuKernelFn> kernels;
  std::unique_ptr<CollectiveRunner> collectives;
  /// oneDNN convolution calls of the current run (runtime/CpuDnnl.h).
  cpu::ConvChain convChain;
  std::shared_ptr<void> keepAlive;
  std::vector<void *> pointers;  ///< current address of every buffer
  std::vector<void *> kept;      ///< per argument: its storage if persistent
  /// Per argument: whether a kernel writes it in place, and the copy of a
  /// caller's data it then works on.
  std::vector<bool> written;
  std::vector<void *> scratch;
  std::vector<std::pair<size_t, size_t>> carries; ///< (result, argument)
  std::vector<void *> owned;     ///< the arena and persistent arguments
  /// poisonSchedule(prog) when poisoning dead buffers, else empty.
  std::vector<std::vector<int>> poison;
  std::mutex runMutex;
  bool profiling = false;
  std::vector<double> seconds;
  int64_t calls = 0;
};

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_CPUEXECUTOR_H
