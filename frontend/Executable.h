//===- Executable.h - a graph compiled to kernels for a device ----*- C++ -*-===//
//
// What `Graph::compile` returns: the runtime Program of the graph, its
// compiled kernels and the buffers to run them on. MLIR-free, like Graph.h.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_FRONTEND_EXECUTABLE_H
#define TILEFUSE_FRONTEND_EXECUTABLE_H

#include "runtime/CpuExecutor.h"

#include <memory>
#include <string>

namespace tilefuse {

/// Stages of one compilation, kept for --emit and report().
struct CompiledArtifacts {
  Program program;
  std::string fusedIR; ///< graph dialect after fusion
  std::string tileIR;  ///< the tile kernels
  std::vector<CpuKernelFn> kernels;
  std::shared_ptr<void> code; ///< owns the machine code of `kernels`
  double compileSeconds = 0;
  /// Seconds per compiler stage, in pipeline order.
  std::vector<std::pair<std::string, double>> stageSeconds;
};

class Executable {
public:
  Executable(std::shared_ptr<const CompiledArtifacts> artifacts, bool cacheHit,
             double seconds);

  /// Checks dtypes and shapes of `args`, runs, returns copies of the results.
  std::vector<HostTensor> run(const std::vector<HostTensor> &args) {
    return executor.run(args);
  }
  /// Runs on caller memory (dtype and shape already checked by the caller).
  void run(const std::vector<const void *> &args) { executor.run(args); }
  void runThen(const std::vector<const void *> &args, const std::function<void()> &read) {
    executor.runThen(args, read);
  }
  const void *result(size_t i) const { return executor.result(i); }
  void makePersistent(size_t argument, const void *initial) {
    executor.makePersistent(argument, initial);
  }
  void carry(size_t result, size_t argument) { executor.carry(result, argument); }
  const void *persistent(size_t argument) const { return executor.persistent(argument); }

  const Program &program() const { return executor.program(); }
  void setProfiling(bool on) { executor.setProfiling(on); }
  const std::vector<double> &stepSeconds() const { return executor.stepSeconds(); }
  int64_t profiledCalls() const { return executor.profiledCalls(); }
  const CompiledArtifacts &artifacts() const { return *art; }
  /// Whether this compile found the graph in the in-process cache, and
  /// how long compile() took.
  bool cacheHit() const { return hit; }
  double compileSeconds() const { return seconds; }

private:
  std::shared_ptr<const CompiledArtifacts> art;
  CpuExecutor executor;
  bool hit;
  double seconds;
};

} // namespace tilefuse

#endif // TILEFUSE_FRONTEND_EXECUTABLE_H
