//===- GraphDialect.cpp - dialect registration and shared syntax ----------===//
#include "ir/graph/GraphDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace tilefuse::graph;

#include "ir/graph/GraphDialect.cpp.inc"

void GraphDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "ir/graph/GraphOps.cpp.inc"
      >();
}

Operation *GraphDialect::materializeConstant(OpBuilder &builder,
                                             Attribute value, Type type,
                                             Location loc) {
  auto elements = llvm::dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return builder.create<ConstantOp>(loc, elements);
}

ParseResult tilefuse::graph::parseElementwiseOp(OpAsmParser &parser,
                                                OperationState &result) {
  SmallVector<OpAsmParser::UnresolvedOperand, 2> operands;
  Type type;
  SMLoc operandsLoc = parser.getCurrentLocation();
  if (parser.parseOperandList(operands) ||
      parser.parseOptionalAttrDict(result.attributes) ||
      parser.parseColonType(type) ||
      parser.resolveOperands(operands, type, operandsLoc, result.operands))
    return failure();
  // Inherent attributes (gelu's `approximate`) are checked before anything
  // reads them, as ODS-generated parsers do.
  if (failed(result.name.verifyInherentAttrs(result.attributes, [&]() {
        return parser.emitError(operandsLoc)
               << "'" << result.name.getStringRef() << "' op ";
      })))
    return failure();
  // Not a statically shaped tensor: keep the type as a placeholder result so
  // the verifier reports the operand type constraint (inference would not
  // know what to do with it).
  auto tensor = llvm::dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape()) {
    result.addTypes(type);
    return success();
  }
  // The result type follows from the operands; the op's inference rule is
  // run here so that a bad dtype is reported at parse time.
  auto opName = result.name.getRegisteredInfo();
  auto infer = opName ? opName->getInterface<InferTypeOpInterface>() : nullptr;
  if (!infer)
    return parser.emitError(operandsLoc, "op does not infer its result type");
  SmallVector<Type, 1> resultTypes;
  if (failed(infer->inferReturnTypes(
          parser.getContext(), result.location, result.operands,
          result.attributes.getDictionary(parser.getContext()),
          result.getRawProperties(), result.regions, resultTypes)))
    return failure();
  result.addTypes(resultTypes);
  return success();
}

void tilefuse::graph::printElementwiseOp(OpAsmPrinter &printer,
                                         Operation *op) {
  printer << ' ';
  printer.printOperands(op->getOperands());
  // Attributes at their default value are elided, as ODS printers do.
  SmallVector<StringRef, 1> elided;
  if (auto approx = op->getAttrOfType<StringAttr>("approximate"))
    if (approx.getValue() == "none")
      elided.push_back("approximate");
  printer.printOptionalAttrDict(op->getAttrs(), elided);
  // Operands share one type in a verified op, so one type is printed.
  printer << " : " << op->getOperand(0).getType();
}

std::string tilefuse::graph::tensorSizeError(Type type) {
  auto tensor = llvm::dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return "";
  // Element bytes rounded up (i1 is stored as a byte).
  unsigned bits = tensor.getElementType().getIntOrFloatBitWidth();
  int64_t count = 1;
  bool overflow = false;
  for (int64_t d : tensor.getShape())
    overflow |= llvm::MulOverflow(count, d, count);
  int64_t bytes = 0;
  overflow = overflow || llvm::MulOverflow(count, int64_t((bits + 7) / 8), bytes);
  if (!overflow)
    return "";
  std::string s;
  llvm::raw_string_ostream os(s);
  os << type << " has more elements or bytes than a 64-bit size can count; "
     << "no tensor of this shape can exist (check the shape computation)";
  return s;
}

int64_t tilefuse::graph::checkpointRegionOf(mlir::Location loc) {
  int64_t id = -1;
  loc->walk([&](mlir::Location inner) {
    if (auto name = llvm::dyn_cast<mlir::NameLoc>(inner)) {
      llvm::StringRef text = name.getName().getValue();
      int64_t v = 0;
      if (text.consume_front(kCheckpointLocPrefix) && !text.getAsInteger(10, v))
        id = v;
    }
    return mlir::WalkResult::advance();
  });
  return id;
}

std::string tilefuse::graph::locationName(mlir::Location loc) {
  while (auto name = llvm::dyn_cast<mlir::NameLoc>(loc)) {
    // tilefuse.checkpoint.<id>, tilefuse.autocast.off: region markers
    if (!name.getName().getValue().starts_with("tilefuse."))
      return name.getName().str();
    loc = name.getChildLoc();
  }
  return "";
}
