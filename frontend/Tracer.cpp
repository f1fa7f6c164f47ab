//===- Tracer.cpp ---------------------------------------------------------===//
//
// Ops are created with a placeholder result type, then their own
// InferTypeOpInterface computes the real one and the op verifier runs, all
// under a diagnostic capture: the tracer never duplicates a shape rule, and a
// user mistake becomes a CompileError instead of an assertion.
//
//===----------------------------------------------------------------------===//
#include "frontend/Tracer.h"
#include "passes/Autocast.h"

#include "frontend/GraphImpl.h"
#include "ir/graph/GraphDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <numeric>

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;

DType tilefuse::promoteDTypes(DType a, DType b) {
  if (a == b)
    return a;
  bool fa = isFloatDType(a), fb = isFloatDType(b);
  if (fa != fb)
    return fa ? a : b;
  if (fa) {
    if (a == DType::F64 || b == DType::F64)
      return DType::F64;
    return DType::F32; // f32 with anything, or f16 with bf16
  }
  if (a == DType::I64 || b == DType::I64)
    return DType::I64;
  if (a == DType::I32 || b == DType::I32)
    return DType::I32;
  return DType::I1;
}

Shape tilefuse::broadcastShapes(const Shape &a, const Shape &b,
                                const std::string &op) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      throw CompileError(op + ": cannot broadcast shapes " + shapeToString(a) +
                         " and " + shapeToString(b) +
                         " (numpy rules: trailing dimensions must be equal "
                         "or 1)");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

struct Tracer::Impl {
  OpBuilder builder{&globalContext()};
  OwningOpRef<ModuleOp> module;
  func::FuncOp func;
  Location loc = UnknownLoc::get(&globalContext());
  /// The user's source location; `loc` is it, marked with the outermost
  /// open checkpoint region (a region inside another is part of the outer
  /// one's rerun).
  Location source = UnknownLoc::get(&globalContext());
  std::vector<int64_t> checkpoints;
  int64_t nextCheckpoint = 0;
  bool autocastOff = false;
  void updateLocation() {
    loc = source;
    if (autocastOff)
      loc = NameLoc::get(StringAttr::get(&ctx(), kAutocastOffLocName), loc);
    if (!checkpoints.empty())
      loc = NameLoc::get(StringAttr::get(&ctx(), graph::kCheckpointLocPrefix.str() +
                                                     std::to_string(checkpoints.front())),
                         loc);
  }
  std::vector<Value> values;
  int64_t nextDropoutStream = 0;
  bool finished = false;

  MLIRContext &ctx() { return globalContext(); }

  std::string where() const {
    if (llvm::isa<UnknownLoc>(source))
      return "";
    return " (at " + formatLocation(source) + ")";
  }
  [[noreturn]] void fail(const std::string &msg) const {
    throw CompileError(msg + where());
  }

  Value get(ValueId id) const {
    if (finished)
      throw CompileError("this trace has finished; trace the function again");
    if (id < 0 || id >= static_cast<int>(values.size()))
      throw CompileError("unknown traced value id " + std::to_string(id));
    return values[id];
  }
  ValueId put(Value v) {
    values.push_back(v);
    return static_cast<int>(values.size()) - 1;
  }
  static RankedTensorType typeOf(Value v) {
    return llvm::cast<RankedTensorType>(v.getType());
  }
  RankedTensorType tensorType(DType dtype, const Shape &shape) {
    return RankedTensorType::get(shape, elementTypeFor(dtype, ctx()));
  }
  DType dtypeOf(Value v) const { return dtypeFromType(v.getType()); }
  Shape shapeOf(Value v) const {
    auto s = typeOf(v).getShape();
    return Shape(s.begin(), s.end());
  }

  /// Creates OpTy, infers its result type if it can, verifies it.
  template <typename OpTy>
  Value create(Type resultType, ValueRange operands,
               ArrayRef<NamedAttribute> attrs = {}) {
    Operation *op = nullptr;
    std::string name = OpTy::getOperationName().str();
    runCapturingDiagnostics("cannot trace " + name, [&]() -> LogicalResult {
      op = builder.create<OpTy>(loc, TypeRange{resultType}, operands, attrs)
               .getOperation();
      if (auto infer = llvm::dyn_cast<InferTypeOpInterface>(op)) {
        SmallVector<Type, 1> types;
        if (failed(infer.inferReturnTypes(
                &ctx(), op->getLoc(), op->getOperands(),
                op->getAttrDictionary(), op->getPropertiesStorage(),
                op->getRegions(), types))) {
          op->erase();
          return failure();
        }
        op->getResult(0).setType(types[0]);
      }
      // Before the verifier, whose size arithmetic would wrap.
      std::string tooBig = tensorSizeError(op->getResult(0).getType());
      if (!tooBig.empty()) {
        op->emitOpError() << "result " << tooBig;
        op->erase();
        return failure();
      }
      if (failed(mlir::verify(op))) {
        op->erase();
        return failure();
      }
      return success();
    });
    return op->getResult(0);
  }

  NamedAttribute attr(StringRef name, Attribute value) {
    return builder.getNamedAttr(name, value);
  }

  /// Creates OpTy of several results, their types inferred, verified.
  template <typename OpTy>
  Operation *createMulti(unsigned numResults, ValueRange operands,
                         ArrayRef<NamedAttribute> attrs) {
    Operation *op = nullptr;
    std::string name = OpTy::getOperationName().str();
    runCapturingDiagnostics("cannot trace " + name, [&]() -> LogicalResult {
      SmallVector<Type> placeholders(numResults, operands.front().getType());
      op = builder.create<OpTy>(loc, TypeRange(placeholders), operands, attrs).getOperation();
      SmallVector<Type, 3> types;
      if (failed(llvm::cast<InferTypeOpInterface>(op).inferReturnTypes(
              &ctx(), op->getLoc(), op->getOperands(), op->getAttrDictionary(),
              op->getPropertiesStorage(), op->getRegions(), types))) {
        op->erase();
        return failure();
      }
      for (auto [r, t] : llvm::zip(op->getResults(), types))
        r.setType(t);
      if (failed(mlir::verify(op))) {
        op->erase();
        return failure();
      }
      return success();
    });
    return op;
  }

  Value full(double value, DType dtype, const Shape &shape) {
    return create<FullOp>(tensorType(dtype, shape), {},
                          {attr("value", builder.getF64FloatAttr(value))});
  }

  Value cast(Value v, DType to) {
    if (dtypeOf(v) == to)
      return v;
    // A cast of a fill is a fill of the converted value.
    if (auto f = v.getDefiningOp<FullOp>(); f && isFloatDType(to))
      return full(f.getValue().convertToDouble(), to, shapeOf(v));
    return create<CastOp>(tensorType(to, shapeOf(v)), {v});
  }

  Value broadcastTo(Value v, const Shape &shape, const std::string &op) {
    Shape from = shapeOf(v);
    if (from == shape)
      return v;
    Shape check = broadcast(from, shape, op);
    if (check != shape)
      fail(op + ": cannot broadcast " + shapeToString(from) + " to " +
           shapeToString(shape));
    // A broadcast of a fill is a bigger fill.
    if (auto f = v.getDefiningOp<FullOp>())
      return full(f.getValue().convertToDouble(), dtypeOf(v), shape);
    SmallVector<int64_t> dims;
    for (size_t i = 0; i < from.size(); ++i)
      dims.push_back(int64_t(shape.size() - from.size() + i));
    return create<BroadcastInDimOp>(
        tensorType(dtypeOf(v), shape), {v},
        {attr("dims", builder.getDenseI64ArrayAttr(dims))});
  }

  /// broadcastShapes with the user's location on failure.
  Shape broadcast(const Shape &a, const Shape &b, const std::string &op) const {
    try {
      return broadcastShapes(a, b, op);
    } catch (const CompileError &e) {
      fail(e.what());
    }
  }

  int64_t normalizeDim(int64_t dim, int64_t rank, const std::string &op) {
    if (dim < -rank || dim >= std::max<int64_t>(rank, 1))
      fail(op + ": dim " + std::to_string(dim) +
           " is out of range for a tensor of rank " + std::to_string(rank));
    return dim < 0 ? dim + rank : dim;
  }
};

Tracer::Tracer(const std::string &functionName)
    : impl_(std::make_unique<Impl>()) {
  auto &b = impl_->builder;
  impl_->module = ModuleOp::create(impl_->loc);
  b.setInsertionPointToEnd(impl_->module->getBody());
  impl_->func = b.create<func::FuncOp>(impl_->loc, functionName,
                                       b.getFunctionType({}, {}));
  b.setInsertionPointToEnd(impl_->func.addEntryBlock());
}

Tracer::~Tracer() = default;

void Tracer::setLocation(const std::string &file, int line) {
  impl_->source = FileLineColLoc::get(&impl_->ctx(), file, line, 0);
  impl_->updateLocation();
}

void Tracer::clearLocation() {
  impl_->source = UnknownLoc::get(&impl_->ctx());
  impl_->updateLocation();
}

void Tracer::setAutocast(bool enabled) {
  if (impl_->autocastOff != !enabled) {
    impl_->autocastOff = !enabled;
    impl_->updateLocation();
  }
}

void Tracer::beginCheckpoint() {
  impl_->checkpoints.push_back(impl_->nextCheckpoint++);
  impl_->updateLocation();
}

void Tracer::endCheckpoint() {
  if (impl_->checkpoints.empty())
    throw CompileError("endCheckpoint without a beginCheckpoint");
  impl_->checkpoints.pop_back();
  impl_->updateLocation();
}

ValueId Tracer::argument(DType dtype, const Shape &shape) {
  for (int64_t d : shape)
    if (d < 0)
      impl_->fail("argument shapes must be static and non-negative, got " +
                  shapeToString(shape));
  std::string tooBig = tensorSizeError(impl_->tensorType(dtype, shape));
  if (!tooBig.empty())
    impl_->fail("argument " + tooBig);
  Block &body = impl_->func.getBody().front();
  return impl_->put(
      body.addArgument(impl_->tensorType(dtype, shape), impl_->loc));
}

DType Tracer::dtype(ValueId v) const { return impl_->dtypeOf(impl_->get(v)); }
Shape Tracer::shape(ValueId v) const { return impl_->shapeOf(impl_->get(v)); }

ValueId Tracer::constant(const HostTensor &data) {
  auto type = impl_->tensorType(data.dtype, data.shape);
  DenseElementsAttr attr;
  int64_t n = data.size();
  if (isFloatDType(data.dtype)) {
    auto sem = &llvm::cast<FloatType>(type.getElementType()).getFloatSemantics();
    SmallVector<APFloat> vals;
    for (int64_t i = 0; i < n; ++i) {
      APFloat f(data.getDouble(i));
      bool lost;
      f.convert(*sem, APFloat::rmNearestTiesToEven, &lost);
      vals.push_back(f);
    }
    attr = DenseElementsAttr::get(type, vals);
  } else if (data.dtype == DType::I1) {
    SmallVector<bool> vals;
    for (int64_t i = 0; i < n; ++i)
      vals.push_back(data.getInt(i) != 0);
    attr = DenseElementsAttr::get(type, vals);
  } else {
    unsigned width = data.dtype == DType::I32 ? 32 : 64;
    SmallVector<APInt> vals;
    for (int64_t i = 0; i < n; ++i)
      vals.push_back(APInt(width, uint64_t(data.getInt(i)), true));
    attr = DenseElementsAttr::get(type, vals);
  }
  return impl_->put(
      impl_->create<ConstantOp>(type, {}, {impl_->attr("value", attr)}));
}

ValueId Tracer::full(double value, DType dtype, const Shape &shape) {
  return impl_->put(impl_->full(value, dtype, shape));
}

ValueId Tracer::binary(const std::string &op, ValueId aId, ValueId bId) {
  Value a = impl_->get(aId), b = impl_->get(bId);
  DType t = promoteDTypes(impl_->dtypeOf(a), impl_->dtypeOf(b));
  if (op == "pow" && !isFloatDType(t))
    t = DType::F32;
  if (op == "div" && !isFloatDType(t))
    t = DType::F32; // true division, as numpy and PyTorch
  if (op == "trunc_div" && isFloatDType(t))
    impl_->fail("trunc_div: integer operands only (floats divide with div)");
  Shape shape = impl_->broadcast(impl_->shapeOf(a), impl_->shapeOf(b), op);
  a = impl_->broadcastTo(impl_->cast(a, t), shape, op);
  b = impl_->broadcastTo(impl_->cast(b, t), shape, op);
  Type type = a.getType();
  Value r;
  if (op == "add") r = impl_->create<AddOp>(type, {a, b});
  else if (op == "sub") r = impl_->create<SubOp>(type, {a, b});
  else if (op == "mul") r = impl_->create<MulOp>(type, {a, b});
  else if (op == "div" || op == "trunc_div") r = impl_->create<DivOp>(type, {a, b});
  else if (op == "pow") r = impl_->create<PowOp>(type, {a, b});
  else if (op == "rem") r = impl_->create<RemOp>(type, {a, b});
  else if (op == "maximum") r = impl_->create<MaximumOp>(type, {a, b});
  else if (op == "minimum") r = impl_->create<MinimumOp>(type, {a, b});
  else if (op == "eq") r = impl_->create<EqOp>(type, {a, b});
  else if (op == "ne") r = impl_->create<NeOp>(type, {a, b});
  else if (op == "lt") r = impl_->create<LtOp>(type, {a, b});
  else if (op == "le") r = impl_->create<LeOp>(type, {a, b});
  else if (op == "gt") r = impl_->create<GtOp>(type, {a, b});
  else if (op == "ge") r = impl_->create<GeOp>(type, {a, b});
  else impl_->fail("unknown binary op '" + op + "'");
  return impl_->put(r);
}

ValueId Tracer::unary(const std::string &op, ValueId aId) {
  Value a = impl_->get(aId);
  bool arithmetic = op == "neg" || op == "abs" || op == "stop_gradient";
  if (!arithmetic && !isFloatDType(impl_->dtypeOf(a)))
    a = impl_->cast(a, DType::F32);
  Type type = a.getType();
  Value r;
  if (op == "neg") r = impl_->create<NegOp>(type, {a});
  else if (op == "abs") r = impl_->create<AbsOp>(type, {a});
  else if (op == "exp") r = impl_->create<ExpOp>(type, {a});
  else if (op == "log") r = impl_->create<LogOp>(type, {a});
  else if (op == "tanh") r = impl_->create<TanhOp>(type, {a});
  else if (op == "sqrt") r = impl_->create<SqrtOp>(type, {a});
  else if (op == "rsqrt") r = impl_->create<RsqrtOp>(type, {a});
  else if (op == "sigmoid") r = impl_->create<SigmoidOp>(type, {a});
  else if (op == "erf") r = impl_->create<ErfOp>(type, {a});
  else if (op == "log1p") r = impl_->create<Log1pOp>(type, {a});
  else if (op == "expm1") r = impl_->create<Expm1Op>(type, {a});
  else if (op == "floor") r = impl_->create<FloorOp>(type, {a});
  else if (op == "stop_gradient") r = impl_->create<StopGradientOp>(type, {a});
  else if (op == "relu") r = impl_->create<ReluOp>(type, {a});
  else if (op == "silu") r = impl_->create<SiluOp>(type, {a});
  else impl_->fail("unknown unary op '" + op + "'");
  return impl_->put(r);
}

ValueId Tracer::gelu(ValueId aId, const std::string &approximate) {
  Value a = impl_->get(aId);
  return impl_->put(impl_->create<GeluOp>(
      a.getType(), {a},
      {impl_->attr("approximate", impl_->builder.getStringAttr(approximate))}));
}

ValueId Tracer::where(ValueId cId, ValueId aId, ValueId bId) {
  Value c = impl_->get(cId), a = impl_->get(aId), b = impl_->get(bId);
  if (impl_->dtypeOf(c) != DType::I1)
    impl_->fail(std::string("where: the condition must be a boolean tensor, "
                            "got ") +
                dtypeName(impl_->dtypeOf(c)) +
                "; compare it first (e.g. x > 0)");
  DType t = promoteDTypes(impl_->dtypeOf(a), impl_->dtypeOf(b));
  Shape shape = impl_->broadcast(
      impl_->broadcast(impl_->shapeOf(c), impl_->shapeOf(a), "where"),
      impl_->shapeOf(b), "where");
  c = impl_->broadcastTo(c, shape, "where");
  a = impl_->broadcastTo(impl_->cast(a, t), shape, "where");
  b = impl_->broadcastTo(impl_->cast(b, t), shape, "where");
  return impl_->put(impl_->create<SelectOp>(a.getType(), {c, a, b}));
}

ValueId Tracer::cast(ValueId a, DType to) {
  return impl_->put(impl_->cast(impl_->get(a), to));
}

ValueId Tracer::broadcastTo(ValueId a, const Shape &shape) {
  return impl_->put(impl_->broadcastTo(impl_->get(a), shape, "broadcast_to"));
}

ValueId Tracer::reshape(ValueId aId, const Shape &shapeIn) {
  Value a = impl_->get(aId);
  Shape shape = shapeIn;
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred >= 0)
        impl_->fail("reshape: only one dimension can be -1, got " +
                    shapeToString(shapeIn));
      inferred = int64_t(i);
    } else if (shape[i] < 0) {
      impl_->fail("reshape: invalid shape " + shapeToString(shapeIn));
    } else if (__builtin_mul_overflow(known, shape[i], &known)) {
      impl_->fail("reshape: the shape " + shapeToString(shapeIn) +
                  " has more elements or bytes than a 64-bit size can count");
    }
  }
  int64_t total = numElements(impl_->shapeOf(a));
  if (inferred >= 0) {
    if (known == 0 || total % known != 0)
      impl_->fail("reshape: cannot reshape " +
                  shapeToString(impl_->shapeOf(a)) + " to " +
                  shapeToString(shapeIn));
    shape[inferred] = total / known;
  }
  return impl_->put(impl_->create<ReshapeOp>(
      impl_->tensorType(impl_->dtypeOf(a), shape), {a}));
}

ValueId Tracer::transpose(ValueId aId, const std::vector<int64_t> &permIn) {
  Value a = impl_->get(aId);
  int64_t rank = impl_->shapeOf(a).size();
  std::vector<int64_t> perm;
  for (int64_t p : permIn)
    perm.push_back(p < 0 && p >= -rank ? p + rank : p);
  return impl_->put(impl_->create<TransposeOp>(
      a.getType(), {a},
      {impl_->attr("perm", impl_->builder.getDenseI64ArrayAttr(perm))}));
}

ValueId Tracer::slice(ValueId aId, const std::vector<int64_t> &start,
                      const std::vector<int64_t> &limit,
                      const std::vector<int64_t> &stride) {
  Value a = impl_->get(aId);
  auto &b = impl_->builder;
  return impl_->put(impl_->create<SliceOp>(
      a.getType(), {a},
      {impl_->attr("start", b.getDenseI64ArrayAttr(start)),
       impl_->attr("limit", b.getDenseI64ArrayAttr(limit)),
       impl_->attr("stride", b.getDenseI64ArrayAttr(stride))}));
}

ValueId Tracer::concat(const std::vector<ValueId> &inputs, int64_t dim) {
  if (inputs.empty())
    impl_->fail("cat: needs at least one tensor");
  SmallVector<Value> values;
  DType t = impl_->dtypeOf(impl_->get(inputs[0]));
  for (ValueId id : inputs)
    t = promoteDTypes(t, impl_->dtypeOf(impl_->get(id)));
  for (ValueId id : inputs)
    values.push_back(impl_->cast(impl_->get(id), t));
  int64_t rank = impl_->shapeOf(values[0]).size();
  dim = impl_->normalizeDim(dim, rank, "cat");
  return impl_->put(impl_->create<ConcatOp>(
      values[0].getType(), values,
      {impl_->attr("dim", impl_->builder.getI64IntegerAttr(dim))}));
}

ValueId Tracer::reduce(const std::string &op, ValueId aId,
                       std::vector<int64_t> dims, bool keepdim) {
  Value a = impl_->get(aId);
  int64_t rank = impl_->shapeOf(a).size();
  for (int64_t &d : dims)
    d = impl_->normalizeDim(d, rank, op);
  std::sort(dims.begin(), dims.end());
  if (std::adjacent_find(dims.begin(), dims.end()) != dims.end())
    impl_->fail(op + ": a dimension is listed twice");
  if (op == "sum" && impl_->dtypeOf(a) == DType::I1)
    a = impl_->cast(a, DType::I64); // counting, as numpy
  SmallVector<NamedAttribute> attrs = {
      impl_->attr("dims", impl_->builder.getDenseI64ArrayAttr(dims)),
      impl_->attr("keepdim", impl_->builder.getBoolAttr(keepdim))};
  if (op != "sum")
    for (int64_t d : dims)
      if (d < int64_t(impl_->shapeOf(a).size()) && impl_->shapeOf(a)[d] == 0)
        impl_->fail(op + ": dimension " + std::to_string(d) + " of " +
                    shapeToString(impl_->shapeOf(a)) +
                    " is empty, and a " + op + " of no elements has no value (as in PyTorch)");
  Value r;
  if (op == "sum") r = impl_->create<ReduceSumOp>(a.getType(), {a}, attrs);
  else if (op == "max") r = impl_->create<ReduceMaxOp>(a.getType(), {a}, attrs);
  else if (op == "min") r = impl_->create<ReduceMinOp>(a.getType(), {a}, attrs);
  else impl_->fail("unknown reduction '" + op + "'");
  return impl_->put(r);
}

ValueId Tracer::argmax(ValueId aId, int64_t dim, bool keepdim) {
  Value a = impl_->get(aId);
  dim = impl_->normalizeDim(dim, impl_->shapeOf(a).size(), "argmax");
  if (!impl_->shapeOf(a).empty() && impl_->shapeOf(a)[dim] == 0)
    impl_->fail("argmax: dimension " + std::to_string(dim) + " of " +
                shapeToString(impl_->shapeOf(a)) + " is empty; an empty argmax has no index");
  return impl_->put(impl_->create<ArgmaxOp>(
      a.getType(), {a},
      {impl_->attr("dim", impl_->builder.getI64IntegerAttr(dim)),
       impl_->attr("keepdim", impl_->builder.getBoolAttr(keepdim))}));
}

ValueId Tracer::matmul(ValueId aId, ValueId bId) {
  Value a = impl_->get(aId), b = impl_->get(bId);
  Shape sa = impl_->shapeOf(a), sb = impl_->shapeOf(b);
  if (sa.empty() || sb.empty())
    impl_->fail("matmul: operands must have rank >= 1, got " +
                shapeToString(sa) + " and " + shapeToString(sb));
  DType t = promoteDTypes(impl_->dtypeOf(a), impl_->dtypeOf(b));
  if (!isFloatDType(t))
    impl_->fail(std::string("matmul: operands are ") +
                dtypeName(impl_->dtypeOf(a)) + shapeToString(sa) + " and " +
                dtypeName(impl_->dtypeOf(b)) + shapeToString(sb) +
                "; matmul needs floating-point tensors, cast them first");
  a = impl_->cast(a, t);
  b = impl_->cast(b, t);
  bool vecA = sa.size() == 1, vecB = sb.size() == 1;
  Shape ma = vecA ? Shape{1, sa[0]} : sa;
  Shape mb = vecB ? Shape{sb[0], 1} : sb;
  if (ma.back() != mb[mb.size() - 2])
    impl_->fail("matmul: cannot multiply " + shapeToString(sa) + " by " +
                shapeToString(sb) + ": contraction sizes " +
                std::to_string(ma.back()) + " and " +
                std::to_string(mb[mb.size() - 2]) + " differ");
  Shape batchA(ma.begin(), ma.end() - 2), batchB(mb.begin(), mb.end() - 2);
  Shape batch;
  try {
    batch = broadcastShapes(batchA, batchB, "matmul");
  } catch (const CompileError &) {
    impl_->fail("matmul: cannot multiply " + shapeToString(sa) + " by " +
                shapeToString(sb) + ": batch dimensions " +
                shapeToString(batchA) + " and " + shapeToString(batchB) +
                " do not broadcast (numpy rules)");
  }
  Shape fa = batch, fb = batch;
  fa.insert(fa.end(), ma.end() - 2, ma.end());
  fb.insert(fb.end(), mb.end() - 2, mb.end());
  if (vecA)
    a = impl_->create<ReshapeOp>(impl_->tensorType(t, ma), {a});
  if (vecB)
    b = impl_->create<ReshapeOp>(impl_->tensorType(t, mb), {b});
  a = impl_->broadcastTo(a, fa, "matmul");
  b = impl_->broadcastTo(b, fb, "matmul");
  Value r = impl_->create<MatmulOp>(a.getType(), {a, b});
  Shape out = batch;
  if (!vecA)
    out.push_back(ma[ma.size() - 2]);
  if (!vecB)
    out.push_back(mb.back());
  if (vecA || vecB)
    r = impl_->create<ReshapeOp>(impl_->tensorType(t, out), {r});
  return impl_->put(r);
}

ValueId Tracer::matmulTransposed(ValueId aId, ValueId bId, bool transposeA,
                                 bool transposeB) {
  Value a = impl_->get(aId), b = impl_->get(bId);
  auto &bl = impl_->builder;
  return impl_->put(impl_->create<MatmulOp>(
      a.getType(), {a, b},
      {impl_->attr("transpose_lhs", bl.getBoolAttr(transposeA)),
       impl_->attr("transpose_rhs", bl.getBoolAttr(transposeB))}));
}

ValueId Tracer::gather(ValueId table, ValueId indices) {
  Value t = impl_->get(table), i = impl_->get(indices);
  return impl_->put(impl_->create<GatherOp>(t.getType(), {t, i}));
}

ValueId Tracer::groupedMatmul(ValueId lhs, ValueId rhs, ValueId offsets) {
  Value a = impl_->get(lhs), b = impl_->get(rhs), o = impl_->get(offsets);
  return impl_->put(impl_->create<GroupedMatmulOp>(a.getType(), {a, b, o}));
}

std::vector<ValueId> Tracer::sort(ValueId x, bool descending) {
  Operation *op = impl_->createMulti<SortOp>(
      2, {impl_->get(x)},
      {impl_->builder.getNamedAttr("descending", impl_->builder.getBoolAttr(descending))});
  return {impl_->put(op->getResult(0)), impl_->put(op->getResult(1))};
}

ValueId Tracer::groupedMatmulWeightGrad(ValueId lhs, ValueId grad, ValueId offsets) {
  Value a = impl_->get(lhs), g = impl_->get(grad), o = impl_->get(offsets);
  return impl_->put(impl_->create<GroupedMatmulWeightGradOp>(a.getType(), {a, g, o}));
}

ValueId Tracer::conv(const std::string &kind, ValueId aId, ValueId bId, const Shape &strides,
                     const Shape &padLow, const Shape &padHigh, const Shape &dilation,
                     int64_t groups, const Shape &size) {
  Value a = impl_->get(aId), b = impl_->get(bId);
  auto &bl = impl_->builder;
  SmallVector<NamedAttribute> attrs = {
      impl_->attr("strides", bl.getDenseI64ArrayAttr(strides)),
      impl_->attr("padding_low", bl.getDenseI64ArrayAttr(padLow)),
      impl_->attr("padding_high", bl.getDenseI64ArrayAttr(padHigh)),
      impl_->attr("dilation", bl.getDenseI64ArrayAttr(dilation)),
      impl_->attr("groups", bl.getI64IntegerAttr(groups))};
  if (kind == "conv")
    return impl_->put(impl_->create<ConvOp>(a.getType(), {a, b}, attrs));
  if (kind == "grad_input") {
    attrs.push_back(impl_->attr("input_spatial", bl.getDenseI64ArrayAttr(size)));
    return impl_->put(impl_->create<ConvGradInputOp>(a.getType(), {a, b}, attrs));
  }
  if (kind == "grad_weight") {
    attrs.push_back(impl_->attr("kernel", bl.getDenseI64ArrayAttr(size)));
    return impl_->put(impl_->create<ConvGradWeightOp>(a.getType(), {a, b}, attrs));
  }
  impl_->fail("conv: unknown kind '" + kind + "' (conv, grad_input or grad_weight)");
}

ValueId Tracer::scatterAdd(ValueId base, ValueId indices, ValueId updates) {
  Value b = impl_->get(base), i = impl_->get(indices), u = impl_->get(updates);
  return impl_->put(impl_->create<ScatterAddOp>(b.getType(), {b, i, u}));
}

namespace {
/// graph.attention or graph.attention_grad of `fixed` operands (q, k, v
/// and for the gradient out, lse, dOut), the optional mask and seed (< 0:
/// none) and the attributes both share; the ids of its results.
template <typename OpTy>
std::vector<ValueId> traceAttention(Tracer::Impl &impl, std::initializer_list<ValueId> fixed,
                                    ValueId mask, ValueId seed, double scale, bool causal,
                                    double dropoutP, int64_t stream) {
  SmallVector<Value> operands;
  for (ValueId id : fixed)
    operands.push_back(impl.get(id));
  SmallVector<int32_t> segments(fixed.size(), 1);
  for (ValueId optional : {mask, seed}) {
    segments.push_back(optional >= 0 ? 1 : 0);
    if (optional >= 0)
      operands.push_back(impl.get(optional));
  }
  OpBuilder &bl = impl.builder;
  Operation *op = impl.template createMulti<OpTy>(
      OpTy::getOperationName() == AttentionOp::getOperationName() ? 2 : 3, operands,
      {bl.getNamedAttr("scale", bl.getF64FloatAttr(scale)),
       bl.getNamedAttr("causal", bl.getBoolAttr(causal)),
       bl.getNamedAttr("dropout_p", bl.getF64FloatAttr(dropoutP)),
       bl.getNamedAttr("stream", bl.getI64IntegerAttr(stream)),
       bl.getNamedAttr("operandSegmentSizes", bl.getDenseI32ArrayAttr(segments))});
  std::vector<ValueId> results;
  for (Value r : op->getResults())
    results.push_back(impl.put(r));
  return results;
}
} // namespace

std::vector<ValueId> Tracer::attention(ValueId q, ValueId k, ValueId v, ValueId mask,
                                       double scale, bool causal, ValueId seed,
                                       double dropoutP, int64_t stream) {
  return traceAttention<AttentionOp>(*impl_, {q, k, v}, mask, seed, scale, causal, dropoutP,
                                     stream);
}

std::vector<ValueId> Tracer::attentionGrad(ValueId q, ValueId k, ValueId v, ValueId out,
                                           ValueId lse, ValueId grad, ValueId mask,
                                           double scale, bool causal, ValueId seed,
                                           double dropoutP, int64_t stream) {
  return traceAttention<AttentionGradOp>(*impl_, {q, k, v, out, lse, grad}, mask, seed, scale,
                                         causal, dropoutP, stream);
}

ValueId Tracer::randomUniform(ValueId seed, DType dtype, const Shape &shape,
                              int64_t stream) {
  Value s = impl_->get(seed);
  return impl_->put(impl_->create<RandomUniformOp>(
      impl_->tensorType(dtype, shape), {s},
      {impl_->attr("stream", impl_->builder.getI64IntegerAttr(stream))}));
}

namespace {
/// softmax / log_softmax: one tensor operand and a normalised `dim`.
template <typename OpTy>
ValueId alongDim(Tracer::Impl &impl, ValueId aId, int64_t dim,
                 const std::string &name) {
  Value a = impl.get(aId);
  dim = impl.normalizeDim(dim, impl.shapeOf(a).size(), name);
  return impl.put(impl.template create<OpTy>(
      a.getType(), {a}, {impl.attr("dim", impl.builder.getI64IntegerAttr(dim))}));
}
} // namespace

ValueId Tracer::softmax(ValueId a, int64_t dim) {
  return alongDim<SoftmaxOp>(*impl_, a, dim, "softmax");
}

ValueId Tracer::logSoftmax(ValueId a, int64_t dim) {
  return alongDim<LogSoftmaxOp>(*impl_, a, dim, "log_softmax");
}

ValueId Tracer::layerNorm(ValueId x, ValueId weight, ValueId bias,
                          double epsilon) {
  Value v = impl_->get(x);
  return impl_->put(impl_->create<LayerNormOp>(
      v.getType(), {v, impl_->get(weight), impl_->get(bias)},
      {impl_->attr("epsilon", impl_->builder.getF64FloatAttr(epsilon))}));
}

ValueId Tracer::linear(ValueId x, ValueId weight, ValueId bias) {
  Value v = impl_->get(x);
  SmallVector<Value> operands = {v, impl_->get(weight)};
  if (bias >= 0)
    operands.push_back(impl_->get(bias));
  return impl_->put(impl_->create<LinearOp>(v.getType(), operands));
}

ValueId Tracer::dropout(ValueId x, ValueId seed, double p) {
  Value v = impl_->get(x);
  return impl_->put(impl_->create<DropoutOp>(
      v.getType(), {v, impl_->get(seed)},
      {impl_->attr("p", impl_->builder.getF64FloatAttr(p)),
       impl_->attr("stream", impl_->builder.getI64IntegerAttr(
                                 impl_->nextDropoutStream++))}));
}

ValueId Tracer::crossEntropy(ValueId logits, ValueId target,
                             int64_t ignoreIndex) {
  Value x = impl_->get(logits);
  return impl_->put(impl_->create<CrossEntropyOp>(
      x.getType(), {x, impl_->get(target)},
      {impl_->attr("ignore_index",
                   impl_->builder.getI64IntegerAttr(ignoreIndex))}));
}

ValueId Tracer::nll(ValueId logp, ValueId target, int64_t ignoreIndex) {
  Value x = impl_->get(logp);
  return impl_->put(impl_->create<NllOp>(
      x.getType(), {x, impl_->get(target)},
      {impl_->attr("ignore_index",
                   impl_->builder.getI64IntegerAttr(ignoreIndex))}));
}

ValueId Tracer::mse(ValueId input, ValueId target) {
  Value x = impl_->get(input);
  return impl_->put(
      impl_->create<MseOp>(x.getType(), {x, impl_->get(target)}));
}

ValueId Tracer::bce(ValueId input, ValueId target) {
  Value x = impl_->get(input);
  return impl_->put(
      impl_->create<BceOp>(x.getType(), {x, impl_->get(target)}));
}

std::shared_ptr<Graph> Tracer::finish(const std::vector<ValueId> &outputs) {
  SmallVector<Value> results;
  for (ValueId id : outputs)
    results.push_back(impl_->get(id));
  if (results.empty())
    impl_->fail("the traced function returned no tensors");
  auto &b = impl_->builder;
  b.create<func::ReturnOp>(impl_->loc, results);
  Block &body = impl_->func.getBody().front();
  impl_->func.setFunctionType(
      b.getFunctionType(body.getArgumentTypes(), ValueRange(results).getTypes()));
  runCapturingDiagnostics("the traced graph is invalid", [&] {
    return mlir::verify(*impl_->module);
  });
  impl_->finished = true;
  auto g = std::make_unique<Graph::Impl>();
  g->entry = impl_->func.getSymName().str();
  g->module = std::move(impl_->module);
  return std::make_shared<Graph>(std::move(g));
}
