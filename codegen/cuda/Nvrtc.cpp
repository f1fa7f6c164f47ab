//===- Nvrtc.cpp ----------------------------------------------------------===//
#include "codegen/cuda/Nvrtc.h"
#include "codegen/CacheDir.h"
#include "runtime/CompileProgress.h"

#include "runtime/HostTensor.h"
#include "runtime/ProgramIO.h"

#include <nvrtc.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <thread>

#include <unistd.h>
#include <sstream>

using namespace tilefuse;

namespace {
void check(nvrtcResult r, const char *what, const std::string &log = "") {
  if (r != NVRTC_SUCCESS)
    throw CompileError(std::string("NVRTC ") + what + " failed: " + nvrtcGetErrorString(r) +
                       (log.empty() ? "" : "\n" + log));
}

/// ptxas -v prints, per kernel:
///   ptxas info    : Compiling entry function 'k' for 'sm_90'
///   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
///   ptxas info    : Used 10 registers, used 1 barriers, 128 bytes smem
std::vector<CudaKernelResources> parseResources(const std::string &log) {
  std::vector<CudaKernelResources> out;
  std::regex entry(R"(Compiling entry function '([^']+)')");
  std::regex frame(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  std::regex regs(R"(Used (\d+) registers)");
  std::regex smem(R"((\d+) bytes smem)");
  std::istringstream lines(log);
  std::string line;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_search(line, m, entry)) {
      out.push_back({m[1].str()});
    } else if (!out.empty() && std::regex_search(line, m, frame)) {
      out.back().stackBytes = std::stoi(m[1].str());
      out.back().spillStores = std::stoi(m[2].str());
      out.back().spillLoads = std::stoi(m[3].str());
    } else if (!out.empty() && std::regex_search(line, m, regs)) {
      out.back().registers = std::stoi(m[1].str());
      out.back().sharedBytes =
          std::regex_search(line, m, smem) ? std::stoi(m[1].str()) : 0;
    }
  }
  return out;
}
} // namespace

std::string tilefuse::nvrtcVersion() {
  int major = 0, minor = 0;
  ::nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

CudaBinary tilefuse::compileCuda(const std::string &source, const std::string &arch) {
  if (arch.rfind("sm_", 0) != 0)
    throw CompileError("CUDA architecture '" + arch + "' is not of the form sm_XX");
  nvrtcProgram prog;
  check(nvrtcCreateProgram(&prog, source.c_str(), "tilefuse_kernels.cu", 0, nullptr, nullptr),
        "program creation");
  std::string archOpt = "--gpu-architecture=" + arch;
  std::string include = std::string("--include-path=") + TILEFUSE_CUDA_INCLUDE_DIR;
  // The options here and kOptions (part of the cache key) must agree.
  const char *opts[] = {archOpt.c_str(), "--std=c++17", "--ptxas-options=-v",
                        include.c_str(), "-default-device"};
  nvrtcResult r = nvrtcCompileProgram(prog, 5, opts);
  size_t logSize = 0;
  nvrtcGetProgramLogSize(prog, &logSize);
  CudaBinary bin;
  bin.arch = arch;
  bin.log.resize(logSize);
  nvrtcGetProgramLog(prog, bin.log.data());
  if (!bin.log.empty() && bin.log.back() == '\0')
    bin.log.pop_back();
  if (r != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&prog);
    check(r, ("compilation for " + arch).c_str(), bin.log);
  }
  size_t size = 0;
  check(nvrtcGetCUBINSize(prog, &size), "cubin size");
  bin.cubin.resize(size);
  check(nvrtcGetCUBIN(prog, bin.cubin.data()), "cubin");
  nvrtcDestroyProgram(&prog);
  bin.kernels = parseResources(bin.log);
  return bin;
}

std::string tilefuse::compileCudaToPtx(const std::string &source, const std::string &arch) {
  if (arch.rfind("sm_", 0) != 0)
    throw CompileError("CUDA architecture '" + arch + "' is not of the form sm_XX");
  nvrtcProgram prog;
  check(nvrtcCreateProgram(&prog, source.c_str(), "tilefuse_kernels.cu", 0, nullptr, nullptr),
        "program creation");
  std::string archOpt = "--gpu-architecture=compute_" + arch.substr(3);
  std::string include = std::string("--include-path=") + TILEFUSE_CUDA_INCLUDE_DIR;
  const char *opts[] = {archOpt.c_str(), "--std=c++17", include.c_str(), "-default-device"};
  nvrtcResult r = nvrtcCompileProgram(prog, 4, opts);
  size_t logSize = 0;
  nvrtcGetProgramLogSize(prog, &logSize);
  std::string log(logSize, '\0');
  nvrtcGetProgramLog(prog, log.data());
  if (r != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&prog);
    check(r, ("compilation for " + arch).c_str(), log);
  }
  size_t size = 0;
  check(nvrtcGetPTXSize(prog, &size), "PTX size");
  std::string ptx(size, '\0');
  check(nvrtcGetPTX(prog, ptx.data()), "PTX");
  nvrtcDestroyProgram(&prog);
  if (!ptx.empty() && ptx.back() == '\0')
    ptx.pop_back();
  return ptx;
}

namespace {
constexpr char kEntryMagic[8] = {'T', 'F', 'C', 'U', 'B', 'I', 'N', '2'};
const char *kOptions = "--std=c++17 --ptxas-options=-v -default-device";

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void putU64(std::string &out, uint64_t v) { out.append(reinterpret_cast<const char *>(&v), 8); }
bool getU64(const std::string &in, size_t &pos, uint64_t &v) {
  if (in.size() - pos < 8)
    return false;
  std::memcpy(&v, in.data() + pos, 8);
  pos += 8;
  return true;
}

/// An entry holds its own key (architecture, options, compiler version and
/// the source): a valid entry under another key's file name -- swapped,
/// copied, or a hash collision -- is a miss, never another kernel's cubin.
std::string encode(const std::string &key, const CudaBinary &b) {
  std::string payload;
  for (const std::string *part : {&key, &b.log, &b.cubin}) {
    putU64(payload, part->size());
    payload += *part;
  }
  std::string out(kEntryMagic, sizeof(kEntryMagic));
  putU64(out, payload.size());
  putU64(out, fnv1a64(payload.data(), payload.size()));
  return out + payload;
}

/// False for anything but a complete, intact entry.
bool decode(const std::string &bytes, const std::string &key, CudaBinary &b) {
  size_t pos = sizeof(kEntryMagic);
  uint64_t size, sum;
  if (bytes.size() < pos || std::memcmp(bytes.data(), kEntryMagic, pos) != 0 ||
      !getU64(bytes, pos, size) || !getU64(bytes, pos, sum) || bytes.size() - pos != size ||
      fnv1a64(bytes.data() + pos, size) != sum)
    return false;
  std::string storedKey;
  for (std::string *part : {&storedKey, &b.log, &b.cubin}) {
    uint64_t n;
    if (!getU64(bytes, pos, n) || bytes.size() - pos < n)
      return false;
    part->assign(bytes, pos, n);
    pos += n;
  }
  return pos == bytes.size() && storedKey == key;
}
} // namespace

namespace {
/// Temporary entries older than an hour: a process killed between writing
/// and renaming one left it behind (a live writer renames within seconds).
void removeStaleTemporaries(const std::string &dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::error_code timeError;
    auto written = fs::last_write_time(it->path(), timeError);
    if (name.find(".cubin.tmp.") != std::string::npos && !timeError &&
        now - written > std::chrono::hours(1))
      fs::remove(it->path(), timeError);
  }
}
} // namespace

std::string tilefuse::cudaCacheDir() { return cacheRoot() + "/cubin"; }

std::vector<CudaBinary> tilefuse::compileCudaUnits(const std::vector<std::string> &units,
                                                   const std::string &arch,
                                                   std::vector<bool> *cached) {
  namespace fs = std::filesystem;
  std::string dir = cudaCacheDir();
  std::error_code ec;
  fs::create_directories(dir, ec); // an unwritable cache only costs recompiles
  removeStaleTemporaries(dir);
  std::string salt = arch + '\0' + kOptions + '\0' + nvrtcVersion() + '\0';
  std::vector<CudaBinary> out(units.size());
  std::vector<bool> hit(units.size(), false);
  std::vector<std::string> errors(units.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < units.size(); i = next++) {
      std::string key = salt + units[i];
      std::string path = dir + "/" + hex(fnv1a64(key.data(), key.size())) + "-" +
                         hex(fnv1a64(units[i].data(), units[i].size())) + ".cubin";
      std::error_code typeError;
      std::ifstream in;
      if (fs::is_regular_file(path, typeError)) // a directory or device there is a miss
        in.open(path, std::ios::binary);
      if (in) {
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        CudaBinary b;
        if (decode(bytes, key, b)) {
          b.arch = arch;
          b.kernels = parseResources(b.log);
          out[i] = std::move(b);
          hit[i] = true;
          if (CompileProgress *p = CompileProgress::current())
            p->kernelsDone(int64_t(out[i].kernels.size()));
          continue;
        }
      }
      try {
        out[i] = compileCuda(units[i], arch);
      } catch (const CompileError &e) {
        errors[i] = e.what();
        continue;
      }
      if (CompileProgress *p = CompileProgress::current())
        p->kernelsDone(int64_t(out[i].kernels.size()));
      // Write beside, then rename: readers see the old entry or the new
      // one, never half of one.
      std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                        std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
      bool written;
      {
        std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
        std::string bytes = encode(key, out[i]);
        o.write(bytes.data(), std::streamsize(bytes.size()));
        o.close();
        written = bool(o); // a full disk: never rename a truncated entry in
      }
      std::error_code renameError;
      if (written)
        fs::rename(tmp, path, renameError);
      if (!written || renameError)
        fs::remove(tmp, renameError);
    }
  };
  unsigned n = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(),
                                               unsigned(units.size())));
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < n; ++t)
    threads.emplace_back(work);
  work();
  for (std::thread &t : threads)
    t.join();
  for (const std::string &e : errors)
    if (!e.empty())
      throw CompileError(e);
  if (cached)
    *cached = hit;
  return out;
}
