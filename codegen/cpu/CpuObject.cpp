//===- CpuObject.cpp - tile kernels -> a shared library for the host ------===//
//
// Ahead-of-time form of the CPU backend: the same lowering as the JIT, the
// same -O2 pipeline, then an object file for the host CPU linked by the
// system's C compiler into a shared library the runtime can dlopen without
// LLVM.
//
//===----------------------------------------------------------------------===//
#include "codegen/cpu/CpuObject.h"

#include "codegen/cpu/CpuTarget.h"
#include "codegen/cpu/TileToLLVM.h"

#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"

#include <cstdio>
#include "llvm/IR/GlobalAlias.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <unistd.h>

using namespace mlir;
using namespace tilefuse;

FailureOr<CpuSharedLibrary> tilefuse::emitCpuSharedLibrary(ModuleOp module) {
  registerBuiltinDialectTranslation(*module.getContext());
  registerLLVMDialectTranslation(*module.getContext());
  // Repeated kernels are compiled once; their names become aliases of it.
  std::map<std::string, std::string> representative = eraseRepeatedKernels(module);
  auto target = selectCpuTarget(/*runsHere=*/false);
  if (!target)
    return module.emitError("cannot compile the CPU kernels: ") << llvm::toString(target.takeError());
  if (failed(lowerTileToLLVM(module, masksNarrowLanes(*target))))
    return failure();
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> ir = translateModuleToLLVMIR(module, ctx);
  if (!ir)
    return module.emitError("translation of the CPU kernels to LLVM IR failed");
  for (const auto &[name, kept] : representative) {
    llvm::Function *f = ir->getFunction(kept);
    if (!f)
      return module.emitError("the kept kernel '") << kept << "' is missing";
    llvm::GlobalAlias::create(f->getLinkage(), name, f);
  }

  auto created = createCpuTargetMachine(*target);
  if (!created)
    return module.emitError("cannot compile the CPU kernels: ")
           << llvm::toString(created.takeError());
  std::unique_ptr<llvm::TargetMachine> machine = std::move(*created);
  const std::string &triple = target->triple;
  ir->setDataLayout(machine->createDataLayout());
  ir->setTargetTriple(triple);
  if (llvm::Error e = makeOptimizingTransformer(2, 0, machine.get())(ir.get()))
    return module.emitError("optimising the CPU kernels failed: ") << llvm::toString(std::move(e));

  // Object file and shared library in a private temporary folder.
  char dirTemplate[] = "/tmp/tilefuse-aot-XXXXXX";
  if (!mkdtemp(dirTemplate))
    return module.emitError("cannot create a temporary folder for the CPU library");
  std::string dir = dirTemplate, object = dir + "/kernels.o", library = dir + "/kernels.so";
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(object, ec, llvm::sys::fs::OF_None);
    if (ec)
      return module.emitError("cannot write ") << object << ": " << ec.message();
    llvm::legacy::PassManager pm;
    if (machine->addPassesToEmitFile(pm, out, nullptr, llvm::CodeGenFileType::ObjectFile))
      return module.emitError("LLVM cannot emit object files for ") << triple;
    pm.run(*ir);
  }
  const char *cc = std::getenv("CC");
  std::string command = std::string(cc && *cc ? cc : "cc") + " -shared -Wl,--no-undefined -o '" +
                        library + "' '" + object + "' -lm 2>&1";
  FILE *pipe = popen(command.c_str(), "r");
  std::string linkLog;
  if (pipe) {
    char buf[256];
    while (fgets(buf, sizeof(buf), pipe))
      linkLog += buf;
  }
  int status = pipe ? pclose(pipe) : -1;
  std::ifstream in(library, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  std::remove(object.c_str());
  std::remove(library.c_str());
  rmdir(dir.c_str());
  if (status != 0 || bytes.str().empty())
    return module.emitError("linking the CPU kernels into a shared library failed (")
           << command << "): " << linkLog;
  return CpuSharedLibrary{bytes.str(), target->requiredFeatures};
}
