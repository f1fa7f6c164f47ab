//===- FusionRules.h - which ops and kernels may become one -------*- C++ -*-===//
//
// The fusion rules, apart from the driver that applies them (FuseOps.cpp):
// each answers whether an op may join a kernel, or two kernels may merge,
// and when it refuses says why in `why` (PyTorch Inductor's WhyNoFuse),
// which `--fuse=remarks=true` reports. A refusal with an empty `why` means
// the rule does not apply to that pair (another kernel kind, another
// domain): nothing to report. Rules only read the graph; no rule merges.
// Internal to passes/.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_PASSES_FUSIONRULES_H
#define TILEFUSE_PASSES_FUSIONRULES_H

#include "passes/FusionGraph.h"

#include "llvm/ADT/STLFunctionalExtras.h"

namespace tilefuse {
class TargetInfo;

namespace fusion {

class FusionRules : public FusionGraph {
public:
  FusionRules(mlir::func::FuncOp func, const TargetInfo &target)
      : FusionGraph(func), target(target) {}

  // --- producer-consumer --------------------------------------------------------
  /// Whether `op` may join group `g`, given every kernel result it reads.
  bool canJoin(unsigned g, mlir::Operation *op, llvm::ArrayRef<Read> reads, std::string &why);

  // --- epilogues ----------------------------------------------------------------
  /// Whether `op` may join library kernel `g` (a GEMM) as an epilogue the
  /// GEMM library applies; `viaOps` when `op` reads the GEMM's result
  /// through recomputed ops.
  bool canTakeEpilogue(unsigned g, mlir::Operation *op, bool viaOps, std::string &why);

  // --- siblings -----------------------------------------------------------------
  /// Whether pointwise kernel `h`, which `op` joining pointwise kernel `g`
  /// also reads (`read`; `reads`: all of op's reads), may merge into `g`:
  /// Adam's m and v chains, read by the parameter update.
  bool canMergeSiblings(unsigned g, unsigned h, const Read &read, llvm::ArrayRef<Read> reads,
                        std::string &why);
  /// Whether reduction `op`, reading no result of reduction kernel `g`, may
  /// join it: one walk over the domain for both (layer_norm's dbeta beside
  /// dgamma), or a total folded beside column sums.
  bool canJoinSiblingReduction(unsigned g, mlir::Operation *op, std::string &why);

  // --- consumer kernels ---------------------------------------------------------
  /// Whether row kernel `a` may absorb kernel `b`, which reads it (`bDeps`:
  /// the kernels b reads): b computes over a's rows, reading a's values at
  /// their own elements or a's row results broadcast along the rows.
  bool canAbsorb(unsigned a, unsigned b, llvm::ArrayRef<unsigned> bDeps, std::string &why);

  // --- row absorbs column -------------------------------------------------------
  /// Whether row kernel `a` may take kernel `b` of column sums (and totals)
  /// of its domain, folding them while it walks its rows.
  bool canTakeColumns(unsigned a, unsigned b, llvm::ArrayRef<unsigned> bDeps, std::string &why);

  /// The reason every rule gives at the kernel size limit.
  static std::string tooManyOps();

protected:
  bool sameDomain(const Group &group, mlir::Operation *op);
  /// A sum over the whole domain (a loss's value) beside column sums of the
  /// same domain: the column kernel's walk over the rows folds it too, as
  /// column partials summed at the end, so the domain is read once for all
  /// (layer_norm's backward with its value: dgamma, dbeta and the sum). The
  /// kernel holds only these reductions and the elementwise ops they read.
  bool totalBesideColumns(unsigned g, mlir::Operation *op);
  /// Whether every operand of epilogue `op` of library kernel `g`, other
  /// than the kernel's own value, is a buffer the library can read: a
  /// broadcast (the library's own indexing) of an argument or of another
  /// kernel's result, not of a recomputed op (a cast, a sum of biases, a
  /// constant) that would have to run inside the library call.
  bool epilogueOperandsAreBuffers(unsigned g, mlir::Operation *op);
  /// Whether sibling reduction `op` may merge into kernel `g` without
  /// delaying a result that other kernels wait for: a result merged into a
  /// kernel that waits for more kernels than it needs waits with it.
  /// (Cross-entropy's count of valid labels, read from the labels alone,
  /// merged into the kernel summing the per-row losses, would come too late
  /// for the row kernel to compute the gradient beside the loss.) Results
  /// that only leave the function can wait (layer_norm's dbeta beside
  /// dgamma: one walk over dy for both).
  bool mergeDelaysNothing(unsigned g, mlir::Operation *op);
  /// Whether every reader of `op`'s results outside its side (`isSide`)
  /// waits for the other side (`isOther`) anyway: the function's return,
  /// or an op that also reads a value of the other side, directly or
  /// through views (the forward cross-entropy's mean divides the loss sum
  /// by the count). Readers are found through views (most readers are not
  /// placed yet: they come later in the function).
  bool delayIsHarmless(mlir::Operation *op, llvm::function_ref<bool(mlir::Operation *)> isSide,
                       llvm::function_ref<bool(mlir::Operation *)> isOther);
  /// Whether `op` reads a value of an op `isOther` accepts, directly or
  /// through views. Not through readsOf: `op` may not be placed yet, and
  /// readsOf's cache would keep what it saw of ops not yet classified.
  bool readsFrom(mlir::Operation *op, llvm::function_ref<bool(mlir::Operation *)> isOther);
  /// Sums over every dimension but the innermost of `g`'s domain, or over
  /// all of them, in a kernel whose reduction is its innermost dimension.
  unsigned columnSumsIn(unsigned g);
  /// Whether `op` of group `a` is, or reads, a sum over other dimensions
  /// than a's (a column sum a has taken).
  bool readsColumnSum(unsigned a, mlir::Operation *op);

  const TargetInfo &target;
};

} // namespace fusion
} // namespace tilefuse

#endif // TILEFUSE_PASSES_FUSIONRULES_H
