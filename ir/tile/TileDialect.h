//===- TileDialect.h - the tile dialect --------------------------*- C++ -*-===//
//
// Triton-style block programs of fused kernels. See TileOps.td.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_IR_TILE_TILEDIALECT_H
#define TILEFUSE_IR_TILE_TILEDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "ir/tile/TileEnums.h.inc"
#include "ir/tile/TileDialect.h.inc"

#define GET_TYPEDEF_CLASSES
#include "ir/tile/TileTypes.h.inc"

#define GET_OP_CLASSES
#include "ir/tile/TileOps.h.inc"

namespace tilefuse::tile {
/// Attribute names on a kernel `func.func`.
constexpr const char *kKernelAttr = "tile.kernel";
constexpr const char *kGridAttr = "tile.grid";
constexpr const char *kBlockAttr = "tile.block";
constexpr const char *kFusedOpsAttr = "tile.fused_ops";
} // namespace tilefuse::tile

#endif // TILEFUSE_IR_TILE_TILEDIALECT_H
