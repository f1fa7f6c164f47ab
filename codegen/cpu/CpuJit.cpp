//===- CpuJit.cpp - tile kernels -> host machine code through ORC ---------===//
#include "codegen/cpu/CpuJit.h"

#include "codegen/cpu/TileToLLVM.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

using namespace mlir;
using namespace tilefuse;

namespace {
void initializeOnce(MLIRContext *ctx) {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  registerBuiltinDialectTranslation(*ctx);
  registerLLVMDialectTranslation(*ctx);
}
} // namespace

namespace {
/// A slice of the kernels, compiled by one thread into one engine.
struct Shard {
  std::vector<std::string> names;
  std::string bitcode;
  std::unique_ptr<ExecutionEngine> engine;
  std::vector<void *> entries; ///< of `names`
  std::string error;
};

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

void compileShard(Shard &shard, ModuleOp anchor) {
  ExecutionEngineOptions options;
  // -O2 on vector code: the kernels are already vectorised; the
  // optimiser's job is CSE and LICM of index math, and scheduling.
  auto transformer = makeOptimizingTransformer(2, 0, nullptr);
  options.transformer = transformer;
  options.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Default;
  options.enableGDBNotificationListener = false;
  options.enablePerfNotificationListener = false;
  std::string parseError;
  auto builder = [&](Operation *, llvm::LLVMContext &ctx) -> std::unique_ptr<llvm::Module> {
    auto buffer = llvm::MemoryBuffer::getMemBuffer(shard.bitcode, "kernels", false);
    auto m = llvm::parseBitcodeFile(buffer->getMemBufferRef(), ctx);
    if (!m) {
      parseError = llvm::toString(m.takeError());
      return nullptr;
    }
    return std::move(*m);
  };
  options.llvmModuleBuilder = builder;
  auto engine = ExecutionEngine::create(anchor, options);
  if (!engine) {
    shard.error = llvm::toString(engine.takeError()) + parseError;
    return;
  }
  shard.engine = std::move(*engine);
  // ORC compiles on first lookup: look everything up here, on this thread.
  for (const std::string &name : shard.names) {
    auto fn = shard.engine->lookup(name);
    if (!fn) {
      shard.error = "compiled kernel '" + name + "' not found: " + llvm::toString(fn.takeError());
      shard.engine.reset();
      return;
    }
    shard.entries.push_back(*fn);
  }
}
} // namespace

FailureOr<CpuCode> tilefuse::jitCpuKernels(ModuleOp module,
                                           const std::vector<std::string> &names) {
  initializeOnce(module.getContext());
  if (failed(lowerTileToLLVM(module)))
    return failure();
  // LLVM's code generation dominates compile time: one shard per core
  // (at least 4 kernels each, below that threads cost more than they save).
  size_t cores = std::max(1u, std::thread::hardware_concurrency());
  size_t n = std::max<size_t>(1, std::min(cores, names.size() / 4));
  std::vector<Shard> shards(n);
  if (failed(splitIntoShards(module, shards)))
    return failure();
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n; ++i)
    threads.emplace_back([&, i] { compileShard(shards[i], module); });
  compileShard(shards[0], module);
  for (std::thread &t : threads)
    t.join();
  auto owner = std::make_shared<std::vector<std::unique_ptr<ExecutionEngine>>>();
  llvm::StringMap<void *> entries;
  for (Shard &shard : shards) {
    if (!shard.engine)
      return module.emitError("the CPU JIT failed: ") << shard.error;
    for (size_t i = 0; i < shard.names.size(); ++i)
      entries[shard.names[i]] = shard.entries[i];
    owner->push_back(std::move(shard.engine));
  }
  CpuCode code;
  for (const std::string &name : names) {
    auto it = entries.find(name);
    if (it == entries.end())
      return module.emitError("no compiled kernel named '") << name << "'";
    code.kernels.push_back(reinterpret_cast<CpuKernelFn>(it->second));
  }
  code.owner = owner;
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
