//===- ProgramBuilder.h - fused graph -> runtime Program ----------*- C++ -*-===//
//
// The last compiler step shared by every backend: a fused graph function
// becomes a runtime Program (kernel launches, GEMMs, gathers, copies over
// numbered buffers) plus a module of tile kernels for a backend to compile.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_CODEGEN_PROGRAMBUILDER_H
#define TILEFUSE_CODEGEN_PROGRAMBUILDER_H

#include "runtime/Program.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace tilefuse {
class TargetInfo;

/// Builds the Program of `func` (whose body holds graph.fusion regions,
/// library ops, constants and func.return) and appends one tile kernel per
/// fusion to `kernels`. `func` is changed in place (dense constants are
/// hoisted out of fusion regions). Emits diagnostics and fails on ops no
/// step can run.
mlir::FailureOr<Program> buildProgram(mlir::func::FuncOp func,
                                      const TargetInfo &target,
                                      mlir::ModuleOp kernels);

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_PROGRAMBUILDER_H
