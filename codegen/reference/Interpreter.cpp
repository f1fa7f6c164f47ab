//===- Interpreter.cpp - walks a graph function, calls the ref kernels ----===//
#include "codegen/reference/Interpreter.h"
#include "codegen/ConvParamsOf.h"
#include "codegen/DTypes.h"

#include "codegen/reference/RefKernels.h"
#include "ir/graph/GraphDialect.h"
#include "passes/FuseOps.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;
using ref::RefTensor;

namespace {

DType dtypeOf(Type t) { return dtypeFromType(t); }
Shape shapeOf(Type t) { return shapeFromType(t); }

std::string describe(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "'" << op->getName() << "' at " << op->getLoc();
  return s;
}

RefTensor constantValue(ConstantOp op) {
  auto attr = llvm::dyn_cast<DenseElementsAttr>(op.getValue());
  if (!attr)
    throw CompileError("reference interpreter: " + describe(op) +
                       " holds a non-dense constant");
  RefTensor t = RefTensor::make(dtypeOf(op.getType()), shapeOf(op.getType()));
  int64_t n = t.size();
  if (t.isFloat()) {
    auto values = attr.getValues<APFloat>();
    for (int64_t k = 0; k < n; ++k)
      t.f[k] = values[attr.isSplat() ? 0 : k].convertToDouble();
  } else if (t.dtype == DType::I1) {
    auto values = attr.getValues<bool>();
    for (int64_t k = 0; k < n; ++k)
      t.i[k] = values[attr.isSplat() ? 0 : k];
  } else {
    auto values = attr.getValues<APInt>();
    for (int64_t k = 0; k < n; ++k)
      t.i[k] = values[attr.isSplat() ? 0 : k].getSExtValue();
  }
  return t;
}

std::vector<int64_t> vec(ArrayRef<int64_t> a) { return {a.begin(), a.end()}; }

class Evaluator {
public:
  const RefTensor &get(Value v) {
    auto it = values.find(v);
    if (it == values.end())
      throw CompileError("reference interpreter: value used before defined");
    return it->second;
  }
  void set(Value v, RefTensor t) { values[v] = std::move(t); }

  template <typename OpTy>
  RefTensor bin(OpTy op, ref::BinaryKind k) {
    return ref::binary(k, get(op.getLhs()), get(op.getRhs()));
  }
  template <typename OpTy>
  RefTensor un(OpTy op, ref::UnaryKind k) {
    return ref::unary(k, get(op.getOperand()));
  }

  RefTensor eval(Operation *op) {
    using BK = ref::BinaryKind;
    using UK = ref::UnaryKind;
    using RK = ref::ReduceKind;
    return llvm::TypeSwitch<Operation *, RefTensor>(op)
        .Case([&](AddOp o) { return bin(o, BK::Add); })
        .Case([&](SubOp o) { return bin(o, BK::Sub); })
        .Case([&](MulOp o) { return bin(o, BK::Mul); })
        .Case([&](DivOp o) { return bin(o, BK::Div); })
        .Case([&](PowOp o) { return bin(o, BK::Pow); })
        .Case([&](RemOp o) { return bin(o, BK::Rem); })
        .Case([&](MaximumOp o) { return bin(o, BK::Max); })
        .Case([&](MinimumOp o) { return bin(o, BK::Min); })
        .Case([&](EqOp o) { return bin(o, BK::Eq); })
        .Case([&](NeOp o) { return bin(o, BK::Ne); })
        .Case([&](LtOp o) { return bin(o, BK::Lt); })
        .Case([&](LeOp o) { return bin(o, BK::Le); })
        .Case([&](GtOp o) { return bin(o, BK::Gt); })
        .Case([&](GeOp o) { return bin(o, BK::Ge); })
        .Case([&](NegOp o) { return un(o, UK::Neg); })
        .Case([&](AbsOp o) { return un(o, UK::Abs); })
        .Case([&](ExpOp o) { return un(o, UK::Exp); })
        .Case([&](LogOp o) { return un(o, UK::Log); })
        .Case([&](TanhOp o) { return un(o, UK::Tanh); })
        .Case([&](SqrtOp o) { return un(o, UK::Sqrt); })
        .Case([&](RsqrtOp o) { return un(o, UK::Rsqrt); })
        .Case([&](SigmoidOp o) { return un(o, UK::Sigmoid); })
        .Case([&](ErfOp o) { return un(o, UK::Erf); })
        .Case([&](Log1pOp o) { return un(o, UK::Log1p); })
        .Case([&](Expm1Op o) { return un(o, UK::Expm1); })
        .Case([&](FloorOp o) { return un(o, UK::Floor); })
        .Case([&](StopGradientOp o) { return get(o.getOperand()); })
        .Case([&](RecomputeBarrierOp o) { return get(o.getOperand()); })
        .Case([&](SelectOp o) {
          return ref::select(get(o.getCond()), get(o.getOnTrue()),
                             get(o.getOnFalse()));
        })
        .Case([&](CastOp o) {
          return ref::cast(get(o.getOperand()), dtypeOf(o.getType()));
        })
        .Case([&](ConstantOp o) { return constantValue(o); })
        .Case([&](FullOp o) {
          return ref::full(dtypeOf(o.getType()), shapeOf(o.getType()),
                           o.getValue().convertToDouble());
        })
        .Case([&](IotaOp o) {
          return ref::iota(dtypeOf(o.getType()), shapeOf(o.getType()),
                           o.getDim());
        })
        .Case([&](BroadcastInDimOp o) {
          return ref::broadcastInDim(get(o.getOperand()), shapeOf(o.getType()),
                                     vec(o.getDims()));
        })
        .Case([&](ReshapeOp o) {
          return ref::reshape(get(o.getOperand()), shapeOf(o.getType()));
        })
        .Case([&](TransposeOp o) {
          return ref::transpose(get(o.getOperand()), vec(o.getPerm()));
        })
        .Case([&](SliceOp o) {
          return ref::slice(get(o.getOperand()), vec(o.getStart()),
                            vec(o.getLimit()), vec(o.getStride()));
        })
        .Case([&](ConcatOp o) {
          std::vector<const RefTensor *> inputs;
          for (Value v : o.getInputs())
            inputs.push_back(&get(v));
          return ref::concat(inputs, o.getDim());
        })
        .Case([&](ReduceSumOp o) {
          return ref::reduce(RK::Sum, get(o.getOperand()), vec(o.getDims()),
                             o.getKeepdim());
        })
        .Case([&](ReduceMaxOp o) {
          return ref::reduce(RK::Max, get(o.getOperand()), vec(o.getDims()),
                             o.getKeepdim());
        })
        .Case([&](ReduceMinOp o) {
          return ref::reduce(RK::Min, get(o.getOperand()), vec(o.getDims()),
                             o.getKeepdim());
        })
        .Case([&](ArgmaxOp o) {
          return ref::argmax(get(o.getOperand()), o.getDim(), o.getKeepdim());
        })
        .Case([&](MatmulOp o) {
          return ref::matmul(get(o.getLhs()), get(o.getRhs()),
                             o.getTransposeLhs(), o.getTransposeRhs());
        })
        .Case([&](GroupedMatmulOp o) {
          return ref::groupedMatmul(get(o.getLhs()), get(o.getRhs()), get(o.getOffsets()),
                                    /*weightGrad=*/false, o.getTransposeRhs());
        })
        .Case([&](GroupedMatmulWeightGradOp o) {
          return ref::groupedMatmul(get(o.getLhs()), get(o.getGrad()), get(o.getOffsets()),
                                    /*weightGrad=*/true);
        })
        .Case<ConvOp, ConvGradInputOp, ConvGradWeightOp>([&](Operation *o) {
          auto [direction, params] = *convParamsOf(o);
          RefTensor out = RefTensor::make(dtypeOf(o->getResult(0).getType()),
                                          shapeOf(o->getResult(0).getType()));
          convReference<double>(direction, params, get(o->getOperand(0)).f.data(),
                                get(o->getOperand(1)).f.data(), out.f.data());
          return out;
        })
        .Case([&](ConvBiasActOp o) {
          auto [direction, params] = *convParamsOf(o);
          RefTensor out = RefTensor::make(dtypeOf(o.getType()), shapeOf(o.getType()));
          convReference<double>(direction, params, get(o.getLhs()).f.data(),
                                get(o.getRhs()).f.data(), out.f.data());
          convEpilogue<double>(params, o.getBias() ? get(o.getBias()).f.data() : nullptr,
                               *convActivationNamed(o.getActivation().str()), out.f.data());
          return out;
        })
        .Case([&](GatherOp o) {
          std::string name = locationName(o.getLoc());
          return ref::gather(get(o.getTable()), get(o.getIndices()),
                             name.empty() ? "graph.gather" : name);
        })
        .Case([&](ScatterAddOp o) {
          return ref::scatterAdd(get(o.getBase()), get(o.getIndices()),
                                 get(o.getUpdates()));
        })
        .Case([&](CollectiveWaitOp o) { return get(o.getPending()); })
        .Case<AllReduceStartOp, ReduceScatterStartOp, AllGatherStartOp, BroadcastStartOp>(
            [&](Operation *o) {
              // One process: every collective over a group of one is its input.
              auto [group, size] = collectiveGroupOf(o);
              if (size != 1)
                throw CompileError("reference interpreter: " + describe(o) +
                                   " runs over process group '" + group.str() + "' of " +
                                   std::to_string(size) + " ranks; the interpreter runs one "
                                   "process (compile the step and run it on every rank)");
              return get(o->getOperand(0));
            })
        .Case([&](RandomUniformOp o) {
          int64_t stream = o.getStream();
          if (Value v = o.getStreamValue())
            stream = get(v).i.at(0);
          return ref::randomUniform(get(o.getSeed()), stream, dtypeOf(o.getType()),
                                    shapeOf(o.getType()));
        })
        .Default([&](Operation *other) -> RefTensor {
          throw CompileError("reference interpreter: unsupported op " +
                             describe(other) +
                             "; run the decompose-composites pass first or "
                             "report the op as unsupported");
        });
  }

private:
  llvm::DenseMap<Value, RefTensor> values;
};

/// Runs the ops of `block` up to its terminator (func.return or
/// graph.yield) and returns the terminator's operands. A graph.fusion runs
/// its body the same way, with its inputs as the block arguments.
std::vector<RefTensor> runBlock(Block &block, Evaluator &ev) {
  for (Operation &op : block) {
    if (llvm::isa<func::ReturnOp, YieldOp>(op)) {
      std::vector<RefTensor> results;
      for (Value v : op.getOperands())
        results.push_back(ev.get(v));
      return results;
    }
    if (auto fusion = llvm::dyn_cast<FusionOp>(op)) {
      Evaluator inner;
      Block &body = fusion.getBody().front();
      for (auto [arg, in] : llvm::zip(body.getArguments(), fusion.getInputs()))
        inner.set(arg, ev.get(in));
      for (auto [r, value] : llvm::zip(fusion.getResults(), runBlock(body, inner)))
        ev.set(r, std::move(value));
      continue;
    }
    if (auto sort = llvm::dyn_cast<SortOp>(op)) {
      auto [values, indices] = ref::sortRows(ev.get(sort.getOperand()), sort.getDescending());
      ev.set(sort.getValues(), std::move(values));
      ev.set(sort.getIndices(), std::move(indices));
      continue;
    }
    if (op.getNumResults() != 1)
      throw CompileError("reference interpreter: unsupported op " +
                         describe(&op));
    ev.set(op.getResult(0), ev.eval(&op));
  }
  throw CompileError("reference interpreter: a block has no terminator");
}

} // namespace

std::vector<HostTensor>
tilefuse::interpretPrimitive(func::FuncOp func,
                             const std::vector<HostTensor> &args) {
  auto fnType = func.getFunctionType();
  std::string name = func.getSymName().str();
  if (args.size() != fnType.getNumInputs())
    throw CompileError("function '" + name + "' takes " +
                       std::to_string(fnType.getNumInputs()) +
                       " arguments, got " + std::to_string(args.size()));
  Evaluator ev;
  for (auto [i, arg] : llvm::enumerate(func.getArguments())) {
    DType want = dtypeOf(arg.getType());
    Shape shape = shapeOf(arg.getType());
    if (args[i].dtype != want || args[i].shape != shape)
      throw CompileError(
          "argument " + std::to_string(i) + " of '" + name + "' must be " +
          dtypeName(want) + shapeToString(shape) + ", got " +
          dtypeName(args[i].dtype) + shapeToString(args[i].shape));
    ev.set(arg, ref::fromHost(args[i]));
  }
  std::vector<HostTensor> results;
  for (const RefTensor &t : runBlock(func.getBody().front(), ev))
    results.push_back(ref::toHost(t));
  return results;
}

void tilefuse::expandAttentionForInterpreter(ModuleOp module) {
  for (auto f : module.getOps<func::FuncOp>())
    expandAttention(f);
}

std::vector<HostTensor> tilefuse::interpret(ModuleOp module,
                                            const std::string &name,
                                            const std::vector<HostTensor> &args) {
  OwningOpRef<ModuleOp> lowered(module.clone());
  std::string diagnostics;
  {
    ScopedDiagnosticHandler capture(module.getContext(), [&](Diagnostic &d) {
      llvm::raw_string_ostream(diagnostics) << d.getLocation() << ": " << d
                                            << "\n";
      return success();
    });
    if (failed(lowerToPrimitives(*lowered)))
      throw CompileError("lowering to primitive ops failed:\n" + diagnostics);
  }
  expandAttentionForInterpreter(*lowered);
  auto func = lowered->lookupSymbol<func::FuncOp>(name);
  if (!func)
    throw CompileError("no function named '" + name + "' in the module");
  return interpretPrimitive(func, args);
}
