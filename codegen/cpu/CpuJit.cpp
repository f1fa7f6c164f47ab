//===- CpuJit.cpp - tile kernels -> machine code in this process ----------===//
//
// Kernels are optimised and compiled to object files on worker threads, then
// linked by ORC in one JIT that resolves external calls from
// cpuKernelSymbols() only (CpuBuiltins.h).
//
//===----------------------------------------------------------------------===//
#include "codegen/cpu/CpuJit.h"

#include "codegen/cpu/CpuBuiltins.h"
#include "codegen/cpu/CpuTarget.h"
#include "codegen/cpu/TileToLLVM.h"
#include "runtime/CompileProgress.h"

#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <mutex>
#include <set>
#include <thread>

using namespace mlir;
using namespace tilefuse;

namespace {
void initializeNativeTargetOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}
void initializeOnce(MLIRContext *ctx) {
  initializeNativeTargetOnce();
  registerBuiltinDialectTranslation(*ctx);
  registerLLVMDialectTranslation(*ctx);
}
} // namespace

namespace {
/// A slice of the kernels, compiled by one thread into one object file.
struct Shard {
  std::vector<std::string> names;
  std::string bitcode;
  llvm::SmallVector<char, 0> object; ///< compiled machine code (ELF)
  std::string error;
};

std::vector<std::string> splitFeatures(llvm::StringRef features) {
  llvm::SmallVector<llvm::StringRef> parts;
  features.split(parts, ',', -1, false);
  return std::vector<std::string>(parts.begin(), parts.end());
}

/// Splits the lowered kernels into `n` modules of similar size and
/// translates each to LLVM bitcode (MLIR work stays on this thread: the
/// context is not shared with the compile threads).
LogicalResult splitIntoShards(ModuleOp module, std::vector<Shard> &shards) {
  SmallVector<LLVM::LLVMFuncOp> defined, declared;
  for (auto f : module.getOps<LLVM::LLVMFuncOp>())
    (f.isExternal() ? declared : defined).push_back(f);
  std::vector<size_t> load(shards.size(), 0);
  std::vector<OwningOpRef<ModuleOp>> parts;
  OpBuilder b(module.getContext());
  for (size_t i = 0; i < shards.size(); ++i) {
    parts.emplace_back(ModuleOp::create(module.getLoc()));
    b.setInsertionPointToEnd(parts.back()->getBody());
    for (auto f : declared)
      b.clone(*f);
  }
  // Largest first onto the least loaded shard.
  std::vector<std::pair<size_t, LLVM::LLVMFuncOp>> bySize;
  for (auto f : defined) {
    size_t ops = 0;
    f.walk([&](Operation *) { ++ops; });
    bySize.emplace_back(ops, f);
  }
  std::stable_sort(bySize.begin(), bySize.end(),
                   [](auto &x, auto &y) { return x.first > y.first; });
  for (auto &[ops, f] : bySize) {
    size_t i = std::min_element(load.begin(), load.end()) - load.begin();
    load[i] += ops;
    b.setInsertionPointToEnd(parts[i]->getBody());
    b.clone(*f);
    shards[i].names.push_back(f.getSymName().str());
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    llvm::LLVMContext ctx;
    auto llvmModule = translateModuleToLLVMIR(*parts[i], ctx);
    if (!llvmModule)
      return module.emitError("translation of the CPU kernels to LLVM IR failed");
    llvm::raw_string_ostream os(shards[i].bitcode);
    llvm::WriteBitcodeToFile(*llvmModule, os);
  }
  return success();
}

/// Optimises a shard's module and compiles it to an object file, on this
/// thread with its own LLVM context and target machine.
void compileShard(Shard &shard, const CpuTarget &target) {
  llvm::LLVMContext ctx;
  auto buffer = llvm::MemoryBuffer::getMemBuffer(shard.bitcode, "kernels", false);
  auto module = llvm::parseBitcodeFile(buffer->getMemBufferRef(), ctx);
  if (!module) {
    shard.error = llvm::toString(module.takeError());
    return;
  }
  auto machine = createCpuTargetMachine(target);
  if (!machine) {
    shard.error = llvm::toString(machine.takeError());
    return;
  }
  (*module)->setDataLayout((*machine)->createDataLayout());
  (*module)->setTargetTriple(target.triple);
  // -O2 on vector code: the kernels are already vectorised; the
  // optimiser's job is CSE and LICM of index math, and scheduling.
  if (llvm::Error e = makeOptimizingTransformer(2, 0, machine->get())(module->get())) {
    shard.error = "optimising the kernels failed: " + llvm::toString(std::move(e));
    return;
  }
  llvm::raw_svector_ostream out(shard.object);
  llvm::legacy::PassManager pm;
  if ((*machine)->addPassesToEmitFile(pm, out, nullptr, llvm::CodeGenFileType::ObjectFile)) {
    shard.error = "LLVM cannot emit object code for " + target.triple;
    return;
  }
  pm.run(**module);
  if (CompileProgress *p = CompileProgress::current())
    p->kernelsDone(int64_t(shard.names.size()));
}

/// The external symbols `object` calls that `provided` lacks, each with the
/// kernels (one text section each) that call it.
std::map<std::string, std::set<std::string>>
unresolvedCalls(const llvm::object::ObjectFile &object, const llvm::StringSet<> &provided) {
  std::map<std::string, std::set<std::string>> missing;
  for (const llvm::object::SectionRef &section : object.sections()) {
    auto relocated = section.getRelocatedSection();
    if (!relocated || *relocated == object.section_end())
      continue;
    auto sectionName = (*relocated)->getName();
    std::string kernel = sectionName ? sectionName->str() : "?";
    if (llvm::StringRef(kernel).starts_with(".text."))
      kernel = kernel.substr(6);
    for (const llvm::object::RelocationRef &reloc : section.relocations()) {
      llvm::object::symbol_iterator symbol = reloc.getSymbol();
      if (symbol == object.symbol_end())
        continue;
      auto flags = symbol->getFlags();
      auto name = symbol->getName();
      if (!flags || !name || !(*flags & llvm::object::SymbolRef::SF_Undefined) || name->empty())
        continue;
      if (!provided.contains(*name))
        missing[name->str()].insert(kernel);
    }
  }
  return missing;
}

/// Links object files in one JIT whose only external symbols are
/// cpuKernelSymbols(): never the process's, so linking does not depend on
/// what else the process has loaded.
llvm::Expected<std::unique_ptr<llvm::orc::LLJIT>>
linkObjects(const std::vector<llvm::StringRef> &objects, const CpuTarget &target) {
  llvm::StringSet<> provided;
  for (const auto &[name, address] : cpuKernelSymbols())
    provided.insert(name);
  std::string unresolved;
  for (llvm::StringRef bytes : objects) {
    auto object = llvm::object::ObjectFile::createObjectFile(llvm::MemoryBufferRef(bytes, "kernels"));
    if (!object)
      return object.takeError();
    for (const auto &[symbol, kernels] : unresolvedCalls(**object, provided)) {
      unresolved += "\n  '" + symbol + "', called by ";
      size_t shown = 0;
      for (const std::string &k : kernels)
        if (shown++ < 3)
          unresolved += (shown > 1 ? ", " : "") + k;
      if (kernels.size() > 3)
        unresolved += " and " + std::to_string(kernels.size() - 3) + " more kernels";
    }
  }
  if (!unresolved.empty())
    return llvm::make_error<llvm::StringError>(
        "the kernels compiled for CPU '" + target.cpu +
            "' call functions the CPU JIT does not provide:" + unresolved +
            "\n(LLVM's code generation emitted these calls; this is a tilefuse bug: please "
            "report it with the graph. TILEFUSE_CPU=<cpu> compiles for another CPU.)",
        llvm::inconvertibleErrorCode());

  llvm::orc::JITTargetMachineBuilder machine{llvm::Triple(target.triple)};
  machine.setCPU(target.cpu);
  machine.addFeatures(splitFeatures(target.features));
  auto jit = llvm::orc::LLJITBuilder()
                 .setJITTargetMachineBuilder(std::move(machine))
                 .setLinkProcessSymbolsByDefault(false)
                 .setPlatformSetUp(llvm::orc::setUpInactivePlatform)
                 .create();
  if (!jit)
    return jit.takeError();
  llvm::orc::SymbolMap symbols;
  for (const auto &[name, address] : cpuKernelSymbols())
    symbols[(*jit)->mangleAndIntern(name)] = llvm::orc::ExecutorSymbolDef(
        llvm::orc::ExecutorAddr::fromPtr(address),
        llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable);
  if (llvm::Error e = (*jit)->getMainJITDylib().define(llvm::orc::absoluteSymbols(symbols)))
    return std::move(e);
  for (llvm::StringRef object : objects)
    if (llvm::Error e = (*jit)->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(object, "kernels")))
      return std::move(e);
  return std::move(*jit);
}

/// The entry points of `names` in `jit`, a kernel in `aliases` by the
/// kernel whose code it runs.
llvm::Expected<std::vector<CpuKernelFn>>
lookUpKernels(llvm::orc::LLJIT &jit, const std::map<std::string, std::string> &aliases,
              const std::vector<std::string> &names) {
  std::vector<CpuKernelFn> kernels;
  for (const std::string &name : names) {
    auto found = aliases.find(name);
    auto address = jit.lookup(found == aliases.end() ? name : found->second);
    if (!address)
      return llvm::make_error<llvm::StringError>(
          "no compiled kernel named '" + name + "': " + llvm::toString(address.takeError()),
          llvm::inconvertibleErrorCode());
    kernels.push_back(address->toPtr<CpuKernelFn>());
  }
  return kernels;
}
} // namespace

FailureOr<CpuCode> tilefuse::jitCpuKernels(ModuleOp module,
                                           const std::vector<std::string> &names) {
  initializeOnce(module.getContext());
  // Errors here are about the machine code, not the IR: they carry the
  // module's location without printing the module.
  auto target = selectCpuTarget(/*runsHere=*/true);
  if (!target)
    return mlir::emitError(module.getLoc(), "the CPU JIT cannot start: ") << llvm::toString(target.takeError());
  // Code generation dominates compile time: kernels repeated layer after
  // layer are compiled once.
  std::map<std::string, std::string> representative = eraseRepeatedKernels(module);
  if (CompileProgress *p = CompileProgress::current(); p && !representative.empty())
    p->kernelsDone(int64_t(representative.size())); // done with their kept kernel
  if (failed(lowerTileToLLVM(module, masksNarrowLanes(*target))))
    return failure();
  // LLVM's code generation dominates compile time: one shard per core
  // (at least 4 kernels each, below that threads cost more than they save).
  size_t cores = std::max(1u, std::thread::hardware_concurrency());
  size_t n = std::max<size_t>(1, std::min(cores, (names.size() - representative.size()) / 4));
  std::vector<Shard> shards(n);
  if (failed(splitIntoShards(module, shards)))
    return failure();
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n; ++i)
    threads.emplace_back([&, i] { compileShard(shards[i], *target); });
  compileShard(shards[0], *target);
  for (std::thread &t : threads)
    t.join();
  for (Shard &shard : shards)
    if (!shard.error.empty())
      return mlir::emitError(module.getLoc(), "the CPU JIT failed: ") << shard.error;
  CpuCode code;
  for (Shard &shard : shards)
    code.objects.emplace_back(shard.object.data(), shard.object.size());
  code.aliases = std::move(representative);
  std::vector<llvm::StringRef> objects(code.objects.begin(), code.objects.end());
  auto jit = linkObjects(objects, *target);
  if (!jit)
    return mlir::emitError(module.getLoc(), "the CPU JIT failed: ") << llvm::toString(jit.takeError());
  auto kernels = lookUpKernels(**jit, code.aliases, names);
  if (!kernels)
    return mlir::emitError(module.getLoc(), "the CPU JIT failed: ") << llvm::toString(kernels.takeError());
  code.kernels = std::move(*kernels);
  code.owner = std::shared_ptr<llvm::orc::LLJIT>(std::move(*jit));
  return code;
}

llvm::Expected<CpuCode> tilefuse::linkCpuObjects(const std::vector<std::string> &objects,
                                                 const std::map<std::string, std::string> &aliases,
                                                 const std::vector<std::string> &names) {
  initializeNativeTargetOnce();
  auto target = selectCpuTarget(/*runsHere=*/true);
  if (!target)
    return target.takeError();
  auto jit = linkObjects(std::vector<llvm::StringRef>(objects.begin(), objects.end()), *target);
  if (!jit)
    return jit.takeError();
  auto kernels = lookUpKernels(**jit, aliases, names);
  if (!kernels)
    return kernels.takeError();
  CpuCode code;
  code.kernels = std::move(*kernels);
  code.owner = std::shared_ptr<llvm::orc::LLJIT>(std::move(*jit));
  code.objects = objects;
  code.aliases = aliases;
  return code;
}

FailureOr<std::string> tilefuse::cpuKernelsToLLVMIR(ModuleOp module) {
  initializeOnce(module.getContext());
  if (failed(lowerTileToLLVM(module)))
    return failure();
  llvm::LLVMContext llvmContext;
  auto llvmModule = translateModuleToLLVMIR(module, llvmContext);
  if (!llvmModule)
    return module.emitError("translation to LLVM IR failed");
  std::string text;
  llvm::raw_string_ostream os(text);
  llvmModule->print(os, nullptr);
  return text;
}
