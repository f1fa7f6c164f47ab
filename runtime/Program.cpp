//===- Program.cpp --------------------------------------------------------===//
#include "runtime/Program.h"
#include "runtime/ProgramIO.h"

#include <algorithm>
#include <cstdio>

using namespace tilefuse;

std::vector<uint8_t> BufferInfo::expandedData() const {
  if (!splat)
    return data;
  std::vector<uint8_t> out(byteSize());
  for (size_t i = 0; i + data.size() <= out.size(); i += data.size())
    std::copy(data.begin(), data.end(), out.begin() + i);
  return out;
}

/// Index of the one buffer a non-kernel step writes.
static size_t writtenIndex(const Step &step) {
  switch (step.kind) {
  case Step::Kind::Gemm: return 2;
  case Step::Kind::Gather: return 2;
  case Step::Kind::ScatterAdd: return 3;
  case Step::Kind::GroupedGemm: return 3;
  case Step::Kind::Copy: return 1;
  case Step::Kind::Conv:
  case Step::Kind::ConvGradInput:
  case Step::Kind::ConvGradWeight: return 2;
  case Step::Kind::CollectiveStart:
  case Step::Kind::CollectiveWait: return step.buffers.empty() ? 0 : step.buffers.size() - 1;
  case Step::Kind::Kernel:
  case Step::Kind::Attention:
  case Step::Kind::AttentionGrad:
  case Step::Kind::Sort: break;
  }
  return 0;
}

const char *tilefuse::collectiveName(CollectiveKind kind) {
  switch (kind) {
  case CollectiveKind::AllReduce: return "all_reduce";
  case CollectiveKind::ReduceScatter: return "reduce_scatter";
  case CollectiveKind::AllGather: return "all_gather";
  case CollectiveKind::Broadcast: return "broadcast";
  }
  return "collective";
}

static bool writesTrailing(const Step &step) {
  return step.kind == Step::Kind::Kernel || step.kind == Step::Kind::Attention ||
         step.kind == Step::Kind::AttentionGrad || step.kind == Step::Kind::Sort;
}

static bool writes(const Step &step, size_t i) {
  if (writesTrailing(step))
    return i + size_t(std::max(0, step.outputs)) >= step.buffers.size();
  return i == writtenIndex(step) || int(i) == convWorkspaceSlot(step);
}

int tilefuse::convWorkspaceSlot(const Step &step) {
  if (!isConvolution(step))
    return -1;
  bool bias = std::find(step.epilogue.begin(), step.epilogue.end(), "bias") != step.epilogue.end();
  size_t slot = bias ? 4 : 3;
  return step.buffers.size() == slot + 1 ? int(slot) : -1;
}

AttentionSlots tilefuse::attentionSlots(const Step &step) {
  AttentionSlots slots;
  int next = step.kind == Step::Kind::AttentionGrad ? 6 : 3; // after q, k, v (out, lse, dOut)
  if (step.attention.mask)
    slots.mask = next++;
  if (step.attention.dropoutP != 0)
    slots.seed = next++;
  slots.firstOutput = size_t(next);
  return slots;
}

std::vector<int> tilefuse::stepReads(const Step &step) {
  std::vector<int> out;
  for (size_t i = 0; i < step.buffers.size(); ++i)
    if (!writes(step, i))
      out.push_back(step.buffers[i]);
  return out;
}

/// An attention step's buffers against its sizes: q, k, v, out (and dOut,
/// dq, dk, dv) all f32 or all bf16, an f32 lse, of exactly the element
/// counts the sizes give, a mask of one byte (i1) or of q's type per score
/// it is read at.
/// A convolution step's sizes against themselves (the output-size rule,
/// the groups) and its three buffers: f32, bf16 or f16 (all one type), of
/// exactly the element counts the sizes give; a forward one's epilogue and
/// bias (f32 only); a workspace, where there is one, of i1 bytes.
static void validateConv(const Program &p, const Step &s, const std::string &what) {
  const ConvParams &c = s.conv;
  auto impossible = [&](const std::string &why) {
    throw CompileError("corrupt program: " + what + " has impossible convolution sizes (" + why +
                       ")");
  };
  // A forward convolution's epilogue (graph.conv_bias_act): "bias" first
  // (buffer 3: one f32 per output channel), then at most one activation.
  bool bias = false;
  for (size_t e = 0; e < s.epilogue.size(); ++e) {
    const std::string &op = s.epilogue[e];
    bool activation = op != "bias" && convActivationNamed(op) &&
                      *convActivationNamed(op) != ConvActivation::None;
    if (s.kind != Step::Kind::Conv || !((op == "bias" && e == 0) ||
                                        (activation && e + 1 == s.epilogue.size())))
      throw CompileError("corrupt program: " + what + " has convolution epilogue '" + op +
                         "' at position " + std::to_string(e));
    bias |= op == "bias";
  }
  size_t want = bias ? 4 : 3;
  if (s.buffers.size() != want && s.buffers.size() != want + 1)
    impossible(std::to_string(s.buffers.size()) + " buffers, expected " + std::to_string(want) +
               " (or a workspace after them)");
  if (int slot = convWorkspaceSlot(s); slot >= 0) {
    const BufferInfo &w = p.buffers[s.buffers[size_t(slot)]];
    if (w.dtype != DType::I1 || w.shape.size() != 1 || w.role != BufferInfo::Role::Intermediate)
      throw CompileError("corrupt program: " + what + " has a workspace of " +
                         dtypeName(w.dtype) + shapeToString(w.shape) +
                         ", expected an intermediate i1 vector (bytes)");
  }
  if (!s.epilogue.empty() && p.buffers[s.buffers[2]].dtype != DType::F32)
    throw CompileError("corrupt program: " + what + " applies an epilogue to " +
                       dtypeName(p.buffers[s.buffers[2]].dtype) + " results (f32 only)");
  if (bias && (p.buffers[s.buffers[3]].dtype != DType::F32 ||
               numElements(p.buffers[s.buffers[3]].shape) != c.outChannels))
    throw CompileError("corrupt program: " + what + " has a bias of " +
                       dtypeName(p.buffers[s.buffers[3]].dtype) +
                       shapeToString(p.buffers[s.buffers[3]].shape) + ", expected " +
                       std::to_string(c.outChannels) + " f32 values");
  if (c.spatial < 1 || c.spatial > 3 || c.batch < 0 || c.channels < 1 || c.outChannels < 1 ||
      c.groups < 1 || c.channels % c.groups || c.outChannels % c.groups)
    impossible("channels, groups or rank");
  for (size_t i = 0; i < size_t(c.spatial); ++i) {
    int64_t span = c.dilation[i] * (c.kernel[i] - 1) + 1;
    int64_t padded = c.input[i] + c.padLow[i] + c.padHigh[i];
    if (c.stride[i] < 1 || c.dilation[i] < 1 || c.kernel[i] < 1 || c.padLow[i] < 0 ||
        c.padHigh[i] < 0 || padded < span || c.output[i] != (padded - span) / c.stride[i] + 1)
      impossible("spatial dimension " + std::to_string(i));
  }
  int64_t in = c.inputElements(), w = c.weightElements(), out = c.outputElements();
  std::vector<int64_t> sizes = s.kind == Step::Kind::Conv            ? std::vector<int64_t>{in, w, out}
                               : s.kind == Step::Kind::ConvGradInput ? std::vector<int64_t>{out, w, in}
                                                                     : std::vector<int64_t>{in, out, w};
  DType t = p.buffers[s.buffers[0]].dtype;
  for (size_t i = 0; i < 3; ++i) {
    const BufferInfo &b = p.buffers[s.buffers[i]];
    if ((t != DType::F32 && t != DType::BF16 && t != DType::F16) || b.dtype != t ||
        numElements(b.shape) != sizes[i])
      throw CompileError("corrupt program: " + what + " buffer " + std::to_string(i) + " is " +
                         dtypeName(b.dtype) + shapeToString(b.shape) + ", expected " +
                         std::to_string(sizes[i]) + " elements of one of f32, bf16, f16");
  }
}

static void validateAttention(const Program &p, const Step &s, const std::string &what) {
  const AttentionParams &a = s.attention;
  bool grad = s.kind == Step::Kind::AttentionGrad;
  AttentionSlots slots = attentionSlots(s);
  size_t want = slots.firstOutput + (grad ? 3 : 2);
  if (s.buffers.size() != want || s.outputs != (grad ? 3 : 2))
    throw CompileError("corrupt program: " + what + " has " + std::to_string(s.buffers.size()) +
                       " buffers and " + std::to_string(s.outputs) + " outputs, expected " +
                       std::to_string(want) + " and " + std::to_string(grad ? 3 : 2));
  if (s.batch < 1 || a.heads < 1 || a.kvHeads < 1 || a.heads % a.kvHeads || a.queries < 0 ||
      a.keys < 0 || a.headDim < 0 || a.valueDim < 0 || a.mask < 0 || a.mask > 2 ||
      !(a.dropoutP >= 0 && a.dropoutP < 1) || a.stream < 0)
    throw CompileError("corrupt program: " + what + " has impossible attention sizes");
  int64_t q = s.batch * a.heads * a.queries, kv = s.batch * a.kvHeads * a.keys;
  std::vector<int64_t> sizes = {q * a.headDim, kv * a.headDim, kv * a.valueDim};
  if (grad)
    sizes.insert(sizes.end(), {q * a.valueDim, q, q * a.valueDim});
  std::vector<int64_t> outputs = grad ? std::vector<int64_t>{q * a.headDim, kv * a.headDim,
                                                             kv * a.valueDim}
                                      : std::vector<int64_t>{q * a.valueDim, q};
  // q, k, v (out, dOut) and the results of one type, f32, bf16 or f16
  // (what an executor's kernels take it checks itself); the log-sum-exp
  // (the forward's second result, the gradient's fifth operand) f32.
  DType t = p.buffers[s.buffers[0]].dtype;
  auto expect = [&](size_t index, int64_t elements, bool statistics) {
    const BufferInfo &b = p.buffers[s.buffers[index]];
    DType want = statistics ? DType::F32 : t;
    if ((t != DType::F32 && t != DType::BF16 && t != DType::F16) || b.dtype != want ||
        numElements(b.shape) != elements)
      throw CompileError("corrupt program: " + what + " buffer " + std::to_string(index) +
                         " is " + dtypeName(b.dtype) + shapeToString(b.shape) + ", expected " +
                         std::to_string(elements) + " " +
                         dtypeName(t == DType::BF16 || t == DType::F16 ? want : DType::F32) +
                         " elements");
  };
  for (size_t i = 0; i < sizes.size(); ++i)
    expect(i, sizes[i], grad && i == 4);
  for (size_t i = 0; i < outputs.size(); ++i)
    expect(slots.firstOutput + i, outputs[i], !grad && i == 1);
  if (slots.mask >= 0) {
    const BufferInfo &m = p.buffers[s.buffers[size_t(slots.mask)]];
    int64_t reach = (s.batch - 1) * a.maskBatchStride + (a.heads - 1) * a.maskHeadStride +
                    a.queries * a.keys;
    if (m.dtype != (a.mask == 1 ? DType::I1 : t) || a.maskBatchStride < 0 ||
        a.maskHeadStride < 0 || numElements(m.shape) < reach)
      throw CompileError("corrupt program: " + what + " mask is " + dtypeName(m.dtype) +
                         shapeToString(m.shape) + ", too small for its strides or of the "
                         "wrong type");
  }
  if (slots.seed >= 0) {
    const BufferInfo &seed = p.buffers[s.buffers[size_t(slots.seed)]];
    if (seed.dtype != DType::I64 || numElements(seed.shape) != 1)
      throw CompileError("corrupt program: " + what + " seed is " + dtypeName(seed.dtype) +
                         shapeToString(seed.shape) + ", expected one i64");
  }
}

/// A collective step against its group and buffers: a known kind and
/// group, one buffer (in place) or an input and an output of one dtype
/// whose element counts the kind relates; a wait pairs with exactly one
/// earlier start of the same ticket, kind and buffers.
static void validateCollective(const Program &p, size_t index, const std::string &what) {
  const Step &s = p.steps[index];
  const CollectiveParams &c = s.collective;
  if (uint8_t(c.kind) > uint8_t(CollectiveKind::Broadcast) || uint8_t(c.reduce) > uint8_t(ReduceOp::Min) ||
      c.group < 0 || c.group >= int(p.groups.size()))
    throw CompileError("corrupt program: " + what + " names collective kind " +
                       std::to_string(int(c.kind)) + " over group " + std::to_string(c.group) +
                       " of " + std::to_string(p.groups.size()));
  int64_t size = p.groups[size_t(c.group)].size;
  bool inPlace = c.kind == CollectiveKind::AllReduce || c.kind == CollectiveKind::Broadcast;
  if (s.buffers.size() != (inPlace ? 1u : 2u) || s.outputs != 1 ||
      (c.kind == CollectiveKind::Broadcast && (c.root < 0 || c.root >= size)))
    throw CompileError("corrupt program: " + what + " has " + std::to_string(s.buffers.size()) +
                       " buffers for a " + collectiveName(c.kind) + " (root " +
                       std::to_string(c.root) + " of " + std::to_string(size) + " ranks)");
  if (!inPlace) {
    const BufferInfo &in = p.buffers[size_t(s.buffers[0])], &out = p.buffers[size_t(s.buffers[1])];
    int64_t a = numElements(in.shape), b = numElements(out.shape);
    bool sizes = c.kind == CollectiveKind::AllGather ? b == a * size : a == b * size;
    if (in.dtype != out.dtype || !sizes)
      throw CompileError("corrupt program: " + what + " " + collectiveName(c.kind) + "s " +
                         dtypeName(in.dtype) + shapeToString(in.shape) + " into " +
                         dtypeName(out.dtype) + shapeToString(out.shape) + " over " +
                         std::to_string(size) + " ranks");
  }
  int starts = 0, waits = 0, startAt = -1, waitAt = -1;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step &o = p.steps[i];
    if (o.kind != Step::Kind::CollectiveStart && o.kind != Step::Kind::CollectiveWait)
      continue;
    if (o.collective.ticket != c.ticket)
      continue;
    if (o.buffers != s.buffers || o.collective.kind != c.kind || o.collective.group != c.group)
      throw CompileError("corrupt program: " + what + " and step " + std::to_string(i) +
                         " share ticket " + std::to_string(c.ticket) + " but not their buffers");
    (o.kind == Step::Kind::CollectiveStart ? starts : waits) += 1;
    (o.kind == Step::Kind::CollectiveStart ? startAt : waitAt) = int(i);
  }
  if (starts != 1 || waits != 1 || startAt > waitAt)
    throw CompileError("corrupt program: " + what + ": collective ticket " +
                       std::to_string(c.ticket) + " has " + std::to_string(starts) +
                       " starts and " + std::to_string(waits) +
                       " waits; each start needs exactly one wait after it");
}

void Program::checkCarry(size_t result, size_t argument) const {
  if (result >= results.size() || argument >= arguments.size())
    throw CompileError("carry: no result " + std::to_string(result) + " or no argument " +
                       std::to_string(argument));
  const BufferInfo &r = buffers[results[result]];
  const BufferInfo &a = buffers[arguments[argument]];
  if (r.dtype != a.dtype || r.shape != a.shape)
    throw CompileError("carry: result " + std::to_string(result) + " is " +
                       dtypeName(r.dtype) + shapeToString(r.shape) + ", argument " +
                       std::to_string(argument) + " is " + dtypeName(a.dtype) +
                       shapeToString(a.shape));
  bool inPlace = results[result] == arguments[argument];
  if ((r.role != BufferInfo::Role::Intermediate && !inPlace) ||
      std::count(results.begin(), results.end(), results[result]) != 1)
    throw CompileError("carry: result " + std::to_string(result) +
                       " is not a buffer of its own");
  if (std::find(aliases.begin(), aliases.end(),
                std::pair<int, int>(int(result), int(argument))) == aliases.end())
    throw CompileError("carry: the program does not declare result " + std::to_string(result) +
                       " as argument " + std::to_string(argument) +
                       "'s next value (Program::aliases), so its memory is not kept");
}

bool Program::writesArgument(size_t argument) const {
  int b = arguments.at(argument);
  for (const Step &s : steps)
    for (int w : stepWrites(s))
      if (w == b)
        return true;
  return false;
}

std::vector<int> tilefuse::stepWrites(const Step &step) {
  std::vector<int> out;
  for (size_t i = 0; i < step.buffers.size(); ++i)
    if (writes(step, i))
      out.push_back(step.buffers[i]);
  return out;
}

int64_t tilefuse::cudaLanesPerThread(int64_t block) {
  // Warp shuffles assume all 32 threads of a warp take part.
  return block % 128 == 0 ? 4 : 1;
}

std::string tilefuse::kernelSymbol(const Program &program, const Step &step) {
  const ProgramKernel &k = program.kernels.at(step.kernel);
  // The interface as text: kind, launch, then each buffer's dtype and shape.
  std::string key = k.kind + " " + std::to_string(k.grid) + " " + std::to_string(k.block) +
                    " " + std::to_string(k.elementsPerProgram);
  for (int b : step.buffers) {
    const BufferInfo &buffer = program.buffers.at(b);
    key += " " + std::string(dtypeName(buffer.dtype)) + shapeToString(buffer.shape);
  }
  uint64_t h = fnv1a64(key.data(), key.size());
  char hash[9];
  std::snprintf(hash, sizeof hash, "%08x", uint32_t(h ^ (h >> 32)));
  return k.name + "_" + hash;
}

std::vector<std::string> tilefuse::kernelSymbols(const Program &program) {
  std::vector<std::string> symbols(program.kernels.size());
  for (const Step &s : program.steps)
    if (s.kind == Step::Kind::Kernel && s.kernel >= 0 && s.kernel < int(symbols.size()))
      symbols[s.kernel] = kernelSymbol(program, s);
  return symbols;
}

void Program::validate() const {
  auto check = [&](int b, const std::string &what) {
    if (b < 0 || b >= int(buffers.size()))
      throw CompileError("corrupt program: " + what + " names buffer " +
                         std::to_string(b) + " of " + std::to_string(buffers.size()));
  };
  for (const ProcessGroup &g : groups)
    if (g.name.empty() || g.size < 1)
      throw CompileError("corrupt program: process group '" + g.name + "' of size " +
                         std::to_string(g.size));
  for (int a : arguments)
    check(a, "an argument");
  for (int r : results)
    check(r, "a result");
  for (auto [result, argument] : aliases)
    if (result < 0 || result >= int(results.size()) || argument < 0 ||
        argument >= int(arguments.size()) ||
        buffers[results[result]].byteSize() != buffers[arguments[argument]].byteSize())
      throw CompileError("corrupt program: result " + std::to_string(result) +
                         " cannot alias argument " + std::to_string(argument));
  for (const BufferInfo &b : buffers)
    if (b.role == BufferInfo::Role::Constant &&
        b.data.size() != (b.splat ? dtypeSize(b.dtype) : b.byteSize()))
      throw CompileError("corrupt program: constant " + b.name + " holds " +
                         std::to_string(b.data.size()) + " bytes, expected " +
                         std::to_string(b.byteSize()));
  for (const ProgramKernel &k : kernels)
    // threads is 0 for CPU kernels; CUDA kernels hold their lanes per
    // thread in their code, so any other count would skip or repeat lanes.
    if (k.threads != 0 && (k.block < 1 || k.threads != k.block / cudaLanesPerThread(k.block)))
      throw CompileError("corrupt program: kernel " + k.name + " runs " +
                         std::to_string(k.threads) + " threads per block of " +
                         std::to_string(k.block) + " lanes, expected " +
                         std::to_string(k.block < 1 ? 0 : k.block / cudaLanesPerThread(k.block)));
  std::vector<int> launches(kernels.size(), 0);
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step &s = steps[i];
    std::string what = "step " + std::to_string(i) + " (" + s.source + ")";
    for (int b : s.buffers)
      check(b, what);
    size_t want = 0;
    switch (s.kind) {
    case Step::Kind::Kernel: {
      if (s.kernel < 0 || s.kernel >= int(kernels.size()))
        throw CompileError("corrupt program: " + what + " names kernel " +
                           std::to_string(s.kernel));
      // Programs partition the elements the kernel writes: more programs
      // than the largest buffer it touches has elements is a tampered grid
      // (one that would run for ever, or write past its buffers).
      if (s.outputs < 1 || s.outputs > int(s.buffers.size()))
        throw CompileError("corrupt program: " + what + " writes " + std::to_string(s.outputs) +
                           " of its " + std::to_string(s.buffers.size()) + " buffers");
      if (++launches[s.kernel] > 1)
        throw CompileError("corrupt program: " + what + " launches kernel " +
                           kernels[s.kernel].name + ", which an earlier step launches");
      const ProgramKernel &k = kernels[s.kernel];
      int64_t most = 1;
      for (int b : s.buffers)
        most = std::max(most, numElements(buffers[b].shape));
      // (grid 0: an empty domain, nothing to run)
      if (k.grid < 0 || k.block < 1 || k.grid > most)
        throw CompileError("corrupt program: " + what + " launches kernel " + k.name +
                           " with grid " + std::to_string(k.grid) + " x block " +
                           std::to_string(k.block) + " over buffers of at most " +
                           std::to_string(most) + " elements");
      continue;
    }
    case Step::Kind::Gemm: want = 3; break;
    case Step::Kind::Gather: want = 3; break;
    case Step::Kind::ScatterAdd: want = 4; break;
    case Step::Kind::GroupedGemm: want = 4; break;
    case Step::Kind::Sort: {
      int64_t total = 0;
      bool sized = s.buffers.size() == 3 && s.outputs == 2 && s.m >= 0 && s.n >= 0 &&
                   !__builtin_mul_overflow(s.m, s.n, &total);
      if (sized) {
        const BufferInfo &x = buffers[s.buffers[0]], &values = buffers[s.buffers[1]],
                         &indices = buffers[s.buffers[2]];
        sized = numElements(x.shape) == total && values.dtype == x.dtype &&
                numElements(values.shape) == total && indices.dtype == DType::I64 &&
                numElements(indices.shape) == total && x.dtype != DType::I1;
      }
      if (!sized)
        throw CompileError("corrupt program: " + what + " sorts " + std::to_string(s.m) +
                           " rows of " + std::to_string(s.n) + " with buffers that do not hold "
                           "them (input, values of its type, i64 indices)");
      continue;
    }
    case Step::Kind::Copy: want = 2; break;
    case Step::Kind::Attention:
    case Step::Kind::AttentionGrad:
      validateAttention(*this, s, what);
      continue;
    case Step::Kind::Conv:
    case Step::Kind::ConvGradInput:
    case Step::Kind::ConvGradWeight:
      validateConv(*this, s, what);
      continue;
    case Step::Kind::CollectiveStart:
    case Step::Kind::CollectiveWait:
      validateCollective(*this, i, what);
      continue;
    }
    if (s.kind == Step::Kind::Gemm) {
      bool bias = false;
      for (size_t e = 0; e < s.epilogue.size(); ++e) {
        const std::string &op = s.epilogue[e];
        // bias first, relu last: the orders cuBLASLt applies.
        if ((op == "bias" && e == 0) || (op == "relu" && e + 1 == s.epilogue.size()))
          bias |= op == "bias";
        else
          throw CompileError("corrupt program: " + what + " has GEMM epilogue '" + op +
                             "' at position " + std::to_string(e));
      }
      want = bias ? 4 : 3;
    }
    if (s.buffers.size() != want)
      throw CompileError("corrupt program: " + what + " has " +
                         std::to_string(s.buffers.size()) + " buffers, expected " +
                         std::to_string(want));
    auto rowElements = [&](const BufferInfo &table) {
      int64_t rows = table.shape.empty() ? 1 : table.shape[0];
      return rows ? numElements(table.shape) / rows : 0;
    };
    auto isIndex = [](DType t) { return t == DType::I32 || t == DType::I64; };
    if (s.kind == Step::Kind::Gather) {
      const BufferInfo &table = buffers[s.buffers[0]], &ids = buffers[s.buffers[1]],
                       &out = buffers[s.buffers[2]];
      if (!isIndex(ids.dtype) || out.dtype != table.dtype ||
          numElements(out.shape) != numElements(ids.shape) * rowElements(table))
        throw CompileError("corrupt program: " + what + " gathers " + dtypeName(table.dtype) +
                           shapeToString(table.shape) + " rows by " + dtypeName(ids.dtype) +
                           shapeToString(ids.shape) + " into " + dtypeName(out.dtype) +
                           shapeToString(out.shape));
    }
    if (s.kind == Step::Kind::ScatterAdd) {
      const BufferInfo &base = buffers[s.buffers[0]], &ids = buffers[s.buffers[1]],
                       &updates = buffers[s.buffers[2]], &out = buffers[s.buffers[3]];
      if (!isIndex(ids.dtype) || out.dtype != base.dtype || out.shape != base.shape ||
          updates.dtype != base.dtype ||
          numElements(updates.shape) != numElements(ids.shape) * rowElements(base))
        throw CompileError("corrupt program: " + what + " scatters " + dtypeName(updates.dtype) +
                           shapeToString(updates.shape) + " by " + dtypeName(ids.dtype) +
                           shapeToString(ids.shape) + " into " + dtypeName(base.dtype) +
                           shapeToString(base.shape));
    }
    if (s.kind == Step::Kind::GroupedGemm) {
      const BufferInfo &a = buffers[s.buffers[0]], &b = buffers[s.buffers[1]],
                       &offsets = buffers[s.buffers[2]], &c = buffers[s.buffers[3]];
      // Products that wrap would let tiny buffers pass for huge sizes.
      int64_t mk = 0, mn = 0, kn = 0, weights = 0;
      bool fits = !__builtin_mul_overflow(s.m, s.k, &mk) &&
                  !__builtin_mul_overflow(s.m, s.n, &mn) &&
                  !__builtin_mul_overflow(s.k, s.n, &kn) &&
                  !__builtin_mul_overflow(s.batch, kn, &weights);
      bool sized = fits && s.batch >= 0 && s.m >= 0 && s.k >= 0 && s.n >= 0 &&
                   numElements(a.shape) == mk &&
                   numElements(b.shape) == (s.transposeA ? mn : weights) &&
                   numElements(c.shape) == (s.transposeA ? weights : mn) &&
                   numElements(offsets.shape) == s.batch;
      if (!sized || !isIndex(offsets.dtype) || !isFloatDType(a.dtype) || b.dtype != a.dtype ||
          c.dtype != a.dtype || (s.transposeA && s.transposeB))
        throw CompileError("corrupt program: " + what + " multiplies " + dtypeName(a.dtype) +
                           shapeToString(a.shape) + " by " + dtypeName(b.dtype) +
                           shapeToString(b.shape) + " in " + std::to_string(s.batch) +
                           " groups by " + dtypeName(offsets.dtype) +
                           shapeToString(offsets.shape) + " offsets into " +
                           dtypeName(c.dtype) + shapeToString(c.shape));
    }
    if (s.kind == Step::Kind::Copy &&
        buffers[s.buffers[0]].byteSize() != buffers[s.buffers[1]].byteSize())
      throw CompileError("corrupt program: " + what + " copies " +
                         std::to_string(buffers[s.buffers[0]].byteSize()) + " bytes into " +
                         std::to_string(buffers[s.buffers[1]].byteSize()));
    if (s.kind == Step::Kind::Gemm) {
      const BufferInfo &a = buffers[s.buffers[0]], &b = buffers[s.buffers[1]],
                       &c = buffers[s.buffers[2]];
      if (numElements(a.shape) != s.batch * s.m * s.k ||
          numElements(b.shape) != s.batch * s.k * s.n ||
          numElements(c.shape) != s.batch * s.m * s.n)
        throw CompileError("corrupt program: " + what + " GEMM sizes do not match its buffers");
      if (s.buffers.size() == 4 && numElements(buffers[s.buffers[3]].shape) != s.n)
        throw CompileError("corrupt program: " + what + " bias is not one value per column");
      // Stored row-major with op(a): m x k and op(b): k x n (a transposed
      // operand is stored k x m); the last dimension is the stored
      // columns, the ones before it any split of batch x rows (a reshape
      // that merged them shares its operand's buffer). With the element
      // counts above this checks both sizes; with square operands a
      // flipped transpose flag cannot be told from the shapes.
      auto columns = [](const BufferInfo &x) { return x.shape.empty() ? -1 : x.shape.back(); };
      if (columns(a) != (s.transposeA ? s.m : s.k) || columns(b) != (s.transposeB ? s.k : s.n) ||
          columns(c) != s.n)
        throw CompileError("corrupt program: " + what + " multiplies " + shapeToString(a.shape) +
                           (s.transposeA ? "^T" : "") + " by " + shapeToString(b.shape) +
                           (s.transposeB ? "^T" : "") + " into " + shapeToString(c.shape) +
                           ", which is not " + std::to_string(s.m) + "x" + std::to_string(s.k) +
                           " by " + std::to_string(s.k) + "x" + std::to_string(s.n));
    }
  }
  // Steps write arguments only where a carried result is computed in
  // place (a parameter's next value over the parameter).
  for (size_t i = 0; i < steps.size(); ++i)
    for (int b : stepWrites(steps[i]))
      if (buffers[b].role == BufferInfo::Role::Argument &&
          std::none_of(aliases.begin(), aliases.end(), [&](std::pair<int, int> ra) {
            return results[ra.first] == b && arguments[ra.second] == b;
          }))
        throw CompileError("corrupt program: step " + std::to_string(i) + " (" + steps[i].source +
                           ") writes argument buffer " + buffers[b].name +
                           ", which is not a carried result computed in place");
  for (size_t k = 0; k < kernels.size(); ++k)
    if (launches[k] == 0)
      throw CompileError("corrupt program: kernel " + kernels[k].name + " is launched by no step");
}
