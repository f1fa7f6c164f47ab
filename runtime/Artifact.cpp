//===- Artifact.cpp -------------------------------------------------------===//
#include "runtime/Artifact.h"
#ifdef TILEFUSE_HAVE_CUDA_EXECUTOR
#include "runtime/CudaExecutor.h"
#endif

#include "runtime/ProgramIO.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

using namespace tilefuse;

namespace {

constexpr char kMagic[8] = {'T', 'F', 'A', 'R', 'T', 'I', 'F', 'T'};

void putU64(std::string &o, uint64_t v) { o.append(reinterpret_cast<const char *>(&v), 8); }

/// `s` with bytes outside printable ASCII as \xNN: names read from a
/// damaged file go into one-line error messages.
std::string printable(const std::string &s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}
void putStr(std::string &o, const std::string &s) {
  putU64(o, s.size());
  o += s;
}

struct Reader {
  const std::string &in;
  size_t pos;
  uint64_t u64(const char *what) {
    if (in.size() - pos < 8)
      throw CompileError(std::string("truncated artifact: ") + what + " is cut off");
    uint64_t v;
    std::memcpy(&v, in.data() + pos, 8);
    pos += 8;
    return v;
  }
  std::string str(const char *what) {
    uint64_t n = u64(what);
    if (in.size() - pos < n)
      throw CompileError(std::string("truncated artifact: ") + what + " is cut off");
    std::string s = in.substr(pos, n);
    pos += n;
    return s;
  }
};

/// The library kept loaded for the life of the executor, with the
/// anonymous file it was loaded from: dlopen knows a library by its path,
/// and /proc/self/fd/N names another library once N is closed and reused,
/// so a second artifact loaded while this one lives would get this one's
/// code. The file stays open (its number taken) until the library goes.
struct LoadedLibrary {
  void *handle = nullptr;
  int fd = -1;
  ~LoadedLibrary() {
    if (handle)
      dlclose(handle);
    if (fd >= 0)
      ::close(fd);
  }
};

} // namespace

const std::vector<std::string> &tilefuse::checkedCpuFeatures() {
  static const std::vector<std::string> features = {
      "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
      "avx512bf16", "avx512fp16", "avx512vnni", "amx-bf16", "amx-tile"};
  return features;
}

bool tilefuse::hostHasCpuFeature(const std::string &feature) {
#if defined(__x86_64__)
#define TF_CHECK(name)                                                                             \
  if (feature == name)                                                                             \
    return __builtin_cpu_supports(name);
  TF_CHECK("avx") TF_CHECK("avx2") TF_CHECK("fma") TF_CHECK("f16c") TF_CHECK("avx512f")
  TF_CHECK("avx512bw") TF_CHECK("avx512vl") TF_CHECK("avx512dq") TF_CHECK("avx512bf16")
  TF_CHECK("avx512fp16") TF_CHECK("avx512vnni") TF_CHECK("amx-bf16") TF_CHECK("amx-tile")
#undef TF_CHECK
#endif
  return false;
}

std::string tilefuse::writeArtifact(const Artifact &a) {
  std::string payload;
  putStr(payload, a.target);
  putU64(payload, a.cpuFeatures.size());
  for (const std::string &f : a.cpuFeatures)
    putStr(payload, f);
  putStr(payload, serializeProgram(a.program));
  putU64(payload, a.blobs.size());
  // Each kernel blob carries its own hash: the code is what a damaged
  // artifact would crash or silently mislead with.
  for (const auto &[name, bytes] : a.blobs) {
    putStr(payload, name);
    putStr(payload, bytes);
    putU64(payload, fnv1a64(bytes.data(), bytes.size()));
  }
  putStr(payload, a.graph);
  putStr(payload, a.metadata);
  std::string out(kMagic, sizeof(kMagic));
  uint32_t version = kArtifactFormatVersion;
  out.append(reinterpret_cast<const char *>(&version), 4);
  putU64(out, payload.size());
  putU64(out, fnv1a64(payload.data(), payload.size()));
  return out + payload;
}

Artifact tilefuse::readArtifact(const std::string &bytes) {
  if (bytes.size() < sizeof(kMagic) + 4 || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    throw CompileError("not a tilefuse artifact (bad magic number)");
  uint32_t version;
  std::memcpy(&version, bytes.data() + sizeof(kMagic), 4);
  if (version != kArtifactFormatVersion)
    throw CompileError("artifact format version " + std::to_string(version) +
                       " is not supported (this runtime reads version " +
                       std::to_string(kArtifactFormatVersion) + "); recompile the model");
  Reader head{bytes, sizeof(kMagic) + 4};
  uint64_t size = head.u64("the header"), sum = head.u64("the header");
  if (bytes.size() - head.pos != size)
    throw CompileError("truncated artifact: " + std::to_string(bytes.size() - head.pos) +
                       " payload bytes, the header says " + std::to_string(size));
  if (fnv1a64(bytes.data() + head.pos, size) != sum)
    throw CompileError("corrupt artifact: the checksum does not match its contents");
  Reader r{bytes, head.pos};
  Artifact a;
  a.target = r.str("the target");
  uint64_t nf = r.u64("the CPU features");
  for (uint64_t i = 0; i < nf && r.pos < bytes.size(); ++i)
    a.cpuFeatures.push_back(r.str("a CPU feature"));
  a.program = deserializeProgram(r.str("the program"));
  uint64_t nb = r.u64("the kernel count");
  for (uint64_t i = 0; i < nb; ++i) {
    std::string name = r.str("a kernel name");
    std::string code = r.str("kernel code");
    if (r.u64("a kernel hash") != fnv1a64(code.data(), code.size()))
      throw CompileError("corrupt artifact: the code of " + printable(name) +
                         " does not match its hash");
    a.blobs.emplace_back(std::move(name), std::move(code));
  }
  a.graph = r.str("the graph");
  a.metadata = r.str("the metadata");
  if (r.pos != bytes.size())
    throw CompileError("corrupt artifact: bytes left after the last field");
  return a;
}

Artifact tilefuse::readArtifactFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw CompileError("cannot open artifact " + path);
  std::stringstream s;
  s << in.rdbuf();
  return readArtifact(s.str());
}

std::unique_ptr<Executor> tilefuse::loadArtifact(const Artifact &a, LoadOptions load) {
  if (a.target == "cpu")
    return loadCpuArtifact(a);
  if (a.target.rfind("cuda:sm_", 0) != 0)
    throw CompileError("the artifact targets '" + a.target + "', which this runtime does not know");
#ifdef TILEFUSE_HAVE_CUDA_EXECUTOR
  std::string why = cudaUnavailableReason();
  if (!why.empty())
    throw CompileError("the artifact targets " + a.target + ", but CUDA is not available: " +
                       why);
  std::string arch = a.target.substr(5), here = cudaDeviceArch(0);
  if (arch != here)
    throw CompileError("the artifact's kernels are for " + arch + ", this GPU is " + here +
                       "; compile it with --target=cuda:" + here);
  CudaOptions options;
  options.graphs = load.cudaGraphs;
  options.tf32 = load.tf32;
  return std::make_unique<CudaExecutor>(a.program, a.blobs, options);
#else
  (void)load;
  throw CompileError("the artifact targets " + a.target +
                     ", but this runtime was built without the CUDA executor (the CUDA "
                     "toolkit's headers were not found when it was built)");
#endif
}

std::unique_ptr<CpuExecutor> tilefuse::loadCpuArtifact(const Artifact &a) {
  if (a.target != "cpu")
    throw CompileError("the artifact targets " + a.target + "; a CPU executor cannot run it");
  std::string missing;
  for (const std::string &f : a.cpuFeatures)
    if (!hostHasCpuFeature(f))
      missing += (missing.empty() ? "" : ", ") + printable(f);
  if (!missing.empty())
    throw CompileError("the artifact's kernels use CPU features this machine lacks (" +
                       missing + "); compile the model on (or for) this machine");
  if (a.blobs.size() != 1 || a.blobs[0].first != "kernels.so")
    throw CompileError("corrupt artifact: a CPU artifact holds one kernel library");
  // dlopen needs a file: an anonymous in-memory one, which nothing can
  // leave behind; a private temporary file where memfd_create is missing,
  // removed once loaded.
  const std::string &so = a.blobs[0].second;
  char path[64] = "/tmp/tilefuse-kernels-XXXXXX";
  bool anonymous = true;
  int fd = memfd_create("tilefuse-kernels", MFD_CLOEXEC);
  if (fd >= 0) {
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  } else {
    anonymous = false;
    fd = mkstemp(path);
  }
  if (fd < 0)
    throw CompileError("cannot create a temporary file for the kernel library");
  bool written = ::write(fd, so.data(), so.size()) == ssize_t(so.size());
  auto lib = std::make_shared<LoadedLibrary>();
  if (written)
    lib->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  std::string error = lib->handle ? "" : (written ? dlerror() : "short write");
  if (anonymous && lib->handle) {
    lib->fd = fd;
  } else {
    ::close(fd);
  }
  if (!anonymous)
    std::remove(path);
  if (!lib->handle)
    throw CompileError("cannot load the artifact's kernel library: " + error);
  std::vector<CpuKernelFn> fns;
  std::vector<std::string> symbols = kernelSymbols(a.program);
  for (size_t i = 0; i < symbols.size(); ++i) {
    void *fn = dlsym(lib->handle, symbols[i].c_str());
    if (!fn)
      throw CompileError("corrupt artifact: the library has no kernel " + symbols[i] + " for " +
                         a.program.kernels[i].name +
                         " (the step that launches it does not match the compiled code)");
    fns.push_back(reinterpret_cast<CpuKernelFn>(fn));
  }
  return std::make_unique<CpuExecutor>(a.program, std::move(fns), lib);
}
