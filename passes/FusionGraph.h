//===- FusionGraph.h - the kernels the fusion pass forms ----------*- C++ -*-===//
//
// What the fusion pass knows while it groups ops into kernels: which group
// (kernel) each op is in, which cheap ops and views are recomputed inside
// their readers, and what a kernel or op reads from which kernels. The
// fusion rules (FusionRules.h) ask these questions; the driver (FuseOps.cpp)
// changes the groups. Internal to passes/.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_PASSES_FUSIONGRAPH_H
#define TILEFUSE_PASSES_FUSIONGRAPH_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <string>
#include <vector>

namespace tilefuse::fusion {

bool isGenerator(mlir::Operation *op);
bool isLibraryCall(mlir::Operation *op);
bool isReduction(mlir::Operation *op);
/// Cheap ops that, computed from kernel inputs alone, are recomputed inside
/// every kernel that reads them instead of being a kernel of their own (a
/// broadcast bias, a one-hot mask from labels, a cast of an input).
bool isCheapToRecompute(mlir::Operation *op);
/// Ops that read their operand at another index than they write.
bool isIndexRemap(mlir::Operation *op);
/// Index remaps that a consumer kernel can apply while reading its input.
bool isView(mlir::Operation *op);
/// A concatenation of constants and views of one value (a padding, zeros
/// interleaved, edges replicated): like a view, read through by its
/// readers, no kernel.
bool isPadding(mlir::Operation *op);
/// A value must exist in memory when a library call or the return reads it.
bool needsMaterializing(mlir::Operation *op);

llvm::SmallVector<int64_t> shapeOf(mlir::Value v);
int64_t numel(llvm::ArrayRef<int64_t> s);

/// The loop nest an op runs in: its result shape, or for a reduction its
/// operand shape and the reduced dimensions.
struct Domain {
  llvm::SmallVector<int64_t> shape;
  llvm::SmallVector<int64_t> reduced;
};
Domain domainOf(mlir::Operation *op);

/// `shape` with `dims` removed (or kept as 1).
llvm::SmallVector<int64_t> reducedShape(llvm::ArrayRef<int64_t> shape,
                                        llvm::ArrayRef<int64_t> dims, bool keepdim);
/// Reduced dims are the innermost ones, and not all of them: each program
/// owns whole rows, so it can use a row's reduction on that row again
/// (softmax, layer_norm). A full reduction is not a row kernel: reading its
/// result back would serialise the kernel on one program.
bool isRowReduction(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<int64_t> dims);
/// Whether each program of a kernel reducing `dims` of `shape` folds whole
/// reductions itself, so that values computed from their results can be
/// used at full size in the same kernel (a second walk of the reduced
/// dims): a row reduction, or one over other dims whose kept elements
/// stream like a pointwise kernel -- the innermost dim kept and wide, and
/// kept elements enough for every core (log_softmax over the channels of
/// [N, C, H, W]). A reduction keeping few elements (batch norm's statistics
/// over N, H, W) is split across programs instead, and so is refused.
bool ownsWholeReductions(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<int64_t> dims);
/// Reduced dims are all but the innermost (layer_norm's dgamma).
bool isColumnReduction(const Domain &d);
/// A sum over every dimension of its operand.
bool isTotal(mlir::Operation *op);
/// Same elements, only size-1 dimensions added or removed.
bool onlyUnitDimsChange(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

/// Recomputed chains (views, cheap ops of leaves) are cloned into every
/// kernel that reads them; past this depth the op is computed once in a
/// kernel instead. This also bounds every walk through recomputed ops.
constexpr unsigned kMaxRecomputeDepth = 16;

/// One kernel being formed.
struct Group {
  llvm::SmallVector<mlir::Operation *> ops;
  Domain domain;
  bool hasReduction = false;
  bool library = false;   ///< a matmul / gather / scatter_add call
  bool epilogue = false;  ///< a library GEMM that absorbed an epilogue
  /// Ops whose value depends on a reduction of this group.
  llvm::DenseSet<mlir::Operation *> afterReduction;
  unsigned firstPosition = 0;
};

/// The groups of one function and the questions asked of them.
class FusionGraph {
public:
  explicit FusionGraph(mlir::func::FuncOp func) : func(func) {}

  /// A value any kernel can read or recompute: an argument, a constant, a
  /// cheap op of such values, or a view (its operand is read remapped).
  bool isLeaf(mlir::Value v);
  bool isLeafOp(mlir::Operation *def);

  /// The other kernels whose results kernel `g` reads.
  llvm::SmallSetVector<unsigned, 4> kernelsRead(unsigned g);
  /// The kernels whose results `v` is computed from, looking through leaves.
  void producers(mlir::Value v, llvm::SmallSetVector<unsigned, 4> &out);

  /// How `op` reads one kernel result, summed over every path through
  /// recomputed ops (views, cheap elementwise ops).
  struct Read {
    mlir::Operation *producer;
    bool viaOps = false;        ///< some path goes through recomputed ops
    bool remapped = false;      ///< some path reads it at another index
    bool broadcastOnly = true;  ///< every remapping path is a broadcast
    /// Every remapping path is row-major reshapes alone: the value is read
    /// at its own linear index, which a pointwise kernel iterates by.
    bool reshapeOnly = true;
    /// The dimensions (of the reading op's shape) those broadcasts expand;
    /// -1: a position unknown (a reshape after the broadcast moved them).
    /// A row's reduction result read back across its row expands only the
    /// reduced dimensions.
    llvm::SmallVector<int64_t, 4> broadcastDims;
  };
  /// The reads of value `v`, memoised: recomputed chains share operands, so
  /// walking every path would be exponential.
  const llvm::SmallVector<Read> &readsOfValue(mlir::Value v);
  static void merge(llvm::SmallVectorImpl<Read> &reads, const Read &r);
  /// Every kernel result `op` reads, in operand order.
  llvm::SmallVector<Read> readsOf(mlir::Operation *op);
  /// Whether `op` reads a reduction result of group `g` (or a value computed
  /// from one), directly or through recomputed ops.
  bool readsReduced(unsigned g, mlir::Operation *op);

  /// Joining `op` to `g` is a cycle if another operand's kernel depends on g.
  bool createsCycle(unsigned g, mlir::Operation *op, std::string &why);
  /// Whether kernel `from` reads, transitively, from kernel `to`.
  bool dependsOn(unsigned from, unsigned to);

  mlir::func::FuncOp func;
  std::vector<Group> groups;
  llvm::DenseMap<mlir::Operation *, unsigned> groupOf;
  llvm::DenseMap<mlir::Operation *, unsigned> positions;
  /// Cheap ops of leaves and views, cloned into the kernels that read them.
  llvm::SetVector<mlir::Operation *> recomputed;
  /// Recomputed reshapes that library calls read too (isBufferView): each
  /// library call that reads one gets a copy of it.
  llvm::DenseSet<mlir::Operation *> bufferViews;
  llvm::DenseMap<mlir::Value, llvm::SmallVector<Read>> readCache;
  llvm::DenseMap<mlir::Operation *, unsigned> recomputeDepths;
};

} // namespace tilefuse::fusion

#endif // TILEFUSE_PASSES_FUSIONGRAPH_H
