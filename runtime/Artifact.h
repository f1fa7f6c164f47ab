//===- Artifact.h - compiled programs as files (.tfa) ---------------*- C++ -*-===//
//
// One file holds everything a runtime needs to run a compiled graph: the
// target, the Program (ProgramIO.h), and the kernels (a shared library for
// the CPU target, one cubin per kernel for CUDA).
//
//   "TFARTIFT" | u32 version | u64 payload bytes | u64 FNV-1a of payload | payload
//
// No MLIR here: tilefuse-run and tilefuse.load read artifacts with the
// runtime alone.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_ARTIFACT_H
#define TILEFUSE_RUNTIME_ARTIFACT_H

#include "runtime/CpuExecutor.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tilefuse {

// 3: kernels are compiled under kernelSymbol names.
constexpr uint32_t kArtifactFormatVersion = 3;

struct Artifact {
  std::string target;                   ///< "cpu" or "cuda:sm_XX"
  std::vector<std::string> cpuFeatures; ///< CPU target: ISA features the code uses
  Program program;
  /// CPU: {"kernels.so", bytes}; CUDA: {kernel name, cubin} per kernel.
  std::vector<std::pair<std::string, std::string>> blobs;
  std::string graph; ///< the source graph's text, for reference
  /// What the producer records about the interface (the Python API: JSON
  /// with the argument and result structure and names); opaque here.
  std::string metadata;
};

/// The x86 ISA features an artifact can require, by their LLVM names: the
/// ones this runtime can check on the machine that loads it.
const std::vector<std::string> &checkedCpuFeatures();
/// Whether this machine's CPU has `feature` (one of checkedCpuFeatures()).
bool hostHasCpuFeature(const std::string &feature);

std::string writeArtifact(const Artifact &artifact);
/// Throws CompileError for a file that is not an artifact, of another
/// format version, truncated or corrupt, saying which.
Artifact readArtifact(const std::string &bytes);
Artifact readArtifactFile(const std::string &path);

/// A CPU executor for a CPU-target artifact: checks this CPU has the
/// features the code needs, loads the kernel library.
std::unique_ptr<CpuExecutor> loadCpuArtifact(const Artifact &artifact);
/// How a CUDA artifact runs (see CudaOptions in CudaExecutor.h).
struct LoadOptions {
  bool cudaGraphs = true; ///< capture calls into CUDA graphs and replay them
  bool tf32 = false;      ///< let f32 GEMMs use tf32 (~1e-3 relative error)
};
/// An executor for the artifact's target: the CPU, or the first GPU when
/// the artifact's architecture is that GPU's. Says why when it cannot: no
/// driver, no GPU, another architecture, a runtime built without the CUDA
/// executor.
std::unique_ptr<Executor> loadArtifact(const Artifact &artifact, LoadOptions options = {});

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_ARTIFACT_H
