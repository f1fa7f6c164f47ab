//===- FusionToTile.cpp - graph.fusion -> tile kernel ---------------------===//
//
// Each graph.fusion becomes one tile program. Programs split the kernel's
// domain: the kept (not reduced) dimensions are divided among programs, the
// reduced ones are looped over inside a program. Values of the region are
// generated on demand at an index ("emit value v at coordinates c"): views
// (broadcast, transpose, slice, reshape, concat) only rewrite coordinates,
// so they cost no memory traffic, and a coordinate that stays affine in the
// lane number turns into a contiguous or strided block load. Anything else
// falls back to per-lane offsets and a gather, which is slower but exact.
//
//===----------------------------------------------------------------------===//
#include "codegen/tile/FusionToTile.h"

#include "ir/graph/GraphDialect.h"
#include "ir/tile/TileDialect.h"
#include "passes/FuseOps.h"
#include "passes/TargetInfo.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <array>
#include <limits>
#include <map>
#include <optional>
#include <numeric>
#include <tuple>

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;

namespace {

constexpr int64_t kAligned = int64_t(1) << 40;

SmallVector<int64_t> shapeOf(Value v) {
  return SmallVector<int64_t>(llvm::cast<RankedTensorType>(v.getType()).getShape());
}
Type dtypeOf(Value v) {
  return llvm::cast<RankedTensorType>(v.getType()).getElementType();
}
int64_t numel(ArrayRef<int64_t> s) {
  return std::accumulate(s.begin(), s.end(), int64_t(1), std::multiplies<>());
}
SmallVector<int64_t> rowMajorStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> st(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    st[d] = st[d + 1] * shape[d + 1];
  return st;
}
SmallVector<int64_t> squeezed(ArrayRef<int64_t> s) {
  SmallVector<int64_t> out;
  for (int64_t d : s)
    if (d != 1)
      out.push_back(d);
  return out;
}
int64_t gcd(int64_t a, int64_t b) { return std::gcd(a, b); }

/// How a program walks reduced dimensions `dims` of `shape`: lanes along
/// the innermost one (unless the lanes already run elsewhere), a scalar
/// loop over the others.
struct ReducedLoops {
  SmallVector<int64_t> outerDims, outerSizes;
  int64_t laneDim = -1;
};
ReducedLoops reducedLoops(ArrayRef<int64_t> dims, ArrayRef<int64_t> shape,
                          bool lanesElsewhere) {
  ReducedLoops l;
  l.outerDims.assign(dims.begin(), dims.end());
  if (!lanesElsewhere && !dims.empty()) {
    l.laneDim = dims.back();
    l.outerDims.pop_back();
  }
  for (int64_t d : l.outerDims)
    l.outerSizes.push_back(shape[d]);
  return l;
}

/// Storage type of a dtype in memory (booleans are bytes).
Type storageType(Type dtype) {
  if (dtype.isInteger(1))
    return IntegerType::get(dtype.getContext(), 8);
  return dtype;
}
/// Type the kernel computes a dtype in: f16 and bf16 widen to f32.
Type computeType(Type dtype) {
  if (dtype.isF16() || dtype.isBF16())
    return Float32Type::get(dtype.getContext());
  return dtype;
}

/// Index of one dimension for the lanes of the current block: lane `l` is
/// at `scalar + l * coef`, unless `vec` holds one index per lane.
struct Coord {
  Value scalar;
  int64_t coef = 0;
  Value vec;
  /// A number known to divide `scalar` (for reshapes that keep lanes in one row).
  int64_t align = 1;
  bool isScalar() const { return !vec && coef == 0; }
  bool isAffine() const { return !vec; }
};
using Coords = SmallVector<Coord>;

/// The ops a kernel reduces with (each gets a loop over reduced dimensions).
bool isReductionOp(Operation *op) {
  return llvm::isa<ReduceSumOp, ReduceMaxOp, ReduceMinOp, ArgmaxOp>(op);
}

/// A sum along `dim` of select(iota_dim == index, v, 0), possibly negated
/// (see KernelEmitter::oneHotPick).
struct OneHotPick {
  int64_t dim = 0;
  Value index;
  SelectOp select;
  bool negated = false;
};
std::optional<OneHotPick> matchOneHotPick(Operation *op);

class KernelEmitter {
public:
  KernelEmitter(FusionOp fusion, func::FuncOp kernel, int64_t block,
                const TargetInfo &target)
      : fusion(fusion), kernel(kernel), b(kernel.getContext()),
        loc(fusion.getLoc()), block(block), target(target) {}

  LogicalResult emit();
  /// Pointwise kernels only: lanes run across rows, over blocks of the
  /// whole domain (see lowerFusionToTile).
  bool flatLanes = false;
  /// Row reductions of short rows: lanes along the innermost kept
  /// dimension, one row each (see lowerFusionToTile).
  bool keptLanes = false;

private:
  // --- constants and scalar index arithmetic ------------------------------
  Value cst(int64_t v) {
    auto it = intConstants.find(v);
    if (it != intConstants.end())
      return it->second;
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&kernel.getBody().front());
    Value c = b.create<arith::ConstantIntOp>(loc, v, 64);
    intConstants[v] = c;
    return c;
  }
  std::optional<int64_t> constOf(Value v) {
    APInt value;
    if (matchPattern(v, m_ConstantInt(&value)))
      return value.getSExtValue();
    return std::nullopt;
  }
  Value addS(Value a, Value c) {
    auto x = constOf(a), y = constOf(c);
    if (x && y) return cst(*x + *y);
    if (x && *x == 0) return c;
    if (y && *y == 0) return a;
    return b.create<arith::AddIOp>(loc, a, c);
  }
  Value mulS(Value a, int64_t k) {
    auto x = constOf(a);
    if (x) return cst(*x * k);
    if (k == 1) return a;
    if (k == 0) return cst(0);
    return b.create<arith::MulIOp>(loc, a, cst(k));
  }
  Value divS(Value a, int64_t k) {
    if (auto x = constOf(a)) return cst(*x / k);
    if (k == 1) return a;
    return b.create<arith::DivUIOp>(loc, a, cst(k));
  }
  Value remS(Value a, int64_t k) {
    if (auto x = constOf(a)) return cst(*x % k);
    if (k == 1) return cst(0);
    return b.create<arith::RemUIOp>(loc, a, cst(k));
  }
  int64_t alignOf(Value v, int64_t fallback) {
    if (auto x = constOf(v))
      return *x == 0 ? kAligned : std::abs(*x);
    return fallback;
  }

  // --- blocks ---------------------------------------------------------------
  VectorType vecType(Type element) { return VectorType::get({block}, element); }
  Value splat(Value scalar) {
    return b.create<vector::SplatOp>(loc, vecType(scalar.getType()), scalar);
  }
  Value toBlock(Value v) {
    return llvm::isa<VectorType>(v.getType()) ? v : splat(v);
  }
  Value lanes() {
    if (!laneIds) {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&kernel.getBody().front());
      laneIds = b.create<tile::LanesOp>(loc, vecType(b.getI64Type()));
    }
    return laneIds;
  }
  /// Lanes below the number of valid lanes of the current block.
  Value activeMask() {
    assert(activeLimit && "lanes used outside a block loop");
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, lanes(),
                                   splat(activeLimit));
  }
  /// The active limit of a block starting at `start` (a multiple of the
  /// block) in a range of `n`: the block itself when every block is full,
  /// so loads and stores need no mask.
  Value lanesLeft(int64_t n, Value start) {
    if (n % block == 0)
      return cst(block);
    return b.create<arith::SubIOp>(loc, cst(n), start);
  }
  Value coordVector(const Coord &c) {
    if (c.vec)
      return c.vec;
    Value v = splat(c.scalar);
    if (c.coef != 0) {
      Value l = lanes();
      if (c.coef != 1)
        l = b.create<arith::MulIOp>(loc, l, splat(cst(c.coef)));
      v = b.create<arith::AddIOp>(loc, v, l);
    }
    return v;
  }
  Coord constCoord(int64_t v) { return {cst(v), 0, {}, v == 0 ? kAligned : v}; }
  Coord add(const Coord &x, const Coord &y) {
    if (x.vec || y.vec)
      return {Value(), 0,
              b.create<arith::AddIOp>(loc, coordVector(x), coordVector(y)), 1};
    return {addS(x.scalar, y.scalar), x.coef + y.coef, {}, gcd(x.align, y.align)};
  }
  Coord scale(const Coord &x, int64_t k) {
    if (x.vec)
      return {Value(), 0, b.create<arith::MulIOp>(loc, x.vec, splat(cst(k))), 1};
    int64_t al = x.align >= kAligned ? kAligned : x.align * k;
    return {mulS(x.scalar, k), x.coef * k, {}, k == 0 ? kAligned : al};
  }
  /// Row-major linear index of `c` in `shape`.
  Coord linearize(const Coords &c, ArrayRef<int64_t> shape) {
    // Coordinates delinearize computed lane by lane, linearized back in the
    // same shape: the original (affine) index, so a contiguous access stays
    // one block load or store instead of a gather.
    for (const Delinearized &d : delinearized)
      if (ArrayRef<int64_t>(d.shape) == shape && c.size() == d.vecs.size() &&
          llvm::all_of(llvm::seq<size_t>(0, c.size()),
                       [&](size_t i) { return c[i].vec && c[i].vec == d.vecs[i]; }))
        return d.lin;
    auto st = rowMajorStrides(shape);
    Coord lin = constCoord(0);
    for (size_t d = 0; d < c.size(); ++d)
      lin = add(lin, scale(c[d], st[d]));
    return lin;
  }
  /// Coordinates of linear index `lin` in `shape`. Lanes stay affine when
  /// every lane of the block lies in one innermost row of `shape`.
  Coords delinearize(const Coord &lin, ArrayRef<int64_t> shape) {
    Coords out(shape.size());
    if (shape.empty())
      return out;
    int64_t inner = shape.back();
    bool sameRow = lin.isScalar() ||
                   (lin.isAffine() && lin.coef == 1 && inner % block == 0 &&
                    lin.align % block == 0);
    if (sameRow) {
      Value rest = lin.scalar;
      for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
        out[d] = {remS(rest, shape[d]), 0, {}, 1};
        if (out[d].scalar == cst(0)) out[d].align = kAligned;
        rest = divS(rest, shape[d]);
      }
      out.back().coef = lin.coef;
      out.back().align = lin.coef ? gcd(lin.align, inner) : out.back().align;
      return out;
    }
    Value rest = coordVector(lin);
    for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
      Value n = splat(cst(shape[d]));
      out[d] = {Value(), 0, b.create<arith::RemUIOp>(loc, rest, n), 1};
      rest = b.create<arith::DivUIOp>(loc, rest, n);
    }
    if (lin.isAffine()) {
      Delinearized record{SmallVector<int64_t>(shape), {}, lin};
      for (const Coord &x : out)
        record.vecs.push_back(x.vec);
      delinearized.push_back(std::move(record));
    }
    return out;
  }

  /// Row-major delinearisation of the scalar `linear` over `sizes`, stored
  /// into the coordinates `dims` of `into`.
  void scatterIndex(Value linear, ArrayRef<int64_t> dims, ArrayRef<int64_t> sizes,
                    Coords &into) {
    for (int64_t k = int64_t(dims.size()) - 1; k >= 0; --k) {
      into[dims[k]] = {remS(linear, sizes[k]), 0, {}, 1};
      linear = divS(linear, sizes[k]);
    }
  }

  /// Affine indices delinearize turned into per-lane coordinates.
  struct Delinearized {
    SmallVector<int64_t> shape;
    SmallVector<Value> vecs;
    Coord lin;
  };
  SmallVector<Delinearized> delinearized;

  // --- memo of emitted values, scoped by loop nest ------------------------
  using Key = std::pair<void *, std::string>;
  Key keyOf(Value v, const Coords &c) {
    std::string k;
    for (const Coord &x : c) {
      k += std::to_string(reinterpret_cast<uintptr_t>(x.scalar.getAsOpaquePointer()));
      k += ':' + std::to_string(x.coef) + ':';
      k += std::to_string(reinterpret_cast<uintptr_t>(x.vec.getAsOpaquePointer()));
      k += ';';
    }
    return {v.getAsOpaquePointer(), k};
  }
  struct Scope {
    KernelEmitter &e;
    Value savedLimit, savedRowStart;
    explicit Scope(KernelEmitter &e)
        : e(e), savedLimit(e.activeLimit), savedRowStart(e.rowStart) {
      e.memo.emplace_back();
    }
    ~Scope() {
      e.memo.pop_back();
      e.activeLimit = savedLimit;
      e.rowStart = savedRowStart;
    }
  };

  // --- row scratch ------------------------------------------------------------
  /// A row kernel (one program per row, lanes along its one reduced
  /// dimension) walks the row once per reduction and once more for the
  /// results. A value that a reduction's pass computes and a later pass
  /// reads again (softmax's exp(x - max): summed, then divided) is kept in
  /// a scratch row by the first pass and loaded by the later ones, where
  /// recomputing it would cost more than a load from L1/L2.
  struct RowScratch {
    Value buffer;
    /// The value's coordinates in the pass that stored it (the row's
    /// dimension aside): a later pass loads it at the same ones.
    Coords stored;
    bool filled = false;
  };
  /// Stores block `x` of `v` at row coordinates `c` when `v` has a scratch
  /// row not yet filled; returns whether it did.
  bool storeRowScratch(Value v, const Coords &c, Value x);
  /// `v` at `c` loaded from its filled scratch row, when `c` is the current
  /// block of the row the scratch holds.
  std::optional<Value> loadRowScratch(Value v, const Coords &c);
  /// A row kernel's row: its one reduced dimension, innermost; -1 in
  /// other kernels.
  int64_t rowDim = -1;
  Value rowStart;          ///< first element of the current block of the row
  llvm::MapVector<Value, RowScratch> rowScratch;

  // --- values ---------------------------------------------------------------
  FailureOr<Value> value(Value v, const Coords &c);
  std::optional<Value> memoized(const Key &key);
  /// Computes, bottom-up, the operands of `root` reached through ops that
  /// read their operands at the same coordinates `c`.
  LogicalResult computeOperandChains(Operation *root, const Coords &c);
  /// The operand a view reads and the coordinates it reads it at.
  std::optional<std::pair<Value, Coords>> viewSource(Operation *op, const Coords &c);
  FailureOr<Value> compute(Value v, const Coords &c);
  FailureOr<Value> load(BlockArgument arg, const Coords &c);
  FailureOr<Value> elementwise(Operation *op, const Coords &c);
  FailureOr<Value> reduction(Operation *op, const Coords &c);
  std::optional<FailureOr<Value>> oneHotPick(Operation *op, Coords operandCoords);
  /// Full-size results the walk of reduction `earlyStoresIn` stores at the
  /// elements it computes (emit(): they read no reduction); `earlyStored`
  /// says that walk was emitted.
  Operation *earlyStoresIn = nullptr;
  SmallVector<unsigned> earlyOutputs;
  bool earlyStored = false;
  /// Stores results `outputs` (full size) at domain coordinates `c`, all
  /// computed before any is stored.
  LogicalResult storeDomainOutputs(ArrayRef<unsigned> outputs, const Coords &c);
  /// Whether `v` (a value of the fusion's body) reads a reduction's result.
  bool readsReduction(Value v);
  FailureOr<Value> argmax(ArgmaxOp op, const Coords &c);
  /// Block `j` of `operand` along dimension `dim` (of `n` elements) at
  /// `coords`, as a block; the active limit becomes the lanes in the row.
  FailureOr<Value> rowBlock(Value operand, Coords coords, int64_t dim, int64_t n, Value j) {
    Value start = mulS(j, block);
    coords[dim] = {start, 1, {}, block};
    activeLimit = lanesLeft(n, start);
    rowStart = start;
    FailureOr<Value> v = value(operand, coords);
    if (failed(v))
      return failure();
    return toBlock(*v);
  }
  FailureOr<Value> argmaxAcrossLanes(ArgmaxOp op, const Coords &operandCoords);
  FailureOr<Value> random(RandomUniformOp op, const Coords &c);
  FailureOr<Value> concat(ConcatOp op, const Coords &c);
  /// concat() where every block of lanes lies in one input; nullopt
  /// where that is not known.
  std::optional<Value> concatOfWholeBlocks(ConcatOp op, const Coords &c);
  Value castTo(Value v, Type fromDtype, Type toDtype);
  Value neutral(Operation *op, Type t);
  Value combine(Operation *op, Value acc, Value v);
  /// Whether reduction `op` over values of type `t` accumulates wider (an
  /// f32 sum in f64); the accumulator's initial value (`neutralValue`,
  /// widened), one step, and its value in the reduction's compute type.
  bool widensSum(Operation *op, Type t) const;
  Value accumulatorInit(Operation *op, Value neutralValue);
  Value accumulate(Operation *op, Value acc, Value x);
  Value accumulated(Operation *op, Value acc);

  // --- stores -----------------------------------------------------------------
  /// Stores result `output` at `c`: `computed` when given, else computed here.
  LogicalResult store(unsigned output, const Coords &c, Value computed = {});
  /// Element offset of lane 0 (or per-lane offsets in `vecOffsets`); `align`
  /// receives a number of elements known to divide it.
  Value offsetOf(const Coords &c, ArrayRef<int64_t> shape, int64_t &stride,
                 Value &vecOffsets, int64_t *align = nullptr);
  /// Coordinates of a value of `shape` from coordinates `from` of a shape
  /// with the same non-unit dimensions.
  Coords matchUnitDims(const Coords &from, ArrayRef<int64_t> fromShape,
                       ArrayRef<int64_t> shape);

  /// Loop `n` times (scalar induction variable), running `body` in a scope.
  template <typename Fn>
  LogicalResult forLoop(int64_t n, ValueRange init, Fn body,
                        SmallVectorImpl<Value> *results = nullptr) {
    return forLoopRange(cst(0), cst(n), init, body, results);
  }
  /// Loop over [lo, hi).
  template <typename Fn>
  LogicalResult forLoopRange(Value lo, Value hi, ValueRange init, Fn body,
                             SmallVectorImpl<Value> *results = nullptr);

public:
  /// Split full reductions (see lowerSplitReduction): the programs of the
  /// partial kernel each reduce one of `chunks` slices into the buffers
  /// after the outputs; the combine kernel folds the slices.
  LogicalResult emitPartial(int64_t chunks, ArrayRef<Operation *> reductions);
  LogicalResult emitCombine(int64_t chunks, ArrayRef<Operation *> reductions);
  /// Split column reductions (see lowerSplitColumnReduction): the programs
  /// of the partial kernel each fold one of `chunks` slices of the reduced
  /// rows for one block of kept elements into slot[slice, kept]; the
  /// combine kernel folds the slices and computes the results.
  LogicalResult emitColumnPartial(int64_t chunks, ArrayRef<Operation *> reductions);
  /// `yields`: the results the combine kernel stores (null: all of them).
  LogicalResult emitColumnCombine(int64_t chunks, ArrayRef<Operation *> reductions,
                                  const SmallVector<unsigned> *yields = nullptr);
  /// A row kernel with column sums (see lowerRowsWithColumnSums): each of
  /// `chunks` programs runs the row kernel over one slice of the rows,
  /// storing results `rowYields`, and folds each of `sums` into an
  /// accumulator row while it walks, stored to slot[slice, column].
  LogicalResult emitRowsWithColumnPartials(int64_t chunks, ArrayRef<Operation *> sums,
                                           const SmallVector<unsigned> &rowYields);

private:
  /// How the kept dimensions of the domain are divided among programs:
  /// lanes along the innermost one when it is kept, one program per
  /// element of the others.
  struct KeptSpace {
    SmallVector<int64_t> domain, kept, keptShape, progDims, progSizes;
    bool lanesKept = false;
    bool flat = false; ///< lanes across rows: programs are blocks of the domain
    int64_t laneDim = -1; ///< the kept dimension lanes run along
    int64_t blocksPerRow = 1, programs = 1, elements = 1;
  };
  KeptSpace keptSpace() { return keptSpace(fusion.getReduced()); }
  /// The kept space of the fusion's domain with `reduced` folded.
  KeptSpace keptSpace(ArrayRef<int64_t> reduced);
  /// Programs of a kernel at domain coordinates `programs` (reduced ones
  /// unset; one, or a group of rows of a row kernel with column sums):
  /// their per-program results among `yields`, then one walk over the
  /// reduced dimensions storing the full-size ones and folding the column
  /// sums (columnSums) of the programs that `valid` (one flag per program,
  /// or none: all) says are real at every block.
  LogicalResult emitProgram(const KeptSpace &ks, ArrayRef<Coords> programs, ArrayRef<Value> valid,
                            ArrayRef<unsigned> yields);
  /// Column sums of a row kernel folded by its walk: each has an
  /// accumulator row in scratch (emitRowsWithColumnPartials).
  SmallVector<Operation *> columnSums;
  SmallVector<Value> columnAccumulators;
  int64_t columnScratchBytes = 0;
  LogicalResult emitColumnPartialByRows(int64_t chunks, ArrayRef<Operation *> reductions,
                                        const KeptSpace &ks);
  /// `init` plus the block at `offset` of each of `n` slices of `slots`
  /// (slice c at offset + c * elements), accumulated as `op` does.
  FailureOr<Value> foldSlices(Operation *op, Value slots, Value offset, int64_t n,
                              int64_t elements, Value init);
  /// Program 0 of a column combine folds total `op`'s column partials
  /// (`slots`) over slices and columns and stores the yields of its result,
  /// marking them in `storedByTotal`.
  LogicalResult combineTotal(int64_t chunks, Operation *op, Value slots, const KeptSpace &ks,
                             Value pid, SmallVectorImpl<bool> &storedByTotal);
  /// Plans the scratch rows of this kernel (none where the target has no
  /// scratch or the kernel is not a row kernel).
  void planRowScratch(const KeptSpace &ks);
  /// Domain coordinates of kept program `pid` (reduced ones unset); sets
  /// the active limit when lanes run along a kept dimension.
  Coords keptDomainCoords(const KeptSpace &k, Value pid);
  /// The kept part of domain coordinates `dc`, for a value of `shape`.
  Coords keptCoords(const KeptSpace &k, const Coords &dc, ArrayRef<int64_t> shape) {
    Coords kc;
    for (int64_t d : k.kept)
      kc.push_back(dc[d]);
    return matchUnitDims(kc, k.keptShape, shape);
  }
  /// Rows [first, end) of slice `slice` of `n` slices of `rows` rows, and
  /// the number of groups of `perGroup` rows that cover them.
  std::tuple<Value, Value, Value> sliceRows(Value slice, int64_t rows, int64_t n,
                                            int64_t perGroup) {
    Value first = divS(mulS(slice, rows), n);
    Value end = divS(mulS(addS(slice, cst(1)), rows), n);
    Value groups =
        divS(addS(b.create<arith::SubIOp>(loc, end, first), cst(perGroup - 1)), perGroup);
    return {first, end, groups};
  }
  /// Maps the fusion's inputs to the kernel's first arguments and, unless
  /// `partial` (a partial kernel writes slots, not the fusion's results),
  /// its results to the arguments after `extraBeforeOutputs` slot pointers.
  /// With `only`, just those results, in that order.
  void bindArguments(unsigned extraBeforeOutputs, bool partial = false,
                     const SmallVector<unsigned> *only = nullptr);
  Coords unitCoords(Value v) { return Coords(shapeOf(v).size(), constCoord(0)); }
  Value chunkId;      ///< partial kernel: the slice this program reduces
  int64_t chunks = 0; ///< partial kernel: number of slices

  FusionOp fusion;
  func::FuncOp kernel;
  OpBuilder b;
  Location loc;
  int64_t block;
  const TargetInfo &target;
  std::map<int64_t, Value> intConstants;
  Value laneIds;
  Value activeLimit;
  std::vector<std::map<Key, Value>> memo;
  DenseMap<Value, Value> argPointers; // block argument -> kernel argument
  SmallVector<Value> outputPointers;
};

template <typename Fn>
LogicalResult KernelEmitter::forLoopRange(Value lo, Value hi, ValueRange init, Fn body,
                                          SmallVectorImpl<Value> *results) {
  auto loop = b.create<scf::ForOp>(loc, lo, hi, cst(1), init);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(loop.getBody());
  SmallVector<Value> yielded;
  {
    Scope scope(*this);
    if (failed(body(loop.getInductionVar(), loop.getRegionIterArgs(), yielded)))
      return failure();
  }
  // A loop without iteration values comes with its terminator already.
  if (!loop.getBody()->mightHaveTerminator())
    b.create<scf::YieldOp>(loc, yielded);
  if (results)
    results->assign(loop.getResults().begin(), loop.getResults().end());
  return success();
}

std::optional<Value> KernelEmitter::memoized(const Key &key) {
  for (auto it = memo.rbegin(); it != memo.rend(); ++it) {
    auto found = it->find(key);
    if (found != it->end())
      return found->second;
  }
  return std::nullopt;
}

/// Ops that read every operand at the coordinates they write: lowered by
/// `elementwise` or as a cast.
static bool readsOperandsInPlace(Operation *op) {
  return !llvm::isa<BroadcastInDimOp, TransposeOp, SliceOp, ReshapeOp, ConcatOp,
                    ReduceSumOp, ReduceMaxOp, ReduceMinOp, ArgmaxOp,
                    RandomUniformOp, FullOp, ConstantOp, IotaOp>(op);
}

// A kernel may chain thousands of ops. Native recursion is bounded by the
// number of index remaps and loops on a path, not by its length: view
// chains are followed in a loop, and same-index operand chains are computed
// bottom-up from an explicit stack before the op that reads them.
FailureOr<Value> KernelEmitter::value(Value v, const Coords &c) {
  Coords coords = c;
  SmallVector<Key> aliases;
  FailureOr<Value> r = failure();
  while (true) {
    Key key = keyOf(v, coords);
    if (std::optional<Value> known = memoized(key)) {
      r = *known;
      break;
    }
    aliases.push_back(std::move(key));
    if (std::optional<Value> kept = loadRowScratch(v, coords)) {
      r = *kept;
      break;
    }
    Operation *op = v.getDefiningOp();
    if (op) {
      if (std::optional<std::pair<Value, Coords>> source = viewSource(op, coords)) {
        v = source->first;
        coords = std::move(source->second);
        continue;
      }
      if (readsOperandsInPlace(op) && failed(computeOperandChains(op, coords)))
        return failure();
    }
    r = compute(v, coords);
    break;
  }
  if (succeeded(r))
    for (Key &key : aliases)
      memo.back()[key] = *r;
  return r;
}

LogicalResult KernelEmitter::computeOperandChains(Operation *root, const Coords &c) {
  struct Frame {
    Operation *op;
    unsigned next;
  };
  SmallVector<Frame> stack = {{root, 0}};
  while (!stack.empty()) {
    Frame &top = stack.back();
    if (top.next == top.op->getNumOperands()) {
      Operation *done = top.op;
      stack.pop_back();
      if (done == root)
        break;
      if (failed(value(done->getResult(0), c)))
        return failure();
      continue;
    }
    Value operand = top.op->getOperand(top.next++);
    Operation *def = operand.getDefiningOp();
    if (!def || !readsOperandsInPlace(def) || memoized(keyOf(operand, c))) {
      // Leaves and remapped operands, in operand order as the op would read them.
      if (failed(value(operand, c)))
        return failure();
      continue;
    }
    // Not memoised, so not computed yet (nor on the stack: the graph has
    // no cycles).
    stack.push_back({def, 0});
  }
  return success();
}

std::optional<std::pair<Value, Coords>>
KernelEmitter::viewSource(Operation *op, const Coords &c) {
  auto resultShape = shapeOf(op->getResult(0));
  if (auto bc = llvm::dyn_cast<BroadcastInDimOp>(op)) {
    auto in = shapeOf(bc.getOperand());
    Coords oc;
    for (auto [i, d] : llvm::enumerate(bc.getDims()))
      oc.push_back(in[i] == 1 && resultShape[d] != 1 ? constCoord(0) : c[d]);
    return std::make_pair(bc.getOperand(), std::move(oc));
  }
  if (auto tr = llvm::dyn_cast<TransposeOp>(op)) {
    Coords oc(c.size());
    for (auto [i, p] : llvm::enumerate(tr.getPerm()))
      oc[p] = c[i];
    return std::make_pair(tr.getOperand(), std::move(oc));
  }
  if (auto sl = llvm::dyn_cast<SliceOp>(op)) {
    Coords oc;
    for (size_t d = 0; d < c.size(); ++d)
      oc.push_back(add(constCoord(sl.getStart()[d]), scale(c[d], sl.getStride()[d])));
    return std::make_pair(sl.getOperand(), std::move(oc));
  }
  if (auto rs = llvm::dyn_cast<ReshapeOp>(op)) {
    auto in = shapeOf(rs.getOperand());
    if (squeezed(in) == squeezed(resultShape))
      return std::make_pair(rs.getOperand(), matchUnitDims(c, resultShape, in));
    return std::make_pair(rs.getOperand(), delinearize(linearize(c, resultShape), in));
  }
  return std::nullopt;
}

FailureOr<Value> KernelEmitter::compute(Value v, const Coords &c) {
  if (auto arg = llvm::dyn_cast<BlockArgument>(v))
    return load(arg, c);
  Operation *op = v.getDefiningOp();
  if (std::optional<std::pair<Value, Coords>> source = viewSource(op, c))
    return value(source->first, source->second);
  if (auto cat = llvm::dyn_cast<ConcatOp>(op))
    return concat(cat, c);
  if (llvm::isa<ReduceSumOp, ReduceMaxOp, ReduceMinOp>(op))
    return reduction(op, c);
  if (auto am = llvm::dyn_cast<ArgmaxOp>(op))
    return argmax(am, c);
  if (auto rnd = llvm::dyn_cast<RandomUniformOp>(op))
    return random(rnd, c);
  if (auto full = llvm::dyn_cast<FullOp>(op)) {
    Type t = computeType(dtypeOf(v));
    if (llvm::isa<FloatType>(t))
      return castTo(b.create<arith::ConstantOp>(
                        loc, b.getFloatAttr(dtypeOf(v), full.getValue().convertToDouble())),
                    dtypeOf(v), dtypeOf(v));
    return b.create<arith::ConstantOp>(
                loc, b.getIntegerAttr(t, static_cast<int64_t>(
                                             full.getValue().convertToDouble())))
        .getResult();
  }
  if (auto k = llvm::dyn_cast<ConstantOp>(op)) {
    auto dense = llvm::dyn_cast<SplatElementsAttr>(k.getValue());
    if (!dense)
      return fusion.emitOpError()
             << "holds a non-splat graph.constant; hoistDenseConstants must run first";
    Type dt = dtypeOf(v);
    TypedAttr attr = llvm::isa<FloatType>(dt)
                         ? TypedAttr(dense.getSplatValue<FloatAttr>())
                         : TypedAttr(dense.getSplatValue<IntegerAttr>());
    return castTo(b.create<arith::ConstantOp>(loc, attr), dt, dt);
  }
  if (auto io = llvm::dyn_cast<IotaOp>(op)) {
    const Coord &x = c[io.getDim()];
    Value idx = x.isScalar() ? x.scalar : coordVector(x);
    return castTo(idx, b.getI64Type(), dtypeOf(v));
  }
  if (auto ca = llvm::dyn_cast<CastOp>(op)) {
    FailureOr<Value> x = value(ca.getOperand(), c);
    if (failed(x))
      return failure();
    return castTo(*x, dtypeOf(ca.getOperand()), dtypeOf(v));
  }
  return elementwise(op, c);
}

/// Whether `v` is (a view of) sum(exp(a - max(a))) over the dims of the max:
/// the max's element contributes exp(0) = 1, every other term is at most 1.
static bool isSumOfShiftedExp(Value v) {
  auto throughViews = [](Value x) {
    while (Operation *def = x.getDefiningOp()) {
      if (!llvm::isa<BroadcastInDimOp, ReshapeOp, StopGradientOp>(def))
        break;
      x = def->getOperand(0);
    }
    return x;
  };
  auto sum = throughViews(v).getDefiningOp<ReduceSumOp>();
  if (!sum)
    return false;
  auto exp = sum.getOperand().getDefiningOp<ExpOp>();
  auto shifted = exp ? exp.getOperand().getDefiningOp<SubOp>() : SubOp();
  auto max = shifted ? throughViews(shifted.getRhs()).getDefiningOp<ReduceMaxOp>() : ReduceMaxOp();
  return max && max.getOperand() == shifted.getLhs() && max.getDims() == sum.getDims();
}

/// Compute-type value `v` of dtype `from` converted to dtype `to`, with the
/// rounding an explicit cast implies (to f16/bf16: round, then widen again).
Value KernelEmitter::castTo(Value v, Type from, Type to) {
  Type cfrom = computeType(from), cto = computeType(to);
  auto vt = llvm::dyn_cast<VectorType>(v.getType());
  auto like = [&](Type t) -> Type { return vt ? Type(vecType(t)) : t; };
  // Literal constants arrive in their dtype; bring them to compute type.
  if (v.getType() != like(cfrom) && v.getType() == like(from))
    v = b.create<arith::ExtFOp>(loc, like(cfrom), v);
  Value r = v;
  if (llvm::isa<FloatType>(cfrom) && llvm::isa<FloatType>(cto)) {
    auto fw = llvm::cast<FloatType>(cfrom).getWidth(), tw = llvm::cast<FloatType>(to).getWidth();
    if (to.isF16() || to.isBF16()) {
      Value narrow = b.create<arith::TruncFOp>(loc, like(to), v);
      return b.create<arith::ExtFOp>(loc, like(cto), narrow);
    }
    if (fw > tw) r = b.create<arith::TruncFOp>(loc, like(cto), v);
    else if (fw < tw) r = b.create<arith::ExtFOp>(loc, like(cto), v);
    return r;
  }
  if (llvm::isa<FloatType>(cfrom)) { // float -> integer
    if (to.isInteger(1)) {
      Value zero = b.create<arith::ConstantOp>(loc, b.getFloatAttr(cfrom, 0.0));
      if (vt) zero = splat(zero);
      return b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNE, v, zero);
    }
    return b.create<arith::FPToSIOp>(loc, like(cto), v);
  }
  if (llvm::isa<FloatType>(cto)) { // integer -> float
    Value f;
    if (from.isInteger(1))
      f = b.create<arith::UIToFPOp>(loc, like(to), v);
    else
      f = b.create<arith::SIToFPOp>(loc, like(to), v);
    return to == cto ? f : b.create<arith::ExtFOp>(loc, like(cto), f).getResult();
  }
  // integer -> integer
  unsigned fw = cfrom.getIntOrFloatBitWidth(), tw = cto.getIntOrFloatBitWidth();
  if (to.isInteger(1)) {
    Value zero = b.create<arith::ConstantOp>(loc, b.getIntegerAttr(cfrom, 0));
    if (vt) zero = splat(zero);
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, v, zero);
  }
  if (fw > tw) return b.create<arith::TruncIOp>(loc, like(cto), v);
  if (fw < tw) {
    if (from.isInteger(1)) return b.create<arith::ExtUIOp>(loc, like(cto), v);
    return b.create<arith::ExtSIOp>(loc, like(cto), v);
  }
  return v;
}

Value KernelEmitter::offsetOf(const Coords &c, ArrayRef<int64_t> shape,
                              int64_t &stride, Value &vecOffsets,
                              int64_t *align) {
  Coord lin = linearize(c, shape);
  if (lin.vec) {
    vecOffsets = lin.vec;
    stride = 0;
    return Value();
  }
  stride = lin.coef;
  if (align)
    *align = lin.align;
  return lin.scalar;
}

FailureOr<Value> KernelEmitter::load(BlockArgument arg, const Coords &c) {
  Value ptr = argPointers.lookup(arg);
  Type dt = dtypeOf(arg), st = storageType(dt);
  int64_t stride = 0;
  Value vecOffsets;
  Value offset = offsetOf(c, shapeOf(arg), stride, vecOffsets);
  Value raw;
  if (!vecOffsets && stride == 0) {
    raw = b.create<tile::LoadScalarOp>(loc, st, ptr, offset);
  } else if (!vecOffsets) {
    raw = b.create<tile::LoadOp>(loc, vecType(st), ptr, offset, activeLimit,
                                 b.getI64IntegerAttr(stride));
  } else {
    raw = b.create<tile::GatherOp>(loc, vecType(st), ptr, vecOffsets, activeMask());
  }
  bool isVec = llvm::isa<VectorType>(raw.getType());
  auto like = [&](Type t) -> Type { return isVec ? Type(vecType(t)) : t; };
  if (dt.isInteger(1)) {
    Value zero = b.create<arith::ConstantOp>(loc, b.getIntegerAttr(st, 0));
    if (isVec) zero = splat(zero);
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, raw, zero).getResult();
  }
  if (computeType(dt) != dt)
    return b.create<arith::ExtFOp>(loc, like(computeType(dt)), raw).getResult();
  return raw;
}

FailureOr<Value> KernelEmitter::elementwise(Operation *op, const Coords &c) {
  SmallVector<Value> xs;
  bool anyVector = false;
  for (Value operand : op->getOperands()) {
    FailureOr<Value> x = value(operand, c);
    if (failed(x))
      return failure();
    anyVector |= llvm::isa<VectorType>(x->getType());
    xs.push_back(*x);
  }
  Value scalarDivisor = xs.size() == 2 && !llvm::isa<VectorType>(xs[1].getType()) ? xs[1] : Value();
  if (anyVector)
    for (Value &x : xs)
      x = toBlock(x);
  Type dt = op->getNumOperands() ? dtypeOf(op->getOperand(0)) : Type();
  bool isFloat = dt && llvm::isa<FloatType>(dt);
  auto like = [&](Value x, double f) -> Value {
    Type et = getElementTypeOrSelf(x.getType());
    Value k = b.create<arith::ConstantOp>(loc, b.getFloatAttr(et, f));
    return llvm::isa<VectorType>(x.getType()) ? splat(k) : k;
  };
  auto likeInt = [&](Value x, int64_t i) -> Value {
    Type et = getElementTypeOrSelf(x.getType());
    Value k = b.create<arith::ConstantOp>(loc, b.getIntegerAttr(et, i));
    return llvm::isa<VectorType>(x.getType()) ? splat(k) : k;
  };
  // Booleans are i1, whose signed reading of true is -1: their order
  // (false < true) is the unsigned one. (maximum/minimum refuse i1.)
  bool isBool = !isFloat && !xs.empty() &&
                getElementTypeOrSelf(xs[0].getType()).isInteger(1);
  auto cmp = [&](arith::CmpFPredicate f, arith::CmpIPredicate i) -> Value {
    if (isFloat)
      return b.create<arith::CmpFOp>(loc, f, xs[0], xs[1]);
    if (isBool) {
      using I = arith::CmpIPredicate;
      i = i == I::slt ? I::ult : i == I::sle ? I::ule : i == I::sgt ? I::ugt
          : i == I::sge ? I::uge : i;
    }
    return b.create<arith::CmpIOp>(loc, i, xs[0], xs[1]);
  };
  using P = arith::CmpFPredicate;
  using I = arith::CmpIPredicate;
  /// An integer divisor that cannot trap (1 where it is 0 or -1), and those
  /// two conditions.
  auto safeDivisor = [&](Value d) -> std::tuple<Value, Value, Value> {
    Value isZero = b.create<arith::CmpIOp>(loc, I::eq, d, likeInt(d, 0));
    Value isM1 = b.create<arith::CmpIOp>(loc, I::eq, d, likeInt(d, -1));
    Value trap = b.create<arith::OrIOp>(loc, isZero, isM1);
    return {b.create<arith::SelectOp>(loc, trap, likeInt(d, 1), d), isZero, isM1};
  };
  if (isa<AddOp>(op)) return isFloat ? Value(b.create<arith::AddFOp>(loc, xs[0], xs[1])) : b.create<arith::AddIOp>(loc, xs[0], xs[1]);
  if (isa<SubOp>(op)) return isFloat ? Value(b.create<arith::SubFOp>(loc, xs[0], xs[1])) : b.create<arith::SubIOp>(loc, xs[0], xs[1]);
  if (isa<MulOp>(op)) return isFloat ? Value(b.create<arith::MulFOp>(loc, xs[0], xs[1])) : b.create<arith::MulIOp>(loc, xs[0], xs[1]);
  if (isa<DivOp>(op)) {
    if (isFloat) {
      // A block divided by a softmax's row sum: one division, then a
      // multiplication per lane, as PyTorch's CPU softmax does (a vector
      // division costs several multiplications). Only there: such a sum
      // lies in [1, n], so its reciprocal is a normal number and the
      // product differs from the quotient by at most one rounding; a
      // reciprocal of any divisor would overflow for tiny ones.
      if (anyVector && scalarDivisor && isSumOfShiftedExp(op->getOperand(1))) {
        Value reciprocal = b.create<arith::DivFOp>(loc, like(scalarDivisor, 1.0), scalarDivisor);
        return b.create<arith::MulFOp>(loc, xs[0], splat(reciprocal)).getResult();
      }
      return b.create<arith::DivFOp>(loc, xs[0], xs[1]).getResult();
    }
    // Integer division never traps in a kernel: x / 0 is 0 and
    // INT_MIN / -1 wraps (the interpreter reports division by zero).
    auto [safe, isZero, isM1] = safeDivisor(xs[1]);
    Value zero = likeInt(xs[1], 0);
    Value q = b.create<arith::DivSIOp>(loc, xs[0], safe);
    Value neg = b.create<arith::SubIOp>(loc, zero, xs[0]);
    q = b.create<arith::SelectOp>(loc, isM1, neg, q);
    return b.create<arith::SelectOp>(loc, isZero, zero, q).getResult();
  }
  if (isa<PowOp>(op)) return b.create<math::PowFOp>(loc, xs[0], xs[1]).getResult();
  if (isa<RemOp>(op)) {
    if (isFloat)
      return b.create<arith::RemFOp>(loc, xs[0], xs[1]).getResult();
    // As division: never traps; x % 0 is 0 and x % -1 is 0 (divided by 1).
    Value safe = std::get<0>(safeDivisor(xs[1]));
    return b.create<arith::RemSIOp>(loc, xs[0], safe).getResult();
  }
  if (isa<MaximumOp>(op)) return isFloat ? Value(b.create<arith::MaximumFOp>(loc, xs[0], xs[1])) : b.create<arith::MaxSIOp>(loc, xs[0], xs[1]);
  if (isa<MinimumOp>(op)) return isFloat ? Value(b.create<arith::MinimumFOp>(loc, xs[0], xs[1])) : b.create<arith::MinSIOp>(loc, xs[0], xs[1]);
  if (isa<EqOp>(op)) return cmp(P::OEQ, I::eq);
  if (isa<NeOp>(op)) return cmp(P::UNE, I::ne);
  if (isa<LtOp>(op)) return cmp(P::OLT, I::slt);
  if (isa<LeOp>(op)) return cmp(P::OLE, I::sle);
  if (isa<GtOp>(op)) return cmp(P::OGT, I::sgt);
  if (isa<GeOp>(op)) return cmp(P::OGE, I::sge);
  if (isa<SelectOp>(op)) return b.create<arith::SelectOp>(loc, xs[0], xs[1], xs[2]).getResult();
  if (isa<NegOp>(op)) return isFloat ? Value(b.create<arith::NegFOp>(loc, xs[0])) : b.create<arith::SubIOp>(loc, likeInt(xs[0], 0), xs[0]);
  if (isa<AbsOp>(op)) return isFloat ? Value(b.create<math::AbsFOp>(loc, xs[0])) : b.create<math::AbsIOp>(loc, xs[0]);
  if (isa<ExpOp>(op)) return b.create<math::ExpOp>(loc, xs[0]).getResult();
  if (isa<LogOp>(op)) return b.create<math::LogOp>(loc, xs[0]).getResult();
  if (isa<TanhOp>(op)) return b.create<math::TanhOp>(loc, xs[0]).getResult();
  if (isa<SqrtOp>(op)) return b.create<math::SqrtOp>(loc, xs[0]).getResult();
  if (isa<RsqrtOp>(op)) {
    // 1/sqrt rather than math.rsqrt: the latter may use a low-precision
    // hardware estimate.
    Value s = b.create<math::SqrtOp>(loc, xs[0]);
    return b.create<arith::DivFOp>(loc, like(s, 1.0), s).getResult();
  }
  if (isa<ErfOp>(op)) return b.create<math::ErfOp>(loc, xs[0]).getResult();
  if (isa<Log1pOp>(op)) return b.create<math::Log1pOp>(loc, xs[0]).getResult();
  if (isa<Expm1Op>(op)) return b.create<math::ExpM1Op>(loc, xs[0]).getResult();
  if (isa<FloorOp>(op)) return b.create<math::FloorOp>(loc, xs[0]).getResult();
  if (isa<SigmoidOp>(op)) {
    // r = e/(1+e) with e = exp(-|x|) never overflows and is sigmoid(-|x|);
    // sigmoid(x) = 1 - r for x >= 0 (rounds correctly next to 1, where
    // 1/(1+e) would lose e), r otherwise.
    Value e = b.create<math::ExpOp>(loc, b.create<arith::NegFOp>(loc, b.create<math::AbsFOp>(loc, xs[0])));
    Value r = b.create<arith::DivFOp>(loc, e, b.create<arith::AddFOp>(loc, like(e, 1.0), e));
    Value pos = b.create<arith::CmpFOp>(loc, P::OGE, xs[0], like(e, 0.0));
    return b.create<arith::SelectOp>(loc, pos, b.create<arith::SubFOp>(loc, like(e, 1.0), r), r).getResult();
  }
  return fusion.emitOpError() << "cannot compile '" << op->getName()
                              << "' inside a kernel; no tile lowering exists for it";
}

Value KernelEmitter::neutral(Operation *op, Type t) {
  bool isFloat = llvm::isa<FloatType>(t);
  if (isa<ReduceSumOp>(op))
    return isFloat ? Value(b.create<arith::ConstantOp>(loc, b.getFloatAttr(t, 0.0)))
                   : b.create<arith::ConstantOp>(loc, b.getIntegerAttr(t, 0));
  bool isMax = isa<ReduceMaxOp>(op);
  if (isFloat)
    return b.create<arith::ConstantOp>(
        loc, b.getFloatAttr(t, isMax ? -INFINITY : INFINITY));
  unsigned w = t.getIntOrFloatBitWidth();
  APInt v = isMax ? APInt::getSignedMinValue(w) : APInt::getSignedMaxValue(w);
  return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(t, v));
}

Value KernelEmitter::combine(Operation *op, Value acc, Value v) {
  bool isFloat = llvm::isa<FloatType>(getElementTypeOrSelf(acc.getType()));
  if (isa<ReduceSumOp>(op))
    return isFloat ? Value(b.create<arith::AddFOp>(loc, acc, v)) : b.create<arith::AddIOp>(loc, acc, v);
  if (isa<ReduceMaxOp>(op))
    return isFloat ? Value(b.create<arith::MaximumFOp>(loc, acc, v)) : b.create<arith::MaxSIOp>(loc, acc, v);
  return isFloat ? Value(b.create<arith::MinimumFOp>(loc, acc, v)) : b.create<arith::MinSIOp>(loc, acc, v);
}

// f32 sums accumulate in f64: a lane that adds
// many small terms to one large one (a softmax row with a dominant logit)
// would drop them all in f32, an error growing with the row (1e-5 relative
// at 262,144 classes). A compensated (Kahan) f32 sum is as accurate but
// lengthens the loop-carried dependency fourfold; the f64 add keeps one
// add per step, at the cost of a widening conversion. f64 sums stay f64.
bool KernelEmitter::widensSum(Operation *op, Type t) const {
  return isa<ReduceSumOp>(op) && getElementTypeOrSelf(t).isF32();
}

Value KernelEmitter::accumulatorInit(Operation *op, Value neutralValue) {
  if (!widensSum(op, neutralValue.getType()))
    return neutralValue;
  Type wide = b.getF64Type();
  if (auto v = llvm::dyn_cast<VectorType>(neutralValue.getType()))
    wide = VectorType::get(v.getShape(), wide);
  return b.create<arith::ConstantOp>(loc, b.getZeroAttr(wide));
}

Value KernelEmitter::accumulate(Operation *op, Value acc, Value x) {
  if (getElementTypeOrSelf(acc.getType()) != getElementTypeOrSelf(x.getType()))
    x = b.create<arith::ExtFOp>(loc, acc.getType(), x);
  return combine(op, acc, x);
}

Value KernelEmitter::accumulated(Operation *op, Value acc) {
  Type want = computeType(dtypeOf(op->getOperand(0)));
  if (getElementTypeOrSelf(acc.getType()) == want)
    return acc;
  if (auto v = llvm::dyn_cast<VectorType>(acc.getType()))
    want = VectorType::get(v.getShape(), want);
  return b.create<arith::TruncFOp>(loc, want, acc);
}

/// A reduction at result coordinates `c`. When `c` has no lanes (one
/// result per program), lanes run along the operand's innermost reduced
/// dimension and fold at the end; otherwise each lane accumulates its own
/// result while a scalar loop walks the reduced dimensions.
FailureOr<Value> KernelEmitter::reduction(Operation *op, const Coords &c) {
  Value operand = op->getOperand(0);
  auto in = shapeOf(operand);
  auto dims = op->getAttrOfType<DenseI64ArrayAttr>("dims").asArrayRef();
  bool keepdim = op->getAttrOfType<BoolAttr>("keepdim") &&
                 op->getAttrOfType<BoolAttr>("keepdim").getValue();
  Type ct = computeType(dtypeOf(operand));
  // Operand coordinates of the kept dimensions; reduced ones filled per step.
  Coords oc(in.size());
  {
    size_t r = 0;
    for (int64_t d = 0; d < int64_t(in.size()); ++d) {
      bool reduced = llvm::is_contained(dims, d);
      if (!reduced)
        oc[d] = c[r];
      if (!reduced || keepdim)
        ++r;
    }
  }
  bool lanesInResult = llvm::any_of(c, [](const Coord &x) { return !x.isScalar(); });
  if (!lanesInResult)
    if (std::optional<FailureOr<Value>> picked = oneHotPick(op, oc))
      return *picked;
  ReducedLoops loops = reducedLoops(dims, in, lanesInResult);
  // Named copies: lambdas below capture them (C++17 lambdas cannot capture
  // structured bindings).
  SmallVector<int64_t> outerDims = loops.outerDims, outerSizes = loops.outerSizes;
  int64_t laneDim = loops.laneDim;
  int64_t outerCount = numel(outerSizes);

  // Accumulate per lane when lanes fold at the end or when each lane has
  // its own result.
  bool vectorAcc = laneDim >= 0 || lanesInResult;
  Value init = neutral(op, ct);
  if (vectorAcc)
    init = splat(init);
  // f32 sums accumulate in f64 and round once (along a row, in groups of
  // kSumGroup blocks summed in f32 first, see below).
  init = accumulatorInit(op, init);
  // A partial kernel reduces one slice: of the outer loop when it has a
  // trip per slice, else of the blocks of the lane loop.
  bool split = chunks > 0 && !lanesInResult && laneDim >= 0;
  int64_t laneSteps = laneDim >= 0 ? (in[laneDim] + block - 1) / block : 1;
  bool splitOuter = split && outerCount >= chunks;
  auto sliceBound = [&](int64_t total, int64_t k) -> Value {
    return divS(mulS(addS(chunkId, cst(k)), total), chunks);
  };
  Value outerLo = splitOuter ? sliceBound(outerCount, 0) : cst(0);
  Value outerHi = splitOuter ? sliceBound(outerCount, 1) : cst(outerCount);
  SmallVector<Value> acc;
  Value filling; // the operand whose scratch row this pass fills
  bool storedEarly = false;
  LogicalResult ok = forLoopRange(
      outerLo, outerHi, ValueRange{init},
      [&](Value o, ValueRange iter, SmallVectorImpl<Value> &yield) -> LogicalResult {
        Coords cc = oc;
        scatterIndex(o, outerDims, outerSizes, cc);
        if (laneDim < 0) {
          FailureOr<Value> v = value(operand, cc);
          if (failed(v))
            return failure();
          if (!vectorAcc && llvm::isa<VectorType>(v->getType()))
            return fusion.emitOpError()
                   << "internal error: a per-program reduction of '" << op->getName()
                   << "' produced a block";
          if (op == earlyStoresIn) {
            if (failed(storeDomainOutputs(earlyOutputs, cc)))
              return failure();
            storedEarly = true;
          }
          yield.push_back(accumulate(op, iter[0], vectorAcc ? toBlock(*v) : *v));
          return success();
        }
        int64_t n = in[laneDim];
        bool splitInner = split && !splitOuter;
        auto blockStep = [&](Value j, ValueRange it2, SmallVectorImpl<Value> &y2) -> LogicalResult {
          FailureOr<Value> v = rowBlock(operand, cc, laneDim, n, j);
          if (failed(v))
            return failure();
          Value x = *v;
          if (laneDim == rowDim && outerCount == 1 && !split && storeRowScratch(operand, cc, x))
            filling = operand;
          if (n % block != 0)
            x = b.create<arith::SelectOp>(loc, activeMask(), x, splat(neutral(op, ct)));
          y2.push_back(accumulate(op, it2[0], x));
          return success();
        };
        SmallVector<Value> inner;
        // A widened sum along a row adds groups of kSumGroup blocks in its
        // compute type first and widens each group's sum once: widening
        // every block made long row kernels compute bound (layer_norm's
        // backward), and a sum of a few terms per lane adds an error of a
        // few units of roundoff, not one growing with the row.
        constexpr int64_t kSumGroup = 8;
        if (!split && widensSum(op, ct) && laneSteps > 1) {
          int64_t groups = (laneSteps + kSumGroup - 1) / kSumGroup;
          if (failed(forLoop(
                  groups, ValueRange{iter[0]},
                  [&](Value g, ValueRange wide, SmallVectorImpl<Value> &y1) -> LogicalResult {
                    Value lo = mulS(g, kSumGroup);
                    Value hi = b.create<arith::MinSIOp>(loc, addS(lo, cst(kSumGroup)),
                                                        cst(laneSteps));
                    SmallVector<Value> narrow;
                    if (failed(forLoopRange(lo, hi, ValueRange{splat(neutral(op, ct))}, blockStep,
                                            &narrow)))
                      return failure();
                    y1.push_back(accumulate(op, wide[0], narrow[0]));
                    return success();
                  },
                  &inner)))
            return failure();
        } else if (failed(forLoopRange(splitInner ? sliceBound(laneSteps, 0) : cst(0),
                                       splitInner ? sliceBound(laneSteps, 1) : cst(laneSteps),
                                       ValueRange{iter[0]}, blockStep, &inner))) {
          return failure();
        }
        yield.push_back(inner[0]);
        return success();
      },
      &acc);
  if (failed(ok))
    return failure();
  // Only a walk with the lanes in the result stored them (not one along
  // the reduced dimension, whose blocks are no elements of the results).
  if (storedEarly)
    earlyStored = true;
  if (filling)
    rowScratch[filling].filled = true;
  if (laneDim < 0)
    return accumulated(op, acc[0]);
  tile::ReduceKind kind = isa<ReduceSumOp>(op)   ? tile::ReduceKind::add
                          : isa<ReduceMaxOp>(op) ? tile::ReduceKind::max
                                                 : tile::ReduceKind::min;
  // Fold the lanes at the accumulator's width, then round once.
  Type accType = getElementTypeOrSelf(acc[0].getType());
  Value folded = b.create<tile::ReduceOp>(loc, accType, kind, acc[0]);
  return accType == ct ? folded : b.create<arith::TruncFOp>(loc, ct, folded).getResult();
}

/// A sum along one dimension `d` of select(iota_d == k, v, 0), with `k`
/// constant along `d` (a one-hot pick: cross-entropy's target logit, its
/// gradient's one-hot row) is v at index k, or 0 when k is outside the
/// dimension: exactly the sum (every other term is 0), without a pass over
/// the row. `oc` holds the operand coordinates of the kept dimensions.
std::optional<OneHotPick> matchOneHotPick(Operation *op) {
  auto dims = op->getAttrOfType<DenseI64ArrayAttr>("dims");
  if (!isa<ReduceSumOp>(op) || !dims || dims.size() != 1)
    return std::nullopt;
  OneHotPick m;
  m.dim = dims[0];
  Value operand = op->getOperand(0);
  if (auto neg = operand.getDefiningOp<NegOp>()) {
    operand = neg.getOperand();
    m.negated = true;
  }
  m.select = operand.getDefiningOp<SelectOp>();
  auto isZero = [](Value v) {
    auto full = v.getDefiningOp<FullOp>();
    return full && full.getValue().isZero();
  };
  if (!m.select || !isZero(m.select.getOperand(2)))
    return std::nullopt;
  auto eq = m.select.getOperand(0).getDefiningOp<EqOp>();
  if (!eq)
    return std::nullopt;
  // Integer indices only (an iota may be float: equality then is not an
  // index match the pick could read at).
  auto iotaAlongD = [&](Value v) {
    auto iota = v.getDefiningOp<IotaOp>();
    return iota && int64_t(iota.getDim()) == m.dim && llvm::isa<IntegerType>(dtypeOf(v));
  };
  // k: a broadcast that maps no operand dimension to d.
  auto constantAlongD = [&](Value v) {
    auto bc = v.getDefiningOp<BroadcastInDimOp>();
    return bc && !llvm::is_contained(bc.getDims(), m.dim);
  };
  if (iotaAlongD(eq.getOperand(0)) && constantAlongD(eq.getOperand(1)))
    m.index = eq.getOperand(1);
  else if (iotaAlongD(eq.getOperand(1)) && constantAlongD(eq.getOperand(0)))
    m.index = eq.getOperand(0);
  if (!m.index)
    return std::nullopt;
  return m;
}

std::optional<FailureOr<Value>> KernelEmitter::oneHotPick(Operation *op, Coords oc) {
  // A partial kernel reduces one slice of the row per program: the pick
  // would be counted once per slice.
  std::optional<OneHotPick> m = chunks > 0 ? std::nullopt : matchOneHotPick(op);
  if (!m)
    return std::nullopt;
  int64_t d = m->dim;
  Value k = m->index;
  SelectOp select = m->select;
  bool negated = m->negated;
  Value operand = op->getOperand(0);
  int64_t n = shapeOf(operand)[d];
  oc[d] = constCoord(0);
  FailureOr<Value> index = value(k, oc);
  if (failed(index))
    return failure();
  Value at = *index;
  if (!at.getType().isInteger(64))
    at = b.create<arith::ExtSIOp>(loc, b.getI64Type(), at);
  Value inside = b.create<arith::AndIOp>(
      loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, at, cst(0)),
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, at, cst(n)));
  // Read in bounds only: an index outside the row picks 0, not memory.
  oc[d] = {b.create<arith::SelectOp>(loc, inside, at, cst(0)), 0, {}, 1};
  FailureOr<Value> v = value(select.getOperand(1), oc);
  if (failed(v))
    return failure();
  if (llvm::isa<VectorType>(v->getType()))
    return FailureOr<Value>(fusion.emitOpError("internal error: a one-hot pick produced a block"));
  Value zero = b.create<arith::ConstantOp>(loc, b.getZeroAttr(v->getType()));
  Value picked = b.create<arith::SelectOp>(loc, inside, *v, zero);
  bool isFloat = llvm::isa<FloatType>(picked.getType());
  if (negated)
    picked = isFloat ? Value(b.create<arith::NegFOp>(loc, picked))
                     : Value(b.create<arith::SubIOp>(loc, zero, picked));
  // The sum starts from +0: a -0 pick sums to +0.
  if (isFloat)
    picked = b.create<arith::AddFOp>(loc, picked, zero);
  return FailureOr<Value>(picked);
}

/// First maximum wins and NaN counts as the maximum (as numpy): a scalar
/// loop over the reduced dimension, each lane tracking its own row.
FailureOr<Value> KernelEmitter::argmax(ArgmaxOp op, const Coords &c) {
  Value operand = op.getOperand();
  auto in = shapeOf(operand);
  int64_t dim = op.getDim();
  Coords oc(in.size());
  size_t r = 0;
  for (int64_t d = 0; d < int64_t(in.size()); ++d) {
    if (d != dim)
      oc[d] = c[r];
    if (d != dim || op.getKeepdim())
      ++r;
  }
  bool lanes = llvm::any_of(c, [](const Coord &x) { return !x.isScalar(); });
  if (!lanes)
    return argmaxAcrossLanes(op, oc);
  Coords first = oc;
  first[dim] = constCoord(0);
  FailureOr<Value> v0 = value(operand, first);
  if (failed(v0))
    return failure();
  Value best = lanes ? toBlock(*v0) : *v0;
  Value bestIdx = lanes ? splat(cst(0)) : cst(0);
  bool isFloat = llvm::isa<FloatType>(getElementTypeOrSelf(best.getType()));
  SmallVector<Value> res;
  if (failed(forLoop(
          in[dim], ValueRange{best, bestIdx},
          [&](Value k, ValueRange it, SmallVectorImpl<Value> &y) -> LogicalResult {
            Coords cc = oc;
            cc[dim] = {k, 0, {}, 1};
            FailureOr<Value> v = value(operand, cc);
            if (failed(v))
              return failure();
            Value x = lanes ? toBlock(*v) : *v;
            Value take;
            if (isFloat) {
              Value gt = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, x, it[0]);
              Value xNan = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNO, x, x);
              Value bestNan = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNO, it[0], it[0]);
              Value notBestNan = b.create<arith::XOrIOp>(
                  loc, bestNan, b.create<arith::ConstantOp>(loc, b.getBoolAttr(true)).getResult());
              Value cand = b.create<arith::OrIOp>(loc, gt, xNan);
              if (lanes) notBestNan = b.create<arith::XOrIOp>(loc, bestNan, splat(b.create<arith::ConstantOp>(loc, b.getBoolAttr(true))));
              take = b.create<arith::AndIOp>(loc, cand, notBestNan);
            } else {
              take = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sgt, x, it[0]);
            }
            y.push_back(b.create<arith::SelectOp>(loc, take, x, it[0]));
            Value kk = lanes ? splat(k) : k;
            y.push_back(b.create<arith::SelectOp>(loc, take, kk, it[1]));
            return success();
          },
          &res)))
    return failure();
  return res[1];
}

/// One argmax per program: the lanes split the reduced dimension (block
/// by block), each keeping its first maximum and its index, then the lanes
/// agree on the maximum and on the smallest index holding it. (A serial
/// scan would run once per GPU thread, every thread reading the whole row.)
FailureOr<Value> KernelEmitter::argmaxAcrossLanes(ArgmaxOp op, const Coords &oc) {
  Value operand = op.getOperand();
  int64_t dim = op.getDim();
  int64_t n = shapeOf(operand)[dim];
  Type ct = computeType(dtypeOf(operand));
  bool isFloat = llvm::isa<FloatType>(ct);
  Value none = splat(cst(std::numeric_limits<int64_t>::max())); // no index yet
  Value init = splat(isFloat ? Value(b.create<arith::ConstantOp>(loc, b.getFloatAttr(ct, 0.0)))
                             : Value(b.create<arith::ConstantOp>(loc, b.getIntegerAttr(ct, 0))));
  auto isNan = [&](Value v) {
    return b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNO, v, v).getResult();
  };
  SmallVector<Value> res;
  if (failed(forLoop(
          (n + block - 1) / block, ValueRange{init, none},
          [&](Value j, ValueRange it, SmallVectorImpl<Value> &y) -> LogicalResult {
            FailureOr<Value> v = rowBlock(operand, oc, dim, n, j);
            if (failed(v))
              return failure();
            Value x = *v;
            Value start = mulS(j, block);
            Value unset = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, it[1], none);
            // Strictly greater keeps a lane's first maximum; NaN beats
            // everything but an earlier NaN.
            Value better;
            if (isFloat) {
              Value gt = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, x, it[0]);
              Value fresh = b.create<arith::XOrIOp>(
                  loc, isNan(it[0]), splat(b.create<arith::ConstantOp>(loc, b.getBoolAttr(true))));
              better = b.create<arith::AndIOp>(loc, b.create<arith::OrIOp>(loc, gt, isNan(x)), fresh);
            } else {
              better = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sgt, x, it[0]);
            }
            Value take = b.create<arith::AndIOp>(
                loc, activeMask(), b.create<arith::OrIOp>(loc, unset, better));
            Value index = b.create<arith::AddIOp>(loc, splat(start), lanes());
            y.push_back(b.create<arith::SelectOp>(loc, take, x, it[0]));
            y.push_back(b.create<arith::SelectOp>(loc, take, index, it[1]));
            return success();
          },
          &res)))
    return failure();
  Value best = res[0], index = res[1];
  Value unset = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, index, none);
  // Lanes that saw no element do not take part in the maximum.
  Value lowest = isFloat ? Value(b.create<arith::ConstantOp>(
                               loc, b.getFloatAttr(ct, -std::numeric_limits<double>::infinity())))
                         : Value(b.create<arith::ConstantOp>(
                               loc, b.getIntegerAttr(ct, llvm::APInt::getSignedMinValue(
                                                             ct.getIntOrFloatBitWidth()))));
  best = b.create<arith::SelectOp>(loc, unset, splat(lowest), best);
  Value top = b.create<tile::ReduceOp>(loc, ct, tile::ReduceKind::max, best);
  Value holds = isFloat ? b.create<arith::OrIOp>(
                              loc,
                              b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OEQ, best, splat(top)),
                              b.create<arith::AndIOp>(loc, isNan(best), splat(isNan(top))))
                              .getResult()
                        : b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, best, splat(top))
                              .getResult();
  holds = b.create<arith::AndIOp>(
      loc, holds,
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, index, none));
  Value candidates = b.create<arith::SelectOp>(loc, holds, index, none);
  return b.create<tile::ReduceOp>(loc, b.getI64Type(), tile::ReduceKind::min, candidates)
      .getResult();
}

/// Philox 4x32-10 on the element's linear index, bit-identical to
/// codegen/reference/Philox.h.
FailureOr<Value> KernelEmitter::random(RandomUniformOp op, const Coords &c) {
  FailureOr<Value> seed = value(op.getSeed(), {});
  if (failed(seed))
    return failure();
  // The stream: a kernel input (fusion made it one) or a constant.
  Value stream;
  if (Value v = op.getStreamValue()) {
    FailureOr<Value> s = value(v, {});
    if (failed(s))
      return failure();
    stream = b.create<arith::TruncIOp>(loc, b.getI32Type(), *s);
  } else {
    stream = b.create<arith::ConstantOp>(loc, b.getI32IntegerAttr(int32_t(uint32_t(op.getStream()))));
  }
  Coord lin = linearize(c, shapeOf(op.getResult()));
  Type i32 = b.getI32Type(), i64 = b.getI64Type();
  // `lanes` values per op: 0 for scalars.
  auto like = [&](Type t, int64_t lanes) -> Type {
    return lanes ? Type(VectorType::get({lanes}, t)) : t;
  };
  auto spread = [&](Value scalar, int64_t lanes) -> Value {
    return lanes ? b.create<vector::SplatOp>(loc, like(scalar.getType(), lanes), scalar).getResult()
                 : scalar;
  };
  auto k32 = [&](uint32_t v, int64_t lanes) {
    return spread(b.create<arith::ConstantOp>(loc, b.getIntegerAttr(i32, int64_t(v))), lanes);
  };
  /// The four 32-bit words of Philox 4x32-10 for counters `blk` (i64).
  auto philox = [&](Value blk, int64_t lanes) {
    Value ctr[4] = {
        b.create<arith::TruncIOp>(loc, like(i32, lanes), blk),
        b.create<arith::TruncIOp>(
            loc, like(i32, lanes), b.create<arith::ShRUIOp>(loc, blk, spread(cst(32), lanes))),
        spread(stream, lanes), k32(0, lanes)};
    Value s = spread(*seed, lanes);
    Value key[2] = {b.create<arith::TruncIOp>(loc, like(i32, lanes), s),
                    b.create<arith::TruncIOp>(
                        loc, like(i32, lanes), b.create<arith::ShRUIOp>(loc, s, spread(cst(32), lanes)))};
    for (int round = 0; round < 10; ++round) {
      auto m0 = b.create<arith::MulUIExtendedOp>(loc, k32(0xD2511F53u, lanes), ctr[0]);
      auto m1 = b.create<arith::MulUIExtendedOp>(loc, k32(0xCD9E8D57u, lanes), ctr[2]);
      Value n0 = b.create<arith::XOrIOp>(loc, b.create<arith::XOrIOp>(loc, m1.getHigh(), ctr[1]), key[0]);
      Value n2 = b.create<arith::XOrIOp>(loc, b.create<arith::XOrIOp>(loc, m0.getHigh(), ctr[3]), key[1]);
      ctr[0] = n0;
      ctr[1] = m1.getLow();
      ctr[2] = n2;
      ctr[3] = m0.getLow();
      key[0] = b.create<arith::AddIOp>(loc, key[0], k32(0x9E3779B9u, lanes));
      key[1] = b.create<arith::AddIOp>(loc, key[1], k32(0xBB67AE85u, lanes));
    }
    return std::array<Value, 4>{ctr[0], ctr[1], ctr[2], ctr[3]};
  };

  Value bits;
  int64_t lanes = lin.isScalar() ? 0 : block;
  if (lanes && lin.isAffine() && lin.coef == 1 && lin.align % 4 == 0 && block % 4 == 0 &&
      target.shufflesLanes()) {
    // Contiguous lanes starting at a multiple of 4: four neighbours share a
    // counter, so run Philox once per counter and interleave its words
    // (a quarter of the work of one Philox per lane).
    int64_t g = block / 4;
    SmallVector<int64_t> ids(g);
    for (int64_t i = 0; i < g; ++i)
      ids[i] = i;
    Value counters = b.create<arith::AddIOp>(
        loc, spread(divS(lin.scalar, 4), g),
        b.create<arith::ConstantOp>(loc, DenseElementsAttr::get(
                                             VectorType::get({g}, i64), ArrayRef<int64_t>(ids))));
    auto w = philox(counters, g);
    SmallVector<int64_t> pairs, quads;
    for (int64_t i = 0; i < g; ++i)
      pairs.append({i, g + i});
    for (int64_t i = 0; i < g; ++i)
      quads.append({2 * i, 2 * i + 1, 2 * g + 2 * i, 2 * g + 2 * i + 1});
    Value w01 = b.create<vector::ShuffleOp>(loc, w[0], w[1], pairs);
    Value w23 = b.create<vector::ShuffleOp>(loc, w[2], w[3], pairs);
    bits = b.create<vector::ShuffleOp>(loc, w01, w23, quads);
  } else {
    Value index = lanes ? coordVector(lin) : lin.scalar;
    auto w = philox(b.create<arith::ShRUIOp>(loc, index, spread(cst(2), lanes)), lanes);
    Value word = b.create<arith::TruncIOp>(
        loc, like(i32, lanes), b.create<arith::AndIOp>(loc, index, spread(cst(3), lanes)));
    bits = w[3];
    for (int k = 2; k >= 0; --k)
      bits = b.create<arith::SelectOp>(
          loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, word, k32(k, lanes)),
          w[k], bits);
  }
  Type dt = dtypeOf(op.getResult());
  int mb = dt.isF64() ? 32 : dt.isF32() ? 24 : dt.isF16() ? 11 : 8;
  Type ct = computeType(dt);
  Value top = b.create<arith::ShRUIOp>(loc, bits, k32(32 - mb, lanes));
  Value f = b.create<arith::UIToFPOp>(loc, like(ct, lanes), top);
  Value scaleK = b.create<arith::ConstantOp>(loc, b.getFloatAttr(ct, std::ldexp(1.0, -mb)));
  return b.create<arith::MulFOp>(loc, f, spread(scaleK, lanes)).getResult();
}

/// Every input read at a clamped coordinate, the right one selected.
FailureOr<Value> KernelEmitter::concat(ConcatOp op, const Coords &c) {
  int64_t dim = op.getDim();
  const Coord &x = c[dim];
  if (std::optional<Value> whole = concatOfWholeBlocks(op, c))
    return *whole;
  Value result;
  int64_t offset = 0;
  for (Value in : op.getInputs()) {
    int64_t n = shapeOf(in)[dim];
    Coords cc = c;
    Value inRange;
    if (x.isScalar()) {
      Value rel = b.create<arith::SubIOp>(loc, x.scalar, cst(offset));
      Value lo = b.create<arith::MaxSIOp>(loc, rel, cst(0));
      cc[dim] = {b.create<arith::MinSIOp>(loc, lo, cst(n - 1)), 0, {}, 1};
      inRange = b.create<arith::AndIOp>(
          loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, rel, cst(0)),
          b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, rel, cst(n)));
    } else {
      Value rel = b.create<arith::SubIOp>(loc, coordVector(x), splat(cst(offset)));
      Value lo = b.create<arith::MaxSIOp>(loc, rel, splat(cst(0)));
      cc[dim] = {Value(), 0, b.create<arith::MinSIOp>(loc, lo, splat(cst(n - 1))), 1};
      inRange = b.create<arith::AndIOp>(
          loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, rel, splat(cst(0))),
          b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, rel, splat(cst(n))));
    }
    FailureOr<Value> v = value(in, cc);
    if (failed(v))
      return failure();
    Value vv = *v;
    if (!result) {
      result = vv;
    } else {
      if (llvm::isa<VectorType>(inRange.getType()) || llvm::isa<VectorType>(vv.getType()) ||
          llvm::isa<VectorType>(result.getType())) {
        vv = toBlock(vv);
        result = toBlock(result);
      }
      result = b.create<arith::SelectOp>(loc, inRange, vv, result);
    }
    offset += n;
  }
  return result;
}

std::optional<Value> KernelEmitter::concatOfWholeBlocks(ConcatOp op, const Coords &c) {
  int64_t dim = op.getDim();
  const Coord &x = c[dim];
  // Lanes run along the concatenated dimension from a block-aligned start,
  // and every input starts at a multiple of the block: each block lies in
  // one input.
  if (x.vec || x.coef != 1 || !activeLimit || x.align % block != 0)
    return std::nullopt;
  for (Value in : op.getInputs())
    if (shapeOf(in)[dim] % block != 0)
      return std::nullopt;
  // Every input is computed at unclamped (affine) coordinates with its
  // loads masked off outside its own blocks, so a block reads only its
  // input, contiguously where that input is (clamping would turn every
  // input's reads into gathers); the block's input is selected whole.
  Value result;
  int64_t offset = 0;
  for (Value in : op.getInputs()) {
    int64_t n = shapeOf(in)[dim];
    Value inside = b.create<arith::AndIOp>(
        loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, x.scalar, cst(offset)),
        b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, x.scalar, cst(offset + n)));
    Coords cc = c;
    cc[dim] = {b.create<arith::SubIOp>(loc, x.scalar, cst(offset)), 1, {},
               std::gcd(x.align, offset == 0 ? kAligned : offset)};
    FailureOr<Value> v = failure();
    {
      Scope scope(*this);
      activeLimit = b.create<arith::SelectOp>(loc, inside, activeLimit, cst(0));
      v = value(in, cc);
    }
    if (failed(v))
      return std::nullopt;
    Value vv = toBlock(*v);
    result = result ? b.create<arith::SelectOp>(loc, inside, vv, result).getResult() : vv;
    offset += n;
  }
  return result;
}

Coords KernelEmitter::matchUnitDims(const Coords &from,
                                    ArrayRef<int64_t> fromShape,
                                    ArrayRef<int64_t> shape) {
  Coords nonUnit;
  for (size_t d = 0; d < fromShape.size(); ++d)
    if (fromShape[d] != 1)
      nonUnit.push_back(from[d]);
  Coords out;
  size_t k = 0;
  for (int64_t s : shape)
    out.push_back(s == 1 ? constCoord(0) : nonUnit[k++]);
  return out;
}

LogicalResult KernelEmitter::store(unsigned output, const Coords &c, Value computed) {
  Value result = fusion.getBody().front().getTerminator()->getOperand(output);
  FailureOr<Value> v = computed ? FailureOr<Value>(computed) : value(result, c);
  if (failed(v))
    return failure();
  Type dt = dtypeOf(result), st = storageType(dt);
  int64_t stride = 0, alignElems = 1;
  Value vecOffsets;
  Value offset = offsetOf(c, shapeOf(result), stride, vecOffsets, &alignElems);
  Value x = *v;
  bool isVec = stride != 0 || vecOffsets;
  if (isVec)
    x = toBlock(x);
  else if (llvm::isa<VectorType>(x.getType()))
    x = b.create<vector::ExtractOp>(loc, x, ArrayRef<int64_t>{0});
  auto like = [&](Type t) -> Type { return isVec ? Type(vecType(t)) : t; };
  if (dt.isInteger(1))
    x = b.create<arith::ExtUIOp>(loc, like(st), x);
  else if (computeType(dt) != dt)
    x = b.create<arith::TruncFOp>(loc, like(st), x);
  if (output >= outputPointers.size() || !outputPointers[output])
    return fusion.emitOpError("internal error: result ")
           << output << " has no output argument in kernel '" << kernel.getSymName() << "'";
  Value ptr = outputPointers[output];
  if (vecOffsets)
    b.create<tile::ScatterOp>(loc, x, ptr, vecOffsets, activeMask());
  else if (isVec) {
    auto storeOp = b.create<tile::StoreOp>(loc, x, ptr, offset, activeLimit,
                                           b.getI64IntegerAttr(stride),
                                           b.getI64IntegerAttr(1), UnitAttr());
    // Bytes known to divide lane 0's address, capped at a cache line.
    int64_t bytes = st.getIntOrFloatBitWidth() / 8;
    int64_t alignBytes = 1;
    while (alignBytes < 64 && (alignElems * bytes) % (alignBytes * 2) == 0)
      alignBytes *= 2;
    storeOp.setAlignment(alignBytes);
    int64_t total = bytes;
    for (int64_t d : shapeOf(result))
      total *= d;
    if (stride == 1 && total >= target.streamingStoreBytes())
      storeOp.setStreaming(true);
  }
  else
    b.create<tile::StoreScalarOp>(loc, x, ptr, offset);
  return success();
}

void KernelEmitter::bindArguments(unsigned extraBeforeOutputs, bool partial,
                                  const SmallVector<unsigned> *only) {
  Block &entry = kernel.getBody().front();
  b.setInsertionPointToStart(&entry);
  memo.emplace_back();
  Block &body = fusion.getBody().front();
  for (auto [i, arg] : llvm::enumerate(body.getArguments()))
    argPointers[arg] = entry.getArgument(i);
  if (partial)
    return;
  outputPointers.assign(fusion.getNumResults(), Value());
  unsigned bound = only ? only->size() : fusion.getNumResults();
  for (unsigned k = 0; k < bound; ++k)
    outputPointers[only ? (*only)[k] : k] =
        entry.getArgument(body.getNumArguments() + extraBeforeOutputs + k);
}

LogicalResult KernelEmitter::emitPartial(int64_t n, ArrayRef<Operation *> reductions) {
  bindArguments(0, /*partial=*/true);
  Block &entry = kernel.getBody().front();
  unsigned firstSlot = fusion.getBody().front().getNumArguments();
  kernel->setAttr(tile::kGridAttr, b.getI64IntegerAttr(n));
  chunkId = b.create<tile::ProgramIdOp>(loc, b.getI64Type());
  chunks = n;
  for (auto [k, op] : llvm::enumerate(reductions)) {
    FailureOr<Value> v = value(op->getResult(0), unitCoords(op->getResult(0)));
    if (failed(v))
      return failure();
    b.create<tile::StoreScalarOp>(loc, *v, entry.getArgument(firstSlot + k), chunkId);
  }
  return success();
}

LogicalResult KernelEmitter::emitCombine(int64_t n, ArrayRef<Operation *> reductions) {
  bindArguments(reductions.size());
  Block &entry = kernel.getBody().front();
  unsigned firstSlot = fusion.getBody().front().getNumArguments();
  kernel->setAttr(tile::kGridAttr, b.getI64IntegerAttr(1));
  for (auto [k, op] : llvm::enumerate(reductions)) {
    Value slots = entry.getArgument(firstSlot + k);
    Type t = llvm::cast<tile::PtrType>(slots.getType()).getPointee();
    Value partials = b.create<tile::LoadOp>(loc, vecType(t), slots, cst(0), cst(n),
                                            b.getI64IntegerAttr(1));
    tile::ReduceKind kind = isa<ReduceSumOp>(op)   ? tile::ReduceKind::add
                            : isa<ReduceMaxOp>(op) ? tile::ReduceKind::max
                                                   : tile::ReduceKind::min;
    Value total = b.create<tile::ReduceOp>(loc, t, kind, partials);
    memo.back()[keyOf(op->getResult(0), unitCoords(op->getResult(0)))] = total;
  }
  Operation *yield = fusion.getBody().front().getTerminator();
  for (unsigned i = 0; i < yield->getNumOperands(); ++i)
    if (failed(store(i, unitCoords(yield->getOperand(i)))))
      return failure();
  return success();
}

KernelEmitter::KeptSpace KernelEmitter::keptSpace(ArrayRef<int64_t> reduced) {
  KeptSpace k;
  k.domain.assign(fusion.getDomain().begin(), fusion.getDomain().end());
  int64_t rank = k.domain.size();
  for (int64_t d = 0; d < rank; ++d)
    if (!llvm::is_contained(reduced, d)) {
      k.kept.push_back(d);
      k.keptShape.push_back(k.domain[d]);
      k.elements *= k.domain[d];
    }
  // A pointwise kernel whose rows are much shorter than its block runs its
  // lanes across rows (flatPointwise): blocks of the whole domain.
  if (flatLanes) {
    k.flat = true;
    k.lanesKept = true;
    k.programs = (k.elements + block - 1) / block;
    return k;
  }
  // Lanes run along the innermost dimension; when it is kept, programs
  // split it into blocks, otherwise each program owns whole rows. Short
  // rows (keptLanes) put the lanes on the innermost kept dimension instead:
  // one lane per row, each looping over its few elements.
  k.lanesKept = rank > 0 && !k.kept.empty() && (k.kept.back() == rank - 1 || keptLanes);
  k.laneDim = k.lanesKept ? k.kept.back() : -1;
  k.progDims = k.kept;
  if (k.lanesKept)
    k.progDims.pop_back();
  k.blocksPerRow = k.lanesKept ? (k.domain[k.laneDim] + block - 1) / block : 1;
  k.programs = k.blocksPerRow;
  for (int64_t d : k.progDims) {
    k.progSizes.push_back(k.domain[d]);
    k.programs *= k.domain[d];
  }
  return k;
}

Coords KernelEmitter::keptDomainCoords(const KeptSpace &k, Value pid) {
  int64_t rank = k.domain.size();
  if (k.flat) {
    Value start = mulS(pid, block);
    activeLimit = lanesLeft(k.elements, start);
    return delinearize({start, 1, {}, block}, k.domain);
  }
  Coords dc(rank);
  scatterIndex(divS(pid, k.blocksPerRow), k.progDims, k.progSizes, dc);
  if (k.lanesKept) {
    Value start = mulS(remS(pid, k.blocksPerRow), block);
    dc[k.laneDim] = {start, 1, {}, block};
    activeLimit = lanesLeft(k.domain[k.laneDim], start);
  }
  return dc;
}

/// A sum of a domain-shaped value over every dimension (see
/// columnSplittableReductions): folded by a column kernel as column
/// partials, then over the columns.
static bool isTotalOf(Operation *op, FusionOp fusion) {
  auto dims = op->getAttrOfType<DenseI64ArrayAttr>("dims");
  return llvm::isa<ReduceSumOp>(op) && dims &&
         ArrayRef<int64_t>(shapeOf(op->getOperand(0))) == fusion.getDomain() &&
         int64_t(dims.size()) == int64_t(fusion.getDomain().size());
}

LogicalResult KernelEmitter::emitColumnPartial(int64_t n, ArrayRef<Operation *> reductions) {
  bindArguments(0, /*partial=*/true);
  Block &entry = kernel.getBody().front();
  unsigned firstSlot = fusion.getBody().front().getNumArguments();
  KeptSpace ks = keptSpace();
  if (ks.lanesKept && columnPartialWalksRows(fusion, reductions, target))
    return emitColumnPartialByRows(n, reductions, ks);
  kernel->setAttr(tile::kGridAttr, b.getI64IntegerAttr(ks.programs * n));
  Value pid = b.create<tile::ProgramIdOp>(loc, b.getI64Type());
  chunkId = divS(pid, ks.programs);
  Coords dc = keptDomainCoords(ks, remS(pid, ks.programs));
  // One walk over this slice's rows folds every reduction (layer_norm's
  // dgamma and dbeta read dy once).
  ReducedLoops rows = reducedLoops(fusion.getReduced(), ks.domain, /*lanesElsewhere=*/true);
  int64_t rowCount = numel(rows.outerSizes);
  SmallVector<Value> init;
  for (Operation *op : reductions)
    init.push_back(accumulatorInit(op, splat(neutral(op, computeType(dtypeOf(op->getOperand(0)))))));
  SmallVector<Value> folded;
  if (failed(forLoopRange(
          divS(mulS(chunkId, rowCount), n), divS(mulS(addS(chunkId, cst(1)), rowCount), n),
          init,
          [&](Value r, ValueRange acc, SmallVectorImpl<Value> &yield) -> LogicalResult {
            Coords cc = dc;
            scatterIndex(r, rows.outerDims, rows.outerSizes, cc);
            for (auto [k, op] : llvm::enumerate(reductions)) {
              FailureOr<Value> v = value(op->getOperand(0), cc);
              if (failed(v))
                return failure();
              yield.push_back(accumulate(op, acc[k], toBlock(*v)));
            }
            return success();
          },
          &folded)))
    return failure();
  Coords slotCoords = keptCoords(ks, dc, ks.keptShape);
  for (auto [k, op] : llvm::enumerate(reductions)) {
    // slot[slice][kept element]: the lanes are contiguous kept elements.
    int64_t stride = 0;
    Value vecOffsets;
    Value offset = offsetOf(slotCoords, ks.keptShape, stride, vecOffsets);
    if (vecOffsets || stride != 1)
      return fusion.emitOpError("internal error: a column partial whose lanes are not contiguous");
    offset = addS(offset, mulS(chunkId, ks.elements));
    b.create<tile::StoreOp>(loc, accumulated(op, folded[k]), entry.getArgument(firstSlot + k), offset,
                            activeLimit, b.getI64IntegerAttr(1), b.getI64IntegerAttr(1),
                            UnitAttr());
  }
  return success();
}

/// One program per slice of rows, walking its rows in memory order: every
/// block of every row is read once, contiguously, and folded into
/// accumulators for all kept elements kept in scratch rows. (A program per
/// block of kept elements reads one block of every row: strided by the row,
/// a new page per row, and each row fetched by every block's program.)
LogicalResult KernelEmitter::emitColumnPartialByRows(int64_t n, ArrayRef<Operation *> reductions,
                                                     const KeptSpace &ks) {
  Block &entry = kernel.getBody().front();
  unsigned firstSlot = fusion.getBody().front().getNumArguments();
  kernel->setAttr(tile::kGridAttr, b.getI64IntegerAttr(n));
  chunkId = b.create<tile::ProgramIdOp>(loc, b.getI64Type());
  SmallVector<Value> accumulators;
  SmallVector<Type> accTypes;
  for (Operation *op : reductions) {
    Value init = accumulatorInit(op, neutral(op, computeType(dtypeOf(op->getOperand(0)))));
    accTypes.push_back(init.getType());
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&entry);
    accumulators.push_back(
        b.create<tile::ScratchOp>(loc, tile::PtrType::get(b.getContext(), init.getType()), ks.elements));
  }
  // Element offset of the lanes of kept block `kp` in the kept shape (also
  // in each scratch row); sets the active limit.
  auto keptBlock = [&](Value kp, Coords &dc) -> FailureOr<Value> {
    dc = keptDomainCoords(ks, kp);
    int64_t stride = 0;
    Value vecOffsets;
    Value offset = offsetOf(keptCoords(ks, dc, ks.keptShape), ks.keptShape, stride, vecOffsets);
    if (vecOffsets || stride != 1)
      return fusion.emitOpError("internal error: a column partial whose lanes are not contiguous");
    return offset;
  };
  auto unit = b.getI64IntegerAttr(1);
  // A block starts at a multiple of the block within a kept row; rows of a
  // length that is no multiple of the block shift the blocks of later rows.
  auto aligned = [&](Type t) {
    int64_t bytes = std::max<int64_t>(1, t.getIntOrFloatBitWidth() / 8);
    bool wholeBlocks = ks.keptShape.empty() || ks.keptShape.back() % block == 0;
    return b.getI64IntegerAttr(wholeBlocks ? std::min<int64_t>(64, block * bytes) : bytes);
  };
  // Neutral accumulators.
  if (failed(forLoop(ks.programs, ValueRange{},
                     [&](Value kp, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
                       Coords dc;
                       FailureOr<Value> at = keptBlock(kp, dc);
                       if (failed(at))
                         return failure();
                       for (auto [k, op] : llvm::enumerate(reductions))
                         b.create<tile::StoreOp>(
                             loc, splat(accumulatorInit(op, neutral(op, computeType(dtypeOf(op->getOperand(0)))))),
                             accumulators[k], *at, activeLimit, unit, aligned(accTypes[k]), UnitAttr());
                       return success();
                     })))
    return failure();
  // Rows go in groups of kRowsPerGroup: for each block of kept elements a
  // group folds into registers, and the scratch row is read and written
  // once per group instead of once per row (layer_norm's dgamma, dbeta and
  // value: three f64 read-modify-writes per element made the walk compute
  // bound). The group's rows stay in cache while its blocks are walked, so
  // memory is still read once, in order.
  // Four rows: rows of a power-of-two length map a column block of every
  // row to the same L1 set, so a group of 8 or more rows (8 ways) evicts
  // itself (65536 x 1024 f32: 4 rows 31 ms, 1 row 44 ms, 8 rows 28-41 ms,
  // 16 rows 95 ms).
  constexpr int64_t kRowsPerGroup = 4;
  ReducedLoops rows = reducedLoops(fusion.getReduced(), ks.domain, /*lanesElsewhere=*/true);
  int64_t rowCount = numel(rows.outerSizes);
  // Named copies: the lambdas below capture them (C++17).
  Value firstRow, endRow, groups;
  std::tie(firstRow, endRow, groups) = sliceRows(chunkId, rowCount, n, kRowsPerGroup);
  if (failed(forLoopRange(
          cst(0), groups, ValueRange{},
          [&](Value g, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
            Value lo = addS(firstRow, mulS(g, kRowsPerGroup));
            Value hi = b.create<arith::MinSIOp>(loc, addS(lo, cst(kRowsPerGroup)), endRow);
            return forLoop(
                ks.programs, ValueRange{},
                [&](Value kp, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
                  Coords dc;
                  FailureOr<Value> at = keptBlock(kp, dc);
                  if (failed(at))
                    return failure();
                  SmallVector<Value> init, sums;
                  for (Operation *op : reductions)
                    init.push_back(splat(accumulatorInit(
                        op, neutral(op, computeType(dtypeOf(op->getOperand(0)))))));
                  if (failed(forLoopRange(
                          lo, hi, init,
                          [&](Value r, ValueRange acc, SmallVectorImpl<Value> &next) -> LogicalResult {
                            Coords rc = dc;
                            scatterIndex(r, rows.outerDims, rows.outerSizes, rc);
                            for (auto [k, op] : llvm::enumerate(reductions)) {
                              FailureOr<Value> v = value(op->getOperand(0), rc);
                              if (failed(v))
                                return failure();
                              next.push_back(accumulate(op, acc[k], toBlock(*v)));
                            }
                            return success();
                          },
                          &sums)))
                    return failure();
                  for (auto [k, op] : llvm::enumerate(reductions)) {
                    Value acc = b.create<tile::LoadOp>(loc, vecType(accTypes[k]), accumulators[k], *at,
                                                       activeLimit, unit);
                    b.create<tile::StoreOp>(loc, combine(op, acc, sums[k]), accumulators[k], *at,
                                            activeLimit, unit, aligned(accTypes[k]), UnitAttr());
                  }
                  return success();
                });
          })))
    return failure();
  // slot[slice][kept element], rounded once as the per-block partial does.
  return forLoop(ks.programs, ValueRange{},
                 [&](Value kp, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
                   Coords dc;
                   FailureOr<Value> at = keptBlock(kp, dc);
                   if (failed(at))
                     return failure();
                   for (auto [k, op] : llvm::enumerate(reductions)) {
                     Value acc = b.create<tile::LoadOp>(loc, vecType(accTypes[k]), accumulators[k], *at,
                                                        activeLimit, unit);
                     b.create<tile::StoreOp>(loc, accumulated(op, acc), entry.getArgument(firstSlot + k),
                                             addS(*at, mulS(chunkId, ks.elements)), activeLimit, unit,
                                             unit, UnitAttr());
                   }
                   return success();
                 });
}

LogicalResult KernelEmitter::emitRowsWithColumnPartials(int64_t n, ArrayRef<Operation *> sums,
                                                        const SmallVector<unsigned> &rowYields) {
  bindArguments(sums.size(), /*partial=*/false, &rowYields);
  Block &entry = kernel.getBody().front();
  unsigned firstSlot = fusion.getBody().front().getNumArguments();
  KeptSpace ks = keptSpace();
  if (ks.lanesKept || ks.flat || keptLanes || ks.domain.size() < 2)
    return fusion.emitOpError("internal error: column sums in a kernel whose lanes do not run "
                              "along its rows");
  int64_t columns = ks.domain.back();
  columnSums.assign(sums.begin(), sums.end());
  SmallVector<Type> accTypes;
  for (Operation *op : sums) {
    Value init = accumulatorInit(op, neutral(op, computeType(dtypeOf(op->getOperand(0)))));
    accTypes.push_back(init.getType());
    columnScratchBytes += columns * (init.getType().getIntOrFloatBitWidth() / 8);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&entry);
    columnAccumulators.push_back(
        b.create<tile::ScratchOp>(loc, tile::PtrType::get(b.getContext(), init.getType()), columns));
  }
  planRowScratch(ks);
  kernel->setAttr(tile::kGridAttr, b.getI64IntegerAttr(n));
  Value slice = b.create<tile::ProgramIdOp>(loc, b.getI64Type());
  auto unit = b.getI64IntegerAttr(1);
  // Runs `body(start)` for every block of a row of accumulators, with the
  // active limit of that block.
  auto forColumnBlocks = [&](auto body) {
    return forLoop((columns + block - 1) / block, ValueRange{},
                   [&](Value j, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
                     Value start = mulS(j, block);
                     activeLimit = lanesLeft(columns, start);
                     return body(start);
                   });
  };
  if (failed(forColumnBlocks([&](Value start) -> LogicalResult {
        for (auto [k, op] : llvm::enumerate(sums))
          b.create<tile::StoreOp>(
              loc, splat(accumulatorInit(op, neutral(op, computeType(dtypeOf(op->getOperand(0)))))),
              columnAccumulators[k], start, activeLimit, unit, unit, UnitAttr());
        return success();
      })))
    return failure();
  // This program's rows, in order, in groups: each group's rows are the
  // row kernel's programs, walked together so that every block of the
  // accumulator rows is read and written once per group (one f64
  // read-modify-write per sum and row made the walk compute bound). The
  // last group repeats the slice's last row to fill up; the repeats store
  // the same results again (nothing is written over an input in this
  // kernel) and fold nothing. The group's rows are emitted one after the
  // other: a long kernel body (more than half of the ops a kernel may
  // take) walks one row at a time to keep the machine code, and its
  // compile time, in bounds.
  const int64_t kRowsPerGroup =
      fusion.getBody().front().getOperations().size() <= kMaxKernelOps / 2 ? 4 : 1;
  Value firstRow, endRow, groups;
  std::tie(firstRow, endRow, groups) = sliceRows(slice, ks.programs, n, kRowsPerGroup);
  Value lastRow = b.create<arith::SubIOp>(loc, endRow, cst(1));
  if (failed(forLoopRange(
          cst(0), groups, ValueRange{},
          [&](Value g, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
            Value base = addS(firstRow, mulS(g, kRowsPerGroup));
            SmallVector<Coords> rows;
            SmallVector<Value> valid;
            for (int64_t r = 0; r < kRowsPerGroup; ++r) {
              Value row = addS(base, cst(r));
              valid.push_back(b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, row, endRow));
              rows.push_back(keptDomainCoords(ks, b.create<arith::MinSIOp>(loc, row, lastRow)));
            }
            // One row a group: it is always a real one.
            return emitProgram(ks, rows, kRowsPerGroup > 1 ? ArrayRef<Value>(valid) : ArrayRef<Value>(),
                               rowYields);
          })))
    return failure();
  // slot[slice][column], rounded once as a column partial is.
  return forColumnBlocks([&](Value start) -> LogicalResult {
    for (auto [k, op] : llvm::enumerate(sums)) {
      Value acc = b.create<tile::LoadOp>(loc, vecType(accTypes[k]), columnAccumulators[k], start,
                                         activeLimit, unit);
      b.create<tile::StoreOp>(loc, accumulated(op, acc), entry.getArgument(firstSlot + k),
                              addS(start, mulS(slice, columns)), activeLimit, unit, unit,
                              UnitAttr());
    }
    return success();
  });
}

LogicalResult KernelEmitter::emitColumnCombine(int64_t n, ArrayRef<Operation *> reductions,
                                               const SmallVector<unsigned> *yields) {
  bindArguments(reductions.size(), /*partial=*/false, yields);
  Block &entry = kernel.getBody().front();
  unsigned firstSlot = fusion.getBody().front().getNumArguments();
  // A row kernel's column sums keep its innermost dimension.
  SmallVector<int64_t> columnDims;
  for (int64_t d = 0; d + 1 < int64_t(fusion.getDomain().size()); ++d)
    columnDims.push_back(d);
  KeptSpace ks = yields ? keptSpace(columnDims) : keptSpace();
  kernel->setAttr(tile::kGridAttr, b.getI64IntegerAttr(ks.programs));
  Value pid = b.create<tile::ProgramIdOp>(loc, b.getI64Type());
  Coords dc = keptDomainCoords(ks, pid);
  int64_t stride = 0;
  Value vecOffsets;
  Value offset = offsetOf(keptCoords(ks, dc, ks.keptShape), ks.keptShape, stride, vecOffsets);
  if (vecOffsets || stride != 1)
    return fusion.emitOpError("internal error: a column combine whose lanes are not contiguous");
  Operation *yield = fusion.getBody().front().getTerminator();
  SmallVector<bool> storedByTotal(yield->getNumOperands(), false);
  for (auto [k, op] : llvm::enumerate(reductions)) {
    Value slots = entry.getArgument(firstSlot + k);
    Type t = llvm::cast<tile::PtrType>(slots.getType()).getPointee();
    if (isTotalOf(op, fusion)) {
      if (failed(combineTotal(n, op, slots, ks, pid, storedByTotal)))
        return failure();
      continue;
    }
    FailureOr<Value> total =
        foldSlices(op, slots, offset, n, ks.elements, accumulatorInit(op, splat(neutral(op, t))));
    if (failed(total))
      return failure();
    memo.back()[keyOf(op->getResult(0), keptCoords(ks, dc, shapeOf(op->getResult(0))))] =
        accumulated(op, *total);
  }
  for (unsigned i = 0; i < yield->getNumOperands(); ++i)
    if ((!yields || llvm::is_contained(*yields, i)) && !storedByTotal[i] &&
        failed(store(i, keptCoords(ks, dc, shapeOf(yield->getOperand(i))))))
      return failure();
  return success();
}

FailureOr<Value> KernelEmitter::foldSlices(Operation *op, Value slots, Value offset, int64_t n,
                                           int64_t elements, Value init) {
  Type t = llvm::cast<tile::PtrType>(slots.getType()).getPointee();
  SmallVector<Value> folded;
  if (failed(forLoop(n, ValueRange{init},
                     [&](Value c, ValueRange acc, SmallVectorImpl<Value> &next) -> LogicalResult {
                       Value part = b.create<tile::LoadOp>(loc, vecType(t), slots,
                                                           addS(offset, mulS(c, elements)),
                                                           activeLimit, b.getI64IntegerAttr(1));
                       next.push_back(accumulate(op, acc[0], part));
                       return success();
                     },
                     &folded)))
    return failure();
  return folded[0];
}

LogicalResult KernelEmitter::combineTotal(int64_t n, Operation *op, Value slots, const KeptSpace &ks,
                                          Value pid, SmallVectorImpl<bool> &storedByTotal) {
  Type t = llvm::cast<tile::PtrType>(slots.getType()).getPointee();
  Value init = accumulatorInit(op, splat(neutral(op, t)));
  // Program 0 folds every slice of every column; the others skip it (a
  // loop of one trip or none: programs have no branches).
  Value trips = b.create<arith::SelectOp>(
      loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, pid, cst(0)), cst(1), cst(0));
  Operation *yield = fusion.getBody().front().getTerminator();
  return forLoopRange(cst(0), trips, ValueRange{}, [&](Value, ValueRange,
                                                       SmallVectorImpl<Value> &) -> LogicalResult {
    SmallVector<Value> sum;
    if (failed(forLoop(
            ks.programs, ValueRange{init},
            [&](Value kp, ValueRange acc, SmallVectorImpl<Value> &next) -> LogicalResult {
              Coords kc = keptDomainCoords(ks, kp); // masks the last block's tail
              int64_t stride = 0;
              Value vecOffsets;
              Value offset = offsetOf(keptCoords(ks, kc, ks.keptShape), ks.keptShape, stride, vecOffsets);
              if (vecOffsets || stride != 1)
                return fusion.emitOpError("internal error: a total whose lanes are not contiguous");
              FailureOr<Value> column = foldSlices(op, slots, offset, n, ks.elements, acc[0]);
              if (failed(column))
                return failure();
              next.push_back(*column);
              return success();
            },
            &sum)))
      return failure();
    Type accType = getElementTypeOrSelf(sum[0].getType());
    Value folded = b.create<tile::ReduceOp>(loc, accType, tile::ReduceKind::add, sum[0]);
    Value total = accumulated(op, folded);
    for (unsigned i = 0; i < yield->getNumOperands(); ++i)
      if (yield->getOperand(i) == op->getResult(0)) {
        if (failed(store(i, unitCoords(op->getResult(0)), total)))
          return failure();
        storedByTotal[i] = true;
      }
    return success();
  });
}

/// Whether `root`, or an op it reads at the same coordinates, costs more
/// than a load: a transcendental, a division, random bits.
static bool costlyToRecompute(Operation *root) {
  SmallVector<Operation *> work = {root};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!work.empty() && seen.size() < 64) {
    Operation *op = work.pop_back_val();
    if (!seen.insert(op).second)
      continue;
    if (llvm::isa<ExpOp, LogOp, TanhOp, ErfOp, PowOp, SigmoidOp, SqrtOp, RsqrtOp, Log1pOp,
                  Expm1Op, RandomUniformOp>(op) ||
        (llvm::isa<DivOp>(op) && llvm::isa<FloatType>(dtypeOf(op->getResult(0)))))
      return true;
    if (!readsOperandsInPlace(op))
      continue;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        work.push_back(def);
  }
  return false;
}

void KernelEmitter::planRowScratch(const KeptSpace &ks) {
  auto reduced = fusion.getReduced();
  if (chunks > 0 || flatLanes || keptLanes || ks.lanesKept || reduced.size() != 1 ||
      reduced[0] != int64_t(ks.domain.size()) - 1)
    return;
  rowDim = reduced[0];
  int64_t budget = target.rowScratchBytes() - columnScratchBytes;
  int64_t n = ks.domain[rowDim];
  Block &body = fusion.getBody().front();
  for (Operation &op : body.without_terminator()) {
    // A one-hot pick reads one element, not the row: nothing to keep.
    if (!llvm::isa<ReduceSumOp, ReduceMaxOp, ReduceMinOp>(op) ||
        squeezed(shapeOf(op.getResult(0))) != squeezed(ks.keptShape) || matchOneHotPick(&op))
      continue;
    Value v = op.getOperand(0);
    Operation *def = v.getDefiningOp();
    Type ct = computeType(dtypeOf(v));
    bool readAgain = llvm::any_of(v.getUsers(), [&](Operation *u) { return u != &op; });
    int64_t bytes = n * (ct.getIntOrFloatBitWidth() / 8);
    if (!def || rowScratch.count(v) || ArrayRef<int64_t>(shapeOf(v)) != ArrayRef<int64_t>(ks.domain) ||
        !(ct.isF32() || ct.isF64()) || !readAgain || !costlyToRecompute(def) || bytes > budget)
      continue;
    budget -= bytes;
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&kernel.getBody().front());
    rowScratch[v].buffer =
        b.create<tile::ScratchOp>(loc, tile::PtrType::get(b.getContext(), ct), n);
  }
}

bool KernelEmitter::storeRowScratch(Value v, const Coords &c, Value x) {
  auto it = rowScratch.find(v);
  if (it == rowScratch.end() || it->second.filled)
    return false;
  int64_t bytes = getElementTypeOrSelf(x.getType()).getIntOrFloatBitWidth() / 8;
  b.create<tile::StoreOp>(loc, x, it->second.buffer, rowStart, activeLimit,
                          b.getI64IntegerAttr(1),
                          b.getI64IntegerAttr(std::min<int64_t>(64, block * bytes)),
                          UnitAttr());
  it->second.stored = c;
  return true;
}

std::optional<Value> KernelEmitter::loadRowScratch(Value v, const Coords &c) {
  auto it = rowScratch.find(v);
  if (it == rowScratch.end() || !it->second.filled || !rowStart)
    return std::nullopt;
  const Coords &stored = it->second.stored;
  auto same = [](const Coord &x, const Coord &y) {
    return x.scalar == y.scalar && x.coef == y.coef && x.vec == y.vec;
  };
  for (size_t d = 0; d < c.size(); ++d) {
    bool match = int64_t(d) == rowDim
                     ? c[d].scalar == rowStart && c[d].coef == 1 && !c[d].vec
                     : same(c[d], stored[d]);
    if (!match)
      return std::nullopt;
  }
  Type t = llvm::cast<tile::PtrType>(it->second.buffer.getType()).getPointee();
  return b.create<tile::LoadOp>(loc, vecType(t), it->second.buffer, rowStart, activeLimit,
                                b.getI64IntegerAttr(1))
      .getResult();
}

bool KernelEmitter::readsReduction(Value v) {
  llvm::DenseSet<Value> seen;
  SmallVector<Value> work = {v};
  while (!work.empty()) {
    Value x = work.pop_back_val();
    Operation *def = x.getDefiningOp();
    if (!def || !seen.insert(x).second)
      continue;
    if (isReductionOp(def))
      return true;
    for (Value operand : def->getOperands())
      work.push_back(operand);
  }
  return false;
}

LogicalResult KernelEmitter::storeDomainOutputs(ArrayRef<unsigned> outputs, const Coords &c) {
  Operation *yield = fusion.getBody().front().getTerminator();
  ArrayRef<int64_t> domain = fusion.getDomain();
  SmallVector<std::tuple<unsigned, Coords, Value>> computed;
  for (unsigned i : outputs) {
    auto s = shapeOf(yield->getOperand(i));
    Coords oc = squeezed(s) == squeezed(domain) ? matchUnitDims(c, domain, s)
                                                : delinearize(linearize(c, domain), s);
    FailureOr<Value> v = value(yield->getOperand(i), oc);
    if (failed(v))
      return failure();
    computed.emplace_back(i, std::move(oc), *v);
  }
  for (auto &[i, oc, v] : computed)
    if (failed(store(i, oc, v)))
      return failure();
  return success();
}

LogicalResult KernelEmitter::emit() {
  bindArguments(0);
  KeptSpace ks = keptSpace();
  planRowScratch(ks);
  kernel->setAttr(tile::kGridAttr, b.getI64IntegerAttr(ks.programs));
  Value pid = b.create<tile::ProgramIdOp>(loc, b.getI64Type());
  SmallVector<unsigned> yields(fusion.getNumResults());
  std::iota(yields.begin(), yields.end(), 0u);
  return emitProgram(ks, {keptDomainCoords(ks, pid)}, {}, yields);
}

LogicalResult KernelEmitter::emitProgram(const KeptSpace &ks, ArrayRef<Coords> programs,
                                         ArrayRef<Value> valid, ArrayRef<unsigned> yields) {
  Block &body = fusion.getBody().front();
  auto domain = ks.domain;
  auto reduced = SmallVector<int64_t>(fusion.getReduced());
  bool lanesKept = ks.lanesKept;
  SmallVector<int64_t> keptShape = ks.keptShape;
  auto keptCoords = [&](const Coords &dc, ArrayRef<int64_t> shape) {
    return this->keptCoords(ks, dc, shape);
  };
  // A column kernel (lanes along kept dimensions) with one reduction whose
  // walk covers the domain: full-size results that read no reduction are
  // stored by that walk at the elements it computes, instead of by a second
  // walk computing them again (gelu's backward beside its bias gradient).
  // With one reduction, every element is read in that one walk before any
  // result is written there, as in-place results need.
  {
    SmallVector<Operation *> reductionOps;
    for (Operation &op : body.without_terminator())
      if (isReductionOp(&op))
        reductionOps.push_back(&op);
    Operation *yieldOp = body.getTerminator();
    SmallVector<unsigned> full;
    bool allFree = true;
    for (unsigned i : yields) {
      auto s = shapeOf(yieldOp->getOperand(i));
      if (squeezed(s) == squeezed(keptShape))
        continue;
      if (squeezed(s) == squeezed(domain) || numel(s) == numel(domain)) {
        full.push_back(i);
        allFree &= !readsReduction(yieldOp->getOperand(i));
      }
    }
    if (lanesKept && !ks.flat && reductionOps.size() == 1 && !full.empty() && allFree &&
        shapeOf(reductionOps[0]->getOperand(0)) == domain) {
      earlyStoresIn = reductionOps[0];
      earlyOutputs = full;
    }
  }
  // Reductions whose result is one per program are computed once, in body
  // order (each after the reductions it reads: a softmax's max before its
  // sum), before anything that reads them: the per-program results stored
  // next and the loop over the reduced dimensions that writes the full-size
  // ones. Computed lazily inside another reduction's loop, a row max would
  // be recomputed for every block of the row.
  for (const Coords &dc : programs)
    for (Operation &op : body.without_terminator())
      if (isReductionOp(&op) && !llvm::is_contained(columnSums, &op) &&
          squeezed(shapeOf(op.getResult(0))) == squeezed(keptShape))
        if (failed(value(op.getResult(0), keptCoords(dc, shapeOf(op.getResult(0))))))
          return failure();
  Operation *yield = body.getTerminator();
  SmallVector<unsigned> domainOutputs;
  // Every per-program result is computed before any is stored: a kernel
  // reads all its inputs at an element before it writes there, which is
  // what lets a result overwrite an input it reads only at that element
  // (inPlaceCandidates).
  SmallVector<std::tuple<unsigned, Coords, Value>> computed;
  for (unsigned i : yields) {
    auto s = shapeOf(yield->getOperand(i));
    if (squeezed(s) == squeezed(keptShape)) {
      for (const Coords &dc : programs) {
        Coords oc = keptCoords(dc, s);
        FailureOr<Value> v = value(yield->getOperand(i), oc);
        if (failed(v))
          return failure();
        computed.emplace_back(i, std::move(oc), *v);
      }
    } else if (squeezed(s) == squeezed(domain) || numel(s) == numel(domain)) {
      if (!earlyStored || !llvm::is_contained(earlyOutputs, i))
        domainOutputs.push_back(i);
    } else if (numel(s) == numel(keptShape)) {
      // A reshaped per-program result: same elements in row-major order.
      for (const Coords &dc : programs)
        if (failed(store(i, delinearize(linearize(keptCoords(dc, keptShape), keptShape), s))))
          return failure();
    } else {
      return fusion.emitOpError()
             << "result #" << i << " has shape [" << s
             << "], which is neither the kernel's domain nor its reduced shape";
    }
  }
  for (auto &[i, oc, v] : computed)
    if (failed(store(i, oc, v)))
      return failure();
  if (domainOutputs.empty() && columnSums.empty())
    return success();

  ReducedLoops loops = reducedLoops(reduced, domain, lanesKept);
  SmallVector<int64_t> outer = loops.outerDims, outerSizes = loops.outerSizes;
  int64_t laneDim = loops.laneDim;
  // At each block: the accumulator rows' blocks loaded once (indexed by
  // the innermost dimension, the one the lanes run along), then for each
  // program's row the results stored and the column sums' terms folded in
  // (those of valid rows), then the accumulators stored: one
  // read-modify-write for all the rows of a group.
  auto storeAll = [&](ArrayRef<Coords> blocks) -> LogicalResult {
    SmallVector<Value> acc;
    Value at;
    if (!columnSums.empty()) {
      const Coords &c = blocks.front();
      if (laneDim != int64_t(domain.size()) - 1 || c[laneDim].coef != 1 || c[laneDim].vec)
        return fusion.emitOpError("internal error: column sums in a kernel whose lanes do not "
                                  "run along its rows");
      at = c[laneDim].scalar;
      for (Value accumulator : columnAccumulators) {
        Type t = llvm::cast<tile::PtrType>(accumulator.getType()).getPointee();
        acc.push_back(b.create<tile::LoadOp>(loc, vecType(t), accumulator, at, activeLimit,
                                             b.getI64IntegerAttr(1)));
      }
    }
    // The rows' terms are added in their compute type first, then
    // widened once: widening every term (an f32 sum accumulates in f64)
    // made the walk compute bound; a sum of a few terms adds an error of a
    // few units of roundoff, not one growing with the rows.
    SmallVector<Value> groupSum(columnSums.size());
    for (auto [r, c] : llvm::enumerate(blocks)) {
      for (auto [k, op] : llvm::enumerate(columnSums)) {
        FailureOr<Value> v = value(op->getOperand(0), c);
        if (failed(v))
          return failure();
        Value term = toBlock(*v);
        if (r < valid.size())
          term = b.create<arith::SelectOp>(
              loc, valid[r], term, splat(neutral(op, getElementTypeOrSelf(term.getType()))));
        groupSum[k] = groupSum[k] ? combine(op, groupSum[k], term) : term;
      }
      if (failed(storeDomainOutputs(domainOutputs, c)))
        return failure();
    }
    for (auto [k, accumulator] : llvm::enumerate(columnAccumulators))
      b.create<tile::StoreOp>(loc, accumulate(columnSums[k], acc[k], groupSum[k]), accumulator, at,
                              activeLimit, b.getI64IntegerAttr(1), b.getI64IntegerAttr(1),
                              UnitAttr());
    return success();
  };
  return forLoop(
      numel(outerSizes), ValueRange{},
      [&](Value o, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
        SmallVector<Coords> rows(programs.begin(), programs.end());
        for (Coords &cc : rows)
          scatterIndex(o, outer, outerSizes, cc);
        if (laneDim < 0)
          return storeAll(rows);
        int64_t n = domain[laneDim];
        return forLoop((n + block - 1) / block, ValueRange{},
                       [&](Value j, ValueRange, SmallVectorImpl<Value> &) -> LogicalResult {
                         Value start = mulS(j, block);
                         for (Coords &c2 : rows)
                           c2[laneDim] = {start, 1, {}, block};
                         activeLimit = lanesLeft(n, start);
                         rowStart = start;
                         return storeAll(rows);
                       });
      });
}

} // namespace

namespace {
/// Every dialect a tile kernel is built from (before any of its types).
void loadTileDialects(MLIRContext *ctx) {
  ctx->loadDialect<tile::TileDialect, arith::ArithDialect, math::MathDialect,
                   scf::SCFDialect, vector::VectorDialect, func::FuncDialect>();
}

/// Pointers to the storage (or, for `compute`, the compute) type of `values`.
SmallVector<Type> pointersTo(ValueRange values, bool compute = false) {
  SmallVector<Type> out;
  for (Value v : values)
    out.push_back(tile::PtrType::get(v.getContext(), compute ? computeType(dtypeOf(v))
                                                             : storageType(dtypeOf(v))));
  return out;
}

/// An empty kernel `name` for `fusion` at the end of `module`: its entry
/// block, the kernel, block and fused-ops attributes.
func::FuncOp createKernel(FusionOp fusion, ModuleOp module, StringRef name,
                          ArrayRef<Type> args, int64_t block) {
  OpBuilder b(fusion.getContext());
  b.setInsertionPointToEnd(module.getBody());
  auto kernel = b.create<func::FuncOp>(fusion.getLoc(), name, b.getFunctionType(args, {}));
  kernel.addEntryBlock();
  kernel->setAttr(tile::kKernelAttr, b.getUnitAttr());
  kernel->setAttr(tile::kBlockAttr, b.getI64IntegerAttr(block));
  SmallVector<Attribute> names;
  for (Operation &op : fusion.getBody().front().without_terminator())
    names.push_back(b.getStringAttr(op.getName().getStringRef()));
  kernel->setAttr(tile::kFusedOpsAttr, b.getArrayAttr(names));
  return kernel;
}

void finishKernel(func::FuncOp kernel) {
  OpBuilder end(kernel.getContext());
  end.setInsertionPointToEnd(&kernel.getBody().front());
  end.create<func::ReturnOp>(kernel.getLoc());
}
} // namespace

FailureOr<func::FuncOp> tilefuse::lowerFusionToTile(FusionOp fusion,
                                                    ModuleOp module,
                                                    const TargetInfo &target,
                                                    StringRef name) {
  loadTileDialects(fusion.getContext());
  SmallVector<Type> args = pointersTo(fusion.getInputs());
  args.append(pointersTo(fusion.getResults()));
  auto domain = fusion.getDomain();
  // Lanes along a kept dimension (pointwise kernels, column reductions)
  // stream like a pointwise kernel; lanes along a reduced row loop over it.
  bool rowReduction = !domain.empty() &&
                      llvm::is_contained(fusion.getReduced(), int64_t(domain.size()) - 1);
  int64_t block = target.blockSize(domain.empty() ? 1 : domain.back(), rowReduction);
  // A pointwise kernel whose rows fill at most half the block they would
  // get runs its lanes across rows: a [65536, 3] kernel would otherwise be
  // 65,536 GPU blocks of 32 threads with 3 working.
  bool flat = fusion.getReduced().empty() && domain.size() >= 2 && 2 * domain.back() <= block;
  if (flat)
    block = target.blockSize(numel(domain), /*rowReduction=*/false);
  // Likewise a row reduction whose rows (all its reduced elements) fill at
  // most half the block: one lane per row instead, lanes along the
  // innermost kept dimension.
  int64_t rowElements = 1, keptInner = -1;
  for (int64_t d = 0; d < int64_t(domain.size()); ++d) {
    if (llvm::is_contained(fusion.getReduced(), d))
      rowElements *= domain[d];
    else
      keptInner = d;
  }
  bool keptLanes = rowReduction && keptInner >= 0 && 2 * rowElements <= block &&
                   domain[keptInner] > 1;
  if (keptLanes)
    block = target.blockSize(domain[keptInner], /*rowReduction=*/false);
  func::FuncOp kernel = createKernel(fusion, module, name, args, block);
  KernelEmitter emitter(fusion, kernel, block, target);
  emitter.flatLanes = flat;
  emitter.keptLanes = keptLanes;
  if (failed(emitter.emit())) {
    kernel.erase();
    return failure();
  }
  finishKernel(kernel);
  return kernel;
}

namespace {
/// Appends to `out` the reductions of `body` (sum, max, min) when each
/// passes `accept` and none reads another's result; false when one does
/// not, or the body has an argmax.
template <typename Accept>
bool independentReductions(Block &body, Accept accept, SmallVectorImpl<Operation *> &out) {
  llvm::DenseSet<Operation *> dependsOnReduction;
  for (Operation &op : body.without_terminator()) {
    bool after = llvm::any_of(op.getOperands(), [&](Value v) {
      return v.getDefiningOp() && dependsOnReduction.contains(v.getDefiningOp());
    });
    if (llvm::isa<ArgmaxOp>(op))
      return false;
    if (llvm::isa<ReduceSumOp, ReduceMaxOp, ReduceMinOp>(op)) {
      if (after || !accept(op))
        return false;
      out.push_back(&op);
      after = true;
    }
    if (after)
      dependsOnReduction.insert(&op);
  }
  return true;
}
} // namespace

SmallVector<std::pair<unsigned, unsigned>> tilefuse::inPlaceCandidates(FusionOp fusion) {
  SmallVector<std::pair<unsigned, unsigned>> pairs;
  if (fusion.getKind() != "pointwise" || !fusion.getReduced().empty())
    return pairs;
  SmallVector<int64_t> domain(fusion.getDomain());
  Block &body = fusion.getBody().front();
  Operation *yield = body.getTerminator();
  for (BlockArgument arg : body.getArguments()) {
    auto argType = llvm::dyn_cast<RankedTensorType>(arg.getType());
    if (!argType || SmallVector<int64_t>(argType.getShape()) != domain)
      continue;
    // Every op that reads the input, directly or through other such ops,
    // must read its operands at the coordinates it computes.
    SmallVector<Value> work = {arg};
    llvm::SmallPtrSet<Operation *, 16> seen;
    bool sameIndex = true;
    while (!work.empty() && sameIndex) {
      Value v = work.pop_back_val();
      for (Operation *user : v.getUsers()) {
        if (user == yield || !seen.insert(user).second)
          continue;
        if (!readsOperandsInPlace(user) || user->getNumResults() != 1 ||
            shapeOf(user->getResult(0)) != domain) {
          sameIndex = false;
          break;
        }
        work.push_back(user->getResult(0));
      }
    }
    if (!sameIndex)
      continue;
    for (unsigned r = 0; r < yield->getNumOperands(); ++r)
      if (yield->getOperand(r).getType() == arg.getType())
        pairs.emplace_back(r, arg.getArgNumber());
  }
  return pairs;
}

SmallVector<Operation *> tilefuse::splittableReductions(FusionOp fusion) {
  SmallVector<Operation *> none, reductions;
  auto domain = fusion.getDomain();
  int64_t elements = 1;
  for (int64_t d : domain)
    elements *= d;
  // Worth two kernels only when one program would stream a lot of data.
  if (fusion.getKind() != "reduction" || int64_t(fusion.getReduced().size()) != int64_t(domain.size()) ||
      domain.empty() || elements < (int64_t(1) << 18))
    return none;
  Block &body = fusion.getBody().front();
  for (Value v : body.getTerminator()->getOperands())
    if (numel(shapeOf(v)) != 1)
      return none;
  // Every reduction folds the whole domain.
  auto accept = [&](Operation &op) {
    return numel(shapeOf(op.getResult(0))) == 1 &&
           numel(shapeOf(op.getOperand(0))) == elements;
  };
  if (!independentReductions(body, accept, reductions))
    return none;
  return reductions.empty() ? none : reductions;
}

namespace {
/// The partial and combine kernels of a split reduction: `column` splits
/// a column reduction (both kernels take blocks of kept elements), else a
/// full reduction (the combine kernel is one program over the slots).
FailureOr<std::pair<func::FuncOp, func::FuncOp>>
lowerSplit(FusionOp fusion, ArrayRef<Operation *> reductions, int64_t chunks, ModuleOp module,
           const TargetInfo &target, StringRef name, bool column) {
  loadTileDialects(fusion.getContext());
  SmallVector<Value> reduced;
  for (Operation *r : reductions)
    reduced.push_back(r->getOperand(0));
  SmallVector<Type> partialArgs = pointersTo(fusion.getInputs());
  partialArgs.append(pointersTo(reduced, /*compute=*/true)); // the slots
  SmallVector<Type> combineArgs(partialArgs);
  combineArgs.append(pointersTo(fusion.getResults()));
  int64_t block = target.blockSize(fusion.getDomain().back(), /*rowReduction=*/!column);
  int64_t combineBlock = column ? block : chunks;
  func::FuncOp partial = createKernel(fusion, module, (name + "_partial").str(), partialArgs, block);
  func::FuncOp combine =
      createKernel(fusion, module, (name + "_combine").str(), combineArgs, combineBlock);
  KernelEmitter first(fusion, partial, block, target);
  KernelEmitter second(fusion, combine, combineBlock, target);
  LogicalResult ok = column ? success(succeeded(first.emitColumnPartial(chunks, reductions)) &&
                                      succeeded(second.emitColumnCombine(chunks, reductions)))
                            : success(succeeded(first.emitPartial(chunks, reductions)) &&
                                      succeeded(second.emitCombine(chunks, reductions)));
  if (failed(ok)) {
    partial.erase();
    combine.erase();
    return failure();
  }
  finishKernel(partial);
  finishKernel(combine);
  return std::make_pair(partial, combine);
}

} // namespace

FailureOr<std::pair<func::FuncOp, func::FuncOp>>
tilefuse::lowerSplitReduction(FusionOp fusion, ArrayRef<Operation *> reductions,
                              int64_t chunks, ModuleOp module, const TargetInfo &target,
                              StringRef name) {
  return lowerSplit(fusion, reductions, chunks, module, target, name, /*column=*/false);
}

bool tilefuse::columnPartialWalksRows(FusionOp fusion, ArrayRef<Operation *> reductions,
                                      const TargetInfo &target) {
  int64_t kept = 1;
  for (auto [d, size] : llvm::enumerate(fusion.getDomain()))
    if (!llvm::is_contained(fusion.getReduced(), int64_t(d)))
      kept *= size;
  int64_t bytes = 0;
  for (Operation *op : reductions) {
    // f32 sums accumulate in f64 (KernelEmitter::widensSum).
    Type ct = computeType(dtypeOf(op->getOperand(0)));
    bool widened = isa<ReduceSumOp>(op) && ct.isF32();
    bytes += kept * (widened ? 8 : std::max<int64_t>(1, ct.getIntOrFloatBitWidth() / 8));
  }
  return bytes <= target.rowScratchBytes();
}

SmallVector<Operation *> tilefuse::columnSplittableReductions(FusionOp fusion) {
  SmallVector<Operation *> none, reductions;
  auto domain = fusion.getDomain();
  auto reduced = fusion.getReduced();
  int64_t rank = domain.size();
  // Lanes along the kept innermost dimension (of more than one element:
  // slots are written block by block); every result kept-shaped.
  if (fusion.getKind() != "reduction" || rank < 2 || reduced.empty() ||
      llvm::is_contained(reduced, rank - 1) || domain.back() < 2)
    return none;
  SmallVector<int64_t> keptShape;
  int64_t elements = 1;
  for (int64_t d = 0; d < rank; ++d) {
    elements *= domain[d];
    if (!llvm::is_contained(reduced, d))
      keptShape.push_back(domain[d]);
  }
  Block &body = fusion.getBody().front();
  for (Value v : body.getTerminator()->getOperands()) {
    Operation *def = v.getDefiningOp();
    if (squeezed(shapeOf(v)) != squeezed(keptShape) && !(def && isTotalOf(def, fusion)))
      return none;
  }
  // Each folds exactly the kernel's reduced dimensions of a domain-shaped
  // value (the partial kernel walks the domain's rows once for all), or
  // sums it whole (a total: column partials, summed over the columns by
  // the combine kernel).
  auto accept = [&](Operation &op) {
    auto dims = op.getAttrOfType<DenseI64ArrayAttr>("dims").asArrayRef();
    return isTotalOf(&op, fusion) ||
           (shapeOf(op.getOperand(0)) == SmallVector<int64_t>(domain) &&
            SmallVector<int64_t>(dims) == SmallVector<int64_t>(reduced) &&
            squeezed(shapeOf(op.getResult(0))) == squeezed(keptShape));
  };
  if (!independentReductions(body, accept, reductions))
    return none;
  return reductions;
}

FailureOr<std::pair<func::FuncOp, func::FuncOp>>
tilefuse::lowerSplitColumnReduction(FusionOp fusion, ArrayRef<Operation *> reductions,
                                    int64_t chunks, ModuleOp module, const TargetInfo &target,
                                    StringRef name) {
  return lowerSplit(fusion, reductions, chunks, module, target, name, /*column=*/true);
}

FailureOr<RowColumnKernels> tilefuse::lowerRowsWithColumnSums(FusionOp fusion,
                                                             ArrayRef<Operation *> sums,
                                                             int64_t chunks, ModuleOp module,
                                                             const TargetInfo &target,
                                                             StringRef name) {
  loadTileDialects(fusion.getContext());
  // What the fusion pass merges (mergeColumnKernels): sums over every
  // dimension but the innermost, or all, of the domain, with an f64
  // accumulator row each in the target's scratch.
  auto domain = fusion.getDomain();
  int64_t rank = domain.size(), bytes = 0;
  for (Operation *op : sums) {
    auto dims = op->getAttrOfType<DenseI64ArrayAttr>("dims");
    bool columnsOrAll = dims && (int64_t(dims.size()) == rank || int64_t(dims.size()) == rank - 1);
    for (int64_t d = 0; columnsOrAll && d < int64_t(dims.size()); ++d)
      columnsOrAll = dims[d] == d;
    if (!llvm::isa<ReduceSumOp>(op) || ArrayRef<int64_t>(shapeOf(op->getOperand(0))) != domain ||
        !columnsOrAll)
      return op->emitOpError("cannot run in a row kernel: only sums of the kernel's domain over "
                             "every dimension but the innermost, or over all, can (run the fusion "
                             "pass to form the kernels)");
    bytes += domain.back() * 8;
  }
  if (bytes > target.rowScratchBytes())
    return fusion.emitOpError("folds ")
           << sums.size() << " column sums of " << domain.back()
           << " columns in its row kernel, which needs " << bytes
           << " bytes of scratch; the " << target.name() << " target has "
           << target.rowScratchBytes() << " (run the fusion pass for this target)";
  RowColumnKernels out;
  // Results that read a column sum exist once every slice is folded: they
  // are the sums themselves (the fusion pass puts nothing after them).
  llvm::DenseSet<Value> fromSums;
  for (Operation &op : fusion.getBody().front().without_terminator())
    if (llvm::is_contained(sums, &op) || llvm::any_of(op.getOperands(), [&](Value v) {
          return fromSums.contains(v);
        }))
      fromSums.insert(op.getResult(0));
  Operation *yield = fusion.getBody().front().getTerminator();
  for (auto [i, v] : llvm::enumerate(yield->getOperands())) {
    if (!fromSums.contains(v)) {
      out.rowYields.push_back(i);
      continue;
    }
    if (!llvm::is_contained(sums, v.getDefiningOp()))
      return fusion.emitOpError("internal error: result #")
             << i << " computes on a column sum; only the sums themselves can be results";
    out.columnYields.push_back(i);
  }
  SmallVector<Value> summed;
  for (Operation *op : sums)
    summed.push_back(op->getOperand(0));
  SmallVector<Type> slots = pointersTo(summed, /*compute=*/true);
  SmallVector<Type> partialArgs = pointersTo(fusion.getInputs());
  partialArgs.append(slots);
  SmallVector<Type> combineArgs(partialArgs);
  for (unsigned i : out.rowYields)
    partialArgs.append(pointersTo(fusion.getResult(i)));
  for (unsigned i : out.columnYields)
    combineArgs.append(pointersTo(fusion.getResult(i)));
  int64_t rowBlock = target.blockSize(fusion.getDomain().back(), /*rowReduction=*/true);
  int64_t columnBlock = target.blockSize(fusion.getDomain().back(), /*rowReduction=*/false);
  out.partial = createKernel(fusion, module, (name + "_partial").str(), partialArgs, rowBlock);
  out.combine = createKernel(fusion, module, (name + "_combine").str(), combineArgs, columnBlock);
  KernelEmitter first(fusion, out.partial, rowBlock, target);
  KernelEmitter second(fusion, out.combine, columnBlock, target);
  if (failed(first.emitRowsWithColumnPartials(chunks, sums, out.rowYields)) ||
      failed(second.emitColumnCombine(chunks, sums, &out.columnYields))) {
    out.partial.erase();
    out.combine.erase();
    return failure();
  }
  finishKernel(out.partial);
  finishKernel(out.combine);
  return out;
}

int64_t tilefuse::keptPrograms(FusionOp fusion, const TargetInfo &target) {
  auto domain = fusion.getDomain();
  auto reduced = fusion.getReduced();
  int64_t rank = domain.size(), programs = 1;
  if (rank == 0 || llvm::is_contained(reduced, rank - 1))
    return 1;
  int64_t block = target.blockSize(domain.back(), /*rowReduction=*/false);
  for (int64_t d = 0; d + 1 < rank; ++d)
    if (!llvm::is_contained(reduced, d))
      programs *= domain[d];
  return programs * ((domain.back() + block - 1) / block);
}

void tilefuse::hoistDenseConstants(func::FuncOp func) {
  SmallVector<FusionOp> fusions;
  func.walk([&](FusionOp f) { fusions.push_back(f); });
  for (FusionOp f : fusions) {
    Block &body = f.getBody().front();
    SmallVector<ConstantOp> dense;
    for (auto k : body.getOps<ConstantOp>())
      if (!llvm::isa<SplatElementsAttr>(k.getValue()))
        dense.push_back(k);
    if (dense.empty())
      continue;
    OpBuilder b(f);
    SmallVector<Value> inputs(f.getInputs());
    for (ConstantOp k : dense) {
      auto outside = b.create<ConstantOp>(k.getLoc(), k.getValue());
      inputs.push_back(outside);
      BlockArgument arg = body.addArgument(k.getType(), k.getLoc());
      k.getResult().replaceAllUsesWith(arg);
      k.erase();
    }
    f.getInputsMutable().assign(inputs);
  }
}
