//===- DTypes.h - runtime dtypes <-> MLIR element types -----------*- C++ -*-===//
//
// The one mapping between the MLIR types of the graph dialect and the
// runtime's DType, shared by the interpreter, the program builder and the
// frontend.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_CODEGEN_DTYPES_H
#define TILEFUSE_CODEGEN_DTYPES_H

#include "runtime/HostTensor.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Types.h"

namespace tilefuse {

/// DType of a tensor type or an element type; throws CompileError for
/// element types tilefuse does not support.
DType dtypeFromType(mlir::Type tensorOrElementType);
mlir::Type elementTypeFor(DType dtype, mlir::MLIRContext &ctx);
/// Shape of a ranked tensor type.
Shape shapeFromType(mlir::Type tensorType);

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_DTYPES_H
