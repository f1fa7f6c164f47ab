//===- TargetInfo.cpp -----------------------------------------------------===//
#include "passes/TargetInfo.h"

#include "ir/graph/GraphDialect.h"
#include "runtime/CudaAttentionKernels.h" // kCudaAttentionMaxDim
#include "runtime/Program.h"              // cudaLanesPerThread

#include "mlir/IR/Matchers.h"

#include <algorithm>
#include <cstdint>

using namespace tilefuse;

namespace {

bool isZero(mlir::Value v) {
  if (auto full = v.getDefiningOp<graph::FullOp>())
    return full.getValue().convertToDouble() == 0.0;
  mlir::DenseElementsAttr attr;
  if (mlir::matchPattern(v, mlir::m_Constant(&attr)) && attr.isSplat() &&
      llvm::isa<mlir::FloatType>(attr.getElementType()))
    return attr.getSplatValue<llvm::APFloat>().isZero();
  return false;
}

/// Whether `v` is a rank-1 tensor of `n` elements broadcast along the last
/// dimension of its result.
bool isColumnBias(mlir::Value v, int64_t n) {
  auto b = v.getDefiningOp<graph::BroadcastInDimOp>();
  if (!b)
    return false;
  auto from = llvm::cast<mlir::RankedTensorType>(b.getOperand().getType());
  auto to = llvm::cast<mlir::RankedTensorType>(b.getType());
  return from.getRank() == 1 && from.getDimSize(0) == n && b.getDims().size() == 1 &&
         b.getDims()[0] == to.getRank() - 1;
}

} // namespace

std::string tilefuse::gemmEpilogueKind(mlir::Operation *op) {
  if (!op || op->getNumOperands() != 2)
    return "";
  mlir::Value a = op->getOperand(0), b = op->getOperand(1);
  auto matmulOnly = [](mlir::Value v) {
    return v.getDefiningOp<graph::MatmulOp>() && v.hasOneUse();
  };
  if (llvm::isa<graph::AddOp>(op)) {
    int64_t n = llvm::cast<mlir::RankedTensorType>(op->getResult(0).getType()).getShape().back();
    if ((matmulOnly(a) && isColumnBias(b, n)) || (matmulOnly(b) && isColumnBias(a, n)))
      return "bias";
    return "";
  }
  if (llvm::isa<graph::MaximumOp>(op)) {
    auto input = [&](mlir::Value v) {
      return matmulOnly(v) ||
             (v.hasOneUse() && gemmEpilogueKind(v.getDefiningOp()) == "bias");
    };
    if ((input(a) && isZero(b)) || (input(b) && isZero(a)))
      return "relu";
  }
  return "";
}

bool TargetInfo::fusedAttentionTakes16Bit(mlir::Type) const { return false; }

namespace {

/// The least power of two >= n, at most 2^62 (doubling past it overflows).
int64_t powerOfTwoAtLeast(int64_t n) {
  int64_t p = 1;
  while (p < n && p < (int64_t(1) << 62))
    p *= 2;
  return p;
}

/// CPU: matmuls go to a BLAS that applies no epilogue, so elementwise
/// consumers of a matmul run in a kernel after it.
class CpuTarget : public TargetInfo {
public:
  std::string name() const override { return "cpu"; }
  bool canFuseMatmulEpilogue(mlir::Operation *) const override { return false; }
  /// Lanes along kept dimensions (pointwise kernels, column reductions):
  /// four AVX-512 vectors of f32, enough independent work per block to
  /// stream at ~85% of memcpy bandwidth. Lanes along reduced rows: two;
  /// their bodies (a dropout's Philox rounds, layer norm's backward) are
  /// large and LLVM's code generation time grows with vector width (the
  /// gpt2_mini training step compiles in ~1.3 s instead of ~2 s). Short rows
  /// get a block just wide enough for them.
  int64_t blockSize(int64_t extent, bool rowReduction) const override {
    return std::min<int64_t>(rowReduction ? 32 : 64,
                             std::max<int64_t>(4, powerOfTwoAtLeast(extent)));
  }
  /// Well past the L2 and a fair share of a large L3: a result this big is
  /// evicted before the next kernel reads it, so writing it through the
  /// cache only costs a read for ownership of every line.
  int64_t streamingStoreBytes() const override { return int64_t(64) << 20; }
  bool shufflesLanes() const override { return true; }
  int64_t threadsPerProgram(int64_t) const override { return 0; }
  /// The thread pool's chunks: up to 32 cores.
  int64_t fullReductionSlices() const override { return 32; }
  bool rematerializesReductions() const override { return false; }
  // Within the 1-2 MiB L2 of a core beside the row itself.
  int64_t rowScratchBytes() const override { return 256 << 10; }
  int64_t fusedAttentionMaxDim() const override { return INT64_MAX; }
  // bf16 block products through oneDNN (AVX512-BF16/AMX); f16 has no fast
  // CPU GEMM (as for matmuls, it widens to f32).
  bool fusedAttentionTakes16Bit(mlir::Type element) const override { return element.isBF16(); }
  bool hasGroupedGemm() const override { return true; }
  bool hasLibrarySort() const override { return true; }
  bool hasLibraryConvolution() const override { return true; }
  // oneDNN's direct kernels read and write [N, S..., C] as it is; the
  // channels-first layout costs a reorder on each side of every call.
  bool convolutionPrefersChannelsLast() const override { return true; }
  // oneDNN's bias argument and eltwise post-ops (runtime/CpuDnnl.cpp),
  // except on a 1x1 stride-1 convolution: the executor runs it on the
  // plain layouts, where oneDNN's GEMM-based convolution applies an
  // epilogue in a pass of its own ~4x slower than a kernel (unet_effnet's
  // 33 such convolutions: 13 -> 54 ms per inference call).
  bool convolutionAppliesEpilogue(mlir::Operation *conv) const override {
    auto attr = [&](const char *name) {
      return conv->getAttrOfType<mlir::DenseI64ArrayAttr>(name).asArrayRef();
    };
    auto weight = llvm::cast<mlir::RankedTensorType>(conv->getOperand(1).getType());
    bool pointwise = conv->getAttrOfType<mlir::IntegerAttr>("groups").getInt() == 1;
    for (int64_t d = 2; d < weight.getRank(); ++d)
      pointwise &= weight.getDimSize(d) == 1;
    for (int64_t v : attr("strides"))
      pointwise &= v == 1;
    for (const char *pad : {"padding_low", "padding_high"})
      for (int64_t v : attr(pad))
        pointwise &= v == 0;
    return !pointwise;
  }
  bool convolutionAppliesEpilogues() const override { return true; }
};

/// CUDA: cuBLASLt adds a column bias itself, for f32, f16 and bf16 GEMMs
/// (it fuses no epilogue into f64 GEMMs). Its ReLU epilogue is not used:
/// it turns NaN into 0, where graph.maximum propagates NaN.
class CudaTarget : public TargetInfo {
public:
  explicit CudaTarget(std::string n) : n(std::move(n)) {}
  std::string name() const override { return n; }
  bool canFuseMatmulEpilogue(mlir::Operation *op) const override {
    mlir::Type element =
        llvm::cast<mlir::RankedTensorType>(op->getResult(0).getType()).getElementType();
    return gemmEpilogueKind(op) == "bias" && (element.isF32() || element.isF16() || element.isBF16());
  }
  /// One block per thread block of 256 threads.
  int64_t blockSize(int64_t extent, bool) const override {
    return std::min<int64_t>(1024, std::max<int64_t>(32, powerOfTwoAtLeast(extent)));
  }
  /// GPUs write back through L2 either way; no streaming stores.
  int64_t streamingStoreBytes() const override { return INT64_MAX; }
  bool shufflesLanes() const override { return false; }
  int64_t threadsPerProgram(int64_t block) const override {
    return block / cudaLanesPerThread(block);
  }
  /// About four blocks per SM on 108 (A100) to 132 (H100, H200) SMs: 32
  /// slices left three quarters of an H200 idle. The combine kernel folds
  /// the 512 partial values in one block of 128 threads.
  int64_t fullReductionSlices() const override { return 512; }
  bool rematerializesReductions() const override { return true; }
  int64_t rowScratchBytes() const override { return 0; }
  // Heads whose tiles fit the architecture's shared memory (256 from
  // sm_80 and on sm_70; 128 on sm_75 and before sm_70).
  int64_t fusedAttentionMaxDim() const override {
    return cudaAttentionMaxDimFor(cudaSharedOptInBytes(computeCapability()));
  }
  // bf16 and f16 tiles widened to f32 as they are loaded
  // (codegen/cuda/CudaAttention.cpp).
  bool fusedAttentionTakes16Bit(mlir::Type element) const override {
    return element.isBF16() || element.isF16();
  }
  // cuDNN, loaded at run time (runtime/Cudnn.cpp).
  // A grouped GEMM's sizes are data: the host would read them mid-step,
  // which no captured CUDA graph can do.
  bool hasGroupedGemm() const override { return false; }
  bool hasLibrarySort() const override { return false; }
  bool hasLibraryConvolution() const override { return true; }
  bool convolutionPadsSymmetrically() const override { return true; }
  int64_t convolutionWorkspaceBytes(const ConvParams &params,
                                    int64_t elementBytes) const override {
    return convWorkspaceBudget(params, elementBytes);
  }

private:
  /// 90 for "cuda" and "cuda:sm_90".
  int64_t computeCapability() const {
    size_t at = n.find("sm_");
    return at == std::string::npos ? 90 : std::stoll(n.substr(at + 3));
  }
  std::string n;
};

} // namespace

std::unique_ptr<TargetInfo> TargetInfo::get(const std::string &name) {
  if (name == "cpu")
    return std::make_unique<CpuTarget>();
  if (name == "cuda")
    return std::make_unique<CudaTarget>(name);
  // cuda:sm_XX with a two- or three-digit compute capability.
  llvm::StringRef arch(name);
  if (arch.consume_front("cuda:sm_") && arch.size() >= 2 && arch.size() <= 3 &&
      llvm::all_of(arch, [](char c) { return c >= '0' && c <= '9'; }))
    return std::make_unique<CudaTarget>(name);
  return nullptr;
}
