//===- ProgramBuilder.cpp - fused graph -> runtime Program ----------------===//
#include "codegen/ProgramBuilder.h"
#include "codegen/ConvParamsOf.h"
#include "codegen/DTypes.h"

#include "codegen/tile/FusionToTile.h"
#include "ir/graph/GraphDialect.h"
#include "ir/tile/TileDialect.h"
#include "passes/FuseOps.h"
#include "passes/TargetInfo.h"
#include "passes/PassUtils.h"
#include "passes/TrainStep.h"
#include "runtime/MemoryPlan.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include <map>
#include <numeric>

using namespace mlir;
using namespace tilefuse;

namespace {

DType dtypeOf(Type t) { return dtypeFromType(t); }
Shape shapeOf(Value v) { return shapeFromType(v.getType()); }

/// Bytes of a dense attribute (splats expanded, booleans one byte each).
HostTensor constantData(ElementsAttr attr) {
  auto type = llvm::cast<RankedTensorType>(attr.getType());
  HostTensor t(dtypeOf(type), Shape(type.getShape().begin(), type.getShape().end()));
  int64_t i = 0;
  if (llvm::isa<FloatType>(type.getElementType())) {
    for (APFloat v : attr.getValues<APFloat>())
      t.setDouble(i++, v.convertToDouble());
  } else {
    for (APInt v : attr.getValues<APInt>())
      t.setInt(i++, type.getElementType().isInteger(1) ? int64_t(v.getZExtValue())
                                                         : v.getSExtValue());
  }
  return t;
}

class ProgramAssembler {
public:
  ProgramAssembler(func::FuncOp func, const TargetInfo &target, ModuleOp kernels)
      : func(func), target(target), kernels(kernels) {}

  FailureOr<Program> build() {
    for (BlockArgument arg : func.getArguments())
      prog.arguments.push_back(newBuffer(arg, BufferInfo::Role::Argument,
                                         "arg" + std::to_string(arg.getArgNumber())));
    for (Operation &op : func.getBody().front()) {
      size_t first = prog.steps.size();
      if (failed(visit(op)))
        return failure();
      // The user's lines behind the steps this op became (a fusion's: of
      // every op in its body).
      std::vector<std::string> lines;
      op.walk([&](Operation *inner) { appendSourceLines(inner->getLoc(), lines); });
      for (size_t i = first; i < prog.steps.size(); ++i)
        prog.steps[i].sourceLines = lines;
    }
    writeCarriedResultsInPlace();
    writeDyingInputsInPlace();
    for (ProgramKernel &k : prog.kernels)
      k.threads = target.threadsPerProgram(k.block);
    // Code is compiled under symbols that bind each kernel to the step
    // that launches it (kernelSymbol): loaders refuse a program whose steps
    // no longer match the code.
    std::vector<std::string> symbols = kernelSymbols(prog);
    for (size_t i = 0; i < prog.kernels.size(); ++i) {
      auto f = kernels.lookupSymbol<func::FuncOp>(prog.kernels[i].name);
      if (!f)
        return func.emitError("internal error: no tile kernel named ") << prog.kernels[i].name;
      SymbolTable::setSymbolName(f, symbols[i]);
    }
    return std::move(prog);
  }

private:
  /// "file:line" of every file location inside `loc`, each once.
  static void appendSourceLines(Location loc, std::vector<std::string> &out) {
    loc->walk([&](Location inner) {
      if (auto file = llvm::dyn_cast<FileLineColLoc>(inner)) {
        std::string line = file.getFilename().str() + ":" + std::to_string(file.getLine());
        if (std::find(out.begin(), out.end(), line) == out.end())
          out.push_back(line);
      }
      return WalkResult::advance();
    });
  }

  int newBuffer(Value v, BufferInfo::Role role, std::string name) {
    BufferInfo info;
    info.name = std::move(name);
    info.dtype = dtypeOf(v.getType());
    info.shape = shapeOf(v);
    info.role = role;
    prog.buffers.push_back(std::move(info));
    int id = int(prog.buffers.size()) - 1;
    buffers[v] = id;
    return id;
  }
  int result(Operation &op, unsigned i = 0) {
    std::string name = op.getName().getStringRef().drop_front(6).str();
    return newBuffer(op.getResult(i), BufferInfo::Role::Intermediate,
                     name + std::to_string(prog.buffers.size()));
  }
  int bufferOf(Value v) { return buffers.lookup(v); }
  /// The constant buffer of `op`'s result: equal constants (the same mask
  /// hoisted by several kernels, zeros of one shape) share one buffer.
  LogicalResult constant(Operation &op, std::vector<uint8_t> bytes, bool splat) {
    auto type = llvm::cast<RankedTensorType>(op.getResult(0).getType());
    std::string key;
    llvm::raw_string_ostream os(key);
    os << type << (splat ? " splat " : " dense ");
    os.write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
    auto it = constants.find(key);
    if (it != constants.end()) {
      buffers[op.getResult(0)] = it->second;
      return success();
    }
    int b = result(op);
    prog.buffers[b].role = BufferInfo::Role::Constant;
    prog.buffers[b].data = std::move(bytes);
    prog.buffers[b].splat = splat;
    constants.emplace(std::move(key), b);
    return success();
  }
  int64_t numel(const Shape &s) {
    return std::accumulate(s.begin(), s.end(), int64_t(1), std::multiplies<>());
  }

  LogicalResult visit(Operation &op) {
    if (auto fusion = llvm::dyn_cast<graph::FusionOp>(op))
      return kernel(fusion);
    if (auto mm = llvm::dyn_cast<graph::MatmulOp>(op))
      return gemm(mm);
    if (auto k = llvm::dyn_cast<graph::ConstantOp>(op)) {
      auto dense = llvm::dyn_cast<DenseElementsAttr>(k.getValue());
      std::vector<uint8_t> bytes = constantData(k.getValue()).bytes;
      bool splat = dense && dense.isSplat() && !bytes.empty();
      if (splat)
        bytes.resize(dtypeSize(dtypeOf(k.getType())));
      return constant(op, std::move(bytes), splat);
    }
    if (auto f = llvm::dyn_cast<graph::FullOp>(op)) {
      // One element: the runtime fills the buffer.
      HostTensor t(dtypeOf(f.getType()), {});
      if (isFloatDType(t.dtype))
        t.setDouble(0, f.getValue().convertToDouble());
      else
        t.setInt(0, int64_t(f.getValue().convertToDouble()));
      return constant(op, std::move(t.bytes), /*splat=*/true);
    }
    if (auto barrier = llvm::dyn_cast<graph::RecomputeBarrierOp>(op)) {
      // Only orders the ops that read it (fusion placed them after
      // `after`); its value is its operand's buffer.
      buffers[barrier.getResult()] = bufferOf(barrier.getOperand());
      return success();
    }
    if (auto view = llvm::dyn_cast<graph::ReshapeOp>(op)) {
      // A row-major reshape between kernels and library calls (fusion left
      // it as a view): the same bytes, so the operand's buffer. One the
      // function returns is settled at the return (returnedView).
      buffers[view.getResult()] = bufferOf(view.getOperand());
      return success();
    }
    if (auto g = llvm::dyn_cast<graph::GatherOp>(op)) {
      Step s;
      s.kind = Step::Kind::Gather;
      // A gather that checks another op's indices is named after it.
      std::string name = graph::locationName(g.getLoc());
      s.source = name.empty() ? "graph.gather" : name;
      s.buffers = {bufferOf(g.getTable()), bufferOf(g.getIndices()), result(op)};
      prog.steps.push_back(s);
      return success();
    }
    if (llvm::isa<graph::GroupedMatmulOp, graph::GroupedMatmulWeightGradOp>(op))
      return groupedGemm(&op);
    if (auto sort = llvm::dyn_cast<graph::SortOp>(op)) {
      auto type = llvm::cast<RankedTensorType>(sort.getOperand().getType());
      Step s;
      s.kind = Step::Kind::Sort;
      s.source = "graph.sort";
      s.n = type.getShape().back();
      s.m = s.n ? type.getNumElements() / s.n : 0;
      s.descending = sort.getDescending();
      s.outputs = 2;
      s.buffers = {bufferOf(sort.getOperand()), result(op, 0), result(op, 1)};
      prog.steps.push_back(s);
      return success();
    }
    if (auto sa = llvm::dyn_cast<graph::ScatterAddOp>(op)) {
      Step s;
      s.kind = Step::Kind::ScatterAdd;
      s.source = "graph.scatter_add";
      s.buffers = {bufferOf(sa.getBase()), bufferOf(sa.getIndices()),
                   bufferOf(sa.getUpdates()), result(op)};
      prog.steps.push_back(s);
      return success();
    }
    if (auto conv = convParamsOf(&op)) {
      auto [direction, params] = *conv;
      if (llvm::cast<RankedTensorType>(op.getResult(0).getType()).getElementType().isF64())
        return op.emitOpError("runs compiled in f32, bf16 or f16, got ")
               << op.getResult(0).getType() << "; cast the operands (f64 convolutions run in "
               << "the reference interpreter only)";
      Step s;
      s.kind = direction == ConvDirection::Forward     ? Step::Kind::Conv
               : direction == ConvDirection::GradInput ? Step::Kind::ConvGradInput
                                                       : Step::Kind::ConvGradWeight;
      s.source = op.getName().getStringRef().str();
      s.conv = params;
      s.buffers = {bufferOf(op.getOperand(0)), bufferOf(op.getOperand(1)), result(op)};
      // The epilogue the library applies: the bias (buffer 3), then the
      // activation.
      if (auto fused = llvm::dyn_cast<graph::ConvBiasActOp>(op)) {
        if (!fused.getType().getElementType().isF32())
          return op.emitOpError("runs in f32 only (oneDNN's f32 convolutions apply its "
                                "epilogue), got ")
                 << fused.getType();
        if (Value bias = fused.getBias()) {
          s.epilogue.push_back("bias");
          s.buffers.push_back(bufferOf(bias));
        }
        if (fused.getActivation() != "none")
          s.epilogue.push_back(fused.getActivation().str());
      }
      // The library's workspace, planned like any buffer (live for this
      // step only).
      int64_t elementBytes = int64_t(dtypeSize(prog.buffers[size_t(s.buffers[2])].dtype));
      if (int64_t bytes = target.convolutionWorkspaceBytes(params, elementBytes)) {
        BufferInfo workspace;
        workspace.name = "conv_workspace" + std::to_string(prog.buffers.size());
        workspace.dtype = DType::I1;
        workspace.shape = {bytes};
        prog.buffers.push_back(std::move(workspace));
        s.buffers.push_back(int(prog.buffers.size()) - 1);
      }
      prog.steps.push_back(s);
      return success();
    }
    if (graph::isCollectiveStart(&op))
      return collectiveStart(op);
    if (auto wait = llvm::dyn_cast<graph::CollectiveWaitOp>(op))
      return collectiveWait(wait);
    if (auto attention = llvm::dyn_cast<graph::AttentionOp>(op))
      return attentionStep(op, attention, {});
    if (auto grad = llvm::dyn_cast<graph::AttentionGradOp>(op))
      return attentionStep(op, grad, {grad.getResult(), grad.getLogsumexp(), grad.getGrad()});
    if (auto ret = llvm::dyn_cast<func::ReturnOp>(op)) {
      // A copy of buffer `from` into a new buffer of result `v`'s shape.
      auto copyOf = [&](Value v, int from, const char *source, const char *prefix) {
        Step s;
        s.kind = Step::Kind::Copy;
        s.source = source;
        int copy = newBuffer(v, BufferInfo::Role::Intermediate,
                             prefix + std::to_string(prog.buffers.size()));
        s.buffers = {from, copy};
        prog.steps.push_back(s);
        return copy;
      };
      for (auto [index, v] : llvm::enumerate(ret.getOperands())) {
        int b = bufferOf(v);
        auto alias = func.getResultAttrOfType<IntegerAttr>(index, kAliasAttrName);
        if (auto view = v.getDefiningOp<graph::ReshapeOp>()) {
          // The result is its operand's buffer under the returned shape,
          // where it can be; else a copy.
          if (!alias && returnedView(ret, view, b))
            prog.buffers[size_t(b)].shape = shapeOf(v);
          else
            b = copyOf(v, b, "graph.reshape", "reshape");
        }
        // Results never alias the caller's arguments: an argument returned
        // as is is copied. A result that becomes an argument's next value
        // gets a buffer of its own, so a runtime can swap the two.
        bool shared = prog.buffers[b].role != BufferInfo::Role::Intermediate ||
                      llvm::is_contained(prog.results, b);
        if (prog.buffers[b].role == BufferInfo::Role::Argument || (alias && shared))
          b = copyOf(v, b, "return", "copy");
        if (alias)
          prog.aliases.emplace_back(int(prog.results.size()), int(alias.getInt()));
        prog.results.push_back(b);
      }
      return success();
    }
    return op.emitOpError() << "is outside any kernel after fusion; no runtime "
                               "step runs it (run the fuse pass first)";
  }

  /// Whether returned reshape `view` of buffer `b` can be `b` itself under
  /// the returned shape (a language model's logits, [B*T, V] as [B, T, V],
  /// returned without a copy): `b` is a step's result that nothing else
  /// returns (a result's shape is the one its caller gets) and that no
  /// gather or scatter reads (they take their tables' rows from the
  /// buffer's shape). Every other step takes its sizes from the graph.
  bool returnedView(func::ReturnOp ret, graph::ReshapeOp view, int b) {
    if (prog.buffers[size_t(b)].role != BufferInfo::Role::Intermediate ||
        llvm::is_contained(prog.results, b))
      return false;
    unsigned returnedHere = 0;
    for (Value r : ret.getOperands())
      returnedHere += bufferOf(r) == b;
    if (returnedHere != 1)
      return false;
    return llvm::none_of(prog.steps, [&](const Step &s) {
      return (s.kind == Step::Kind::Gather || s.kind == Step::Kind::ScatterAdd) &&
             llvm::is_contained(s.buffers, b);
    });
  }

  /// A GEMM whose library applies the elementwise epilogue (the target
  /// said it can): one Gemm step reading the epilogue's other inputs.
  LogicalResult gemmWithEpilogue(graph::FusionOp fusion) {
    Block &body = fusion.getBody().front();
    auto mms = llvm::to_vector(body.getOps<graph::MatmulOp>());
    if (mms.size() != 1)
      return fusion.emitOpError("a matmul kernel must hold exactly one graph.matmul");
    graph::MatmulOp mm = mms.front();
    auto operandBuffer = [&](Value v) -> FailureOr<int> {
      auto arg = llvm::dyn_cast<BlockArgument>(v);
      if (!arg)
        return fusion.emitOpError("the GEMM of a matmul kernel must read kernel inputs");
      return bufferOf(fusion.getInputs()[arg.getArgNumber()]);
    };
    FailureOr<int> a = operandBuffer(mm.getLhs()), b = operandBuffer(mm.getRhs());
    if (failed(a) || failed(b))
      return failure();
    Step s;
    if (failed(gemmSizes(mm, s)))
      return failure();
    s.source = fusion.getKernelName().str() + " (graph.matmul + epilogue)";
    s.buffers = {*a, *b, result(*fusion)};
    for (Operation &op : body.without_terminator()) {
      if (&op == mm.getOperation() ||
          llvm::isa<graph::BroadcastInDimOp, graph::FullOp, graph::ConstantOp>(op))
        continue;
      std::string kind = gemmEpilogueKind(&op);
      if (kind.empty())
        return op.emitOpError("is in a GEMM epilogue, but the GEMM library cannot apply it");
      s.epilogue.push_back(kind);
      if (kind != "bias")
        continue;
      // The bias vector: the kernel input the broadcast operand reads.
      for (Value v : op.getOperands())
        if (auto bc = v.getDefiningOp<graph::BroadcastInDimOp>()) {
          auto arg = llvm::dyn_cast<BlockArgument>(bc.getOperand());
          if (!arg)
            return op.emitOpError("the bias of a GEMM epilogue must be a kernel input");
          s.buffers.push_back(bufferOf(fusion.getInputs()[arg.getArgNumber()]));
        }
    }
    prog.steps.push_back(s);
    return success();
  }

  /// One ProgramKernel for tile kernel `k`.
  int addKernel(func::FuncOp k, graph::FusionOp fusion, const std::string &kind) {
    ProgramKernel info;
    info.name = k.getSymName().str();
    info.kind = kind;
    info.grid = k->getAttrOfType<IntegerAttr>(tile::kGridAttr).getInt();
    info.block = k->getAttrOfType<IntegerAttr>(tile::kBlockAttr).getInt();
    auto domain = fusion.getDomain();
    int64_t elements = std::accumulate(domain.begin(), domain.end(), int64_t(1),
                                       std::multiplies<>());
    info.elementsPerProgram = std::max<int64_t>(1, elements / std::max<int64_t>(1, info.grid));
    for (Attribute a : k->getAttrOfType<ArrayAttr>(tile::kFusedOpsAttr))
      info.fusedOps.push_back(llvm::cast<StringAttr>(a).str());
    prog.kernels.push_back(info);
    return int(prog.kernels.size()) - 1;
  }

  /// A step of one of a split kernel's two kernels (`k`): it reads the
  /// fusion's inputs, then the slot buffers; the caller adds what it writes.
  Step splitStep(func::FuncOp k, graph::FusionOp fusion, const std::string &source,
                 ArrayRef<int> slots) {
    Step s;
    s.kind = Step::Kind::Kernel;
    s.kernel = addKernel(k, fusion, "reduction");
    s.source = source;
    for (Value in : fusion.getInputs())
      s.buffers.push_back(bufferOf(in));
    s.buffers.insert(s.buffers.end(), slots.begin(), slots.end());
    return s;
  }

  /// One slot buffer of `shape` per reduction of a split kernel, of the
  /// reduction's compute type (f16 and bf16 sums fold in f32).
  SmallVector<int> slotBuffers(ArrayRef<Operation *> reductions, const std::string &name,
                               const Shape &shape) {
    SmallVector<int> slots;
    for (Operation *r : reductions) {
      BufferInfo slot;
      slot.name = name + "_slices" + std::to_string(prog.buffers.size());
      Type t = getElementTypeOrSelf(r->getOperand(0).getType());
      slot.dtype = t.isF16() || t.isBF16() ? DType::F32 : dtypeOf(t);
      slot.shape = shape;
      prog.buffers.push_back(slot);
      slots.push_back(int(prog.buffers.size()) - 1);
    }
    return slots;
  }

  /// A reduction with too little parallelism for its size: partial folds
  /// over slices in parallel, then a combine kernel folds the slices and
  /// computes the results (FusionToTile.h). A full reduction has one slot
  /// per slice and reduction; a column reduction one row of kept elements.
  LogicalResult splitReduction(graph::FusionOp fusion, ArrayRef<Operation *> reductions,
                               const std::string &name, int64_t slices, bool column) {
    FailureOr<std::pair<func::FuncOp, func::FuncOp>> ks =
        column ? lowerSplitColumnReduction(fusion, reductions, slices, kernels, target, name)
               : lowerSplitReduction(fusion, reductions, slices, kernels, target, name);
    if (failed(ks))
      return failure();
    // Slots hold the kept elements of the domain (a full reduction folded
    // by a column kernel has column partials too).
    int64_t keptElements = 1;
    if (column)
      for (auto [d, size] : llvm::enumerate(fusion.getDomain()))
        if (!llvm::is_contained(fusion.getReduced(), int64_t(d)))
          keptElements *= size;
    SmallVector<int> slots =
        slotBuffers(reductions, name, column ? Shape{slices, keptElements} : Shape{slices});
    Step partial = splitStep(ks->first, fusion, name + " (partial)", slots);
    Step combine = splitStep(ks->second, fusion, name + " (combine)", slots);
    // The partial kernel stores the domain-sized results its walk computes.
    SmallVector<unsigned> early =
        column ? columnPartialKernelResults(fusion) : partialKernelResults(fusion);
    for (unsigned i : early)
      partial.buffers.push_back(result(*fusion, i));
    partial.outputs = int(slots.size() + early.size());
    for (unsigned i = 0; i < fusion.getNumResults(); ++i)
      if (!llvm::is_contained(early, i))
        combine.buffers.push_back(result(*fusion, i));
    combine.outputs = int(fusion.getNumResults() - early.size());
    // The combine kernel covers only the slots, not the domain.
    ProgramKernel &c = prog.kernels[combine.kernel];
    c.elementsPerProgram = std::max<int64_t>(1, slices * keptElements / std::max<int64_t>(1, c.grid));
    prog.steps.push_back(partial);
    prog.steps.push_back(combine);
    return success();
  }

  /// A row kernel that also folds column sums (lowerRowsWithColumnSums):
  /// slices of rows as many as a full reduction has, each writing one row
  /// of partial sums, then a kernel folding the slices.
  LogicalResult rowsWithColumnSums(graph::FusionOp fusion, ArrayRef<Operation *> sums,
                                   const std::string &name) {
    int64_t rows = numel(fusion.getDomain()) / std::max<int64_t>(1, fusion.getDomain().back());
    int64_t slices = std::max<int64_t>(1, std::min(target.fullReductionSlices(), rows));
    FailureOr<RowColumnKernels> ks =
        lowerRowsWithColumnSums(fusion, sums, slices, kernels, target, name);
    if (failed(ks))
      return failure();
    int64_t columns = fusion.getDomain().back();
    SmallVector<int> slots = slotBuffers(sums, name, Shape{slices, columns});
    Step partial = splitStep(ks->partial, fusion, name + " (rows and column partials)", slots);
    Step combine = splitStep(ks->combine, fusion, name + " (column combine)", slots);
    for (unsigned i : ks->rowYields)
      partial.buffers.push_back(result(*fusion, i));
    partial.outputs = int(slots.size() + ks->rowYields.size());
    for (unsigned i : ks->columnYields)
      combine.buffers.push_back(result(*fusion, i));
    combine.outputs = int(ks->columnYields.size());
    // No result is written over an input: the partial kernel walks the
    // last rows of a slice again to fill up a group of rows.
    // The combine kernel covers only the slots, not the domain.
    ProgramKernel &c = prog.kernels[combine.kernel];
    c.elementsPerProgram = std::max<int64_t>(1, slices * columns / std::max<int64_t>(1, c.grid));
    prog.steps.push_back(partial);
    prog.steps.push_back(combine);
    return success();
  }

  /// Slices worth splitting the column reduction `fusion` into (0: not
  /// worth it). A column reduction's programs are its blocks of kept
  /// elements; with few of them, each walks a long reduced extent alone
  /// (layer_norm's dgamma over 65536 rows of 1024: 16 CPU programs, one
  /// GPU block). Slices bring the programs to about 256 while each slice
  /// keeps at least 32 rows.
  int64_t rowsOf(graph::FusionOp fusion) {
    int64_t rows = 1;
    for (int64_t d : fusion.getReduced())
      rows *= fusion.getDomain()[d];
    return rows;
  }
  int64_t columnSlices(graph::FusionOp fusion) {
    int64_t programs = keptPrograms(fusion, target);
    int64_t rows = rowsOf(fusion);
    int64_t slices = std::min<int64_t>(256 / std::max<int64_t>(1, programs), rows / 32);
    return programs < 128 && slices >= 2 ? slices : 0;
  }

  LogicalResult kernel(graph::FusionOp fusion) {
    if (fusion.getKind() == "matmul")
      return gemmWithEpilogue(fusion);
    std::string splitName = (func.getSymName() + "_" + fusion.getKernelName()).str();
    if (SmallVector<Operation *> sums = columnSumsOfRowKernel(fusion); !sums.empty())
      return rowsWithColumnSums(fusion, sums, splitName);
    if (SmallVector<Operation *> reductions = splittableReductions(fusion); !reductions.empty())
      return splitReduction(fusion, reductions, splitName, target.fullReductionSlices(),
                            /*column=*/false);
    if (SmallVector<Operation *> reductions = columnSplittableReductions(fusion);
        !reductions.empty()) {
      // A full reduction folded beside the columns needs the combine
      // kernel to sum its column partials, however few the slices.
      bool total = llvm::any_of(reductions, [&](Operation *r) {
        return int64_t(r->getAttrOfType<DenseI64ArrayAttr>("dims").size()) ==
               int64_t(fusion.getDomain().size());
      });
      if (int64_t slices = columnSlices(fusion); slices || total) {
        // Programs that walk whole rows are the slices alone: as many as
        // a full reduction has (every core busy), 32 rows a slice at least.
        if (columnPartialWalksRows(fusion, reductions, target))
          slices = std::max(slices, std::min(target.fullReductionSlices(), rowsOf(fusion) / 32));
        return splitReduction(fusion, reductions, splitName, std::max<int64_t>(slices, 1),
                              /*column=*/true);
      }
    }
    // Kernel symbols are unique per module: the function names its kernels.
    std::string name = (func.getSymName() + "_" + fusion.getKernelName()).str();
    FailureOr<func::FuncOp> k = lowerFusionToTile(fusion, kernels, target, name);
    if (failed(k))
      return failure();
    ProgramKernel info;
    info.name = name;
    info.kind = fusion.getKind().str();
    info.grid = (*k)->getAttrOfType<IntegerAttr>(tile::kGridAttr).getInt();
    info.block = (*k)->getAttrOfType<IntegerAttr>(tile::kBlockAttr).getInt();
    auto domain = fusion.getDomain();
    int64_t elements = std::accumulate(domain.begin(), domain.end(), int64_t(1),
                                       std::multiplies<>());
    info.elementsPerProgram = std::max<int64_t>(1, elements / std::max<int64_t>(1, info.grid));
    for (Attribute a : (*k)->getAttrOfType<ArrayAttr>(tile::kFusedOpsAttr))
      info.fusedOps.push_back(llvm::cast<StringAttr>(a).str());
    prog.kernels.push_back(info);
    Step s;
    s.kind = Step::Kind::Kernel;
    s.kernel = int(prog.kernels.size()) - 1;
    s.source = info.name;
    for (Value in : fusion.getInputs())
      s.buffers.push_back(bufferOf(in));
    for (unsigned i = 0; i < fusion.getNumResults(); ++i)
      s.buffers.push_back(result(*fusion, i));
    s.outputs = int(fusion.getNumResults());
    for (auto [r, input] : inPlaceCandidates(fusion))
      overwritable[bufferOf(fusion.getResult(r))].push_back(bufferOf(fusion.getInputs()[input]));
    prog.steps.push_back(s);
    return success();
  }

  LogicalResult gemmSizes(graph::MatmulOp mm, Step &s) {
    Shape a = shapeOf(mm.getLhs()), b = shapeOf(mm.getRhs()), c = shapeOf(mm.getResult());
    if (a.size() < 2 || b.size() < 2 || c.size() < 2)
      return mm.emitOpError() << "has an operand of rank < 2; the tracer should "
                                 "have reshaped vectors to matrices";
    s.kind = Step::Kind::Gemm;
    s.transposeA = mm.getTransposeLhs();
    s.transposeB = mm.getTransposeRhs();
    s.m = c[c.size() - 2];
    s.n = c.back();
    s.k = s.transposeA ? a[a.size() - 2] : a.back();
    // The product of the batch dims (not numel / (m n): m or n may be 0).
    s.batch = numel(Shape(c.begin(), c.end() - 2));
    if (numel(a) != s.batch * s.m * s.k || numel(b) != s.batch * s.k * s.n)
      return mm.emitOpError() << "broadcasts batch dimensions; the GEMM step "
                                 "needs equal batch dimensions";
    return success();
  }

  /// A graph.attention (`saved` empty) or graph.attention_grad step (`saved`:
  /// the forward's result and logsumexp, and the result's cotangent):
  /// sizes from the graph's types, the kernels' layout (runtime/CpuAttention.h).
  template <typename OpTy>
  LogicalResult attentionStep(Operation &op, OpTy attention, ArrayRef<Value> saved) {
    Value q = attention.getQuery(), k = attention.getKey(), v = attention.getValue();
    Value mask = attention.getMask();
    auto qt = llvm::cast<RankedTensorType>(q.getType());
    // Which of these a target's kernels take, fusion decided
    // (TargetInfo::fusedAttentionTakes16Bit).
    Type element = qt.getElementType();
    if (!element.isF32() && !element.isBF16() && !element.isF16())
      return op.emitOpError("runs compiled in f32, bf16 or f16, got ")
             << qt << "; f64 attention runs in the reference interpreter only";
    Shape qs = shapeOf(q), ks = shapeOf(k), vs = shapeOf(v);
    size_t r = qs.size();
    Step s;
    s.kind = saved.empty() ? Step::Kind::Attention : Step::Kind::AttentionGrad;
    s.source = op.getName().getStringRef().str();
    s.batch = 1;
    for (size_t i = 0; i + 3 < r; ++i)
      s.batch *= qs[i];
    AttentionParams &a = s.attention;
    a.heads = qs[r - 3], a.queries = qs[r - 2], a.headDim = qs[r - 1];
    a.kvHeads = ks[r - 3], a.keys = ks[r - 2], a.valueDim = vs[r - 1];
    a.causal = attention.getCausal(), a.scale = attention.getScale().convertToDouble();
    a.dropoutP = attention.getDropoutP().convertToDouble();
    a.stream = attention.getStream();
    s.buffers = {bufferOf(q), bufferOf(k), bufferOf(v)};
    for (Value x : saved)
      s.buffers.push_back(bufferOf(x));
    if (mask) {
      Shape ms = shapeOf(mask);
      a.mask = llvm::cast<RankedTensorType>(mask.getType()).getElementType().isInteger(1) ? 1 : 2;
      // The verifier allows the query's batch dimensions or all 1, and
      // the query's heads or 1: 1 broadcasts (a stride of 0).
      int64_t maskBatch = 1;
      for (size_t i = 0; i + 3 < r; ++i)
        maskBatch *= ms[i];
      a.maskHeadStride = ms[r - 3] == 1 ? 0 : a.queries * a.keys;
      a.maskBatchStride = maskBatch == 1 ? 0 : ms[r - 3] * a.queries * a.keys;
      s.buffers.push_back(bufferOf(mask));
    }
    if (Value seed = attention.getSeed())
      s.buffers.push_back(bufferOf(seed));
    s.outputs = int(op.getNumResults());
    for (unsigned i = 0; i < op.getNumResults(); ++i)
      s.buffers.push_back(result(op, i));
    prog.steps.push_back(s);
    return success();
  }

  /// A collective's start step. All-reduce and broadcast work in place:
  /// on the operand's buffer when nothing else reads it (a gradient bucket),
  /// else on a copy. The start's pending value is the buffer the wait
  /// completes (collectiveWait).
  LogicalResult collectiveStart(Operation &op) {
    auto [name, size] = graph::collectiveGroupOf(&op);
    int group = -1;
    for (size_t i = 0; i < prog.groups.size(); ++i)
      if (prog.groups[i].name == name)
        group = int(i);
    if (group < 0) {
      prog.groups.push_back({name.str(), size});
      group = int(prog.groups.size()) - 1;
    } else if (prog.groups[size_t(group)].size != size) {
      return op.emitOpError("names process group '")
             << name << "' with " << size << " ranks; another collective of this function "
             << "gave it " << prog.groups[size_t(group)].size;
    }
    Step s;
    s.kind = Step::Kind::CollectiveStart;
    s.source = op.getName().getStringRef().str();
    CollectiveParams &c = s.collective;
    c.group = group;
    c.ticket = nextTicket++;
    auto reduceOf = [](StringRef r) {
      return r == "max" ? ReduceOp::Max : r == "min" ? ReduceOp::Min : ReduceOp::Sum;
    };
    Value input = op.getOperand(0);
    int in = bufferOf(input);
    if (auto ar = llvm::dyn_cast<graph::AllReduceStartOp>(op)) {
      c.kind = CollectiveKind::AllReduce, c.reduce = reduceOf(ar.getReduce());
    } else if (auto rs = llvm::dyn_cast<graph::ReduceScatterStartOp>(op)) {
      c.kind = CollectiveKind::ReduceScatter, c.reduce = reduceOf(rs.getReduce());
    } else if (llvm::isa<graph::AllGatherStartOp>(op)) {
      c.kind = CollectiveKind::AllGather;
    } else {
      c.kind = CollectiveKind::Broadcast;
      c.root = llvm::cast<graph::BroadcastStartOp>(op).getRoot();
    }
    if (c.kind == CollectiveKind::AllReduce || c.kind == CollectiveKind::Broadcast) {
      bool ownBuffer = prog.buffers[size_t(in)].role == BufferInfo::Role::Intermediate &&
                       input.hasOneUse() && !llvm::is_contained(prog.results, in) &&
                       llvm::count_if(buffers, [&](auto &entry) { return entry.second == in; }) == 1;
      if (ownBuffer) {
        buffers[op.getResult(0)] = in;
      } else {
        Step copy;
        copy.kind = Step::Kind::Copy;
        copy.source = s.source + " (its own copy of the operand)";
        copy.buffers = {in, result(op)};
        prog.steps.push_back(copy);
      }
      s.buffers = {bufferOf(op.getResult(0))};
    } else {
      s.buffers = {in, result(op)};
    }
    prog.steps.push_back(s);
    pendingStarts[op.getResult(0)] = prog.steps.size() - 1;
    return success();
  }

  /// The wait names its start's buffers: they stay live (in flight) until
  /// it, and what reads the result runs after it.
  LogicalResult collectiveWait(graph::CollectiveWaitOp wait) {
    auto it = pendingStarts.find(wait.getPending());
    if (it == pendingStarts.end())
      return wait.emitOpError("waits for a collective that was not started before it");
    Step s = prog.steps[it->second];
    s.kind = Step::Kind::CollectiveWait;
    s.source = "graph.collective_wait (" + s.source + ")";
    prog.steps.push_back(s);
    buffers[wait.getResult()] = bufferOf(wait.getPending());
    return success();
  }

  /// graph.grouped_matmul and its weights' gradient: one library step
  /// that reads the groups' offsets when it runs.
  LogicalResult groupedGemm(Operation *op) {
    auto lhs = llvm::cast<RankedTensorType>(op->getOperand(0).getType());
    auto other = llvm::cast<RankedTensorType>(op->getOperand(1).getType());
    auto result = llvm::cast<RankedTensorType>(op->getResult(0).getType());
    bool weightGrad = llvm::isa<graph::GroupedMatmulWeightGradOp>(op);
    Step s;
    s.kind = Step::Kind::GroupedGemm;
    s.source = op->getName().getStringRef().str();
    s.batch = llvm::cast<RankedTensorType>(op->getOperand(2).getType()).getDimSize(0);
    s.m = lhs.getDimSize(0);
    s.k = lhs.getDimSize(1);
    s.n = weightGrad ? other.getDimSize(1) : result.getDimSize(1);
    s.transposeA = weightGrad;
    if (auto mm = llvm::dyn_cast<graph::GroupedMatmulOp>(op))
      s.transposeB = mm.getTransposeRhs();
    s.buffers = {bufferOf(op->getOperand(0)), bufferOf(op->getOperand(1)),
                 bufferOf(op->getOperand(2)), this->result(*op)};
    prog.steps.push_back(s);
    return success();
  }

  LogicalResult gemm(graph::MatmulOp mm) {
    Step s;
    if (failed(gemmSizes(mm, s)))
      return failure();
    s.source = "graph.matmul";
    s.buffers = {bufferOf(mm.getLhs()), bufferOf(mm.getRhs()), result(*mm)};
    prog.steps.push_back(s);
    return success();
  }

  func::FuncOp func;
  const TargetInfo &target;
  ModuleOp kernels;
  Program prog;
  DenseMap<Value, int> buffers;
  std::map<std::string, int> constants; ///< constant key -> buffer
  int32_t nextTicket = 0;
  DenseMap<Value, size_t> pendingStarts; ///< pending value -> its start step
  /// Result buffer of a kernel -> input buffers it may be written over
  /// (inPlaceCandidates).
  std::map<int, std::vector<int>> overwritable;

  /// A training step's carried results written over their arguments: the
  /// kernel that computes a parameter's (or optimizer state's) next value
  /// writes it where the current value is, when it reads that value only
  /// at the element it writes and every other step that reads the
  /// argument runs before it. No second copy of the parameters and state
  /// lives in the arena, and nothing swaps after the call.
  void writeCarriedResultsInPlace() {
    std::vector<int> writer(prog.buffers.size(), -1);
    for (size_t i = 0; i < prog.steps.size(); ++i)
      for (int b : stepWrites(prog.steps[i]))
        writer[size_t(b)] = writer[size_t(b)] == -1 ? int(i) : -2; // -2: written twice
    for (auto [resultIndex, argumentIndex] : prog.aliases) {
      int r = prog.results[size_t(resultIndex)], a = prog.arguments[size_t(argumentIndex)];
      int w = writer[size_t(r)];
      auto it = overwritable.find(r);
      if (w < 0 || it == overwritable.end() || !llvm::is_contained(it->second, a) ||
          llvm::count(prog.results, r) != 1 || llvm::count(prog.arguments, a) != 1 ||
          prog.buffers[size_t(r)].dtype != prog.buffers[size_t(a)].dtype ||
          prog.buffers[size_t(r)].shape != prog.buffers[size_t(a)].shape)
        continue;
      bool laterUse = false;
      for (size_t i = 0; i < prog.steps.size(); ++i)
        if (int(i) > w && llvm::is_contained(prog.steps[i].buffers, a))
          laterUse = true;
      if (laterUse)
        continue;
      for (Step &step : prog.steps)
        std::replace(step.buffers.begin(), step.buffers.end(), r, a);
      prog.results[size_t(resultIndex)] = a;
    }
    dropUnusedBuffers();
  }

  /// A kernel's result written over an intermediate input of the same size
  /// that no later step reads (inPlaceCandidates): the result takes the
  /// input's buffer, so the two are never live at once (a normalisation
  /// over its convolution's output, a loss's softmax over its logits).
  /// The scheduler keeps the input's other readers before the kernel (a
  /// write after reads), and views share their operand's buffer, so the
  /// last use seen here is the buffer's.
  void writeDyingInputsInPlace() {
    std::vector<int> lastUse(prog.buffers.size(), -1), writes(prog.buffers.size(), 0);
    for (size_t i = 0; i < prog.steps.size(); ++i) {
      for (int b : prog.steps[i].buffers)
        lastUse[size_t(b)] = int(i);
      for (int b : stepWrites(prog.steps[i]))
        ++writes[size_t(b)];
    }
    // The caller reads results after the last step.
    for (int b : prog.results)
      lastUse[size_t(b)] = int(prog.steps.size());
    auto intermediate = [&](int b) {
      return prog.buffers[size_t(b)].role == BufferInfo::Role::Intermediate &&
             !llvm::is_contained(prog.results, b) && !llvm::is_contained(prog.arguments, b);
    };
    // Where a buffer renamed here now lives (candidates name the original).
    std::vector<int> now(prog.buffers.size());
    std::iota(now.begin(), now.end(), 0);
    bool renamed = false;
    for (size_t k = 0; k < prog.steps.size(); ++k) {
      Step &step = prog.steps[k];
      if (step.kind != Step::Kind::Kernel)
        continue;
      size_t inputs = step.buffers.size() - size_t(step.outputs);
      for (size_t o = inputs; o < step.buffers.size(); ++o) {
        int r = step.buffers[o];
        auto it = overwritable.find(r);
        // (A result may take the input's buffer: the caller reads it there.)
        if (it == overwritable.end() || writes[size_t(r)] != 1 ||
            prog.buffers[size_t(r)].role != BufferInfo::Role::Intermediate ||
            llvm::is_contained(prog.arguments, r) || llvm::count(prog.results, r) > 1)
          continue;
        for (int candidate : it->second) {
          int x = now[size_t(candidate)];
          const BufferInfo &in = prog.buffers[size_t(x)], &out = prog.buffers[size_t(r)];
          // Read by this kernel through one input only (a view of it as a
          // second input would read elements already overwritten).
          int reads = int(llvm::count(ArrayRef<int>(step.buffers).take_front(inputs), x));
          if (!intermediate(x) || lastUse[size_t(x)] != int(k) || reads != 1 ||
              llvm::is_contained(ArrayRef<int>(step.buffers).drop_front(inputs), x) ||
              in.dtype != out.dtype || in.shape != out.shape)
            continue;
          for (Step &s : prog.steps)
            std::replace(s.buffers.begin(), s.buffers.end(), r, x);
          std::replace(prog.results.begin(), prog.results.end(), r, x);
          lastUse[size_t(x)] = lastUse[size_t(r)];
          now[size_t(r)] = x;
          overwritable.erase(it);
          renamed = true;
          break;
        }
      }
    }
    if (renamed)
      dropUnusedBuffers();
  }

  /// Removes intermediate buffers no step, argument or result names.
  void dropUnusedBuffers() {
    std::vector<bool> used(prog.buffers.size(), false);
    for (const Step &step : prog.steps)
      for (int b : step.buffers)
        used[size_t(b)] = true;
    for (int b : prog.arguments)
      used[size_t(b)] = true;
    for (int b : prog.results)
      used[size_t(b)] = true;
    std::vector<int> renumbered(prog.buffers.size(), -1);
    std::vector<BufferInfo> kept;
    for (size_t b = 0; b < prog.buffers.size(); ++b)
      if (used[b] || prog.buffers[b].role != BufferInfo::Role::Intermediate) {
        renumbered[b] = int(kept.size());
        kept.push_back(std::move(prog.buffers[b]));
      }
    prog.buffers = std::move(kept);
    for (Step &step : prog.steps)
      for (int &b : step.buffers)
        b = renumbered[size_t(b)];
    for (int &b : prog.arguments)
      b = renumbered[size_t(b)];
    for (int &b : prog.results)
      b = renumbered[size_t(b)];
    // The in-place candidates name buffers too: renumbered, dropped ones gone.
    std::map<int, std::vector<int>> candidates;
    for (auto &[result, inputs] : overwritable) {
      if (renumbered[size_t(result)] < 0)
        continue;
      std::vector<int> &kept = candidates[renumbered[size_t(result)]];
      for (int input : inputs)
        if (renumbered[size_t(input)] >= 0)
          kept.push_back(renumbered[size_t(input)]);
    }
    overwritable = std::move(candidates);
  }
};

} // namespace

FailureOr<Program> tilefuse::buildProgram(func::FuncOp func,
                                          const TargetInfo &target,
                                          ModuleOp kernels) {
  if (failed(verifyGraphFunction(func)))
    return failure();
  hoistDenseConstants(func);
  FailureOr<Program> program = ProgramAssembler(func, target, kernels).build();
  if (failed(program))
    return failure();
  // Step order and arena offsets by liveness: the plan travels with the
  // Program, so every executor and artifact allocates the planned peak.
  try {
    planProgramMemory(*program);
  } catch (const CompileError &e) {
    return func.emitError() << e.what();
  }
  // Single-trip loops (rows that fit one block) disappear, repeated index
  // arithmetic is shared: the tile IR users read is the simplified one.
  PassManager pm(kernels.getContext());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  if (failed(pm.run(kernels)))
    return failure();
  return program;
}
