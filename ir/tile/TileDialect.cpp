//===- TileDialect.cpp - tile dialect registration and verifiers ----------===//
#include "ir/tile/TileDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace tilefuse::tile;

#include "ir/tile/TileDialect.cpp.inc"
#include "ir/tile/TileEnums.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "ir/tile/TileTypes.cpp.inc"

#define GET_OP_CLASSES
#include "ir/tile/TileOps.cpp.inc"

void TileDialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "ir/tile/TileTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "ir/tile/TileOps.cpp.inc"
      >();
}

namespace {
/// Memory ops move storage types only (booleans as i8 bytes): conversions
/// to compute types are explicit arith ops.
LogicalResult checkElement(Operation *op, Type pointee, Type element) {
  if (!llvm::isa<FloatType>(pointee) && !pointee.isInteger(8) &&
      !pointee.isInteger(32) && !pointee.isInteger(64))
    return op->emitOpError() << "points to " << pointee
                             << "; expected f32, f16, bf16, f64, i32, i64 or i8";
  if (element == pointee)
    return success();
  return op->emitOpError() << "moves " << element << " through a pointer to "
                           << pointee << "; the element types must match";
}
Type elementOf(Type t) {
  if (auto v = llvm::dyn_cast<VectorType>(t))
    return v.getElementType();
  return t;
}
} // namespace

LogicalResult LoadOp::verify() {
  if (int64_t(getStride()) < 0)
    return emitOpError() << "stride " << int64_t(getStride()) << " is negative";
  if (int64_t(getDiv()) < 1)
    return emitOpError() << "div " << int64_t(getDiv()) << " must be at least 1";
  return checkElement(*this, getPtr().getType().getPointee(),
                      elementOf(getType()));
}

LogicalResult GatherOp::verify() {
  auto n = getType().getNumElements();
  if (getOffsets().getType().getNumElements() != n ||
      getMask().getType().getNumElements() != n)
    return emitOpError() << "offsets, mask and result must have " << n
                         << " lanes each";
  return checkElement(*this, getPtr().getType().getPointee(),
                      elementOf(getType()));
}

LogicalResult LoadScalarOp::verify() {
  return checkElement(*this, getPtr().getType().getPointee(), getType());
}

LogicalResult StoreOp::verify() {
  if (int64_t(getStride()) < 1)
    return emitOpError() << "stride " << int64_t(getStride())
                         << " would store several lanes to one element";
  return checkElement(*this, getPtr().getType().getPointee(),
                      elementOf(getValue().getType()));
}

LogicalResult ScatterOp::verify() {
  auto n = llvm::cast<VectorType>(getValue().getType()).getNumElements();
  if (getOffsets().getType().getNumElements() != n ||
      getMask().getType().getNumElements() != n)
    return emitOpError() << "value, offsets and mask must have " << n
                         << " lanes each";
  return checkElement(*this, getPtr().getType().getPointee(),
                      elementOf(getValue().getType()));
}

LogicalResult StoreScalarOp::verify() {
  return checkElement(*this, getPtr().getType().getPointee(),
                      getValue().getType());
}

LogicalResult ScratchOp::verify() {
  if (int64_t(getElements()) < 1)
    return emitOpError() << "holds " << int64_t(getElements())
                         << " elements; a scratch buffer needs at least one";
  return success();
}

LogicalResult ReduceOp::verify() {
  if (elementOf(getBlock().getType()) != getType())
    return emitOpError() << "reduces " << getBlock().getType() << " to "
                         << getType() << "; the element types must match";
  return success();
}
