//===- DiskCache.h - compiles kept between processes --------------*- C++ -*-===//
//
// Two caches of whole compiles in <cacheRoot()>, beside the cubin cache:
//
// - cpu/: a process that compiles a graph it (or another process) compiled
//   before loads the Program and the kernels' object files from disk and
//   links them in a JIT: no MLIR pass and no code generation runs.
// - cuda-artifacts/: an artifact for a CUDA target (Graph.export) written
//   before is read back whole: no MLIR pass, no CUDA rendering (NVRTC's own
//   cubin cache only saves the NVRTC step).
//
// Entries are artifact containers (versioned, checksummed), written beside
// and renamed; a corrupt, truncated or foreign entry is a miss that the
// compile replaces, and so is an entry another user owns or could write
// (it is code this process would run). The keys cover the graph, the target
// and compile settings, this build of tilefuse, and the compiler the code
// comes from (LLVM and the CPU; NVRTC). TILEFUSE_DISK_CACHE=0 (or, for the
// CPU, TILEFUSE_CPU_CACHE=0) turns them off; each keeps at most
// TILEFUSE_DISK_CACHE_MB (or TILEFUSE_CPU_CACHE_MB; default 1024) MiB,
// dropping the least recently used entries.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_FRONTEND_DISKCACHE_H
#define TILEFUSE_FRONTEND_DISKCACHE_H

#include <memory>
#include <optional>
#include <string>

namespace tilefuse {

struct CompiledArtifacts;
struct CpuCode;

/// The folder of the CPU entries.
std::string cpuCacheDir();

/// The disk key of a compile whose in-process key is `key`; empty when the
/// cache is off or this build of tilefuse cannot be identified (its code
/// could then differ from an entry's without the key saying so).
std::string cpuDiskKey(const std::string &key);

/// The compile stored under `diskKey`, its kernels linked and ready; null
/// on a miss (no entry, or one that is corrupt or for another key).
std::shared_ptr<CompiledArtifacts> loadCpuCompile(const std::string &diskKey);

/// Stores `art` (a CPU compile) with the machine code it runs. Failing to
/// write (a read-only cache folder, a full disk) only costs recompiles.
void storeCpuCompile(const std::string &diskKey, const CompiledArtifacts &art,
                     const CpuCode &code);

/// The disk key of an artifact for CUDA target whose compile key is `key`
/// (the graph, target, settings and metadata); empty when the cache is off
/// or this build cannot be identified.
std::string cudaArtifactDiskKey(const std::string &key);

/// The artifact's bytes stored under `diskKey`; nullopt on a miss.
std::optional<std::string> loadCudaArtifact(const std::string &diskKey);

/// Stores an artifact's bytes under `diskKey` (failing to write only costs
/// recompiles).
void storeCudaArtifact(const std::string &diskKey, const std::string &bytes);

} // namespace tilefuse

#endif // TILEFUSE_FRONTEND_DISKCACHE_H
