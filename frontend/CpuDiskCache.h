//===- CpuDiskCache.h - compiled CPU graphs kept between processes -*- C++ -*-===//
//
// A process that compiles a graph it (or another process) compiled before
// loads the Program and the kernels' object files from disk and links them
// in a JIT: no MLIR pass and no code generation runs. Entries are artifact
// containers (versioned, checksummed) in <cacheRoot()>/cpu, written beside
// and renamed; a corrupt, truncated or foreign entry is a miss that the
// compile replaces, and so is an entry another user owns or could write
// (it is machine code this process would run). The key covers the graph, the target and compile
// settings, this build of tilefuse, LLVM and the CPU the code is for.
// TILEFUSE_CPU_CACHE=0 turns the cache off; it keeps at most
// TILEFUSE_CPU_CACHE_MB (default 1024) MiB, dropping the least recently
// used entries.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_FRONTEND_CPUDISKCACHE_H
#define TILEFUSE_FRONTEND_CPUDISKCACHE_H

#include <memory>
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

} // namespace tilefuse

#endif // TILEFUSE_FRONTEND_CPUDISKCACHE_H
