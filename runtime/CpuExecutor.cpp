//===- CpuExecutor.cpp ----------------------------------------------------===//
#include "runtime/CpuExecutor.h"

#include "runtime/MemoryPlan.h"
#include "runtime/CpuAttention.h"
#include "runtime/CpuDnnl.h"
#include "runtime/CpuLibrary.h"
#include "runtime/ThreadPool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

using namespace tilefuse;

CpuExecutor::CpuExecutor(Program program, std::vector<CpuKernelFn> fns,
                         std::shared_ptr<void> keep)
    : prog(std::move(program)), kernels(std::move(fns)),
      keepAlive(std::move(keep)) {
  prog.validate();
  for (const Step &st : prog.steps)
    if (st.kind == Step::Kind::Attention || st.kind == Step::Kind::AttentionGrad)
      cpu::checkAttentionType(prog.buffers[size_t(st.buffers[0])].dtype);
  if (kernels.size() != prog.kernels.size())
    throw CompileError("CPU executor: " + std::to_string(kernels.size()) +
                       " kernel entry points for " +
                       std::to_string(prog.kernels.size()) + " kernels");
  pointers.assign(prog.buffers.size(), nullptr);
  kept.assign(prog.arguments.size(), nullptr);
  scratch.assign(prog.arguments.size(), nullptr);
  for (size_t i = 0; i < prog.arguments.size(); ++i)
    written.push_back(prog.writesArgument(i));
  // One arena for every non-argument buffer (arguments are read in place),
  // laid out by the program's memory plan; 64-byte offsets at least: whole
  // cache lines, aligned vector loads and the streaming stores' alignment.
  if (prog.plan.empty())
    prog.plan = planMemory(prog);
  checkMemoryPlan(prog, prog.plan, 64);
  char *arena = static_cast<char *>(allocate(std::max<uint64_t>(64, prog.plan.bytes), "the arena"));
  if (poisonArenaRequested())
    poison = poisonSchedule(prog);
  collectives = std::make_unique<CollectiveRunner>(prog);
  // oneDNN runs convolutions and bf16 GEMMs on the process's OpenMP
  // threads, which spin for a while after each; the pool's own workers
  // would then compete with them for the same cores between those steps (a
  // U-Net step ran 20% slower so; GPT-2 small's bf16 attention after its
  // QKV GEMM took 1.5x its time alone). Grids run on those OpenMP threads
  // instead, where one OpenMP runtime serves the process
  // (ThreadPool::setTeam refuses otherwise).
  auto onOpenMPThreads = [&](const Step &s) {
    return isConvolution(s) || (s.kind == Step::Kind::Gemm &&
                                cpu::dnnlTakesGemm(prog.buffers[size_t(s.buffers[2])].dtype));
  };
  if (std::any_of(prog.steps.begin(), prog.steps.end(), onOpenMPThreads) &&
      cpu::dnnlStatus() == "loaded")
    ThreadPool::global().setTeam(ThreadPool::Team::OpenMP);
  for (size_t b = 0; b < prog.buffers.size(); ++b) {
    if (prog.plan.offsets[b] == MemoryPlan::kNotInArena)
      continue;
    pointers[b] = arena + prog.plan.offsets[b];
    const BufferInfo &info = prog.buffers[b];
    if (info.role == BufferInfo::Role::Constant)
      copyBytes(pointers[b], info.expandedData().data(), info.byteSize());
  }
}

void *CpuExecutor::allocate(uint64_t bytes, const std::string &what) {
  // 64-byte alignment: whole cache lines, aligned vector loads.
  bytes = std::max<uint64_t>(64, (bytes + 63) / 64 * 64);
  void *p = std::aligned_alloc(64, bytes);
  if (!p)
    throw CompileError("CPU executor: cannot allocate " + std::to_string(bytes) +
                       " bytes for " + what);
  owned.push_back(p);
  return p;
}

void CpuExecutor::setCommunicator(const std::string &group, std::shared_ptr<Communicator> comm) {
  std::lock_guard<std::mutex> lock(runMutex);
  collectives->bind(group, std::move(comm));
}

void CpuExecutor::makePersistent(size_t argument, const void *initial) {
  if (argument >= prog.arguments.size())
    throw CompileError("no argument " + std::to_string(argument) + " to keep");
  const BufferInfo &info = prog.buffers[prog.arguments[argument]];
  if (!kept[argument])
    kept[argument] = allocate(info.byteSize(), info.name);
  copyBytes(kept[argument], initial, info.byteSize());
}

void CpuExecutor::carry(size_t result, size_t argument) {
  prog.checkCarry(result, argument);
  if (!kept[argument])
    throw CompileError("carry: result " + std::to_string(result) + " -> argument " +
                       std::to_string(argument) + " needs a persistent argument");
  carries.emplace_back(result, argument);
}

const void *CpuExecutor::persistent(size_t argument) {
  return argument < kept.size() ? kept[argument] : nullptr;
}

CpuExecutor::~CpuExecutor() {
  for (void *p : owned)
    std::free(p);
}

void CpuExecutor::runThen(const std::vector<ArgRef> &args,
                          const std::function<void()> &read) {
  std::lock_guard<std::mutex> lock(runMutex);
  runLocked(args);
  read();
}

bool CpuExecutor::redirectable(size_t i) const {
  if (i >= prog.results.size())
    return false;
  int b = prog.results[i];
  const BufferInfo &info = prog.buffers[b];
  if (info.role == BufferInfo::Role::Argument || info.role == BufferInfo::Role::Constant ||
      prog.plan.offsets[b] == MemoryPlan::kNotInArena)
    return false;
  if (std::count(prog.results.begin(), prog.results.end(), b) != 1)
    return false;
  // (every carried result is declared among the aliases: checkCarry)
  for (auto [result, argument] : prog.aliases)
    if (result == int(i))
      return false;
  return true;
}

void CpuExecutor::runInto(const std::vector<ArgRef> &args, const std::vector<void *> &targets,
                          const std::function<void()> &read) {
  std::lock_guard<std::mutex> lock(runMutex);
  std::vector<std::pair<int, void *>> saved;
  for (size_t i = 0; i < targets.size() && i < prog.results.size(); ++i) {
    if (!targets[i])
      continue;
    if (!redirectable(i) || reinterpret_cast<uintptr_t>(targets[i]) % 64 != 0)
      throw CompileError("result " + std::to_string(i) +
                         " cannot be computed into the caller's memory");
    int b = prog.results[i];
    saved.emplace_back(b, pointers[b]);
    pointers[b] = targets[i];
  }
  try {
    runLocked(args);
  } catch (...) {
    for (auto [b, p] : saved)
      pointers[b] = p;
    throw;
  }
  for (auto [b, p] : saved)
    pointers[b] = p;
  read();
}

void CpuExecutor::runLocked(const std::vector<ArgRef> &args) {
  if (args.size() != prog.arguments.size())
    throw CompileError("expected " + std::to_string(prog.arguments.size()) +
                       " arguments, got " + std::to_string(args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].onDevice)
      throw CompileError("argument " + std::to_string(i) +
                         " is in GPU memory; this function runs on the CPU");
    void *p = args[i].data ? const_cast<void *>(args[i].data) : kept[i];
    if (!p)
      throw CompileError("argument " + std::to_string(i) + " is missing");
    if (args[i].data && written[i]) {
      // A kernel writes this argument in place: it works on a copy (the
      // kept value's storage when the argument is persistent), never on
      // the caller's array.
      const BufferInfo &info = prog.buffers[prog.arguments[i]];
      if (!kept[i] && !scratch[i])
        scratch[i] = allocate(info.byteSize(), info.name);
      p = kept[i] ? kept[i] : scratch[i];
      copyBytes(p, args[i].data, info.byteSize());
    }
    pointers[prog.arguments[i]] = p;
  }
  collectives->checkBound();
  try {
    runSteps();
  } catch (...) {
    // A collective still in flight writes into the arena: finish it
    // before anyone reuses the bytes.
    collectives->drain();
    throw;
  }
  for (auto [result, argument] : carries)
    if (prog.results[result] != prog.arguments[argument]) // in place: nothing to swap
      std::swap(pointers[prog.results[result]], kept[argument]);
}

void CpuExecutor::runSteps() {
  ThreadPool &pool = ThreadPool::global();
  std::vector<void *> kargs;
  if (profiling)
    ++calls;
  auto stepStart = std::chrono::steady_clock::now();
  convChain = {}; // a new run: the buffers hold new values
  if (!poison.empty())
    poisonBuffers(poison.back());
  for (size_t index = 0; index < prog.steps.size(); ++index) {
    const Step &s = prog.steps[index];
    // A blocked copy made by one convolution serves the next only while
    // nothing wrote the bytes it was made from (the arena reuses bytes,
    // kernels write over dying inputs); collectives write in the
    // background, so they end the chain.
    if (s.kind == Step::Kind::CollectiveStart || s.kind == Step::Kind::CollectiveWait)
      convChain = {};
    else if (!isConvolution(s))
      for (int b : stepWrites(s))
        convChain.resetIfWritten(pointers[size_t(b)], prog.buffers[size_t(b)].byteSize());
    if (profiling)
      stepStart = std::chrono::steady_clock::now();
    switch (s.kind) {
    case Step::Kind::Kernel: {
      const ProgramKernel &k = prog.kernels[s.kernel];
      kargs.clear();
      for (int b : s.buffers)
        kargs.push_back(pointers[b]);
      CpuKernelFn fn = kernels[s.kernel];
      void **argv = kargs.data();
      // Ranges of about 16K elements at least: below that, splitting costs more than it saves.
      int64_t minPrograms = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, k.elementsPerProgram));
      pool.parallelFor(k.grid, minPrograms,
                       [&](int64_t first, int64_t end) { fn(argv, first, end); });
      break;
    }
    case Step::Kind::Gemm:
      if (!s.epilogue.empty())
        throw CompileError("a GEMM with a fused epilogue (" + s.source +
                           ") was compiled for a GPU target; the CPU executor cannot run it");
      cpu::gemm(s, prog.buffers[s.buffers[2]].dtype, pointers[s.buffers[0]],
                pointers[s.buffers[1]], pointers[s.buffers[2]]);
      break;
    case Step::Kind::Sort:
      cpu::sort(s, prog.buffers[s.buffers[0]].dtype, pointers[s.buffers[0]],
                pointers[s.buffers[1]], static_cast<int64_t *>(pointers[s.buffers[2]]));
      break;
    case Step::Kind::GroupedGemm:
      cpu::groupedGemm(s, prog.buffers[s.buffers[0]].dtype, prog.buffers[s.buffers[2]].dtype,
                       pointers[s.buffers[0]], pointers[s.buffers[1]], pointers[s.buffers[2]],
                       pointers[s.buffers[3]]);
      break;
    case Step::Kind::Gather:
      cpu::gather(prog.buffers[s.buffers[0]], prog.buffers[s.buffers[1]],
                  pointers[s.buffers[0]], pointers[s.buffers[1]],
                  pointers[s.buffers[2]], s.source);
      break;
    case Step::Kind::ScatterAdd: {
      // A base of constant zeros (autodiff's gradient of a gather) is never
      // read: the output is cleared.
      const BufferInfo &base = prog.buffers[s.buffers[0]];
      bool zeros = base.role == BufferInfo::Role::Constant && base.splat &&
                   std::all_of(base.data.begin(), base.data.end(), [](uint8_t x) { return x == 0; });
      cpu::scatterAdd(base, prog.buffers[s.buffers[1]], zeros ? nullptr : pointers[s.buffers[0]],
                      pointers[s.buffers[1]], pointers[s.buffers[2]], pointers[s.buffers[3]]);
      break;
    }
    case Step::Kind::Copy:
      copyBytes(pointers[s.buffers[1]], pointers[s.buffers[0]],
                  prog.buffers[s.buffers[0]].byteSize());
      break;
    case Step::Kind::Conv:
    case Step::Kind::ConvGradInput:
    case Step::Kind::ConvGradWeight:
      cpu::conv(s, prog.buffers[s.buffers[2]].dtype, pointers[s.buffers[0]],
                pointers[s.buffers[1]], pointers[s.buffers[2]], &convChain,
                s.buffers.size() > 3 ? pointers[s.buffers[3]] : nullptr);
      break;
    case Step::Kind::Attention:
    case Step::Kind::AttentionGrad:
      runAttention(s, pointers);
      break;
    case Step::Kind::CollectiveStart:
    case Step::Kind::CollectiveWait:
      collectives->run(s, pointers);
      break;
    }
    if (!poison.empty())
      poisonBuffers(poison[index]);
    if (profiling)
      seconds[index] += std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - stepStart)
                            .count();
  }
}

namespace {
/// The buffers of an attention step as the kernels take them.
cpu::AttentionShape attentionShape(const Step &s) {
  const AttentionParams &a = s.attention;
  cpu::AttentionShape shape;
  shape.batch = s.batch, shape.heads = a.heads, shape.kvHeads = a.kvHeads;
  shape.queries = a.queries, shape.keys = a.keys;
  shape.headDim = a.headDim, shape.valueDim = a.valueDim;
  shape.causal = a.causal, shape.scale = a.scale;
  shape.mask = cpu::AttentionMask(a.mask);
  shape.maskBatchStride = a.maskBatchStride, shape.maskHeadStride = a.maskHeadStride;
  shape.dropoutP = a.dropoutP, shape.stream = a.stream;
  return shape;
}
} // namespace

void CpuExecutor::runAttention(const Step &s, const std::vector<void *> &at) {
  cpu::AttentionShape shape = attentionShape(s);
  auto f = [&](size_t i) { return static_cast<float *>(at[size_t(s.buffers[i])]); };
  DType dtype = prog.buffers[size_t(s.buffers[0])].dtype; // f32 or bf16
  AttentionSlots slots = attentionSlots(s);
  if (slots.seed >= 0)
    shape.seed = *static_cast<const uint64_t *>(at[size_t(s.buffers[size_t(slots.seed)])]);
  const void *mask = slots.mask >= 0 ? at[size_t(s.buffers[size_t(slots.mask)])] : nullptr;
  size_t out = slots.firstOutput;
  if (s.kind == Step::Kind::Attention) {
    cpu::attentionForward(shape, dtype, f(0), f(1), f(2), mask, f(out), f(out + 1));
    return;
  }
  cpu::attentionBackward(shape, dtype, f(0), f(1), f(2), mask, f(3), f(4), f(5), f(out),
                         f(out + 1), f(out + 2));
}

void CpuExecutor::poisonBuffers(const std::vector<int> &dead) {
  for (int b : dead)
    std::memset(pointers[b], 0xFF, prog.buffers[b].byteSize());
}

const void *CpuExecutor::result(size_t i) {
  // A carried result already lives on as its argument.
  for (auto [result, argument] : carries)
    if (result == i)
      return kept[argument];
  return pointers.at(prog.results.at(i));
}
