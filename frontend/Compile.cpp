//===- Compile.cpp - Graph::compile and the in-process kernel cache ------===//
//
// One pipeline for Python, the CLI and the tests: primitives -> fusion ->
// runtime Program + tile kernels -> machine code. A graph compiles once per
// process: the cache key is the graph's text and the target, so tracing the
// same function twice reuses the kernels (each Executable still gets its
// own buffers).
//
//===----------------------------------------------------------------------===//
#include "frontend/Executable.h"
#include "frontend/GraphImpl.h"

#include "codegen/ProgramBuilder.h"
#include "codegen/cpu/CpuJit.h"
#include "codegen/cpu/CpuObject.h"
#include "runtime/Artifact.h"
#include "codegen/cuda/CudaRenderer.h"
#ifdef TILEFUSE_HAVE_NVRTC
#include "codegen/cuda/Nvrtc.h"
#endif
#include "passes/FuseOps.h"
#include "passes/TargetInfo.h"

#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <map>
#include <mutex>

using namespace mlir;
using namespace tilefuse;

Executable::Executable(std::shared_ptr<const CompiledArtifacts> artifacts,
                       bool cacheHit, double seconds)
    : art(std::move(artifacts)),
      executor(art->program, art->kernels, art->code), hit(cacheHit),
      seconds(seconds) {}

namespace {

std::string printOp(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->print(os);
  return s;
}

/// The one path from a graph to its runtime Program and tile kernels:
/// primitives, fusion, buildProgram. `stage` is called after each step with
/// the (fused) function and the kernels built so far.
struct ProgramAndKernels {
  Program program;
  OwningOpRef<ModuleOp> kernels;
};
using StageHook = std::function<void(const char *, func::FuncOp, ModuleOp)>;
ProgramAndKernels programFor(const Graph::Impl &g, const TargetInfo &target,
                             const StageHook &stage = {}) {
  OwningOpRef<ModuleOp> module = g.lowerCopy("lowering @" + g.entry + " to primitive ops failed");
  func::FuncOp func = module->lookupSymbol<func::FuncOp>(g.entry);
  ProgramAndKernels out;
  out.kernels = ModuleOp::create(UnknownLoc::get(&globalContext()));
  if (stage)
    stage("primitives", func, *out.kernels);
  runCapturingDiagnostics("cannot compile @" + g.entry + " for " + target.name(),
                          [&]() -> LogicalResult {
    if (failed(fuseFunction(func, target, /*remarks=*/false)))
      return failure();
    if (stage)
      stage("fuse", func, *out.kernels);
    FailureOr<Program> prog = buildProgram(func, target, *out.kernels);
    if (failed(prog))
      return failure();
    out.program = std::move(*prog);
    if (stage)
      stage("tile", func, *out.kernels);
    return success();
  });
  return out;
}

std::shared_ptr<const CompiledArtifacts>
compileArtifacts(const Graph::Impl &g, const TargetInfo &target) {
  auto start = std::chrono::steady_clock::now();
  auto art = std::make_shared<CompiledArtifacts>();
  auto last = start;
  auto stage = [&](const char *name) {
    auto now = std::chrono::steady_clock::now();
    art->stageSeconds.emplace_back(name, std::chrono::duration<double>(now - last).count());
    last = now;
  };
  ProgramAndKernels built = programFor(g, target, [&](const char *name, func::FuncOp func,
                                                      ModuleOp kernels) {
    if (std::string(name) == "fuse")
      art->fusedIR = printOp(func);
    if (std::string(name) == "tile")
      art->tileIR = printOp(kernels);
    stage(name);
  });
  art->program = std::move(built.program);
  std::vector<std::string> names;
  for (const ProgramKernel &k : art->program.kernels)
    names.push_back(k.name);
  runCapturingDiagnostics("cannot compile @" + g.entry + " for " + target.name(),
                          [&]() -> LogicalResult {
    FailureOr<CpuCode> code = jitCpuKernels(*built.kernels, names);
    if (failed(code))
      return failure();
    art->kernels = code->kernels;
    art->code = code->owner;
    return success();
  });
  stage("machine code");
  art->compileSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return art;
}

} // namespace

std::shared_ptr<Executable> Graph::compile(const std::string &device) const {
  auto start = std::chrono::steady_clock::now();
  if (device != "cpu")
    throw CompileError("device '" + device + "' is not supported by this build: "
                       "only the CPU backend exists; use device='cpu'");
  std::unique_ptr<TargetInfo> target = TargetInfo::get("cpu");
  static std::mutex mutex;
  // Never destroyed: the JIT's code must outlive LLVM's own static
  // destructors at process exit.
  static auto &cache =
      *new std::map<std::string, std::shared_ptr<const CompiledArtifacts>>();
  std::string key = device + "\n@" + impl_->entry + "\n" + mlir();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  // (one compile at a time: the MLIR context is single-threaded)
  bool hit = it != cache.end();
  std::shared_ptr<const CompiledArtifacts> art =
      hit ? it->second : compileArtifacts(*impl_, *target);
  if (!hit)
    cache.emplace(key, art);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::make_shared<Executable>(art, hit, seconds);
}

namespace {
/// The tile kernels of `g` for a CUDA target, rendered as CUDA C: one text,
/// or (units) one translation unit per kernel.
std::vector<std::string> cudaText(const Graph::Impl &g, const std::string &target, bool units) {
  std::unique_ptr<TargetInfo> info = TargetInfo::get(target);
  if (!info || target.rfind("cuda", 0) != 0)
    throw CompileError("'" + target + "' is not a CUDA target; expected cuda:sm_XX");
  ProgramAndKernels built = programFor(g, *info);
  ModuleOp kernels = *built.kernels;
  std::vector<std::string> text;
  runCapturingDiagnostics("cannot generate CUDA for @" + g.entry, [&]() -> LogicalResult {
    if (units) {
      FailureOr<std::vector<std::string>> all = renderCudaKernelUnits(kernels);
      if (failed(all))
        return failure();
      text = std::move(*all);
      return success();
    }
    FailureOr<std::string> src = renderCudaKernels(kernels);
    if (failed(src))
      return failure();
    text.push_back(*src);
    return success();
  });
  return text;
}
} // namespace

std::string Graph::cudaSource(const std::string &target) const {
  return cudaText(*impl_, target, /*units=*/false).front();
}

std::vector<Graph::CudaKernelReport> Graph::compileCuda(const std::string &target) const {
  std::vector<std::string> units = cudaText(*impl_, target, /*units=*/true);
#ifdef TILEFUSE_HAVE_NVRTC
  std::string arch = target == "cuda" ? "sm_90" : target.substr(target.find(':') + 1);
  std::vector<bool> cached;
  std::vector<CudaBinary> bins = compileCudaUnits(units, arch, &cached);
  std::vector<CudaKernelReport> out;
  for (size_t i = 0; i < bins.size(); ++i)
    for (const CudaKernelResources &k : bins[i].kernels)
      out.push_back({k.name, k.registers, k.spillStores, k.spillLoads, k.stackBytes,
                     bool(cached[i])});
  return out;
#else
  throw CompileError("this build of tilefuse has no NVRTC (the CUDA toolkit was not found "
                     "when it was built); cudaSource() still prints the kernels");
#endif
}

std::string Graph::compileArtifact(const std::string &target) const {
  std::unique_ptr<TargetInfo> info = TargetInfo::get(target);
  if (!info)
    throw CompileError("unknown target '" + target + "'; expected cpu or cuda:sm_XX");
  bool cuda = target.rfind("cuda", 0) == 0;
#ifndef TILEFUSE_HAVE_NVRTC
  if (cuda)
    throw CompileError("this build of tilefuse has no NVRTC: it cannot write CUDA artifacts");
#endif
  Artifact artifact;
  artifact.target = target == "cuda" ? "cuda:sm_90" : target;
  artifact.graph = mlir();
  // The Program and its tile kernels, as for every other use of the graph.
  ProgramAndKernels built = programFor(*impl_, *info);
  artifact.program = std::move(built.program);
  ModuleOp kernels = *built.kernels;
  if (!cuda)
    runCapturingDiagnostics("cannot compile @" + impl_->entry + " for " + target,
                            [&]() -> LogicalResult {
      FailureOr<std::string> library = emitCpuSharedLibrary(kernels);
      if (failed(library))
        return failure();
      artifact.blobs.emplace_back("kernels.so", std::move(*library));
      return success();
    });
  if (!cuda) {
    artifact.cpuFeatures = hostCpuFeatures();
    return writeArtifact(artifact);
  }
#ifdef TILEFUSE_HAVE_NVRTC
  std::vector<std::string> units;
  runCapturingDiagnostics("cannot generate CUDA for @" + impl_->entry, [&]() -> LogicalResult {
    FailureOr<std::vector<std::string>> all = renderCudaKernelUnits(kernels);
    if (failed(all))
      return failure();
    units = std::move(*all);
    return success();
  });
  std::vector<CudaBinary> bins =
      compileCudaUnits(units, artifact.target.substr(artifact.target.find(':') + 1));
  for (size_t i = 0; i < bins.size(); ++i)
    artifact.blobs.emplace_back(artifact.program.kernels.at(i).name, bins[i].cubin);
#endif
  return writeArtifact(artifact);
}
