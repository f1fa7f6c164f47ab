//===- PassUtils.h - helpers shared by module passes -------------*- C++ -*-===//
#ifndef TILEFUSE_PASSES_PASSUTILS_H
#define TILEFUSE_PASSES_PASSUTILS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

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

} // namespace tilefuse

#endif // TILEFUSE_PASSES_PASSUTILS_H
