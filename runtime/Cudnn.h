//===- Cudnn.h - cuDNN's convolutions, loaded at run time -------*- C++ -*-===//
//
// The CUDA executor's graph.conv, conv_grad_input and conv_grad_weight
// steps. libcudnn.so.9 is loaded the first time a program with
// convolutions runs on a GPU (never linked: a build with the CUDA toolkit
// runs without cuDNN and says why it cannot run convolutions). No CUDA
// headers here; the ABI is runtime/CudnnAbi.h.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_CUDNN_H
#define TILEFUSE_RUNTIME_CUDNN_H

#include "runtime/Program.h"

#include <memory>
#include <string>

namespace tilefuse::cudnn {

/// "" when cuDNN can be used here, else why not.
std::string unavailableReason();

/// A cuDNN handle on one stream (the executor's), in the current context.
class Handle {
public:
  explicit Handle(void *stream);
  ~Handle();
  Handle(const Handle &) = delete;
  Handle &operator=(const Handle &) = delete;
  void *get() const { return handle; }

private:
  void *handle = nullptr;
};

/// One convolution step's descriptors and algorithm, chosen once at load:
/// cuDNN's heuristics' first deterministic algorithm (the same bits every
/// step, as the CPU's oneDNN gives) that fits the workspace the program
/// planned for the step (convWorkspaceSlot; none: an algorithm that needs
/// no workspace), else its first algorithm that fits.
class Conv {
public:
  /// Refuses (CompileError naming `s.source`) what cuDNN cannot run:
  /// unequal padding on the two sides of a dimension, a dtype other than
  /// f32/f16/bf16/f64, no algorithm within `workspaceLimit` bytes.
  Conv(const Handle &handle, const Step &s, DType dtype, size_t workspaceLimit);
  ~Conv();
  Conv(const Conv &) = delete;
  Conv &operator=(const Conv &) = delete;
  /// Bytes of workspace the chosen algorithm uses (at most the limit).
  size_t workspaceBytes() const { return workspace; }
  /// Enqueues the step on the handle's stream: `out` = the convolution of
  /// device buffers (a, b) in the step's direction (ConvDirection), with
  /// the planned workspace at `workspacePtr`.
  void enqueue(uint64_t a, uint64_t b, uint64_t out, uint64_t workspacePtr) const;

private:
  const Handle &handle;
  ConvDirection direction;
  std::string source;
  bool doubleScalars = false;
  void *input = nullptr, *output = nullptr, *filter = nullptr, *conv = nullptr;
  int algo = 0;
  size_t workspace = 0;
};


} // namespace tilefuse::cudnn

#endif // TILEFUSE_RUNTIME_CUDNN_H
