//===- tilefuse-opt.cpp - mlir-opt for the tilefuse dialects and passes ---===//
//
// Only the dialects and passes tilefuse uses are registered: registering all
// of MLIR would triple this file's compile time for nothing.
//
// `--emit=STAGE` prints a graph module at a stage of the one pipeline
// (passes/Pipelines.cpp): graph (as parsed), primitive, fused, tile (the
// tile kernels), llvm (the CPU kernels in the LLVM dialect). With
// `--target=cpu|cuda:sm_XX` for the fused and tile stages.
//
//===----------------------------------------------------------------------===//
#include "ir/graph/GraphDialect.h"
#include "codegen/Passes.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

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
  } else if (emit == "cuda") {
    llvm::errs() << "tilefuse-opt: --emit=cuda is not available: this build "
                    "has no CUDA backend; use graph, primitive, fused, tile or llvm\n";
    return false;
  } else {
    llvm::errs() << "tilefuse-opt: unknown stage --emit=" << emit
                 << "; expected graph, primitive, fused, tile or llvm\n";
    return false;
  }
  return true;
}
} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args;
  if (!expandEmit(argc, argv, args))
    return 1;
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
  tilefuse::registerTilefusePipelines();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "tilefuse optimizer driver\n", registry));
}
