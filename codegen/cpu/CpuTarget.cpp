//===- CpuTarget.cpp - the CPU that kernels are compiled for --------------===//
#include "codegen/cpu/CpuTarget.h"

#include "runtime/Artifact.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"
#include "llvm/TargetParser/X86TargetParser.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

using namespace tilefuse;

namespace {

void initializeNativeTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

llvm::Error failure(const llvm::Twine &message) {
  return llvm::make_error<llvm::StringError>(message, llvm::inconvertibleErrorCode());
}

/// Features `cpu` implies, by their LLVM names (x86 only; empty elsewhere).
std::vector<std::string> featuresOfNamedCpu(const llvm::Triple &triple, llvm::StringRef cpu) {
  std::vector<std::string> out;
  if (triple.getArch() != llvm::Triple::x86_64)
    return out;
  llvm::SmallVector<llvm::StringRef> features;
  llvm::X86::getFeaturesForCPU(cpu, features);
  for (llvm::StringRef f : features)
    out.push_back(f.str());
  return out;
}

} // namespace

llvm::Expected<CpuTarget> tilefuse::selectCpuTarget(bool runsHere) {
  initializeNativeTarget();
  CpuTarget target;
  target.triple = llvm::sys::getProcessTriple();
  llvm::Triple triple(target.triple);
  llvm::StringMap<bool> host = llvm::sys::getHostCPUFeatures();
  const char *named = std::getenv("TILEFUSE_CPU");
  std::vector<std::string> enabled;
  if (!named || !*named || std::string(named) == "host" || std::string(named) == "native") {
    target.cpu = llvm::sys::getHostCPUName().str();
    for (auto &f : host) {
      target.features += (target.features.empty() ? "" : ",") +
                         std::string(f.second ? "+" : "-") + f.first().str();
      if (f.second)
        enabled.push_back(f.first().str());
    }
  } else {
    target.cpu = named;
    std::string error;
    const llvm::Target *llvmTarget = llvm::TargetRegistry::lookupTarget(target.triple, error);
    if (!llvmTarget)
      return failure("no LLVM target for " + target.triple + ": " + error);
    std::unique_ptr<llvm::MCSubtargetInfo> info(
        llvmTarget->createMCSubtargetInfo(target.triple, "", ""));
    if (!info || !info->isCPUStringValid(target.cpu))
      return failure("TILEFUSE_CPU='" + target.cpu +
                     "' is not a CPU LLVM knows; use host, x86-64, x86-64-v2, x86-64-v3, "
                     "x86-64-v4 or a CPU name such as znver4 or sapphirerapids");
    enabled = featuresOfNamedCpu(triple, target.cpu);
    if (runsHere) {
      std::string lacking;
      for (const std::string &f : enabled) {
        auto it = host.find(f);
        if (it != host.end() && !it->second)
          lacking += (lacking.empty() ? "" : ", ") + f;
      }
      if (!lacking.empty())
        return failure("TILEFUSE_CPU='" + target.cpu + "' needs CPU features this machine lacks (" +
                       lacking + "): code compiled for it cannot run here");
    }
  }
  for (const std::string &f : checkedCpuFeatures())
    if (std::find(enabled.begin(), enabled.end(), f) != enabled.end())
      target.requiredFeatures.push_back(f);
  return target;
}

bool tilefuse::masksNarrowLanes(const CpuTarget &target) {
  return std::find(target.requiredFeatures.begin(), target.requiredFeatures.end(),
                   "avx512bw") != target.requiredFeatures.end();
}

llvm::Expected<std::unique_ptr<llvm::TargetMachine>>
tilefuse::createCpuTargetMachine(const CpuTarget &target) {
  initializeNativeTarget();
  std::string error;
  const llvm::Target *llvmTarget = llvm::TargetRegistry::lookupTarget(target.triple, error);
  if (!llvmTarget)
    return failure("no LLVM target for " + target.triple + ": " + error);
  llvm::TargetOptions options;
  // One section per kernel: a call the JIT cannot resolve is reported with
  // the kernel that makes it.
  options.FunctionSections = true;
  std::unique_ptr<llvm::TargetMachine> machine(llvmTarget->createTargetMachine(
      target.triple, target.cpu, target.features, options, llvm::Reloc::PIC_));
  if (!machine)
    return failure("LLVM cannot create a target machine for CPU '" + target.cpu + "'");
  return machine;
}
