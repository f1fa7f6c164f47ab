//===- KernelEmitter.h - the core of graph.fusion -> tile ---------*- C++ -*-===//
//
// The state every tile kernel is emitted with (coordinates, value lookup
// and memoisation, loads and stores, loops, accumulators, scratch rows) and
// the two ways a kernel family plugs into it:
//
//  - an op family lowers op kinds of a fusion body at coordinates, inside
//    whatever kernel asks for their values: its file defines
//    populate<Name>Lowerings (one line in KernelFamilies.def registers it);
//  - a kernel family lays out whole kernels (which programs walk what, which
//    slots they fill) by driving a KernelEmitter from a public function in
//    FusionToTile.h, which ProgramBuilder calls.
//
// Families are free functions over a KernelEmitter, not members of it: a new
// family is a new file, not a longer class. Which file owns which family is
// listed in docs/ARCHITECTURE.md ("Kernel families").
//
// Internal to codegen/tile; nothing outside it includes this header.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_CODEGEN_TILE_KERNELEMITTER_H
#define TILEFUSE_CODEGEN_TILE_KERNELEMITTER_H

#include "ir/graph/GraphDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"

#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace tilefuse {
class TargetInfo;

namespace tilegen {

/// Alignment of a coordinate known to be 0 (every number divides it).
constexpr int64_t kAligned = int64_t(1) << 40;

inline llvm::SmallVector<int64_t> shapeOf(mlir::Value v) {
  return llvm::SmallVector<int64_t>(llvm::cast<mlir::RankedTensorType>(v.getType()).getShape());
}
inline mlir::Type dtypeOf(mlir::Value v) {
  return llvm::cast<mlir::RankedTensorType>(v.getType()).getElementType();
}
inline int64_t numel(llvm::ArrayRef<int64_t> s) {
  return std::accumulate(s.begin(), s.end(), int64_t(1), std::multiplies<>());
}
inline llvm::SmallVector<int64_t> rowMajorStrides(llvm::ArrayRef<int64_t> shape) {
  llvm::SmallVector<int64_t> st(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    st[d] = st[d + 1] * shape[d + 1];
  return st;
}
inline llvm::SmallVector<int64_t> squeezed(llvm::ArrayRef<int64_t> s) {
  llvm::SmallVector<int64_t> out;
  for (int64_t d : s)
    if (d != 1)
      out.push_back(d);
  return out;
}
inline int64_t gcd(int64_t a, int64_t b) { return std::gcd(a, b); }

/// How a program walks reduced dimensions `dims` of `shape`: lanes along
/// the innermost one (unless the lanes already run elsewhere), a scalar
/// loop over the others.
struct ReducedLoops {
  llvm::SmallVector<int64_t> outerDims, outerSizes;
  int64_t laneDim = -1;
};
ReducedLoops reducedLoops(llvm::ArrayRef<int64_t> dims, llvm::ArrayRef<int64_t> shape,
                          bool lanesElsewhere);

/// Storage type of a dtype in memory (booleans are bytes).
mlir::Type storageType(mlir::Type dtype);
/// Type the kernel computes a dtype in: f16 and bf16 widen to f32.
mlir::Type computeType(mlir::Type dtype);

/// Index of one dimension for the lanes of the current block: lane `l` is
/// at `scalar + (l / div) * coef`, unless `vec` holds one index per lane.
/// A `div` above 1 (each index repeated for `div` lanes) comes from lanes
/// running along a dimension of `div` elements inside a reshape: the
/// inverse of a strided slice, nearest upsampling. Loads read it as a
/// contiguous block spread over the lanes, not as a gather.
struct Coord {
  mlir::Value scalar;
  int64_t coef = 0;
  mlir::Value vec;
  /// A number known to divide `scalar` (for reshapes that keep lanes in one row).
  int64_t align = 1;
  int64_t div = 1;
  bool isScalar() const { return !vec && coef == 0; }
  bool isAffine() const { return !vec; }
  /// Lane l at scalar + l * coef: one index per lane, evenly spaced.
  bool isLinear() const { return !vec && div == 1; }
};
using Coords = llvm::SmallVector<Coord>;

/// The ops a kernel reduces with (each gets a loop over reduced dimensions).
bool isReductionOp(mlir::Operation *op);
/// Whether `v` (a value of a fusion's body) reads a reduction's result.
bool readsReduction(mlir::Value v);
/// Ops that read every operand at the coordinates they write: lowered by
/// the elementwise family or as a cast.
bool readsOperandsInPlace(mlir::Operation *op);

/// How the kept dimensions of the domain are divided among programs:
/// lanes along the innermost one when it is kept, one program per
/// element of the others.
struct KeptSpace {
  llvm::SmallVector<int64_t> domain, kept, keptShape, progDims, progSizes;
  bool lanesKept = false;
  bool flat = false; ///< lanes across rows: programs are blocks of the domain
  int64_t laneDim = -1; ///< the kept dimension lanes run along
  /// Index into progDims of the dimension consecutive programs step along
  /// (-1: programs walk the blocks of a row first, then rows in row-major
  /// order). Set for kernels reading an input transposed, see emit().
  int64_t fastProgDim = -1;
  int64_t blocksPerRow = 1, programs = 1, elements = 1;
};

/// Emits one tile program for a graph.fusion into `kernel`. Its members are
/// the core that op families and kernel families build on; they are public
/// because the families are functions of their own files.
class KernelEmitter {
public:
  KernelEmitter(graph::FusionOp fusion, mlir::func::FuncOp kernel, int64_t block,
                const TargetInfo &target)
      : fusion(fusion), kernel(kernel), b(kernel.getContext()),
        loc(fusion.getLoc()), block(block), target(target) {}

  // --- the kernel entry (FusionToTile.cpp) ----------------------------------
  /// The kernel of a fusion: one program per block of kept elements.
  mlir::LogicalResult emit();
  /// Pointwise kernels only: lanes run across rows, over blocks of the
  /// whole domain (see lowerFusionToTile).
  bool flatLanes = false;
  /// Row reductions of short rows: lanes along the innermost kept
  /// dimension, one row each (see lowerFusionToTile).
  bool keptLanes = false;

  // --- constants and scalar index arithmetic ------------------------------
  mlir::Value cst(int64_t v);
  std::optional<int64_t> constOf(mlir::Value v);
  mlir::Value addS(mlir::Value a, mlir::Value c);
  mlir::Value mulS(mlir::Value a, int64_t k);
  mlir::Value divS(mlir::Value a, int64_t k);
  mlir::Value remS(mlir::Value a, int64_t k);
  int64_t alignOf(mlir::Value v, int64_t fallback);

  // --- blocks ---------------------------------------------------------------
  mlir::VectorType vecType(mlir::Type element) { return mlir::VectorType::get({block}, element); }
  mlir::Value splat(mlir::Value scalar);
  mlir::Value toBlock(mlir::Value v);
  mlir::Value lanes();
  /// Lanes in [activeFirst, activeLimit) of the current block.
  mlir::Value activeMask();
  /// The active limit of a block starting at `start` (a multiple of the
  /// block) in a range of `n`: the block itself when every block is full,
  /// so loads and stores need no mask.
  mlir::Value lanesLeft(int64_t n, mlir::Value start);
  mlir::Value coordVector(const Coord &c);
  Coord constCoord(int64_t v) { return {cst(v), 0, {}, v == 0 ? kAligned : v}; }
  Coord add(const Coord &x, const Coord &y);
  Coord scale(const Coord &x, int64_t k);
  /// Row-major linear index of `c` in `shape`.
  Coord linearize(const Coords &c, llvm::ArrayRef<int64_t> shape);
  /// Coordinates of linear index `lin` in `shape`. Lanes stay affine when
  /// every lane of the block lies in one innermost row of `shape`.
  Coords delinearize(const Coord &lin, llvm::ArrayRef<int64_t> shape);

  /// Row-major delinearisation of the scalar `linear` over `sizes`, stored
  /// into the coordinates `dims` of `into`.
  void scatterIndex(mlir::Value linear, llvm::ArrayRef<int64_t> dims,
                    llvm::ArrayRef<int64_t> sizes, Coords &into);

  /// Affine indices delinearize turned into per-lane or repeated coordinates.
  struct Delinearized {
    llvm::SmallVector<int64_t> shape;
    Coords coords;
    Coord lin;
  };
  llvm::SmallVector<Delinearized> delinearized;

  // --- memo of emitted values, scoped by loop nest ------------------------
  using Key = std::pair<void *, std::string>;
  Key keyOf(mlir::Value v, const Coords &c);
  struct Scope {
    KernelEmitter &e;
    mlir::Value savedLimit, savedFirst, savedRowStart;
    explicit Scope(KernelEmitter &e)
        : e(e), savedLimit(e.activeLimit), savedFirst(e.activeFirst), savedRowStart(e.rowStart) {
      e.memo.emplace_back();
    }
    ~Scope() {
      e.memo.pop_back();
      e.activeLimit = savedLimit;
      e.activeFirst = savedFirst;
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
    mlir::Value buffer;
    /// The value's coordinates in the pass that stored it (the row's
    /// dimension aside): a later pass loads it at the same ones.
    Coords stored;
    bool filled = false;
  };
  /// Stores block `x` of `v` at row coordinates `c` when `v` has a scratch
  /// row not yet filled; returns whether it did.
  bool storeRowScratch(mlir::Value v, const Coords &c, mlir::Value x);
  /// `v` at `c` loaded from its filled scratch row, when `c` is the current
  /// block of the row the scratch holds.
  std::optional<mlir::Value> loadRowScratch(mlir::Value v, const Coords &c);
  /// A row kernel's row: its one reduced dimension, innermost; -1 in
  /// other kernels.
  int64_t rowDim = -1;
  mlir::Value rowStart;          ///< first element of the current block of the row
  llvm::MapVector<mlir::Value, RowScratch> rowScratch;

  // --- values ---------------------------------------------------------------
  /// The value of `v` (a value of the fusion's body) at coordinates `c`:
  /// memoised, views followed, everything else lowered by its op family.
  mlir::FailureOr<mlir::Value> value(mlir::Value v, const Coords &c);
  std::optional<mlir::Value> memoized(const Key &key);
  /// Computes, bottom-up, the operands of `root` reached through ops that
  /// read their operands at the same coordinates `c`.
  mlir::LogicalResult computeOperandChains(mlir::Operation *root, const Coords &c);
  /// Coordinates in `to` of a reshape's result coordinates `c` (shape
  /// `from`) when the reshape keeps the rows (the innermost dimension),
  /// splits each row into groups, or merges groups into rows, the lanes
  /// running along the rows or groups; nullopt otherwise (delinearize of
  /// the linear index then).
  std::optional<Coords> reshapeAlongRows(const Coords &c, llvm::ArrayRef<int64_t> from,
                                         llvm::ArrayRef<int64_t> to);
  /// The operand a view reads and the coordinates it reads it at.
  std::optional<std::pair<mlir::Value, Coords>> viewSource(mlir::Operation *op, const Coords &c);
  mlir::FailureOr<mlir::Value> compute(mlir::Value v, const Coords &c);
  mlir::FailureOr<mlir::Value> load(mlir::BlockArgument arg, const Coords &c);
  /// Full-size results the walk of reduction `earlyStoresIn` stores at the
  /// elements it computes (emit(): they read no reduction); `earlyStored`
  /// says that walk was emitted.
  mlir::Operation *earlyStoresIn = nullptr;
  llvm::SmallVector<unsigned> earlyOutputs;
  bool earlyStored = false;
  /// Stores results `outputs` (full size) at domain coordinates `c`, all
  /// computed before any is stored.
  mlir::LogicalResult storeDomainOutputs(llvm::ArrayRef<unsigned> outputs, const Coords &c);
  /// Block `j` of `operand` along dimension `dim` (of `n` elements) at
  /// `coords`, as a block; the active limit becomes the lanes in the row.
  mlir::FailureOr<mlir::Value> rowBlock(mlir::Value operand, Coords coords, int64_t dim,
                                        int64_t n, mlir::Value j);

  // --- accumulators -----------------------------------------------------------
  mlir::Value neutral(mlir::Operation *op, mlir::Type t);
  mlir::Value combine(mlir::Operation *op, mlir::Value acc, mlir::Value v);
  /// Whether reduction `op` over values of type `t` accumulates wider (an
  /// f32 sum in f64); the accumulator's initial value (`neutralValue`,
  /// widened), one step, and its value in the reduction's compute type.
  bool widensSum(mlir::Operation *op, mlir::Type t) const;
  mlir::Value accumulatorInit(mlir::Operation *op, mlir::Value neutralValue);
  mlir::Value accumulate(mlir::Operation *op, mlir::Value acc, mlir::Value x);
  mlir::Value accumulated(mlir::Operation *op, mlir::Value acc);

  // --- stores -----------------------------------------------------------------
  /// Stores result `output` at `c`: `computed` when given, else computed here.
  mlir::LogicalResult store(unsigned output, const Coords &c, mlir::Value computed = {});
  /// Element offset of lane 0 (or per-lane offsets in `vecOffsets`); `align`
  /// receives a number of elements known to divide it. With `div`, lanes
  /// may repeat each offset (lane l at offset + (l / *div) * stride);
  /// without it they are returned per lane.
  mlir::Value offsetOf(const Coords &c, llvm::ArrayRef<int64_t> shape, int64_t &stride,
                       mlir::Value &vecOffsets, int64_t *align = nullptr, int64_t *div = nullptr);
  /// Coordinates of a value of `shape` from coordinates `from` of a shape
  /// with the same non-unit dimensions.
  Coords matchUnitDims(const Coords &from, llvm::ArrayRef<int64_t> fromShape,
                       llvm::ArrayRef<int64_t> shape);

  // --- loops ------------------------------------------------------------------
  /// Loop `n` times (scalar induction variable), running `body` in a scope.
  template <typename Fn>
  mlir::LogicalResult forLoop(int64_t n, mlir::ValueRange init, Fn body,
                              llvm::SmallVectorImpl<mlir::Value> *results = nullptr) {
    return forLoopRange(cst(0), cst(n), init, body, results);
  }
  /// Loop over [lo, hi).
  template <typename Fn>
  mlir::LogicalResult forLoopRange(mlir::Value lo, mlir::Value hi, mlir::ValueRange init, Fn body,
                                   llvm::SmallVectorImpl<mlir::Value> *results = nullptr);

  // --- programs -----------------------------------------------------------------
  KeptSpace keptSpace() { return keptSpace(fusion.getReduced()); }
  /// The kept space of the fusion's domain with `reduced` folded.
  KeptSpace keptSpace(llvm::ArrayRef<int64_t> reduced);
  /// Programs of a kernel at domain coordinates `programs` (reduced ones
  /// unset; one, or a group of rows of a row kernel with column sums):
  /// their per-program results among `yields`, then one walk over the
  /// reduced dimensions storing the full-size ones and folding the column
  /// sums (columnSums) of the programs that `valid` (one flag per program,
  /// or none: all) says are real at every block.
  mlir::LogicalResult emitProgram(const KeptSpace &ks, llvm::ArrayRef<Coords> programs,
                                  llvm::ArrayRef<mlir::Value> valid,
                                  llvm::ArrayRef<unsigned> yields);
  /// Column sums of a row kernel folded by its walk: each has an
  /// accumulator row in scratch (RowColumnSumsToTile.cpp).
  llvm::SmallVector<mlir::Operation *> columnSums;
  llvm::SmallVector<mlir::Value> columnAccumulators;
  int64_t columnScratchBytes = 0;
  /// Plans the scratch rows of this kernel (none where the target has no
  /// scratch or the kernel is not a row kernel).
  void planRowScratch(const KeptSpace &ks);
  /// Domain coordinates of kept program `pid` (reduced ones unset); sets
  /// the active limit when lanes run along a kept dimension.
  Coords keptDomainCoords(const KeptSpace &k, mlir::Value pid);
  /// The kept part of domain coordinates `dc`, for a value of `shape`.
  Coords keptCoords(const KeptSpace &k, const Coords &dc, llvm::ArrayRef<int64_t> shape);
  /// Rows [first, end) of slice `slice` of `n` slices of `rows` rows, and
  /// the number of groups of `perGroup` rows that cover them.
  std::tuple<mlir::Value, mlir::Value, mlir::Value> sliceRows(mlir::Value slice, int64_t rows,
                                                              int64_t n, int64_t perGroup);
  /// Maps the fusion's inputs to the kernel's first arguments and, unless
  /// `partial` (a partial kernel writes slots, not the fusion's results),
  /// its results to the arguments after `extraBeforeOutputs` slot pointers.
  /// With `only`, just those results, in that order.
  void bindArguments(unsigned extraBeforeOutputs, bool partial = false,
                     const llvm::SmallVector<unsigned> *only = nullptr);
  Coords unitCoords(mlir::Value v) { return Coords(shapeOf(v).size(), constCoord(0)); }
  mlir::Value chunkId;      ///< partial kernel: the slice this program reduces
  int64_t chunks = 0; ///< partial kernel: number of slices

  graph::FusionOp fusion;
  mlir::func::FuncOp kernel;
  mlir::OpBuilder b;
  mlir::Location loc;
  int64_t block;
  const TargetInfo &target;
  std::map<int64_t, mlir::Value> intConstants;
  mlir::Value laneIds;
  mlir::Value activeLimit;
  /// Lanes below this one read no memory (null: none); set where a block
  /// starts before the input it reads (concat's later inputs).
  mlir::Value activeFirst;
  std::vector<std::map<Key, mlir::Value>> memo;
  llvm::DenseMap<mlir::Value, mlir::Value> argPointers; // block argument -> kernel argument
  llvm::SmallVector<mlir::Value> outputPointers;
};

template <typename Fn>
mlir::LogicalResult KernelEmitter::forLoopRange(mlir::Value lo, mlir::Value hi,
                                                mlir::ValueRange init, Fn body,
                                                llvm::SmallVectorImpl<mlir::Value> *results) {
  auto loop = b.create<mlir::scf::ForOp>(loc, lo, hi, cst(1), init);
  mlir::OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(loop.getBody());
  llvm::SmallVector<mlir::Value> yielded;
  {
    Scope scope(*this);
    if (mlir::failed(body(loop.getInductionVar(), loop.getRegionIterArgs(), yielded)))
      return mlir::failure();
  }
  // A loop without iteration values comes with its terminator already.
  if (!loop.getBody()->mightHaveTerminator())
    b.create<mlir::scf::YieldOp>(loc, yielded);
  if (results)
    results->assign(loop.getResults().begin(), loop.getResults().end());
  return mlir::success();
}

// --- op families -------------------------------------------------------------

/// Lowers op `op` of the fusion body at coordinates `c`: the entry of an op
/// family for the op kinds it registered.
using OpLowering = mlir::FailureOr<mlir::Value> (*)(KernelEmitter &e, mlir::Operation *op,
                                                    const Coords &c);

/// Which op family lowers each op kind (filled by the populate functions
/// KernelFamilies.def lists).
class OpLowerings {
public:
  /// `lower` handles ops of kinds `Ops`.
  template <typename... Ops>
  void add(OpLowering lower) {
    (table.try_emplace(mlir::TypeID::get<Ops>(), lower), ...);
  }
  /// The lowering registered for `op`'s kind; null when none is.
  OpLowering lookup(mlir::Operation *op) const;

private:
  llvm::DenseMap<mlir::TypeID, OpLowering> table;
};

/// Every op family's lowerings, built once.
const OpLowerings &opLowerings();

#define TILEFUSE_OP_FAMILY(Name) void populate##Name##Lowerings(OpLowerings &lowerings);
#include "codegen/tile/KernelFamilies.def"
#undef TILEFUSE_OP_FAMILY

// --- shared between families ---------------------------------------------------

/// A sum along `dim` of select(iota_dim == index, v, 0), possibly negated
/// (see oneHotPick).
struct OneHotPick {
  int64_t dim = 0;
  mlir::Value index;
  graph::SelectOp select;
  bool negated = false;
};
std::optional<OneHotPick> matchOneHotPick(mlir::Operation *op);
/// Reduction `op` as a one-hot pick at operand coordinates `operandCoords`
/// of its kept dimensions (SpecialOpsToTile.cpp); nullopt when it is none.
std::optional<mlir::FailureOr<mlir::Value>> oneHotPick(KernelEmitter &e, mlir::Operation *op,
                                                       Coords operandCoords);

/// The combine kernel of a split column reduction, or of a row kernel's
/// column sums (SplitReduceToTile.cpp): folds the `chunks` slices of each
/// reduction's slots for a block of kept elements and stores `yields`, the
/// results it computes (null: all of them). The kept elements are the
/// fusion's, or with `yields` and not `keptOfFusion` a row kernel's
/// columns (every dimension but the innermost reduced).
mlir::LogicalResult emitColumnCombine(KernelEmitter &e, int64_t chunks,
                                      llvm::ArrayRef<mlir::Operation *> reductions,
                                      const llvm::SmallVector<unsigned> *yields = nullptr,
                                      bool keptOfFusion = false);

// --- kernels ---------------------------------------------------------------------

/// Every dialect a tile kernel is built from (before any of its types).
void loadTileDialects(mlir::MLIRContext *ctx);
/// Pointers to the storage (or, for `compute`, the compute) type of `values`.
llvm::SmallVector<mlir::Type> pointersTo(mlir::ValueRange values, bool compute = false);
/// An empty kernel `name` for `fusion` at the end of `module`: its entry
/// block, the kernel, block and fused-ops attributes.
mlir::func::FuncOp createKernel(graph::FusionOp fusion, mlir::ModuleOp module,
                                llvm::StringRef name, llvm::ArrayRef<mlir::Type> args,
                                int64_t block);
void finishKernel(mlir::func::FuncOp kernel);

} // namespace tilegen
} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_TILE_KERNELEMITTER_H
