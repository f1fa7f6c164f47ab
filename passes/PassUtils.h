//===- PassUtils.h - helpers shared by module passes -------------*- C++ -*-===//
#ifndef TILEFUSE_PASSES_PASSUTILS_H
#define TILEFUSE_PASSES_PASSUTILS_H

#include "ir/graph/GraphDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"

namespace tilefuse {

/// The function named `name`, or the only function when `name` is empty;
/// emits an error on the module and returns null otherwise.
inline mlir::func::FuncOp findFunction(mlir::ModuleOp module,
                                       llvm::StringRef name) {
  if (!name.empty()) {
    auto f = module.lookupSymbol<mlir::func::FuncOp>(name);
    if (!f)
      module.emitError("no function named '") << name << "'";
    return f;
  }
  auto funcs = module.getOps<mlir::func::FuncOp>();
  if (std::distance(funcs.begin(), funcs.end()) != 1) {
    module.emitError("the module has several functions; pass function=NAME");
    return nullptr;
  }
  return *funcs.begin();
}

/// Whether `f` is a graph function the compiler can take: defined here
/// (not a declaration), taking and returning statically shaped tensors.
/// Emits the reason on `f` when not.
inline mlir::LogicalResult verifyGraphFunction(mlir::func::FuncOp f) {
  if (f.isExternal())
    return f.emitError("function @")
           << f.getSymName()
           << " is declared without a body; tilefuse compiles functions defined in the module";
  auto type = f.getFunctionType();
  auto check = [&](mlir::Type t, const char *what, unsigned i) -> mlir::LogicalResult {
    auto tensor = llvm::dyn_cast<mlir::RankedTensorType>(t);
    if (tensor && tensor.hasStaticShape())
      return mlir::success();
    return f.emitError() << what << " " << i << " of @" << f.getSymName() << " is " << t
                         << "; graph functions take and return statically shaped tensors "
                            "(a scalar is a 0-d tensor, e.g. tensor<f32>)";
  };
  for (auto [i, t] : llvm::enumerate(type.getInputs()))
    if (mlir::failed(check(t, "argument", i)))
      return mlir::failure();
  for (auto [i, t] : llvm::enumerate(type.getResults()))
    if (mlir::failed(check(t, "result", i)))
      return mlir::failure();
  // Element and byte counts computed from an impossible shape would wrap.
  mlir::LogicalResult sizes = mlir::success();
  f.walk([&](mlir::Operation *op) {
    auto checkSize = [&](mlir::Value v) {
      std::string error = graph::tensorSizeError(v.getType());
      if (error.empty())
        return true;
      mlir::emitError(v.getLoc()) << error;
      sizes = mlir::failure();
      return false;
    };
    for (mlir::Region &r : op->getRegions())
      for (mlir::Block &b : r)
        for (mlir::BlockArgument a : b.getArguments())
          if (!checkSize(a))
            return mlir::WalkResult::interrupt();
    for (mlir::Value v : op->getResults())
      if (!checkSize(v))
        return mlir::WalkResult::interrupt();
    return mlir::WalkResult::advance();
  });
  return sizes;
}

} // namespace tilefuse

#endif // TILEFUSE_PASSES_PASSUTILS_H
