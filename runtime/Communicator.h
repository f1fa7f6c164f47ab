//===- Communicator.h - where a program's collectives run --------*- C++ -*-===//
//
// A Program names process groups symbolically (name, size); whoever loads it
// binds each name to a Communicator: tilefuse.distributed wraps the
// torch.distributed process group the user initialised (gloo, NCCL), tests
// use an in-process one. The runtime never builds a transport of its own.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_COMMUNICATOR_H
#define TILEFUSE_RUNTIME_COMMUNICATOR_H

#include "runtime/Program.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tilefuse {

/// One collective as a communicator receives it. `input` and `output` are
/// the same address for the in-place kinds (all-reduce, broadcast); the
/// caller keeps both alive and untouched until wait() returns.
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::AllReduce;
  ReduceOp reduce = ReduceOp::Sum;
  int64_t root = 0;
  DType dtype = DType::F32;
  const void *input = nullptr;
  void *output = nullptr;
  int64_t inputElements = 0, outputElements = 0;
  std::string group;
};

/// A process group's transport. Every rank issues the same collectives in
/// the same order (same program); start() returns at once or when the
/// collective is done, wait() blocks until it is. Errors (a rank that died,
/// a timeout) are thrown as exceptions from either.
class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t size() const = 0;
  /// Starts `call`; the returned handle is passed to wait() once.
  virtual int64_t start(const CollectiveCall &call) = 0;
  virtual void wait(int64_t handle) = 0;
};

/// A group of one process: every collective is its input (copied where the
/// output is a buffer of its own). What a program compiled for world size 1
/// runs on when nobody binds its group.
class SelfCommunicator : public Communicator {
public:
  int64_t rank() const override { return 0; }
  int64_t size() const override { return 1; }
  int64_t start(const CollectiveCall &call) override;
  void wait(int64_t) override {}
};

/// The collectives of one executor's program: the communicator bound to each
/// process group and the collectives in flight during a run.
class CollectiveRunner {
public:
  explicit CollectiveRunner(const Program &program);
  /// Binds group `name` to `comm`; throws CompileError when the program has
  /// no such group or `comm`'s size is not the one it was compiled for.
  void bind(const std::string &name, std::shared_ptr<Communicator> comm);
  /// Throws CompileError naming the first group with no communicator (a
  /// group of one needs none).
  void checkBound() const;
  /// Runs a CollectiveStart or CollectiveWait step over `pointers` (every
  /// buffer's address).
  void run(const Step &step, const std::vector<void *> &pointers);
  /// Waits for whatever a failed run left in flight, ignoring its errors.
  void drain();

private:
  const Program &prog;
  std::vector<std::shared_ptr<Communicator>> comms; ///< by group index
  std::map<int32_t, std::pair<int32_t, int64_t>> inFlight; ///< ticket -> (group, handle)
};

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_COMMUNICATOR_H
