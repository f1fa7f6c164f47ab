//===- Nvrtc.h - CUDA C -> cubin without a GPU ------------------------*- C++ -*-===//
//
// NVRTC compiles for a given sm_XX on any machine with the CUDA toolkit;
// ptxas's resource report (registers, spills, stack) is parsed per kernel.
// No MLIR here.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_CODEGEN_CUDA_NVRTC_H
#define TILEFUSE_CODEGEN_CUDA_NVRTC_H

#include <string>
#include <vector>

namespace tilefuse {

struct CudaKernelResources {
  std::string name;
  int registers = -1;
  int spillStores = -1, spillLoads = -1;
  int stackBytes = -1;
  int sharedBytes = -1; ///< static shared memory (block reductions)
};

struct CudaBinary {
  std::string arch;  ///< "sm_90"
  std::string cubin; ///< the ELF image
  std::string log;   ///< NVRTC's and ptxas's messages
  std::vector<CudaKernelResources> kernels;
};

/// Compiles `source` to a cubin for `arch` ("sm_80", "sm_90", ...). Throws
/// CompileError with the compile log on failure.
CudaBinary compileCuda(const std::string &source, const std::string &arch);
/// "13.0"
std::string nvrtcVersion();
/// PTX of `source` for virtual architecture compute_XX of `arch` (sm_XX):
/// what the emitted C became, for tests and for reading.
std::string compileCudaToPtx(const std::string &source, const std::string &arch);

/// compileCuda for every unit, in parallel (one thread per core), through
/// a disk cache of cubins keyed by a hash of (source, arch, options, NVRTC
/// version): $TILEFUSE_CACHE_DIR, else $XDG_CACHE_HOME/tilefuse, else
/// ~/.cache/tilefuse. Entries are written to a temporary file and renamed
/// (safe when processes compile the same kernels at once) and carry a
/// checksum: a corrupt or truncated entry is compiled again and replaced.
/// `cached[i]` says whether unit i came from the cache.
std::vector<CudaBinary> compileCudaUnits(const std::vector<std::string> &units,
                                         const std::string &arch,
                                         std::vector<bool> *cached = nullptr);
/// The cache folder compileCudaUnits uses.
std::string cudaCacheDir();

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_CUDA_NVRTC_H
