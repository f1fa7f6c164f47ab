//===- FuseOps.h - kernel fusion ---------------------------------*- C++ -*-===//
#ifndef TILEFUSE_PASSES_FUSEOPS_H
#define TILEFUSE_PASSES_FUSEOPS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <functional>

namespace tilefuse {

class TargetInfo;
namespace graph {
class FusionOp;
}

/// The most ops one kernel takes. Beyond a few hundred chained ops a kernel
/// saves little memory traffic but costs LLVM superlinear time (a 2,000-op
/// chain took 12.6 s as one kernel).
constexpr size_t kMaxKernelOps = 256;

/// graph.attention and graph.attention_grad of `func` written out with
/// matmul, exp and reductions, except those whose head and value
/// dimensions are at most `keepUpToDim` (what a target's fused kernels
/// take: TargetInfo::fusedAttentionMaxDim); the values stay the op's.
void expandAttention(mlir::func::FuncOp func, int64_t keepUpToDim = 0);
/// The same for one graph.attention or graph.attention_grad (else nothing).
void expandAttentionOp(mlir::Operation *op);
/// A 16-bit graph.attention or graph.attention_grad rewritten as the f32
/// op on its widened operands, its 16-bit results narrowed back (returns
/// the new op; any other op is returned as is): for targets without
/// 16-bit kernels, and the written-out form, whose reference is f32 math.
mlir::Operation *widenAttentionOp(mlir::Operation *op);
/// widenAttentionOp for every 16-bit attention op of `func` whose element
/// type `keeps` refuses (TargetInfo::fusedAttentionTakes16Bit).
void widenAttention(mlir::func::FuncOp func, const std::function<bool(mlir::Type)> &keeps);

/// Every graph.grouped_matmul and grouped_matmul_weight_grad of `func`
/// written as one dense GEMM each (for targets without a grouped GEMM
/// step: TargetInfo::hasGroupedGemm; everywhere with TILEFUSE_GROUPED_GEMM=0).
void expandGroupedMatmuls(mlir::func::FuncOp func);

/// Every graph.conv / conv_grad_input / conv_grad_weight of `func` padded
/// unequally on some side rewritten to equal padding, the difference
/// concatenated to the input as zeros (and cut from an input's gradient):
/// for targets whose convolution library pads both sides alike
/// (TargetInfo::convolutionPadsSymmetrically).
void padConvolutionsSymmetrically(mlir::func::FuncOp func);

/// Every f32 graph.conv of `func` whose output only a chain of per-channel
/// +, -, *, / (a bias, an inference batch norm) and then silu read
/// rewritten into one graph.conv_bias_act (the scale folded into the
/// weight, where the weight has at most 1/8 of the output's elements; the
/// shift as its bias), for the convolutions whose library applies a bias
/// and an activation faster than a kernel does
/// (TargetInfo::convolutionAppliesEpilogue). Returns how many were folded;
/// none with TILEFUSE_CONV_EPILOGUES=0.
int foldConvolutionEpilogues(mlir::func::FuncOp func, const TargetInfo &target);

/// Every convolution of `func` given channels-last activations
/// ([N, S..., C]), and that layout carried through the ops that read and
/// produce them wherever an op can take it as it is (elementwise ops,
/// broadcasts, reductions, slices, concats, transposes, reshapes keeping
/// the moved dimensions together): transposes remain where values enter or
/// leave such a region. For targets whose convolutions run fastest that way
/// (TargetInfo::convolutionPrefersChannelsLast), except with
/// TILEFUSE_CHANNELS_LAST=0. A region (values connected through such ops)
/// changes layout when it holds at least two convolutions and, with
/// `weighCosts`, when the transposes at its edges cost less than the
/// reorders its convolutions would make channels-first. Returns how many
/// convolutions changed layout.
int layOutChannelsLast(mlir::func::FuncOp func, bool weighCosts = true);

/// Groups the primitive graph ops of `func` into graph.fusion kernels (see
/// FuseOpsPass in Passes.td). With `remarks`, every refused fusion is
/// reported as a remark naming the reason.
mlir::LogicalResult fuseFunction(mlir::func::FuncOp func,
                                 const TargetInfo &target, bool remarks);

/// Recomputes a kernel's saved outputs inside the later kernel of the same
/// iteration space that reads them, where that frees more bytes across
/// the step than it keeps alive (see RematerializePass in Passes.td).
/// fuseFunction ends with it. TILEFUSE_REMATERIALIZE sets the share of
/// the function's bytes moved it may add, in percent (default 5; 0: off);
/// a value that is not such a share fails with an error on `func`.
/// Kernels that reduce are recomputed where `target` says it pays, or
/// with a share above the default.
mlir::LogicalResult rematerializeFunction(mlir::func::FuncOp func, const TargetInfo &target);

/// The reductions of row kernel `fusion` (one that reduces its innermost
/// dimension) over other dimensions: sums over every dimension but the
/// innermost, or over all, that the fusion pass merged into the row kernel
/// walking the same domain (layer_norm's dgamma, dbeta and loss beside dx;
/// see mergeColumnKernels). Empty for every other kernel. Codegen folds
/// them per slice of rows, then over the slices.
llvm::SmallVector<mlir::Operation *> columnSumsOfRowKernel(graph::FusionOp fusion);

} // namespace tilefuse

#endif // TILEFUSE_PASSES_FUSEOPS_H
