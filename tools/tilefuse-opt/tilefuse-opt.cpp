//===- tilefuse-opt.cpp - mlir-opt for the tilefuse dialects and passes ---===//
//
// Only the dialects and passes tilefuse uses are registered: registering all
// of MLIR would triple this file's compile time for nothing.
//
// `--emit=STAGE` prints a graph module at a stage of the one pipeline
// (passes/Pipelines.cpp): graph (as parsed), primitive, fused, tile (the
// tile kernels), llvm (the CPU kernels in the LLVM dialect), cuda (the CUDA C
// of the kernels, for --target=cuda:sm_XX), plan (each function's memory
// plan: step order, live ranges, arena offsets). With
// `--target=cpu|cuda:sm_XX` for the fused and later stages.
//
//===----------------------------------------------------------------------===//
#include "ir/graph/GraphDialect.h"
#include "codegen/Passes.h"
#include "codegen/ProgramBuilder.h"
#include "codegen/cuda/CudaRenderer.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "passes/TargetInfo.h"
#include "runtime/MemoryPlan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/SourceMgr.h"

#include <algorithm>
#include "mlir/Transforms/Passes.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace {
/// Rewrites --emit=STAGE and --target=T into the registered pipeline of that
/// stage; returns false (after printing why) for a stage that does not exist.
bool expandEmit(int argc, char **argv, std::vector<std::string> &out) {
  std::string emit, target = "cpu";
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--emit=", 0) == 0)
      emit = arg.substr(7);
    else if (arg.rfind("--target=", 0) == 0)
      target = arg.substr(9);
    else
      out.push_back(arg);
  }
  if (emit.empty() || emit == "graph")
    return true;
  if (emit == "primitive") {
    out.push_back("--tilefuse-primitive");
  } else if (emit == "fused") {
    out.push_back("--tilefuse-fused=target=" + target);
  } else if (emit == "tile") {
    out.push_back("--tilefuse-fused=target=" + target);
    out.push_back("--tilefuse-lower-to-tile=target=" + target);
  } else if (emit == "llvm") {
    if (target != "cpu") {
      llvm::errs() << "tilefuse-opt: --emit=llvm is the CPU backend's stage; "
                      "use --target=cpu\n";
      return false;
    }
    out.push_back("--tilefuse-fused=target=cpu");
    out.push_back("--tilefuse-lower-to-tile=target=cpu");
    out.push_back("--tilefuse-tile-to-llvm");
  } else if (emit == "cuda" || emit == "plan") {
    // Printed by emitText (text, not IR).
    out.push_back("--emit-text=" + emit);
    out.push_back("--target=" + target);
  } else {
    llvm::errs() << "tilefuse-opt: unknown stage --emit=" << emit
                 << "; expected graph, primitive, fused, tile, llvm, cuda or plan\n";
    return false;
  }
  return true;
}
/// --emit=cuda: the module's fused kernels for a CUDA target as CUDA C.
/// --emit=plan: each function's memory plan (runtime/MemoryPlan.h) for the
/// target, as the compiler makes it.
int emitText(const std::string &what, const std::vector<std::string> &args,
             mlir::DialectRegistry &registry) {
  std::string input = "-", target = what == "cuda" ? "cuda:sm_90" : "cpu";
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].rfind("--target=", 0) == 0)
      target = args[i].substr(9);
    else if (args[i].rfind("--emit-text=", 0) == 0)
      continue;
    else if (args[i][0] != '-' || args[i] == "-")
      input = args[i];
  }
  if (what == "cuda" && target.rfind("cuda", 0) != 0) {
    llvm::errs() << "tilefuse-opt: --emit=cuda needs a CUDA target (--target=cuda:sm_XX)\n";
    return 1;
  }
  std::unique_ptr<tilefuse::TargetInfo> info = tilefuse::TargetInfo::get(target);
  if (!info) {
    llvm::errs() << "tilefuse-opt: unknown target '" << target << "'; expected cpu or cuda[:sm_XX]\n";
    return 1;
  }
  mlir::MLIRContext ctx(registry);
  llvm::SourceMgr sources;
  mlir::SourceMgrDiagnosticHandler diagnostics(sources, &ctx);
  auto file = mlir::openInputFile(input);
  if (!file) {
    llvm::errs() << "tilefuse-opt: cannot open " << input << "\n";
    return 1;
  }
  sources.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sources, &ctx);
  if (!module)
    return 1;
  mlir::PassManager pm(&ctx);
  tilefuse::buildFusedGraphPipeline(pm, target);
  if (what == "cuda") {
    tilefuse::LowerToTilePassOptions options;
    options.target = target;
    pm.addPass(tilefuse::createLowerToTilePass(options));
  }
  if (mlir::failed(pm.run(*module)))
    return 1;
  if (what == "cuda") {
    mlir::FailureOr<std::string> text = tilefuse::renderCudaKernels(*module);
    if (mlir::failed(text))
      return 1;
    llvm::outs() << *text;
    return 0;
  }
  mlir::OwningOpRef<mlir::ModuleOp> kernels(mlir::ModuleOp::create(module->getLoc()));
  for (auto func : llvm::to_vector(module->getOps<mlir::func::FuncOp>())) {
    std::string name = func.getSymName().str();
    mlir::FailureOr<tilefuse::Program> program = tilefuse::buildProgram(func, *info, *kernels);
    if (mlir::failed(program))
      return 1;
    llvm::outs() << "func @" << name << " (" << target << ")\n"
                 << tilefuse::formatMemoryPlan(*program);
  }
  return 0;
}
} // namespace

/// tilefuse's own options first: MlirOptMain's --help lists every LLVM
/// option (hundreds), which buries them.
void printHelp() {
  llvm::outs()
      << "OVERVIEW: tilefuse optimizer driver (mlir-opt for the tilefuse dialects)\n\n"
      << "USAGE: tilefuse-opt [options] <input.mlir | ->\n\n"
      << "tilefuse options:\n"
      << "  --emit=STAGE        print the module at a stage of the pipeline:\n"
      << "                        graph (as parsed), primitive (composites decomposed),\n"
      << "                        fused (graph.fusion kernels), tile (tile kernels),\n"
      << "                        llvm (CPU kernels in the LLVM dialect), cuda (CUDA C),\n"
      << "                        plan (memory plan: live ranges, arena offsets, peak)\n"
      << "  --target=T          cpu (default) or cuda:sm_XX, for fused/tile/llvm/cuda/plan\n"
      << "  --verify-diagnostics, --split-input-file   as mlir-opt\n"
      << "  --help-mlir         every option of the MLIR driver and LLVM\n\n"
      << "tilefuse passes and pipelines:\n";
  // tilefuse's passes (passes/Passes.td, codegen/Passes.td) and pipelines.
  for (const char *name : {"autocast", "decompose-composites", "autodiff", "build-train-step", "fuse", "rematerialize",
                           "tilefuse-lower-to-tile", "tilefuse-tile-to-llvm", "tilefuse-primitive",
                           "tilefuse-fused", "canonicalize", "cse"}) {
    const mlir::PassRegistryEntry *entry = mlir::PassInfo::lookup(name);
    if (!entry)
      entry = mlir::PassPipelineInfo::lookup(name);
    if (entry)
      llvm::outs() << "  --" << llvm::left_justify(name, 24) << entry->getPassDescription()
                   << "\n";
  }
}

int main(int argc, char **argv) {
  std::vector<std::string> args;
  if (!expandEmit(argc, argv, args))
    return 1;
  bool help = false, helpMlir = false;
  for (std::string &a : args) {
    help |= a == "--help" || a == "-help" || a == "-h";
    if (a == "--help-mlir") {
      helpMlir = true;
      a = "--help";
    }
  }
  std::vector<char *> rewritten;
  for (std::string &a : args)
    rewritten.push_back(a.data());
  rewritten.push_back(nullptr);
  argc = static_cast<int>(args.size());
  argv = rewritten.data();

  mlir::DialectRegistry registry;
  registry.insert<tilefuse::graph::GraphDialect, mlir::func::FuncDialect,
                  tilefuse::tile::TileDialect, mlir::arith::ArithDialect,
                  mlir::math::MathDialect, mlir::scf::SCFDialect,
                  mlir::vector::VectorDialect, mlir::LLVM::LLVMDialect,
                  mlir::cf::ControlFlowDialect>();
  tilefuse::registerTilefusePasses();
  tilefuse::registerTilefuseCodegenPasses();
  for (const std::string &a : args)
    if (a.rfind("--emit-text=", 0) == 0)
      return emitText(a.substr(12), args, registry);
  tilefuse::registerTilefusePipelines();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  if (help && !helpMlir) {
    printHelp();
    return 0;
  }
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "tilefuse optimizer driver\n", registry));
}
