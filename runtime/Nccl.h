//===- Nccl.h - NCCL, loaded at run time -------------------------*- C++ -*-===//
//
// The CUDA executor's collectives. libnccl.so.2 is loaded the first time a
// program with collectives runs on a GPU (never linked: a build with the
// CUDA toolkit runs without NCCL and says why it cannot run collectives).
// The ABI declared in Nccl.cpp is NCCL 2's stable one. No CUDA headers here.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_NCCL_H
#define TILEFUSE_RUNTIME_NCCL_H

#include "runtime/Program.h"

#include <memory>
#include <string>

namespace tilefuse::nccl {

/// "" when NCCL can be used here, else why not.
std::string unavailableReason();

/// A new NCCL unique id (128 bytes): rank 0 makes it, every rank of the
/// group receives it (through the process group's store) and joins with it.
std::string uniqueId();

/// One rank's NCCL communicator.
class Comm {
public:
  /// Joins the communicator of `uniqueId` as `rank` of `size` (blocks
  /// until every rank joined), on the current CUDA context's device.
  Comm(const std::string &uniqueId, int64_t rank, int64_t size);
  ~Comm();
  Comm(const Comm &) = delete;
  Comm &operator=(const Comm &) = delete;
  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }
  /// Enqueues collective `c` on CUDA stream `stream` (a CUstream) over
  /// device buffers `input` and `output` (the same for the in-place kinds).
  void enqueue(const CollectiveParams &c, DType dtype, uint64_t input, uint64_t output,
               int64_t inputElements, int64_t outputElements, void *stream);

private:
  void *comm = nullptr;
  int64_t rank_ = 0, size_ = 1;
};

} // namespace tilefuse::nccl

#endif // TILEFUSE_RUNTIME_NCCL_H
