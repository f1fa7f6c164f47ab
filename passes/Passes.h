//===- Passes.h - graph-level passes ----------------------------*- C++ -*-===//
#ifndef TILEFUSE_PASSES_PASSES_H
#define TILEFUSE_PASSES_PASSES_H

#include "ir/graph/GraphDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace tilefuse {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace tilefuse

#endif // TILEFUSE_PASSES_PASSES_H
