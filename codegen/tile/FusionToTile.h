//===- FusionToTile.h - graph.fusion -> tile kernel ---------------*- C++ -*-===//
//
// Turns one kernel chosen by the fusion pass into a Triton-style tile
// program (ir/tile). Shared by every backend: the CPU backend lowers the
// result to LLVM, the CUDA renderer prints it.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_CODEGEN_TILE_FUSIONTOTILE_H
#define TILEFUSE_CODEGEN_TILE_FUSIONTOTILE_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace tilefuse {
class TargetInfo;
namespace graph {
class FusionOp;
}

/// Appends to `module` a kernel `func.func` named `name`: arguments are pointers to the fusion's inputs, then to its
/// results, all row-major and contiguous. Emits a diagnostic on the fusion
/// and fails when the region holds something no tile program expresses.
mlir::FailureOr<mlir::func::FuncOp>
lowerFusionToTile(graph::FusionOp fusion, mlir::ModuleOp module,
                  const TargetInfo &target, llvm::StringRef name);

/// Pairs (result, input) of `fusion` where the kernel may write the result
/// over the input's buffer: the kernel reads the input only at the element
/// it computes (through elementwise ops and casts, no view or generator),
/// or in reductions it folds before storing any full-size result (a
/// reduction kernel whose programs own whole reductions: a row kernel, a
/// softmax over [N, C, H, W]'s classes), the two have the kernel's domain
/// as their shape and the same type, and the kernel computes every result
/// at an element before it stores any there.
llvm::SmallVector<std::pair<unsigned, unsigned>> inPlaceCandidates(graph::FusionOp fusion);

/// The reductions of `fusion` when it is a full reduction worth splitting
/// in two kernels: every result is one value, or (beside one reduction)
/// domain-sized and computed without a reduction's result; every reduction
/// (sum, max, min) folds the whole domain and reads no other reduction's
/// result. Empty otherwise.
llvm::SmallVector<mlir::Operation *> splittableReductions(graph::FusionOp fusion);

/// The results of a split full reduction its partial kernel stores (the
/// domain-sized ones, at the elements its walk reads); the combine kernel
/// stores the others.
llvm::SmallVector<unsigned> partialKernelResults(graph::FusionOp fusion);

/// A split full reduction: a partial kernel of `chunks` programs, each
/// folding one slice of the domain into one slot per reduction (buffers of
/// the reduction's compute type, passed after the inputs) and storing the
/// partialKernelResults of its slice (passed after the slots), and a
/// combine kernel (inputs, slots, the other results) that folds the slots
/// and computes the results. One program would otherwise stream the whole
/// domain alone.
mlir::FailureOr<std::pair<mlir::func::FuncOp, mlir::func::FuncOp>>
lowerSplitReduction(graph::FusionOp fusion, llvm::ArrayRef<mlir::Operation *> reductions,
                    int64_t chunks, mlir::ModuleOp module, const TargetInfo &target,
                    llvm::StringRef name);

/// The reductions of `fusion` when it is a column reduction that can be
/// split in two kernels: the innermost dimension is kept, every result has
/// the kept shape, and every reduction (sum, max, min) folds exactly the
/// kernel's reduced dimensions and reads no other reduction's result.
/// Empty otherwise.
llvm::SmallVector<mlir::Operation *> columnSplittableReductions(graph::FusionOp fusion);
/// The results of a split column reduction its partial kernel stores (of
/// the domain's shape, reading no reduction: computed by its walk); the
/// combine kernel stores the others.
llvm::SmallVector<unsigned> columnPartialKernelResults(graph::FusionOp fusion);
/// Whether the partial kernel of a split column reduction walks slices of
/// whole rows, all kept elements accumulated in scratch (the target has the
/// scratch for them), rather than one block of kept elements per program.
bool columnPartialWalksRows(graph::FusionOp fusion, llvm::ArrayRef<mlir::Operation *> reductions,
                           const TargetInfo &target);

/// Programs a column reduction's kernel runs on `target` (blocks of kept
/// elements): few means little parallelism for a long reduced extent.
int64_t keptPrograms(graph::FusionOp fusion, const TargetInfo &target);

/// A split column reduction: a partial kernel whose programs each fold one
/// of `chunks` slices of the reduced rows for one block of kept elements
/// into slot[slice, kept] (one slot buffer per reduction, compute type,
/// passed after the inputs), and a combine kernel (inputs, slots, results)
/// that folds the slices and computes the results.
mlir::FailureOr<std::pair<mlir::func::FuncOp, mlir::func::FuncOp>>
lowerSplitColumnReduction(graph::FusionOp fusion, llvm::ArrayRef<mlir::Operation *> reductions,
                          int64_t chunks, mlir::ModuleOp module, const TargetInfo &target,
                          llvm::StringRef name);

/// The two kernels of a row kernel with column sums (columnSumsOfRowKernel
/// in passes/FuseOps.h): a partial kernel (inputs, one slot buffer per sum
/// of the sum's compute type, the results `rowYields`) whose `chunks`
/// programs each run the row kernel over one slice of the rows while
/// folding every sum into an accumulator row, stored to slot[slice,
/// column]; and a combine kernel (inputs, slots, the results
/// `columnYields`: the sums) that folds the slices, one program per block
/// of columns. The rows' inputs are read once for the rows and the sums.
struct RowColumnKernels {
  mlir::func::FuncOp partial, combine;
  llvm::SmallVector<unsigned> rowYields, columnYields;
};
mlir::FailureOr<RowColumnKernels>
lowerRowsWithColumnSums(graph::FusionOp fusion, llvm::ArrayRef<mlir::Operation *> sums,
                        int64_t chunks, mlir::ModuleOp module, const TargetInfo &target,
                        llvm::StringRef name);

/// Makes every non-splat graph.constant inside fusion regions of `func` an
/// input of its region instead (kernels read tables from memory; only splat
/// constants become immediates).
void hoistDenseConstants(mlir::func::FuncOp func);

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_TILE_FUSIONTOTILE_H
