//===- TargetInfo.h - what fusion needs to know about a target ---*- C++ -*-===//
//
// The one interface between fusion decisions and targets: passes ask it,
// they never test which target they run for.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_PASSES_TARGETINFO_H
#define TILEFUSE_PASSES_TARGETINFO_H

#include "runtime/Conv.h"

#include <cstdint>
#include <memory>
#include <string>

namespace mlir {
class Operation;
class Type;
} // namespace mlir

namespace tilefuse {

/// The GEMM epilogue (as cuBLASLt names them) that elementwise op `op`
/// applies to a matmul result: "bias" for matmul + a vector broadcast along
/// the last dimension, "relu" for max(x, 0) of a matmul or bias-add result
/// that nothing else reads; "" for anything else.
std::string gemmEpilogueKind(mlir::Operation *op);

class TargetInfo {
public:
  virtual ~TargetInfo() = default;
  virtual std::string name() const = 0;
  /// Whether the GEMM library of this target can apply `epilogue` (an
  /// elementwise op consuming a matmul result) inside the GEMM itself.
  virtual bool canFuseMatmulEpilogue(mlir::Operation *epilogue) const = 0;
  /// Elements per block of a tile program whose lanes run along a dimension
  /// of `extent` elements (a power of two); `rowReduction` when the lanes
  /// run along a reduced row (the program loops over it; such kernels hold
  /// the largest bodies).
  virtual int64_t blockSize(int64_t extent, bool rowReduction) const = 0;
  /// Results of at least this many bytes are written around the cache
  /// (nobody reads them back before they would be evicted anyway).
  virtual int64_t streamingStoreBytes() const = 0;
  /// Whether lanes of a block can exchange values cheaply (vector
  /// shuffles on a CPU; on a GPU lanes are threads).
  virtual bool shufflesLanes() const = 0;
  /// GPU threads a tile program of `block` lanes runs on (one thread block);
  /// 0 where programs are not thread blocks (the CPU).
  virtual int64_t threadsPerProgram(int64_t block) const = 0;
  /// Slices a large full reduction is split into (programs of its partial
  /// kernel): enough to keep every core or SM streaming.
  virtual int64_t fullReductionSlices() const = 0;
  /// Whether rematerialization by default recomputes kernels that reduce
  /// (a softmax's max and sum, with its exp) in the kernels that read
  /// their outputs: where kernels are memory-bound (GPUs) the recompute is
  /// nearly free; on CPU cores exp and reductions are compute-bound (it
  /// cost gpt2_mini's step 7%), so they are recomputed only when a larger
  /// bandwidth share is asked for (memory_budget).
  virtual bool rematerializesReductions() const = 0;
  /// Bytes a row kernel's program may keep in a private scratch row (a
  /// softmax's exponentials computed for the row sum, loaded again for the
  /// output instead of recomputed); 0 where programs have no scratch.
  /// CPU rows are compute-bound (exp costs more than a load from L1/L2);
  /// GPU rows are memory-bound and recompute for free.
  virtual int64_t rowScratchBytes() const = 0;
  /// The largest head (and value) dimension of the runtime's fused
  /// attention kernels for this target (graph.attention / attention_grad as
  /// library steps); fusion writes attention with larger heads out with
  /// matmul, exp and reductions first. 0: no fused kernels.
  virtual int64_t fusedAttentionMaxDim() const = 0;
  /// Whether those kernels take 16-bit operands of `element` (bf16, f16);
  /// fusion widens other 16-bit attention to f32 around the op
  /// (widenAttention).
  virtual bool fusedAttentionTakes16Bit(mlir::Type element) const;
  /// Whether the runtime runs graph.grouped_matmul and its weights'
  /// gradient as a grouped GEMM step (one GEMM per group, sizes read when
  /// it runs); else fusion writes them as dense GEMMs (expandGroupedMatmuls).
  virtual bool hasGroupedGemm() const = 0;
  /// Whether the runtime runs graph.sort (a library step) for this target.
  virtual bool hasLibrarySort() const = 0;
  /// Whether the runtime runs graph.conv and its gradients (library steps)
  /// for this target.
  virtual bool hasLibraryConvolution() const = 0;
  /// Whether those convolutions must pad each side of a dimension alike
  /// (cuDNN's legacy API takes one padding per dimension; oneDNN two):
  /// fusion then writes the unequal part out (padConvolutionsSymmetrically).
  virtual bool convolutionPadsSymmetrically() const { return false; }
  /// Whether the library's convolutions run fastest on channels-last
  /// activations ([N, S..., C]): fusion then lays the convolutions and the
  /// ops around them out that way (layOutChannelsLast).
  virtual bool convolutionPrefersChannelsLast() const { return false; }
  /// Whether the library applies a per-channel bias and an activation to
  /// graph.conv `conv`'s output while it writes it (oneDNN's bias and
  /// post-ops) faster than a kernel after it: fusion then folds such an
  /// epilogue into graph.conv_bias_act (foldConvolutionEpilogues).
  virtual bool convolutionAppliesEpilogue(mlir::Operation *conv) const { return false; }
  /// Whether it does for any convolution (graph.conv_bias_act runs here).
  virtual bool convolutionAppliesEpilogues() const { return false; }
  /// Bytes of workspace to plan for a library convolution of `params` on
  /// elements of `elementBytes` (a buffer of the memory plan, live during
  /// its step: runtime/Program.h's convWorkspaceSlot); 0: none.
  virtual int64_t convolutionWorkspaceBytes(const ConvParams &params,
                                            int64_t elementBytes) const {
    return 0;
  }

  /// "cpu" or "cuda[:sm_XX]"; null for an unknown name.
  static std::unique_ptr<TargetInfo> get(const std::string &name);
};

} // namespace tilefuse

#endif // TILEFUSE_PASSES_TARGETINFO_H
