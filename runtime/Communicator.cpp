//===- Communicator.cpp ---------------------------------------------------===//
#include "runtime/Communicator.h"

#include <cstring>

using namespace tilefuse;

int64_t SelfCommunicator::start(const CollectiveCall &call) {
  if (call.output != call.input)
    std::memcpy(call.output, call.input, size_t(call.outputElements) * dtypeSize(call.dtype));
  return 0;
}

CollectiveRunner::CollectiveRunner(const Program &program) : prog(program) {
  for (const ProcessGroup &g : prog.groups)
    comms.push_back(g.size == 1 ? std::make_shared<SelfCommunicator>() : nullptr);
}

void CollectiveRunner::bind(const std::string &name, std::shared_ptr<Communicator> comm) {
  for (size_t i = 0; i < prog.groups.size(); ++i) {
    if (prog.groups[i].name != name)
      continue;
    if (!comm || comm->size() != prog.groups[i].size)
      throw CompileError("process group '" + name + "' has " +
                         std::to_string(comm ? comm->size() : 0) +
                         " ranks; the program was compiled for " +
                         std::to_string(prog.groups[i].size) +
                         " (compile it again for this world size)");
    comms[i] = std::move(comm);
    return;
  }
  std::string known;
  for (const ProcessGroup &g : prog.groups)
    known += (known.empty() ? "" : ", ") + g.name;
  throw CompileError("the program has no process group '" + name + "' (it has: " +
                     (known.empty() ? std::string("none") : known) + ")");
}

void CollectiveRunner::checkBound() const {
  for (size_t i = 0; i < prog.groups.size(); ++i)
    if (!comms[i])
      throw CompileError("process group '" + prog.groups[i].name + "' (" +
                         std::to_string(prog.groups[i].size) +
                         " ranks) has no communicator: run the step in each of its processes "
                         "with the process group bound (tilefuse.distributed), e.g. under "
                         "torchrun after torch.distributed.init_process_group()");
}

void CollectiveRunner::run(const Step &step, const std::vector<void *> &pointers) {
  const CollectiveParams &c = step.collective;
  if (step.kind == Step::Kind::CollectiveWait) {
    auto it = inFlight.find(c.ticket);
    if (it == inFlight.end())
      throw CompileError("collective wait for ticket " + std::to_string(c.ticket) +
                         " with no collective in flight");
    auto [group, handle] = it->second;
    inFlight.erase(it);
    comms[size_t(group)]->wait(handle);
    return;
  }
  checkBound();
  CollectiveCall call;
  call.kind = c.kind, call.reduce = c.reduce, call.root = c.root;
  const BufferInfo &in = prog.buffers[size_t(step.buffers.front())];
  const BufferInfo &out = prog.buffers[size_t(step.buffers.back())];
  call.dtype = in.dtype;
  call.input = pointers[size_t(step.buffers.front())];
  call.output = pointers[size_t(step.buffers.back())];
  call.inputElements = numElements(in.shape);
  call.outputElements = numElements(out.shape);
  call.group = prog.groups[size_t(c.group)].name;
  int64_t handle = comms[size_t(c.group)]->start(call);
  inFlight[c.ticket] = {c.group, handle};
}

void CollectiveRunner::drain() {
  for (auto [ticket, entry] : inFlight) {
    try {
      comms[size_t(entry.first)]->wait(entry.second);
    } catch (...) {
    }
  }
  inFlight.clear();
}
