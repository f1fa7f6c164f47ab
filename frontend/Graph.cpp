//===- Graph.cpp ----------------------------------------------------------===//
#include "frontend/GraphImpl.h"

#include "codegen/reference/Interpreter.h"
#include "ir/graph/GraphDialect.h"
#include "passes/Autocast.h"
#include "passes/Autodiff.h"
#include "passes/FuseOps.h"
#include "passes/TargetInfo.h"
#include "passes/Pipelines.h"
#include "passes/TrainStep.h"
#include "passes/ShardParameters.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace tilefuse;

MLIRContext &tilefuse::globalContext() {
  static MLIRContext *ctx = [] {
    auto *c = new MLIRContext(MLIRContext::Threading::DISABLED);
    // arith too, so a module using it parses and is refused by name (the
    // kernels' lowering loads it into this context later anyway).
    c->loadDialect<graph::GraphDialect, func::FuncDialect, arith::ArithDialect>();
    return c;
  }();
  return *ctx;
}

std::string tilefuse::formatLocation(Location loc) {
  if (auto name = llvm::dyn_cast<NameLoc>(loc))
    if (name.getName().getValue().starts_with("tilefuse."))
      return formatLocation(name.getChildLoc());
  if (auto file = llvm::dyn_cast<FileLineColLoc>(loc))
    return file.getFilename().str() + ":" + std::to_string(file.getLine()) +
           (file.getColumn() ? ":" + std::to_string(file.getColumn()) : "");
  std::string s;
  llvm::raw_string_ostream(s) << loc;
  return s;
}

void tilefuse::runCapturingDiagnostics(
    const std::string &what, const std::function<LogicalResult()> &fn) {
  std::string text;
  LogicalResult result = failure();
  {
    ScopedDiagnosticHandler capture(&globalContext(), [&](Diagnostic &d) {
      llvm::raw_string_ostream os(text);
      if (!llvm::isa<UnknownLoc>(d.getLocation()))
        os << formatLocation(d.getLocation()) << ": ";
      os << d << "\n";
      for (Diagnostic &note : d.getNotes())
        os << "  note: " << note << "\n";
      return success();
    });
    result = fn();
  }
  if (failed(result))
    throw CompileError(what + (text.empty() ? "" : ":\n" + text));
}

func::FuncOp Graph::Impl::func() const {
  return const_cast<mlir::OwningOpRef<ModuleOp> &>(module)->lookupSymbol<func::FuncOp>(entry);
}

Graph::Graph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Graph::~Graph() = default;

std::shared_ptr<Graph> Graph::parse(const std::string &text, const std::string &entry,
                                    const std::string &sourceName) {
  auto impl = std::make_unique<Impl>();
  runCapturingDiagnostics("could not parse the graph-dialect module", [&] {
    impl->module = parseSourceString<ModuleOp>(text, &globalContext(), sourceName);
    return success(static_cast<bool>(impl->module));
  });
  // Sizes computed from an impossible shape would wrap: refuse it here.
  std::string tooBig;
  impl->module->walk([&](Operation *op) {
    auto check = [&](Value v) {
      if (tooBig.empty() && !graph::tensorSizeError(v.getType()).empty())
        tooBig = formatLocation(v.getLoc()) + ": " + graph::tensorSizeError(v.getType());
    };
    for (Value v : op->getResults())
      check(v);
    for (Region &r : op->getRegions())
      for (Block &b : r)
        for (BlockArgument a : b.getArguments())
          check(a);
  });
  if (!tooBig.empty())
    throw CompileError(tooBig);
  // Only graph-dialect ops inside functions: anything else (arith, another
  // dialect's ops) has no meaning for the passes.
  std::string foreign;
  impl->module->walk([&](Operation *op) {
    if (!foreign.empty() || llvm::isa<ModuleOp, func::FuncOp, func::ReturnOp>(op) ||
        llvm::isa<graph::GraphDialect>(op->getDialect()))
      return;
    foreign = formatLocation(op->getLoc()) + ": '" + op->getName().getStringRef().str() +
              "' is not a graph-dialect op; tilefuse graphs are made of graph.* ops "
              "(tilefuse-opt --help lists the pipeline)";
  });
  if (!foreign.empty())
    throw CompileError(foreign);
  std::vector<func::FuncOp> funcs;
  impl->module->walk([&](func::FuncOp f) { funcs.push_back(f); });
  if (!entry.empty()) {
    if (!impl->module->lookupSymbol<func::FuncOp>(entry))
      throw CompileError("the module has no function named '" + entry + "'");
    impl->entry = entry;
  } else if (funcs.empty()) {
    throw CompileError("the module defines no function; tilefuse compiles a func.func of "
                       "graph-dialect ops");
  } else if (funcs.size() == 1) {
    impl->entry = funcs[0].getSymName().str();
  } else {
    throw CompileError("the module has " + std::to_string(funcs.size()) +
                       " functions; name the entry function");
  }
  if (impl->func().isExternal())
    throw CompileError("function '" + impl->entry +
                       "' is declared without a body; tilefuse compiles functions defined in "
                       "the module");
  // Every argument and result must be a tensor type tilefuse supports.
  auto fnType = impl->func().getFunctionType();
  for (Type t : llvm::concat<const Type>(fnType.getInputs(), fnType.getResults()))
    if (!llvm::isa<RankedTensorType>(t) ||
        !llvm::cast<RankedTensorType>(t).hasStaticShape()) {
      std::string s;
      llvm::raw_string_ostream(s) << t;
      throw CompileError("function '" + impl->entry + "' uses " + s +
                         "; arguments and results must be statically "
                         "shaped tensors");
    } else {
      dtypeFromType(t);
    }
  return std::make_shared<Graph>(std::move(impl));
}

std::string Graph::mlir() const {
  std::string s;
  llvm::raw_string_ostream os(s);
  impl_->module->print(os);
  return s;
}

const std::string &Graph::entryName() const { return impl_->entry; }

namespace {
std::vector<TensorSignature> signatures(TypeRange types) {
  std::vector<TensorSignature> out;
  for (Type t : types) {
    auto shape = llvm::cast<RankedTensorType>(t).getShape();
    out.push_back({dtypeFromType(t), Shape(shape.begin(), shape.end())});
  }
  return out;
}
} // namespace

std::vector<TensorSignature> Graph::inputs() const {
  return signatures(impl_->func().getFunctionType().getInputs());
}

std::vector<TensorSignature> Graph::outputs() const {
  return signatures(impl_->func().getFunctionType().getResults());
}

std::vector<std::vector<int64_t>> Graph::shardLayout() const {
  std::vector<std::vector<int64_t>> layout;
  if (auto shards = impl_->func()->getAttrOfType<ArrayAttr>(kShardsAttrName))
    for (Attribute a : shards) {
      auto members = llvm::cast<DenseI64ArrayAttr>(a).asArrayRef();
      layout.emplace_back(members.begin(), members.end());
    }
  return layout;
}

std::string Graph::summary() const {
  llvm::MapVector<StringRef, int> counts;
  int total = 0;
  impl_->func().walk([&](Operation *op) {
    if (op->getDialect() && op->getDialect()->getNamespace() == "graph") {
      ++counts[op->getName().getStringRef()];
      ++total;
    }
  });
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "graph @" << impl_->entry << ": " << total << " ops\n  inputs:";
  for (auto &sig : inputs())
    os << " " << sig.str();
  os << "\n  outputs:";
  for (auto &sig : outputs())
    os << " " << sig.str();
  os << "\n";
  for (auto &[name, n] : counts)
    os << "  " << name << " x" << n << "\n";
  return s;
}

OwningOpRef<ModuleOp> Graph::Impl::lowerCopy(const std::string &what) const {
  OwningOpRef<ModuleOp> copy(
      const_cast<OwningOpRef<ModuleOp> &>(module)->clone());
  runCapturingDiagnostics(what, [&] { return lowerToPrimitives(*copy); });
  return copy;
}

std::vector<HostTensor> Graph::interpret(const std::vector<HostTensor> &args) const {
  if (!impl_->lowered) {
    impl_->lowered = impl_->lowerCopy("lowering @" + impl_->entry +
                                      " to primitive ops failed");
    expandAttentionForInterpreter(impl_->lowered.get());
  }
  return interpretPrimitive(impl_->lowered->lookupSymbol<func::FuncOp>(impl_->entry),
                            args);
}

namespace {
/// A new Graph holding a lowered copy of `g`'s module plus the function that
/// `build` adds to it (which becomes the entry).
std::shared_ptr<Graph> deriveGraph(
    const Graph::Impl &g, const std::string &what,
    const std::function<FailureOr<func::FuncOp>(func::FuncOp)> &build) {
  auto impl = std::make_unique<Graph::Impl>();
  impl->module = g.lowerCopy(what);
  runCapturingDiagnostics(what, [&]() -> LogicalResult {
    FailureOr<func::FuncOp> f =
        build(impl->module->lookupSymbol<func::FuncOp>(g.entry));
    if (failed(f))
      return failure();
    impl->entry = f->getSymName().str();
    return mlir::verify(*impl->module);
  });
  return std::make_shared<Graph>(std::move(impl));
}
} // namespace

std::shared_ptr<Graph> Graph::autocast(const std::string &precision,
                                       const std::vector<std::string> &keepFloat32) const {
  auto impl = std::make_unique<Graph::Impl>();
  impl->module = OwningOpRef<ModuleOp>(impl_->module->clone());
  impl->entry = impl_->entry;
  std::string what = "cannot autocast @" + impl_->entry + " to " + precision;
  runCapturingDiagnostics(what, [&]() -> LogicalResult {
    func::FuncOp f = impl->module->lookupSymbol<func::FuncOp>(impl->entry);
    if (failed(autocastFunction(f, precision, keepFloat32)))
      return failure();
    return mlir::verify(*impl->module);
  });
  return std::make_shared<Graph>(std::move(impl));
}

std::shared_ptr<Graph> Graph::valueAndGrad(const std::vector<unsigned> &wrt) const {
  return deriveGraph(*impl_, "cannot differentiate @" + impl_->entry,
                     [&](func::FuncOp f) {
                       return buildValueAndGrad(f, wrt,
                                                impl_->entry + "_value_and_grad");
                     });
}

std::shared_ptr<Graph> Graph::trainStep(unsigned numParams, const OptimizerConfig &config,
                                        unsigned numState) const {
  return deriveGraph(*impl_, "cannot build a training step of @" + impl_->entry,
                     [&](func::FuncOp f) {
                       return buildTrainStep(f, numParams, config,
                                             impl_->entry + "_train_step", numState);
                     });
}

std::shared_ptr<Graph> Graph::primitive(const std::string &target) const {
  std::unique_ptr<TargetInfo> info = TargetInfo::get(target);
  if (!info)
    throw CompileError("unknown target '" + target + "'; expected cpu or cuda[:sm_XX]");
  return deriveGraph(*impl_, "cannot lower @" + impl_->entry,
                     [&](func::FuncOp f) -> FailureOr<func::FuncOp> {
                       expandAttention(f, info->fusedAttentionMaxDim());
                       return f;
                     });
}

std::shared_ptr<Graph> Graph::fuse(const std::string &target) const {
  std::unique_ptr<TargetInfo> info = TargetInfo::get(target);
  if (!info)
    throw CompileError("unknown target '" + target +
                       "'; expected cpu or cuda[:sm_XX]");
  return deriveGraph(*impl_, "cannot fuse @" + impl_->entry,
                     [&](func::FuncOp f) -> FailureOr<func::FuncOp> {
                       if (failed(fuseFunction(f, *info, /*remarks=*/false)))
                         return failure();
                       return f;
                     });
}

std::vector<KernelInfo> Graph::report() const {
  std::vector<KernelInfo> rows;
  auto opName = [](Operation *op) {
    return op->getName().getStringRef().drop_front(6).str(); // "graph."
  };
  for (Operation &op : impl_->func().getBody().front().without_terminator()) {
    KernelInfo row;
    if (auto fusion = llvm::dyn_cast<graph::FusionOp>(op)) {
      row.name = fusion.getKernelName().str();
      row.kind = fusion.getKind().str();
      row.domain.assign(fusion.getDomain().begin(), fusion.getDomain().end());
      row.reduced.assign(fusion.getReduced().begin(), fusion.getReduced().end());
      for (Operation &inner : fusion.getBody().front().without_terminator())
        if (!llvm::isa<graph::FullOp, graph::IotaOp, graph::ConstantOp>(inner))
          row.ops.push_back(opName(&inner));
      row.numInputs = fusion.getInputs().size();
      row.numOutputs = fusion.getNumResults();
    } else if (llvm::isa<graph::FullOp, graph::IotaOp, graph::ConstantOp>(op)) {
      continue;
    } else if (llvm::isa<graph::ReshapeOp>(op)) {
      continue; // a view between kernels: its operand's buffer, no step
    } else {
      row.name = opName(&op);
      row.kind = "library";
      auto shape = llvm::cast<RankedTensorType>(op.getResult(0).getType()).getShape();
      row.domain.assign(shape.begin(), shape.end());
      row.ops = {row.name};
      row.numInputs = op.getNumOperands();
      row.numOutputs = op.getNumResults();
    }
    rows.push_back(std::move(row));
  }
  return rows;
}
