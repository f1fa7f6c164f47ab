//===- Executor.cpp -------------------------------------------------------===//
#include "runtime/Executor.h"

#include <cstring>

using namespace tilefuse;

std::vector<HostTensor> Executor::run(const std::vector<HostTensor> &args) {
  const Program &prog = program();
  if (args.size() != prog.arguments.size())
    throw CompileError("expected " + std::to_string(prog.arguments.size()) +
                       " arguments, got " + std::to_string(args.size()));
  std::vector<ArgRef> ptrs;
  for (size_t i = 0; i < args.size(); ++i) {
    const BufferInfo &want = prog.buffers[prog.arguments[i]];
    if (args[i].dtype != want.dtype || args[i].shape != want.shape)
      throw CompileError("argument " + std::to_string(i) + " is " +
                         dtypeName(args[i].dtype) + shapeToString(args[i].shape) +
                         "; the program was compiled for " + dtypeName(want.dtype) +
                         shapeToString(want.shape));
    // A zero-size argument has no bytes but is given: never a null pointer
    // (which means "missing").
    static const uint64_t noElements = 0;
    const void *data = args[i].bytes.empty() ? static_cast<const void *>(&noElements)
                                             : args[i].bytes.data();
    ptrs.push_back({data, false});
  }
  std::vector<HostTensor> out;
  runThen(ptrs, [&] {
    for (size_t i = 0; i < prog.results.size(); ++i) {
      const BufferInfo &info = prog.buffers[prog.results[i]];
      HostTensor t(info.dtype, info.shape);
      copyBytes(t.bytes.data(), result(i), info.byteSize());
      out.push_back(std::move(t));
    }
  });
  return out;
}


void Executor::setNcclCommunicator(const std::string &, const std::string &, int64_t, int64_t) {
  throw CompileError("this executor runs on " + device() +
                     ": its collectives run on a Communicator (tilefuse.distributed binds one), "
                     "not NCCL");
}
