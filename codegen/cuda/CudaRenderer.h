//===- CudaRenderer.h - tile kernels as CUDA C --------------------*- C++ -*-===//
//
// The CUDA backend's emitter: one tile program = one thread block, one lane
// = one thread. Each kernel starts with a comment naming the source ops it
// fuses. The text compiles with NVRTC (codegen/cuda/Nvrtc.h).
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_CODEGEN_CUDA_CUDARENDERER_H
#define TILEFUSE_CODEGEN_CUDA_CUDARENDERER_H

#include "runtime/Program.h" // cudaLanesPerThread: the runtime checks it too

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace tilefuse {

/// CUDA C of every tile kernel of `module` (built for a cuda target, so
/// blocks are thread blocks); emits a diagnostic naming the first op the
/// renderer cannot spell.

mlir::FailureOr<std::string> renderCudaKernels(mlir::ModuleOp module);

/// The same, one translation unit per kernel (each with the shared
/// prelude), in module order: units compile independently and in parallel.
mlir::FailureOr<std::vector<std::string>> renderCudaKernelUnits(mlir::ModuleOp module);

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_CUDA_CUDARENDERER_H
