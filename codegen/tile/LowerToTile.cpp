//===- LowerToTile.cpp - fused graph functions -> tile kernels ------------===//
//
// The pass behind `--emit=tile`: the same buildProgram the compiler uses,
// keeping only the kernels it produces.
//
//===----------------------------------------------------------------------===//
#include "codegen/Passes.h"
#include "codegen/ProgramBuilder.h"
#include "passes/TargetInfo.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace tilefuse {
#define GEN_PASS_DEF_LOWERTOTILEPASS
#include "codegen/Passes.h.inc"
} // namespace tilefuse

using namespace mlir;
using namespace tilefuse;

namespace {
struct LowerToTilePass : tilefuse::impl::LowerToTilePassBase<LowerToTilePass> {
  using LowerToTilePassBase::LowerToTilePassBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::unique_ptr<TargetInfo> info = TargetInfo::get(target);
    if (!info) {
      module.emitError("unknown target '") << target << "'; expected cpu or cuda[:sm_XX]";
      return signalPassFailure();
    }
    OwningOpRef<ModuleOp> kernels(ModuleOp::create(module.getLoc()));
    for (auto func : llvm::to_vector(module.getOps<func::FuncOp>()))
      if (failed(buildProgram(func, *info, *kernels)))
        return signalPassFailure();
    for (Operation &op : llvm::make_early_inc_range(module.getBody()->getOperations()))
      op.erase();
    for (Operation &op : llvm::make_early_inc_range(kernels->getBody()->getOperations())) {
      op.remove();
      module.getBody()->push_back(&op);
    }
  }
};
} // namespace
