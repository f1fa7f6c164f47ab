//===- Executable.h - a graph compiled to kernels for a device ----*- C++ -*-===//
//
// What `Graph::compile` returns: the runtime Program of the graph, its
// compiled kernels and the buffers to run them on. MLIR-free, like Graph.h.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_FRONTEND_EXECUTABLE_H
#define TILEFUSE_FRONTEND_EXECUTABLE_H

#include "frontend/Graph.h"
#include "runtime/CpuExecutor.h"

#include <memory>
#include <string>

namespace tilefuse {

/// Stages of one compilation, kept for --emit and report().
struct CompiledArtifacts {
  Program program;
  std::string fusedIR; ///< graph dialect after fusion
  std::string tileIR;  ///< the tile kernels
  std::string target; ///< "cpu" or "cuda:sm_XX"
  std::vector<CpuKernelFn> kernels;
  std::shared_ptr<void> code; ///< owns the machine code of `kernels`
  /// CUDA: (kernel name, cubin) per kernel, plus the runtime library's.
  std::vector<std::pair<std::string, std::string>> cubins;
  std::vector<CudaKernelReport> cudaReports;
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
    return executor->run(args);
  }
  /// The executor running the program (CPU or CUDA), see runtime/Executor.h.
  Executor &exec() { return *executor; }
  const Program &program() const { return executor->program(); }
  const CompiledArtifacts &artifacts() const { return *art; }
  /// Whether this compile found the graph in the in-process cache, and
  /// how long compile() took.
  bool cacheHit() const { return hit; }
  double compileSeconds() const { return seconds; }

private:
  std::shared_ptr<const CompiledArtifacts> art;
  std::unique_ptr<Executor> executor;
  bool hit;
  double seconds;
};

} // namespace tilefuse

#endif // TILEFUSE_FRONTEND_EXECUTABLE_H
