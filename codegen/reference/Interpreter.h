//===- Interpreter.h - the reference interpreter -----------------*- C++ -*-===//
//
// Executes a graph-dialect function directly on the CPU, one op at a time,
// in double precision with each result rounded to its declared dtype. It is
// the oracle every compiled result is checked against: obviously correct
// before fast.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_CODEGEN_REFERENCE_INTERPRETER_H
#define TILEFUSE_CODEGEN_REFERENCE_INTERPRETER_H

#include "runtime/HostTensor.h"

#include <string>
#include <vector>

namespace mlir {
class ModuleOp;
namespace func {
class FuncOp;
} // namespace func
} // namespace mlir

namespace tilefuse {

/// Runs `func`, whose body holds only primitive graph ops and func.return.
/// Throws CompileError for wrong argument counts/types, unsupported ops and
/// run-time faults (an out-of-range gather index, integer division by 0).
std::vector<HostTensor> interpretPrimitive(mlir::func::FuncOp func,
                                           const std::vector<HostTensor> &args);

/// graph.attention and graph.attention_grad in every function of `module`
/// (a lowered copy) written out with matmul, exp and reductions: the
/// interpreter evaluates attention as it does composites, through the ops
/// it stands for (passes/ExpandAttention.cpp, which CUDA fusion uses too),
/// so a written-out and a fused graph interpret to the same bits.
void expandAttentionForInterpreter(mlir::ModuleOp module);

/// Runs function `name` of `module` (composites allowed): a clone of the
/// module is lowered to primitives with the shared pipeline first.
std::vector<HostTensor> interpret(mlir::ModuleOp module, const std::string &name,
                                  const std::vector<HostTensor> &args);

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_REFERENCE_INTERPRETER_H
