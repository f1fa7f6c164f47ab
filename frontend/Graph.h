//===- Graph.h - a traced or parsed graph-dialect program --------*- C++ -*-===//
//
// The handle users hold: an MLIR module with one entry function. The header
// is free of MLIR so the Python bindings compile quickly; the module lives
// behind a pointer to implementation.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_FRONTEND_GRAPH_H
#define TILEFUSE_FRONTEND_GRAPH_H

#include "passes/OptimizerConfig.h"
#include "runtime/HostTensor.h"
#include "runtime/Program.h"

#include <memory>
#include <string>
#include <vector>

namespace tilefuse {
class Executable;

/// One CUDA kernel's compile report from NVRTC and ptxas.
struct CudaKernelReport {
  std::string name;
  int registers, spillStores, spillLoads, stackBytes, sharedBytes;
  bool cached;     ///< the cubin came from the disk cache
  std::string log; ///< NVRTC's and ptxas's messages for its unit
};

/// One kernel of a fused graph: a graph.fusion region or a library call.
struct KernelInfo {
  std::string name;               ///< "kernel3", or the library op ("matmul")
  std::string kind;               ///< pointwise | reduction | matmul | library
  Shape domain;                   ///< the iteration space
  std::vector<int64_t> reduced;   ///< reduced dims of the domain
  std::vector<std::string> ops;   ///< source ops it computes, in order
  int numInputs = 0, numOutputs = 0;
};

/// One value a kernel computes, as the numerics report sees it.
struct ProbedValue {
  std::string kernel;            ///< the fusion's name (as --emit=fused), or the library op
  std::vector<std::string> ops;  ///< the source ops the kernel computes
  std::string location;          ///< the first source line among them ("file:line")
  std::string dtype;             ///< this value's dtype
  std::string lowest;            ///< "bf16" / "f16": the lowest precision the
                                 ///< kernel touches; "" if f32 or wider
  int64_t reductionLength = 1;   ///< longest sum behind one element
  int output = 0;                ///< which result of its kernel
};

/// One row of Graph::numericsReport.
struct NumericsRow : ProbedValue {
  double error = 0; ///< max|out - f32| / max|f32|
  double bound = 0; ///< numericsBound(lowest, reductionLength)
  bool over = false;
};

/// The error a kernel may have under the precision policy: u * (4 +
/// sqrt(K)), u the unit roundoff of `lowest` (bf16 2^-8, f16 2^-11, else
/// f32's 2^-24), K the reduction length. 4u covers rounding the inputs and
/// the output and the f32 operations between; sqrt(K) u the inputs'
/// roundings adding up in a sum of K terms, as they do for random signs.
double numericsBound(const std::string &lowest, int64_t reductionLength);

/// The rows as a table, one line per kernel output, those over their bound
/// marked OVER with their source line, and a summary line.
std::string formatNumericsReport(const std::vector<NumericsRow> &rows);

/// What a numerics probe compiled into (Graph::compileNumericsProbe): its
/// results are the graph's `numResults` results, then `values`; the
/// isolated probe's arguments are the graph's, then one per `cutArguments`
/// entry (the index in `values` of the value it stands for).
struct NumericsProbeLayout {
  size_t numResults = 0;
  std::vector<ProbedValue> values;
  std::vector<int> cutArguments;
};

class Graph {
public:
  struct Impl;
  explicit Graph(std::unique_ptr<Impl> impl);
  ~Graph();

  /// Parses and verifies graph-dialect text. The entry function is the one
  /// named `entry`, or the only function. Throws CompileError with the
  /// parser's diagnostics (`sourceName`:line:column).
  static std::shared_ptr<Graph> parse(const std::string &text, const std::string &entry = "",
                                      const std::string &sourceName = "<graph text>");

  /// Textual IR of the whole module.
  std::string mlir() const;
  /// One line per op kind with its count, plus the signature.
  std::string summary() const;
  const std::string &entryName() const;
  std::vector<TensorSignature> inputs() const;
  std::vector<TensorSignature> outputs() const;
  /// A sharded (ZeRO) training step's shards: the parameter indices each
  /// one holds, in order; empty for any other graph.
  std::vector<std::vector<int64_t>> shardLayout() const;

  /// Runs the reference interpreter (composites are decomposed first; the
  /// lowered module is kept for the next call).
  std::vector<HostTensor> interpret(const std::vector<HostTensor> &args) const;

  /// A graph returning this graph's results followed by the gradient of the
  /// first result (a 0-d float loss) with respect to each argument in `wrt`.
  std::shared_ptr<Graph> valueAndGrad(const std::vector<unsigned> &wrt) const;

  /// One whole training step of this loss graph, whose first `numParams`
  /// arguments are parameters: (params, state, rest..., step: i64, lr: f64)
  /// -> (loss, new params, new state). See passes/TrainStep.h.
  /// `numState` model state arguments follow the parameters (see
  /// buildTrainStep).
  std::shared_ptr<Graph> trainStep(unsigned numParams, const OptimizerConfig &config,
                                   unsigned numState = 0) const;

  /// This graph lowered to primitives and fused into kernels for `target`
  /// ("cpu" or "cuda[:sm_XX]"); it computes the same values.
  std::shared_ptr<Graph> fuse(const std::string &target = "cpu") const;
  /// This graph as the fusion pass receives it for `target` ("cpu",
  /// "cuda[:sm_XX]"): attention recognised, composites decomposed,
  /// canonicalized, CSE'd; attention written out again for a target
  /// without fused attention kernels.
  std::shared_ptr<Graph> primitive(const std::string &target = "cpu") const;
  /// The kernels of the entry function, in execution order (for a graph
  /// that is not fused, every primitive op would be its own kernel: fuse()
  /// first).
  std::vector<KernelInfo> report() const;

  /// Compiles this graph into kernels for `device` ("cpu", or "cuda": the
  /// first GPU, when a driver and cuBLAS are there): the fused
  /// program, its tile kernels, machine code. Compiling the same graph
  /// again in this process reuses the kernels.
  std::shared_ptr<Executable> compile(const std::string &device = "cpu") const;

  /// This graph fused for `device` as compile() fuses it, then rewritten to
  /// expose every kernel's values (frontend/NumericsProbe.h): in f32 (the
  /// `shadow`), or with each kernel's inputs from other kernels made
  /// arguments. Compiled outside the compile cache.
  std::shared_ptr<Executable> compileNumericsProbe(const std::string &device, bool shadow,
                                                   NumericsProbeLayout &layout) const;

  /// The numerics contract: each kernel of this graph compiled for
  /// `device`, fed the f32 shadow's values for its inputs, against the
  /// shadow's outputs, on `args`. One row per kernel output (integer and i1 ones too: a mask must match exactly), in
  /// program order; `over` marks those beyond their bound.
  std::vector<NumericsRow> numericsReport(const std::vector<HostTensor> &args,
                                          const std::string &device = "cpu") const;

  /// This graph under the mixed-precision policy `precision` ("fp32",
  /// "bf16", "fp16"; see AutocastPass): GEMMs in low precision, sensitive
  /// ops in f32, the rest following their operands; `keepFloat32` op kinds
  /// forced to f32. Apply before value_and_grad / trainStep (the policy
  /// sees softmax, layer_norm and the losses whole).
  std::shared_ptr<Graph> autocast(const std::string &precision,
                                  const std::vector<std::string> &keepFloat32 = {}) const;

  /// The runtime Program this graph compiles into for `target` ("cpu" or
  /// "cuda:sm_XX"), with its memory plan, without compiling any kernel:
  /// what a compile would allocate, known in a fraction of its time.
  Program plannedProgram(const std::string &target = "cpu") const;

  /// The CUDA C of this graph's kernels for `target` ("cuda:sm_XX"): each
  /// kernel begins with a comment naming the source ops it fuses.
  std::string cudaSource(const std::string &target = "cuda:sm_90") const;
  /// The CUDA C of the fused attention kernels the program for `target`
  /// launches (the variants of its attention steps), "" when it has none.
  std::string cudaAttentionSource(const std::string &target = "cuda:sm_90") const;
  /// Compiles this graph's kernels with NVRTC for `target`'s architecture
  /// (no GPU needed), one translation unit per kernel, in parallel, through
  /// the cubin disk cache (codegen/cuda/Nvrtc.h); returns the per-kernel
  /// resources, followed by the fused attention kernels' (tf_attention_*)
  /// when the program launches them. Throws CompileError with NVRTC's log on failure, or when
  /// this build has no NVRTC.
  std::vector<CudaKernelReport> compileCuda(const std::string &target = "cuda:sm_90") const;
  /// The PTX NVRTC makes of cudaSource(target): what the kernels became.
  std::string cudaPtx(const std::string &target = "cuda:sm_90") const;
  /// The PTX of cudaAttentionSource(target) ("" without attention): shows,
  /// e.g., whether the 16-bit kernels' products became tensor-core
  /// operations (wmma.mma.sync) for that architecture.
  std::string cudaAttentionPtx(const std::string &target = "cuda:sm_90") const;

  /// An ahead-of-time artifact (runtime/Artifact.h) of this graph for
  /// `target`: "cpu" (a shared library for this machine's CPU) or
  /// "cuda:sm_XX" (cubins). The bytes of the .tfa file.
  /// Empties the in-process cache of compiled graphs (compile() fills it,
  /// at most TILEFUSE_COMPILE_CACHE entries); returns how many it held.
  static size_t clearCompileCache();

  /// `metadata` is stored as is (Artifact::metadata).
  std::string compileArtifact(const std::string &target = "cpu",
                              const std::string &metadata = "") const;

  Impl &impl() { return *impl_; }
  const Impl &impl() const { return *impl_; }

private:
  std::unique_ptr<Impl> impl_;
};

} // namespace tilefuse

#endif // TILEFUSE_FRONTEND_GRAPH_H
