//===- DTypes.cpp ---------------------------------------------------------===//
#include "codegen/DTypes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace tilefuse;

DType tilefuse::dtypeFromType(Type t) {
  if (auto tensor = llvm::dyn_cast<RankedTensorType>(t))
    t = tensor.getElementType();
  if (t.isF32()) return DType::F32;
  if (t.isF64()) return DType::F64;
  if (t.isF16()) return DType::F16;
  if (t.isBF16()) return DType::BF16;
  if (t.isInteger(1)) return DType::I1;
  if (t.isInteger(32)) return DType::I32;
  if (t.isInteger(64)) return DType::I64;
  std::string s;
  llvm::raw_string_ostream(s) << t;
  throw CompileError("unsupported element type " + s +
                     "; tilefuse supports f32, f16, bf16, f64, i32, i64, i1");
}

Type tilefuse::elementTypeFor(DType dtype, MLIRContext &ctx) {
  Builder b(&ctx);
  switch (dtype) {
  case DType::F32: return b.getF32Type();
  case DType::F64: return b.getF64Type();
  case DType::F16: return b.getF16Type();
  case DType::BF16: return b.getBF16Type();
  case DType::I1: return b.getI1Type();
  case DType::I32: return b.getI32Type();
  case DType::I64: return b.getI64Type();
  }
  return {};
}

Shape tilefuse::shapeFromType(Type t) {
  auto s = llvm::cast<RankedTensorType>(t).getShape();
  return Shape(s.begin(), s.end());
}
