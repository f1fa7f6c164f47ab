//===- Nvrtc.cpp ----------------------------------------------------------===//
#include "codegen/cuda/Nvrtc.h"

#include "runtime/HostTensor.h"

#include <nvrtc.h>

#include <regex>
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
///   ptxas info    : Used 10 registers, used 0 barriers
std::vector<CudaKernelResources> parseResources(const std::string &log) {
  std::vector<CudaKernelResources> out;
  std::regex entry(R"(Compiling entry function '([^']+)')");
  std::regex frame(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  std::regex regs(R"(Used (\d+) registers)");
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
