//===- CpuJit.cpp - tile kernels -> host machine code through ORC ---------===//
#include "codegen/cpu/CpuJit.h"

#include "codegen/cpu/TileToLLVM.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

#include <mutex>

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

FailureOr<CpuCode> tilefuse::jitCpuKernels(ModuleOp module,
                                           const std::vector<std::string> &names) {
  initializeOnce(module.getContext());
  if (failed(lowerTileToLLVM(module)))
    return failure();
  ExecutionEngineOptions options;
  // -O2 on vector code: the kernels are already vectorised; the
  // optimiser's job is scheduling, LICM of index math and unrolling.
  auto transformer = makeOptimizingTransformer(2, 0, nullptr);
  options.transformer = transformer;
  options.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Default;
  options.enableGDBNotificationListener = false;
  options.enablePerfNotificationListener = false;
  auto engine = ExecutionEngine::create(module, options);
  if (!engine) {
    std::string msg = llvm::toString(engine.takeError());
    return module.emitError("the CPU JIT failed: ") << msg;
  }
  std::shared_ptr<ExecutionEngine> owner(std::move(*engine));
  CpuCode code;
  for (const std::string &name : names) {
    auto fn = owner->lookup(name);
    if (!fn) {
      std::string msg = llvm::toString(fn.takeError());
      return module.emitError("compiled kernel '") << name << "' not found: " << msg;
    }
    code.kernels.push_back(reinterpret_cast<CpuKernelFn>(*fn));
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
