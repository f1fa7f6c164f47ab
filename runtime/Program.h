//===- Program.h - what a compiled graph runs ----------------------*- C++ -*-===//
//
// The contract between the compiler and every executor: an ordered list of
// steps over numbered buffers. No MLIR here (see runtime/CMakeLists.txt), so
// a Program can be built on one machine and run on another.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_PROGRAM_H
#define TILEFUSE_RUNTIME_PROGRAM_H

#include "runtime/Conv.h"
#include "runtime/HostTensor.h"

#include <string>
#include <vector>

namespace tilefuse {

/// One tensor the program reads or writes, row-major and contiguous.
struct BufferInfo {
  enum class Role { Argument, Constant, Intermediate };
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  Role role = Role::Intermediate;
  /// Bytes of a Constant buffer: every element, or one when `splat` (all
  /// elements equal: fills and zeros, which can be large, stay small in
  /// artifacts).
  std::vector<uint8_t> data;
  bool splat = false;
  /// The constant's bytes, every element.
  std::vector<uint8_t> expandedData() const;
  size_t byteSize() const { return size_t(numElements(shape)) * dtypeSize(dtype); }
};

/// A fused kernel: `grid` programs of `block` elements each.
struct ProgramKernel {
  std::string name;
  std::string kind; ///< pointwise | reduction
  int64_t grid = 1;
  int64_t block = 1;
  /// Domain elements each program covers (sizes thread chunks).
  int64_t elementsPerProgram = 1;
  /// GPU threads per program (each holds block / threads lanes); 0 for a
  /// CPU kernel.
  int64_t threads = 0;
  std::vector<std::string> fusedOps;
};

/// The sizes and flags of an attention step (graph.attention and
/// graph.attention_grad; runtime/CpuAttention.h gives the semantics).
struct AttentionParams {
  int64_t heads = 1, kvHeads = 1, queries = 0, keys = 0, headDim = 0, valueDim = 0;
  bool causal = false;
  double scale = 1.0;
  /// 0: no mask, 1: i1 (a byte per score, 0 masks out), 2: additive f32.
  int32_t mask = 0;
  int64_t maskBatchStride = 0, maskHeadStride = 0;
  /// Dropout of the probabilities (0: none; else a seed buffer follows the
  /// mask) and its Philox stream.
  double dropoutP = 0;
  int64_t stream = 0;
};

/// A process group a program's collectives run over: a name the caller
/// binds to a communicator at load (Executor::setCommunicator), never a
/// live handle, and the number of ranks the program was compiled for.
struct ProcessGroup {
  std::string name;
  int64_t size = 1;
};

enum class CollectiveKind : uint8_t { AllReduce, ReduceScatter, AllGather, Broadcast };
enum class ReduceOp : uint8_t { Sum, Max, Min };
const char *collectiveName(CollectiveKind kind);

/// What a collective step does (graph.*_start and graph.collective_wait).
struct CollectiveParams {
  CollectiveKind kind = CollectiveKind::AllReduce;
  ReduceOp reduce = ReduceOp::Sum;
  int32_t group = 0; ///< index into Program::groups
  int64_t root = 0;  ///< Broadcast: the rank whose value everyone gets
  /// Pairs a start with its wait: unique among a program's starts.
  int32_t ticket = 0;
};

struct Step {
  enum class Kind {
    Kernel, Gemm, Gather, ScatterAdd, Copy, Attention, AttentionGrad,
    Conv, ConvGradInput, ConvGradWeight, CollectiveStart, CollectiveWait, GroupedGemm, Sort
  };
  Kind kind = Kind::Kernel;
  /// Kernel: inputs then outputs. Gemm: a, b, c. Gather: table, indices,
  /// out. ScatterAdd: base, indices, updates, out. Copy: src, dst.
  /// Attention: q, k, v, [mask], [seed], out, lse. AttentionGrad: q, k, v,
  /// out, lse, dOut, [mask], [seed], dq, dk, dv. Conv: input, weight,
  /// out, [bias] (with a "bias" epilogue); ConvGradInput: dOut, weight, dInput; ConvGradWeight: input, dOut,
  /// dWeight (runtime/Conv.h); each convolution then optionally its
  /// workspace (i1 bytes, planned by the compiler: convWorkspaceSlot). CollectiveStart and CollectiveWait: the
  /// buffer all-reduced or broadcast in place, or the input then the
  /// output (reduce-scatter, all-gather); a wait names its start's buffers,
  /// so they stay live (in flight) until it. GroupedGemm: a, b, offsets, c
  /// (runtime/GroupedGemm.h: `batch` groups of the `m` rows of a [m, k];
  /// c[rows of g] = a[rows of g] op(b[g]), b [batch, k, n] ([batch, n, k]
  /// with transposeB), c [m, n]; with
  /// transposeA the weights' gradient: c[g] = a[rows of g]^T b[rows of g],
  /// b [m, n], c [batch, k, n]). Sort: x, values, indices (graph.sort:
  /// `m` rows of `n`, stable, `descending`).
  std::vector<int> buffers;
  /// Kernel and attention steps: how many of `buffers`, at the end, it
  /// writes (the rest it reads). The other kinds write one buffer, fixed by
  /// the kind (see stepWrites).
  int outputs = 1;
  int kernel = -1; ///< index into Program::kernels
  // GEMM: c[i] = op(a[i]) * op(b[i]) for i < batch; op transposes when asked.
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool transposeA = false, transposeB = false;
  /// Sort: the order (a stable sort either way).
  bool descending = false;
  /// Attention steps: `batch` above is the product of the leading
  /// (batch) dimensions.
  AttentionParams attention;
  /// Convolution steps' sizes.
  ConvParams conv;
  /// Collective steps.
  CollectiveParams collective;
  /// GEMM epilogue the GEMM library applies (cuBLASLt on CUDA), in order:
  /// "bias" (adds buffer 3, one value per column of c) and/or "relu";
  /// empty on the CPU, whose BLAS applies none. A Conv's (f32, the CPU's
  /// oneDNN; graph.conv_bias_act): "bias" (buffer 3, one value per output
  /// channel) and/or an activation ("relu", "silu", runtime/Conv.h).
  std::vector<std::string> epilogue;
  /// Source-level op the step computes, for reports and errors.
  std::string source;
  /// Where in the user's code its ops were traced ("file:line"), in order
  /// of first appearance; empty where no location is known.
  std::vector<std::string> sourceLines;
};

/// Whether `s` is a convolution step (Conv, ConvGradInput, ConvGradWeight).
inline bool isConvolution(const Step &s) {
  return s.kind == Step::Kind::Conv || s.kind == Step::Kind::ConvGradInput ||
         s.kind == Step::Kind::ConvGradWeight;
}

/// What convolution step `s` computes from its operands (runtime/Conv.h).
inline ConvDirection convDirection(const Step &s) {
  return s.kind == Step::Kind::Conv            ? ConvDirection::Forward
         : s.kind == Step::Kind::ConvGradInput ? ConvDirection::GradInput
                                               : ConvDirection::GradWeight;
}

/// Where the buffers live: one arena, each buffer at an offset, buffers
/// whose live ranges never meet sharing bytes (runtime/MemoryPlan.h makes
/// and checks it). Arguments are not in the arena: the CPU reads them in
/// place, the CUDA executor gives them slots of their own after it.
struct MemoryPlan {
  static constexpr uint64_t kNotInArena = UINT64_MAX;
  /// Every offset is a multiple of it (a power of two); 0: no plan yet.
  uint64_t alignment = 0;
  /// The arena's size: the planned peak (a multiple of the alignment).
  uint64_t bytes = 0;
  /// Byte offset of each buffer, or kNotInArena (arguments).
  std::vector<uint64_t> offsets;
  bool empty() const { return alignment == 0; }
};

struct Program {
  std::vector<BufferInfo> buffers;
  std::vector<ProgramKernel> kernels;
  std::vector<Step> steps;
  /// The process groups collective steps name.
  std::vector<ProcessGroup> groups;
  std::vector<int> arguments; ///< buffer of each function argument
  std::vector<int> results;   ///< buffer of each function result
  /// (result, argument): the result is the argument's next value (a
  /// training step's parameters and optimizer state), so a runtime may keep
  /// the argument on its device and carry the result into it. Where the
  /// result's buffer is the argument's own, a kernel computes it in place
  /// (the only way a step may write an argument) and nothing is carried.
  std::vector<std::pair<int, int>> aliases;
  /// The arena layout the compiler planned; executors plan one themselves
  /// when it is empty and check it (checkMemoryPlan) when it is not.
  MemoryPlan plan;

  /// Checks internal consistency (indices in range, shapes of steps, each
  /// kernel launched by one step, GPU threads per block); throws
  /// CompileError naming the first problem.
  void validate() const;
  /// Throws CompileError unless result `result` may become argument
  /// `argument`'s next value after every run (Executor::carry): the same
  /// dtype and shape, a buffer of its own (or the argument's, computed in
  /// place), and declared in `aliases` (the plan pins only those: any other
  /// result shares its bytes with buffers of the next call).
  void checkCarry(size_t result, size_t argument) const;
  /// Whether a step writes argument `argument` in place: a caller's data
  /// for it must be copied before a run, never written.
  bool writesArgument(size_t argument) const;
};

/// Where an attention step keeps its optional buffers: indices into
/// Step::buffers of the mask and the dropout seed (-1: none), and of its
/// first output (the layout Step::buffers documents).
struct AttentionSlots {
  int mask = -1, seed = -1;
  size_t firstOutput = 0;
};
AttentionSlots attentionSlots(const Step &step);

/// The index in `step.buffers` of a convolution step's workspace (the last
/// buffer, after the bias where there is one), or -1 without one. The step
/// writes it and nothing reads it after, so the plan keeps it for that
/// step only.
int convWorkspaceSlot(const Step &step);

/// The buffers `step` reads and the buffers it writes, in step order.
std::vector<int> stepReads(const Step &step);
std::vector<int> stepWrites(const Step &step);

/// Lanes of a block each CUDA thread holds: four (one 128-bit access of
/// f32) while the block still fills whole warps, else one. A CUDA kernel of
/// `block` lanes runs block / cudaLanesPerThread(block) threads per block.
int64_t cudaLanesPerThread(int64_t block);

/// The symbol a kernel's code is compiled under: its name, then a hash of
/// the interface it was compiled for (kind, grid, block, elements per
/// program, the dtype and shape of every buffer `step` passes it). Loaders
/// look code up by it, so a step that names another kernel, or whose
/// launch or buffers changed after compilation, finds no code and is
/// refused instead of running with the wrong arguments.
std::string kernelSymbol(const Program &program, const Step &step);
/// kernelSymbol of every kernel, by kernel index, from the step that
/// launches it (validate() checks there is exactly one).
std::vector<std::string> kernelSymbols(const Program &program);

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_PROGRAM_H
