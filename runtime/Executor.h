//===- Executor.h - runs a Program on one device -------------------*- C++ -*-===//
//
// What every executor offers (CPU: CpuExecutor.h, CUDA: CudaExecutor.h), so
// Python, tilefuse-run and compiled functions drive either the same way.
// An executor owns the buffers of one Program, allocated once and reused by
// every call; persistent arguments (a training step's parameters and
// optimizer state) live in it between calls.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_EXECUTOR_H
#define TILEFUSE_RUNTIME_EXECUTOR_H

#include "runtime/Program.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tilefuse {

class Communicator;

/// Where an argument's data is: host memory, or memory of the executor's
/// device (a CUDA device pointer, e.g. a tensor passed by DLPack). nullptr
/// stands for a persistent argument.
struct ArgRef {
  const void *data = nullptr;
  bool onDevice = false;
};

class Executor {
public:
  virtual ~Executor() = default;

  /// "cpu" or "cuda:<ordinal>".
  virtual std::string device() const = 0;
  virtual const Program &program() const = 0;

  /// Runs with argument i at args[i] (row-major, of the argument's dtype
  /// and shape: the caller checks), then calls `read` (which may call
  /// result()) before any other call of this executor runs. Calls from
  /// several threads take turns.
  virtual void runThen(const std::vector<ArgRef> &args, const std::function<void()> &read) = 0;
  void run(const std::vector<ArgRef> &args) {
    runThen(args, [] {});
  }
  /// Host arguments: checks dtypes and shapes, runs, returns copies.
  std::vector<HostTensor> run(const std::vector<HostTensor> &args);

  /// Result i of the last run in host memory, valid until the next run.
  virtual const void *result(size_t i) = 0;
  /// Result i of the last run where the device keeps it (host memory on
  /// the CPU), valid until the next run.
  virtual void *deviceResult(size_t i) = 0;

  /// Argument `argument` lives in the executor from now on, starting as a
  /// copy of host data `initial`; run() takes nullptr in its place.
  virtual void makePersistent(size_t argument, const void *initial) = 0;
  /// After every run, result `result` becomes the value of persistent
  /// argument `argument` (the buffers swap: no copy).
  virtual void carry(size_t result, size_t argument) = 0;
  /// Current value of a persistent argument in host memory (valid until
  /// the next run); nullptr when the argument is not persistent.
  virtual const void *persistent(size_t argument) = 0;

  /// Binds the program's process group `group` to `comm` (runtime/
  /// Communicator.h) for the runs that follow; throws CompileError for an
  /// unknown group, a size other than the compiled one, or an executor that
  /// cannot run collectives.
  virtual void setCommunicator(const std::string &group, std::shared_ptr<Communicator> comm) = 0;
  /// Binds group `group` to an NCCL communicator this rank joins (`rank` of
  /// `size`, with the group's NCCL unique id, runtime/Nccl.h): how a GPU
  /// executor's collectives run, on its own streams. Executors without
  /// NCCL refuse.
  virtual void setNcclCommunicator(const std::string &group, const std::string &uniqueId,
                                   int64_t rank, int64_t size);

  /// When on, run() adds each step's wall time to stepSeconds().
  virtual void setProfiling(bool on) = 0;
  virtual const std::vector<double> &stepSeconds() const = 0;
  virtual int64_t profiledCalls() const = 0;
};

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_EXECUTOR_H
