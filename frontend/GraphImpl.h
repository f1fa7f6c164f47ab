//===- GraphImpl.h - MLIR side of Graph (frontend-internal) -----*- C++ -*-===//
#ifndef TILEFUSE_FRONTEND_GRAPHIMPL_H
#define TILEFUSE_FRONTEND_GRAPHIMPL_H

#include "codegen/DTypes.h"
#include "frontend/Graph.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <functional>

namespace tilefuse {

/// The process-wide context with the dialects tilefuse uses loaded.
mlir::MLIRContext &globalContext();

/// Runs `fn` while collecting every diagnostic it emits; if `fn` fails,
/// throws CompileError("<what>:\n<diagnostics>").
void runCapturingDiagnostics(const std::string &what,
                             const std::function<mlir::LogicalResult()> &fn);

/// "file:line" for file locations, MLIR's spelling otherwise.
std::string formatLocation(mlir::Location loc);


struct Graph::Impl {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::string entry;
  /// `module` lowered to primitives, built on first use by the interpreter.
  mlir::OwningOpRef<mlir::ModuleOp> lowered;
  mlir::func::FuncOp func() const;
  /// A copy of `module` lowered to primitives (diagnostics -> CompileError).
  mlir::OwningOpRef<mlir::ModuleOp> lowerCopy(const std::string &what) const;
};

} // namespace tilefuse

#endif // TILEFUSE_FRONTEND_GRAPHIMPL_H
