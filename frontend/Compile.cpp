//===- Compile.cpp - Graph::compile and the in-process kernel cache ------===//
//
// One pipeline for Python, the CLI and the tests: primitives -> fusion ->
// runtime Program + tile kernels -> machine code. A graph compiles once per
// process: the cache key is the graph's text and the target, so tracing the
// same function twice reuses the kernels (each Executable still gets its
// own buffers).
//
//===----------------------------------------------------------------------===//
#include "frontend/DiskCache.h"
#include "frontend/Executable.h"
#include "frontend/GraphImpl.h"

#include "codegen/ProgramBuilder.h"
#include "codegen/cpu/CpuJit.h"
#include "codegen/cpu/CpuObject.h"
#include "runtime/Artifact.h"
#include "runtime/CompileProgress.h"
#include "codegen/cuda/CudaAttention.h"
#include "codegen/cuda/CudaRenderer.h"
#ifdef TILEFUSE_HAVE_NVRTC
#include "codegen/cuda/CudaLibrary.h"
#include "codegen/cuda/Nvrtc.h"
#endif
#ifdef TILEFUSE_HAVE_CUDA_EXECUTOR
#include "runtime/CudaExecutor.h"
#endif
#include "frontend/NumericsProbe.h"
#include "passes/FuseOps.h"
#include "passes/TargetInfo.h"

#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdlib>
#include <list>
#include <cstring>
#include <map>
#include <mutex>

using namespace mlir;
using namespace tilefuse;

namespace {
std::unique_ptr<Executor> executorFor(const CompiledArtifacts &art) {
  if (art.target == "cpu")
    return std::make_unique<CpuExecutor>(art.program, art.kernels, art.code);
#ifdef TILEFUSE_HAVE_CUDA_EXECUTOR
  return std::make_unique<CudaExecutor>(art.program, art.cubins);
#else
  throw CompileError("this build of tilefuse has no CUDA executor");
#endif
}
} // namespace

Executable::Executable(std::shared_ptr<const CompiledArtifacts> artifacts,
                       bool cacheHit, double seconds)
    : art(std::move(artifacts)), executor(executorFor(*art)), hit(cacheHit),
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
/// A rewrite of the fused function before it becomes a Program (the
/// numerics probes).
using FusedRewrite = std::function<LogicalResult(func::FuncOp)>;
ProgramAndKernels programFor(const Graph::Impl &g, const TargetInfo &target,
                             const StageHook &stage = {},
                             const FusedRewrite &afterFusion = {}) {
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
    if (afterFusion && failed(afterFusion(func)))
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

/// The CUDA C of `kernels`, one translation unit per kernel.
std::vector<std::string> cudaUnits(const Graph::Impl &g, ModuleOp kernels) {
  std::vector<std::string> units;
  runCapturingDiagnostics("cannot generate CUDA for @" + g.entry, [&]() -> LogicalResult {
    FailureOr<std::vector<std::string>> all = renderCudaKernelUnits(kernels);
    if (failed(all))
      return failure();
    units = std::move(*all);
    return success();
  });
  return units;
}

/// The kernel a CUDA unit defines: the name after `extern "C" __global__
/// void [__launch_bounds__(...)]`.
std::string unitKernelName(const std::string &unit) {
  size_t at = unit.find("extern \"C\" __global__ void ");
  if (at == std::string::npos)
    return "";
  at += std::strlen("extern \"C\" __global__ void ");
  if (unit.compare(at, 18, "__launch_bounds__(") == 0)
    at = unit.find(')', at) + 2;
  size_t end = unit.find('(', at);
  return end == std::string::npos ? "" : unit.substr(at, end - at);
}

/// CUDA units with repeated programs (the same text but for the kernel's
/// name: every layer of a deep model) compiled once.
struct SharedUnits {
  std::vector<std::string> unique; ///< the units to compile
  std::vector<size_t> compiled;    ///< per unit: its program's index in `unique`
  std::vector<size_t> first;       ///< per unit: the first unit of its program
};

SharedUnits shareRepeatedUnits(const std::vector<std::string> &units) {
  SharedUnits out;
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < units.size(); ++i) {
    std::string name = unitKernelName(units[i]), key = units[i];
    for (size_t at = name.empty() ? std::string::npos : key.find(name); at != std::string::npos;
         at = key.find(name, at + 1))
      key.replace(at, name.size(), "tilefuse_kernel");
    auto [it, inserted] = seen.emplace(std::move(key), i);
    if (inserted)
      out.unique.push_back(units[i]);
    out.first.push_back(it->second);
    out.compiled.push_back(inserted ? out.unique.size() - 1 : out.compiled[it->second]);
  }
  return out;
}

bool hasAttentionSteps(const Program &program) {
  return llvm::any_of(program.steps, [](const Step &s) {
    return s.kind == Step::Kind::Attention || s.kind == Step::Kind::AttentionGrad;
  });
}

#ifdef TILEFUSE_HAVE_NVRTC
/// The reports of the kernels of one compiled unit (under `as`'s name
/// when a repeated kernel shares that unit's code).
void appendReports(const CudaBinary &bin, bool cached, std::vector<CudaKernelReport> &out,
                   const std::string &as = "") {
  for (const CudaKernelResources &k : bin.kernels)
    out.push_back({as.empty() || bin.kernels.size() != 1 ? k.name : as, k.registers, k.spillStores, k.spillLoads,
                   k.stackBytes, k.sharedBytes, cached, bin.log});
}
#endif

/// Cubins of `kernels` for `arch` (sm_XX), through the disk cache, each
/// under its kernel's symbol, plus the runtime library's when the program
/// gathers or scatters and the attention kernels' when it has attention.
std::vector<std::pair<std::string, std::string>>
cudaBinaries(const Graph::Impl &g, const Program &program, ModuleOp kernels, const std::string &arch,
             std::vector<CudaKernelReport> *reports = nullptr) {
#ifdef TILEFUSE_HAVE_NVRTC
  std::vector<std::string> units = cudaUnits(g, kernels);
  bool library = llvm::any_of(program.steps, [](const Step &s) {
    return s.kind == Step::Kind::Gather || s.kind == Step::Kind::ScatterAdd;
  });
  bool attention = hasAttentionSteps(program);
  // Repeated kernels compile once; their blobs name the kernel they share.
  SharedUnits shared = shareRepeatedUnits(units);
  if (CompileProgress *p = CompileProgress::current())
    p->kernelsDone(int64_t(units.size() - shared.unique.size())); // done with their kept unit
  size_t libraryUnit = shared.unique.size();
  if (library)
    shared.unique.push_back(cudaLibrarySource());
  size_t attentionUnit = shared.unique.size();
  if (attention)
    shared.unique.push_back(cudaAttentionSource(cudaAttentionVariants(program)));
  std::vector<CudaBinary> bins = compileCudaUnits(shared.unique, arch);
  std::vector<std::string> symbols = kernelSymbols(program);
  if (reports) {
    for (size_t i = 0; i < units.size(); ++i)
      appendReports(bins.at(shared.compiled[i]), /*cached=*/false, *reports, symbols[i]);
    if (attention) // kernels the program launches, with their registers and spills
      appendReports(bins.at(attentionUnit), /*cached=*/false, *reports);
  }
  std::vector<std::pair<std::string, std::string>> blobs;
  for (size_t i = 0; i < program.kernels.size(); ++i)
    blobs.emplace_back(symbols[i], shared.first[i] == i
                                       ? bins.at(shared.compiled[i]).cubin
                                       : kCudaAliasPrefix + symbols[shared.first[i]]);
  if (library)
    blobs.emplace_back(kCudaLibraryBlob, std::move(bins.at(libraryUnit).cubin));
  if (attention)
    blobs.emplace_back(kCudaAttentionBlob, std::move(bins.at(attentionUnit).cubin));
  return blobs;
#else
  (void)g, (void)program, (void)kernels, (void)arch, (void)reports;
  throw CompileError("this build of tilefuse has no NVRTC (the CUDA toolkit was not found "
                     "when it was built): it cannot compile CUDA kernels");
#endif
}

/// Called with a finished CPU compile and its machine code (to keep it).
using CpuCodeHook = std::function<void(const CompiledArtifacts &, const CpuCode &)>;

std::shared_ptr<const CompiledArtifacts>
compileArtifacts(const Graph::Impl &g, const TargetInfo &target,
                 const FusedRewrite &afterFusion = {}, const CpuCodeHook &onCpuCode = {}) {
  auto start = std::chrono::steady_clock::now();
  auto art = std::make_shared<CompiledArtifacts>();
  auto last = start;
  CompileProgress progress("@" + g.entry + " for " + target.name());
  progress.stage("lowering");
  auto stage = [&](const char *name) {
    auto now = std::chrono::steady_clock::now();
    art->stageSeconds.emplace_back(name, std::chrono::duration<double>(now - last).count());
    last = now;
    // `name` finished: say what comes next.
    std::string finished = name;
    if (finished == "primitives")
      progress.stage("fusing");
    else if (finished == "fuse")
      progress.stage("lowering to tile kernels");
    else if (finished == "tile")
      progress.stage("building the program");
  };
  ProgramAndKernels built = programFor(g, target, [&](const char *name, func::FuncOp func,
                                                      ModuleOp kernels) {
    if (std::string(name) == "fuse")
      art->fusedIR = printOp(func);
    if (std::string(name) == "tile")
      art->tileIR = printOp(kernels);
    stage(name);
  }, afterFusion);
  art->program = std::move(built.program);
  art->target = target.name();
  progress.stage("machine code", int64_t(art->program.kernels.size()));
  if (art->target != "cpu") {
    art->cubins = cudaBinaries(g, art->program, *built.kernels,
                               art->target.substr(art->target.find(':') + 1), &art->cudaReports);
    stage("machine code");
    art->compileSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return art;
  }
  std::vector<std::string> names = kernelSymbols(art->program);
  CpuCode cpuCode;
  runCapturingDiagnostics("cannot compile @" + g.entry + " for " + target.name(),
                          [&]() -> LogicalResult {
    FailureOr<CpuCode> code = jitCpuKernels(*built.kernels, names);
    if (failed(code))
      return failure();
    art->kernels = code->kernels;
    art->code = code->owner;
    cpuCode = std::move(*code);
    return success();
  });
  stage("machine code");
  art->compileSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (onCpuCode)
    onCpuCode(*art, cpuCode);
  return art;
}

} // namespace

namespace {
/// Compiled graphs by (target, settings, graph text with its source
/// locations), the most recently used first,
/// at most TILEFUSE_COMPILE_CACHE entries (default 64): a sweep over many
/// graphs must not grow without bound. Executables keep their own artifacts
/// alive; an evicted graph is compiled again when asked for.
struct CompileCache {
  std::mutex mutex;
  std::list<std::pair<std::string, std::shared_ptr<const CompiledArtifacts>>> entries;
  std::map<std::string, decltype(entries)::iterator> index;

  size_t capacity() const {
    const char *v = std::getenv("TILEFUSE_COMPILE_CACHE");
    if (!v || !*v)
      return 64;
    char *end = nullptr;
    long n = std::strtol(v, &end, 10);
    return *end == '\0' && n >= 0 ? size_t(n) : 64;
  }
  std::shared_ptr<const CompiledArtifacts> find(const std::string &key) {
    auto it = index.find(key);
    if (it == index.end())
      return nullptr;
    entries.splice(entries.begin(), entries, it->second);
    return it->second->second;
  }
  void insert(const std::string &key, std::shared_ptr<const CompiledArtifacts> art) {
    size_t limit = capacity();
    if (limit == 0)
      return;
    entries.emplace_front(key, std::move(art));
    index[key] = entries.begin();
    while (entries.size() > limit) {
      index.erase(entries.back().first);
      entries.pop_back();
    }
  }
  void clear() {
    index.clear();
    entries.clear();
  }
};

CompileCache &compileCache() {
  // Never destroyed: JIT code still cached must outlive LLVM's own static
  // destructors at process exit.
  static auto *cache = new CompileCache();
  return *cache;
}
} // namespace

size_t Graph::clearCompileCache() {
  CompileCache &cache = compileCache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  size_t n = cache.entries.size();
  cache.clear();
  return n;
}

namespace {
/// The graph's text with its source locations (part of the compile keys).
std::string locatedText(Graph::Impl &g) {
  std::string text;
  llvm::raw_string_ostream os(text);
  g.module->print(os, OpPrintingFlags().enableDebugInfo());
  return text;
}

/// Settings the compile reads from the environment: part of every key.
std::string compileSettings() {
  std::string settings;
  for (const char *name : {"TILEFUSE_REMATERIALIZE", "TILEFUSE_MEMORY_PLAN",
                           "TILEFUSE_FUSED_ATTENTION", "TILEFUSE_CONV_EPILOGUES",
                           "TILEFUSE_ATTENTION_16BIT", "TILEFUSE_GROUPED_GEMM",
                           "TILEFUSE_CHANNELS_LAST"})
    if (const char *v = std::getenv(name))
      settings += std::string(" ") + name + "=" + v;
  return settings;
}

/// The compile target of `device` ("cpu", or "cuda": the first GPU's arch).
std::string targetForDevice(const std::string &device) {
  if (device == "cuda") {
#ifdef TILEFUSE_HAVE_CUDA_EXECUTOR
    std::string why = cudaUnavailableReason();
    if (!why.empty())
      throw CompileError("device 'cuda' is not available: " + why + "; use device='cpu'");
    return "cuda:" + cudaDeviceArch(0);
#else
    throw CompileError("device 'cuda' is not available: this build of tilefuse has no CUDA "
                       "executor (the CUDA toolkit was not found when it was built)");
#endif
  }
  if (device != "cpu")
    throw CompileError("unknown device '" + device + "'; expected 'cpu' or 'cuda'");
  return "cpu";
}
} // namespace

std::shared_ptr<Executable> Graph::compileNumericsProbe(const std::string &device, bool shadow,
                                                        NumericsProbeLayout &layout) const {
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<TargetInfo> target = TargetInfo::get(targetForDevice(device));
  layout = NumericsProbeLayout();
  std::lock_guard<std::mutex> lock(compileCache().mutex); // one compile at a time
  auto art = compileArtifacts(*impl_, *target, [&](func::FuncOp fused) {
    return probeNumerics(fused, shadow, layout);
  });
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::make_shared<Executable>(art, /*cacheHit=*/false, seconds);
}

std::shared_ptr<Executable> Graph::compile(const std::string &device) const {
  auto start = std::chrono::steady_clock::now();
  std::string targetName = targetForDevice(device);
  std::unique_ptr<TargetInfo> target = TargetInfo::get(targetName);
  // The CPU kernels are compiled for TILEFUSE_CPU's CPU when it is set.
  const char *cpu = targetName == "cpu" ? std::getenv("TILEFUSE_CPU") : nullptr;
  std::string settings = compileSettings();
  // The graph with its source locations: the Program reports them, so the
  // same graph traced from other lines is another compile.
  std::string located = locatedText(*impl_);
  std::string key = targetName + (cpu ? std::string("/") + cpu : "") + settings + "\n@" +
                    impl_->entry + "\n" + located;
  CompileCache &cache = compileCache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  // (one compile at a time: the MLIR context is single-threaded)
  std::shared_ptr<const CompiledArtifacts> art = cache.find(key);
  bool hit = art != nullptr;
  if (!hit) {
    // Another process may have compiled this graph for this CPU before.
    std::string diskKey = targetName == "cpu" ? cpuDiskKey(key) : "";
    art = loadCpuCompile(diskKey);
    if (!art)
      art = compileArtifacts(*impl_, *target, {},
                             [&](const CompiledArtifacts &done, const CpuCode &code) {
                               storeCpuCompile(diskKey, done, code);
                             });
    cache.insert(key, art);
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::make_shared<Executable>(art, hit, seconds);
}

namespace {
/// The tile kernels of `g` for a CUDA target, rendered as CUDA C: one text,
/// or (units) one translation unit per kernel.
std::unique_ptr<TargetInfo> cudaTarget(const std::string &target) {
  std::unique_ptr<TargetInfo> info = TargetInfo::get(target);
  if (!info || target.rfind("cuda", 0) != 0)
    throw CompileError("'" + target + "' is not a CUDA target; expected cuda:sm_XX");
  return info;
}

std::vector<std::string> cudaText(const Graph::Impl &g, const std::string &target, bool units) {
  ProgramAndKernels built = programFor(g, *cudaTarget(target));
  ModuleOp kernels = *built.kernels;
  if (units)
    return cudaUnits(g, kernels);
  std::vector<std::string> text;
  runCapturingDiagnostics("cannot generate CUDA for @" + g.entry, [&]() -> LogicalResult {
    FailureOr<std::string> src = renderCudaKernels(kernels);
    if (failed(src))
      return failure();
    text.push_back(*src);
    return success();
  });
  return text;
}
} // namespace

Program Graph::plannedProgram(const std::string &target) const {
  std::unique_ptr<TargetInfo> info = TargetInfo::get(target);
  if (!info)
    throw CompileError("unknown target '" + target + "'; expected cpu or cuda[:sm_XX]");
  return programFor(*impl_, *info).program;
}

std::string Graph::cudaSource(const std::string &target) const {
  return cudaText(*impl_, target, /*units=*/false).front();
}

std::string Graph::cudaAttentionSource(const std::string &target) const {
  ProgramAndKernels built = programFor(*impl_, *cudaTarget(target));
  if (!hasAttentionSteps(built.program))
    return "";
  return tilefuse::cudaAttentionSource(cudaAttentionVariants(built.program));
}

std::vector<CudaKernelReport> Graph::compileCuda(const std::string &target) const {
  ProgramAndKernels built = programFor(*impl_, *cudaTarget(target));
  std::vector<std::string> units = cudaUnits(*impl_, *built.kernels);
#ifdef TILEFUSE_HAVE_NVRTC
  std::string arch = target == "cuda" ? "sm_90" : target.substr(target.find(':') + 1);
  SharedUnits shared = shareRepeatedUnits(units);
  // The attention kernels the program launches are reported after its own.
  bool attention = hasAttentionSteps(built.program);
  if (attention)
    shared.unique.push_back(tilefuse::cudaAttentionSource(cudaAttentionVariants(built.program)));
  std::vector<bool> cached;
  std::vector<CudaBinary> bins = compileCudaUnits(shared.unique, arch, &cached);
  std::vector<CudaKernelReport> out;
  for (size_t i = 0; i < units.size(); ++i)
    appendReports(bins[shared.compiled[i]], cached[shared.compiled[i]], out,
                  unitKernelName(units[i]));
  if (attention)
    appendReports(bins.back(), cached.back(), out);
  return out;
#else
  throw CompileError("this build of tilefuse has no NVRTC (the CUDA toolkit was not found "
                     "when it was built); cudaSource() still prints the kernels");
#endif
}

std::string Graph::cudaAttentionPtx(const std::string &target) const {
  std::string source = cudaAttentionSource(target);
  if (source.empty())
    return "";
#ifdef TILEFUSE_HAVE_NVRTC
  return compileCudaToPtx(source, target == "cuda" ? "sm_90" : target.substr(target.find(':') + 1));
#else
  throw CompileError("this build of tilefuse has no NVRTC; cudaAttentionSource() still prints "
                     "the kernels");
#endif
}

std::string Graph::cudaPtx(const std::string &target) const {
  std::string source = cudaText(*impl_, target, /*units=*/false).front();
#ifdef TILEFUSE_HAVE_NVRTC
  return compileCudaToPtx(source, target == "cuda" ? "sm_90" : target.substr(target.find(':') + 1));
#else
  throw CompileError("this build of tilefuse has no NVRTC; cudaSource() still prints the kernels");
#endif
}

std::string Graph::compileArtifact(const std::string &target, const std::string &metadata) const {
  std::unique_ptr<TargetInfo> info = TargetInfo::get(target);
  if (!info)
    throw CompileError("unknown target '" + target + "'; expected cpu or cuda:sm_XX");
  bool cuda = target.rfind("cuda", 0) == 0;
#ifndef TILEFUSE_HAVE_NVRTC
  if (cuda)
    throw CompileError("this build of tilefuse has no NVRTC: it cannot write CUDA artifacts");
#endif
  // A CUDA artifact written before (by any process of this build) is read
  // back whole. The key: the graph with its source locations (the Program
  // names them), the target, the compile settings, the metadata and NVRTC.
  std::string diskKey;
#ifdef TILEFUSE_HAVE_NVRTC
  if (cuda) {
    diskKey = cudaArtifactDiskKey(target + compileSettings() + "\nNVRTC " + nvrtcVersion() +
                                  "\nmetadata " + std::to_string(metadata.size()) + "\n" +
                                  metadata + "\n@" + impl_->entry + "\n" + locatedText(*impl_));
    if (std::optional<std::string> kept = loadCudaArtifact(diskKey))
      return std::move(*kept);
  }
#endif
  CompileProgress progress("@" + impl_->entry + " for " + target + " (artifact)");
  progress.stage("lowering");
  Artifact artifact;
  artifact.metadata = metadata;
  artifact.target = target == "cuda" ? "cuda:sm_90" : target;
  artifact.graph = mlir();
  // The Program and its tile kernels, as for every other use of the graph.
  ProgramAndKernels built = programFor(*impl_, *info);
  // CUDA counts kernels as NVRTC finishes them; the CPU library is one object.
  progress.stage("machine code", cuda ? int64_t(built.program.kernels.size()) : 0);
  artifact.program = std::move(built.program);
  ModuleOp kernels = *built.kernels;
  if (!cuda)
    runCapturingDiagnostics("cannot compile @" + impl_->entry + " for " + target,
                            [&]() -> LogicalResult {
      FailureOr<CpuSharedLibrary> library = emitCpuSharedLibrary(kernels);
      if (failed(library))
        return failure();
      artifact.blobs.emplace_back("kernels.so", std::move(library->bytes));
      artifact.cpuFeatures = std::move(library->requiredFeatures);
      return success();
    });
  if (!cuda)
    return writeArtifact(artifact);
  artifact.blobs = cudaBinaries(*impl_, artifact.program, kernels,
                                artifact.target.substr(artifact.target.find(':') + 1));
  std::string bytes = writeArtifact(artifact);
  storeCudaArtifact(diskKey, bytes);
  return bytes;
}
