//===- DiskCache.cpp - compiles kept between processes --------------------===//
#include "frontend/DiskCache.h"

#include "codegen/CacheDir.h"
#include "codegen/cpu/CpuJit.h"
#include "codegen/cpu/CpuTarget.h"
#include "frontend/Executable.h"
#include "runtime/Artifact.h"
#include "runtime/ProgramIO.h"

#include "llvm/Config/llvm-config.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <dlfcn.h>
#include <link.h>
#include <filesystem>
#include <optional>
#include <set>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace tilefuse;
namespace fs = std::filesystem;

namespace {

/// `path`'s size and modification time, or "" when it cannot be read.
std::string fileStamp(const std::string &path) {
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0)
    return "";
  return path + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

/// This build of tilefuse: every file its code was loaded from (the one
/// holding this function, and any tilefuse shared library beside it, as in
/// a build with shared libraries), with sizes and modification times: a
/// rebuild of any part changes it. Empty when a file cannot be identified.
std::string buildIdentity() {
  static const std::string identity = [] {
    Dl_info info;
    if (!dladdr(reinterpret_cast<void *>(&buildIdentity), &info) || !info.dli_fname)
      return std::string();
    // The main program is named as it was started (maybe a relative path).
    std::string self = fileStamp(info.dli_fname);
    if (self.empty()) {
      char exe[4096];
      ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
      self = n > 0 ? fileStamp(std::string(exe, size_t(n))) : "";
    }
    if (self.empty())
      return std::string();
    std::set<std::string> libraries;
    dl_iterate_phdr(
        [](struct dl_phdr_info *object, size_t, void *out) {
          std::string name = object->dlpi_name ? object->dlpi_name : "";
          std::string lower = name;
          std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
          if (lower.find("tilefuse") != std::string::npos)
            static_cast<std::set<std::string> *>(out)->insert(name);
          return 0;
        },
        &libraries);
    std::string all = self;
    for (const std::string &library : libraries) {
      std::string stamp = fileStamp(library);
      if (stamp.empty())
        return std::string();
      all += "\n" + stamp;
    }
    return all;
  }();
  return identity;
}

/// Whether the disk caches are off (TILEFUSE_DISK_CACHE=0; for the CPU
/// also its older name TILEFUSE_CPU_CACHE=0).
bool cacheOff(bool cpu) {
  auto off = [](const char *name) {
    const char *v = std::getenv(name);
    return v && std::string(v) == "0";
  };
  return off("TILEFUSE_DISK_CACHE") || (cpu && off("TILEFUSE_CPU_CACHE"));
}

uint64_t capacityBytes() {
  for (const char *name : {"TILEFUSE_DISK_CACHE_MB", "TILEFUSE_CPU_CACHE_MB"}) {
    const char *v = std::getenv(name);
    if (v && *v) {
      char *end = nullptr;
      long long mb = std::strtoll(v, &end, 10);
      if (*end == '\0' && mb >= 0)
        return uint64_t(mb) << 20;
    }
  }
  return uint64_t(1024) << 20;
}

std::string cudaArtifactDir() { return cacheRoot() + "/cuda-artifacts"; }

std::string entryPath(const std::string &dir, const std::string &diskKey) {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.tfa",
                static_cast<unsigned long long>(fnv1a64(diskKey.data(), diskKey.size())));
  return dir + "/" + name;
}

/// The entry at `path` with target `target` stored under `diskKey`;
/// nullopt when there is none, it is corrupt, another key's, or not this
/// user's alone (an entry is code this process will run).
std::optional<Artifact> readOwnEntry(const std::string &path, const std::string &target,
                                     const std::string &diskKey) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)))
    return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  Artifact entry;
  try {
    entry = readArtifact(bytes.str());
  } catch (const CompileError &) {
    return std::nullopt; // corrupt or truncated: compiled again and replaced
  }
  if (entry.target != target || entry.metadata != diskKey)
    return std::nullopt; // another key with the same hash
  std::error_code ec;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec); // recently used
  return entry;
}

void evict(const std::string &dir);

/// Writes `entry` to `path` in `dir`: beside, then renamed (readers see
/// the old entry or the new one), writable by this user alone.
void writeEntry(const std::string &dir, const std::string &path, const Artifact &entry) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    std::string bytes = writeArtifact(entry);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      return;
    }
  }
  // Whatever the umask: loads refuse entries others could write.
  fs::permissions(tmp, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                           fs::perms::others_read, ec);
  fs::rename(tmp, path, ec);
  if (ec)
    fs::remove(tmp, ec);
  evict(dir);
}

/// Removes the least recently used entries (and temporaries left by killed
/// writers) until the folder holds at most the capacity.
void evict(const std::string &dir) {
  std::vector<std::pair<fs::file_time_type, fs::path>> entries;
  uint64_t total = 0;
  std::error_code ec;
  auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e;
    auto written = fs::last_write_time(it->path(), e);
    if (e || !it->is_regular_file(e))
      continue;
    std::string name = it->path().filename().string();
    if (name.find(".tfa.tmp.") != std::string::npos) {
      if (now - written > std::chrono::hours(1))
        fs::remove(it->path(), e);
      continue;
    }
    if (it->path().extension() != ".tfa")
      continue;
    uint64_t size = it->file_size(e);
    if (e)
      continue;
    total += size;
    entries.emplace_back(written, it->path());
  }
  uint64_t limit = capacityBytes();
  std::sort(entries.begin(), entries.end());
  for (auto &[when, path] : entries) {
    if (total <= limit)
      break;
    std::error_code e;
    uint64_t size = fs::file_size(path, e);
    if (!e && fs::remove(path, e))
      total -= size;
  }
}

} // namespace

std::string tilefuse::cpuCacheDir() { return cacheRoot() + "/cpu"; }

std::string tilefuse::cpuDiskKey(const std::string &key) {
  std::string identity = buildIdentity();
  if (cacheOff(/*cpu=*/true) || identity.empty())
    return "";
  auto target = selectCpuTarget(/*runsHere=*/true);
  if (!target) {
    llvm::consumeError(target.takeError());
    return "";
  }
  return "tilefuse cpu compile\n" + identity + "\nLLVM " LLVM_VERSION_STRING "\n" +
         target->triple + " " + target->cpu + " " + target->features + "\n" + key;
}

std::shared_ptr<CompiledArtifacts> tilefuse::loadCpuCompile(const std::string &diskKey) {
  if (diskKey.empty())
    return nullptr;
  auto start = std::chrono::steady_clock::now();
  std::optional<Artifact> entry = readOwnEntry(entryPath(cpuCacheDir(), diskKey), "cpu", diskKey);
  if (!entry)
    return nullptr;
  auto art = std::make_shared<CompiledArtifacts>();
  std::vector<std::string> objects;
  std::map<std::string, std::string> aliases;
  for (auto &[name, blob] : entry->blobs) {
    if (name == "object") {
      objects.push_back(std::move(blob));
    } else if (name == "aliases") {
      std::istringstream lines(blob);
      std::string alias, kept;
      while (lines >> alias >> kept)
        aliases[alias] = kept;
    } else if (name == "fused.mlir") {
      art->fusedIR = std::move(blob);
    } else if (name == "tile.mlir") {
      art->tileIR = std::move(blob);
    }
  }
  auto code = linkCpuObjects(objects, aliases, kernelSymbols(entry->program));
  if (!code) {
    llvm::consumeError(code.takeError());
    return nullptr;
  }
  art->program = std::move(entry->program);
  art->target = "cpu";
  art->kernels = std::move(code->kernels);
  art->code = std::move(code->owner);
  art->compileSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  art->stageSeconds = {{"disk cache", art->compileSeconds}};
  return art;
}

void tilefuse::storeCpuCompile(const std::string &diskKey, const CompiledArtifacts &art,
                               const CpuCode &code) {
  if (diskKey.empty())
    return;
  Artifact entry;
  entry.target = "cpu";
  entry.program = art.program;
  entry.metadata = diskKey;
  for (const std::string &object : code.objects)
    entry.blobs.emplace_back("object", object);
  std::string aliases;
  for (const auto &[alias, kept] : code.aliases)
    aliases += alias + " " + kept + "\n";
  entry.blobs.emplace_back("aliases", std::move(aliases));
  entry.blobs.emplace_back("fused.mlir", art.fusedIR);
  entry.blobs.emplace_back("tile.mlir", art.tileIR);
  std::string dir = cpuCacheDir();
  writeEntry(dir, entryPath(dir, diskKey), entry);
}

// A CUDA artifact is kept inside an entry of its own (target "cuda
// artifact", the disk key as metadata): the artifact's own metadata is the
// caller's.
constexpr const char *kCudaArtifactEntry = "cuda artifact";

std::string tilefuse::cudaArtifactDiskKey(const std::string &key) {
  std::string identity = buildIdentity();
  if (cacheOff(/*cpu=*/false) || identity.empty())
    return "";
  return "tilefuse cuda artifact\n" + identity + "\n" + key;
}

std::optional<std::string> tilefuse::loadCudaArtifact(const std::string &diskKey) {
  if (diskKey.empty())
    return std::nullopt;
  std::optional<Artifact> entry =
      readOwnEntry(entryPath(cudaArtifactDir(), diskKey), kCudaArtifactEntry, diskKey);
  if (!entry || entry->blobs.size() != 1 || entry->blobs[0].first != "artifact")
    return std::nullopt;
  try {
    readArtifact(entry->blobs[0].second); // checks the stored artifact whole
  } catch (const CompileError &) {
    return std::nullopt;
  }
  return std::move(entry->blobs[0].second);
}

void tilefuse::storeCudaArtifact(const std::string &diskKey, const std::string &bytes) {
  if (diskKey.empty())
    return;
  Artifact entry;
  entry.target = kCudaArtifactEntry;
  entry.metadata = diskKey;
  entry.blobs.emplace_back("artifact", bytes);
  std::string dir = cudaArtifactDir();
  writeEntry(dir, entryPath(dir, diskKey), entry);
}
