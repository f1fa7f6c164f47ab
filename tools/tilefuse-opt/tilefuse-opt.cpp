//===- tilefuse-opt.cpp - mlir-opt for the tilefuse dialects and passes ---===//
//
// Only the dialects and passes tilefuse uses are registered: registering all
// of MLIR would triple this file's compile time for nothing.
//
//===----------------------------------------------------------------------===//
#include "ir/graph/GraphDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<tilefuse::graph::GraphDialect, mlir::func::FuncDialect>();
  tilefuse::registerTilefusePasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "tilefuse optimizer driver\n", registry));
}
