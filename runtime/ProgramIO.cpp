//===- ProgramIO.cpp ------------------------------------------------------===//
#include "runtime/ProgramIO.h"
#include "runtime/MemoryPlan.h"

#include <cstring>

using namespace tilefuse;

namespace {

constexpr char kMagic[8] = {'T', 'F', 'P', 'R', 'O', 'G', 'R', 'M'};

class Writer {
public:
  template <typename T> void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out.append(reinterpret_cast<const char *>(&v), sizeof(T));
  }
  void str(const std::string &s) {
    put<uint64_t>(s.size());
    out += s;
  }
  void bytes(const std::vector<uint8_t> &b) {
    put<uint64_t>(b.size());
    out.append(reinterpret_cast<const char *>(b.data()), b.size());
  }
  std::string out;
};

class Reader {
public:
  explicit Reader(const std::string &in, size_t pos) : in(in), pos(pos) {}
  template <typename T> T get(const char *what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, in.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string str(const char *what) {
    uint64_t n = get<uint64_t>(what);
    need(n, what);
    std::string s = in.substr(pos, n);
    pos += n;
    return s;
  }
  std::vector<uint8_t> bytes(const char *what) {
    uint64_t n = get<uint64_t>(what);
    need(n, what);
    std::vector<uint8_t> b(in.begin() + pos, in.begin() + pos + n);
    pos += n;
    return b;
  }
  /// A count of items each at least `minBytes` long (bounds allocations).
  uint32_t count(const char *what, size_t minBytes) {
    uint32_t n = get<uint32_t>(what);
    if (uint64_t(n) * minBytes > in.size() - pos)
      throw CompileError(std::string("corrupt program: ") + what + " count " +
                         std::to_string(n) + " exceeds the data");
    return n;
  }
  bool atEnd() const { return pos == in.size(); }

private:
  void need(uint64_t n, const char *what) {
    if (n > in.size() - pos)
      throw CompileError(std::string("truncated program: ") + what + " needs " +
                         std::to_string(n) + " bytes, " +
                         std::to_string(in.size() - pos) + " left");
  }
  const std::string &in;
  size_t pos;
};

} // namespace

uint64_t tilefuse::fnv1a64(const void *data, size_t size) {
  uint64_t h = 14695981039346656037ull;
  auto *p = static_cast<const uint8_t *>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::string tilefuse::serializeProgram(const Program &p) {
  Writer w;
  w.put<uint32_t>(uint32_t(p.buffers.size()));
  for (const BufferInfo &b : p.buffers) {
    w.str(b.name);
    w.put<uint8_t>(uint8_t(b.dtype));
    w.put<uint8_t>(uint8_t(b.role));
    w.put<uint32_t>(uint32_t(b.shape.size()));
    for (int64_t d : b.shape)
      w.put<int64_t>(d);
    w.bytes(b.data);
    w.put<uint8_t>(b.splat);
  }
  w.put<uint32_t>(uint32_t(p.kernels.size()));
  for (const ProgramKernel &k : p.kernels) {
    w.str(k.name);
    w.str(k.kind);
    w.put<int64_t>(k.grid);
    w.put<int64_t>(k.block);
    w.put<int64_t>(k.elementsPerProgram);
    w.put<int64_t>(k.threads);
    w.put<uint32_t>(uint32_t(k.fusedOps.size()));
    for (const std::string &op : k.fusedOps)
      w.str(op);
  }
  w.put<uint32_t>(uint32_t(p.steps.size()));
  for (const Step &s : p.steps) {
    w.put<uint8_t>(uint8_t(s.kind));
    w.put<uint32_t>(uint32_t(s.buffers.size()));
    for (int b : s.buffers)
      w.put<int32_t>(b);
    w.put<int32_t>(s.outputs);
    w.put<int32_t>(s.kernel);
    for (int64_t v : {s.batch, s.m, s.n, s.k})
      w.put<int64_t>(v);
    w.put<uint8_t>(s.transposeA);
    w.put<uint8_t>(s.transposeB);
    w.put<uint8_t>(s.descending);
    w.str(s.source);
    w.put<uint32_t>(uint32_t(s.sourceLines.size()));
    for (const std::string &line : s.sourceLines)
      w.str(line);
    w.put<uint32_t>(uint32_t(s.epilogue.size()));
    for (const std::string &op : s.epilogue)
      w.str(op);
    const AttentionParams &a = s.attention;
    for (int64_t v : {a.heads, a.kvHeads, a.queries, a.keys, a.headDim, a.valueDim,
                      a.maskBatchStride, a.maskHeadStride})
      w.put<int64_t>(v);
    w.put<uint8_t>(a.causal);
    w.put<double>(a.scale);
    w.put<int32_t>(a.mask);
    w.put<double>(a.dropoutP);
    w.put<int64_t>(a.stream);
    const ConvParams &c = s.conv;
    w.put<int32_t>(c.spatial);
    for (int64_t v : {c.batch, c.channels, c.outChannels, c.groups})
      w.put<int64_t>(v);
    w.put<uint8_t>(c.channelsLast);
    for (const std::array<int64_t, 3> *a3 : {&c.input, &c.kernel, &c.output, &c.stride,
                                             &c.padLow, &c.padHigh, &c.dilation})
      for (int64_t v : *a3)
        w.put<int64_t>(v);
    const CollectiveParams &col = s.collective;
    w.put<uint8_t>(uint8_t(col.kind));
    w.put<uint8_t>(uint8_t(col.reduce));
    w.put<int32_t>(col.group);
    w.put<int64_t>(col.root);
    w.put<int32_t>(col.ticket);
  }
  w.put<uint32_t>(uint32_t(p.groups.size()));
  for (const ProcessGroup &g : p.groups) {
    w.str(g.name);
    w.put<int64_t>(g.size);
  }
  for (const std::vector<int> *list : {&p.arguments, &p.results}) {
    w.put<uint32_t>(uint32_t(list->size()));
    for (int b : *list)
      w.put<int32_t>(b);
  }
  w.put<uint32_t>(uint32_t(p.aliases.size()));
  for (auto [result, argument] : p.aliases) {
    w.put<int32_t>(result);
    w.put<int32_t>(argument);
  }
  w.put<uint64_t>(p.plan.alignment);
  w.put<uint64_t>(p.plan.bytes);
  w.put<uint32_t>(uint32_t(p.plan.offsets.size()));
  for (uint64_t offset : p.plan.offsets)
    w.put<uint64_t>(offset);
  Writer header;
  header.out.append(kMagic, sizeof(kMagic));
  header.put<uint32_t>(kProgramFormatVersion);
  header.put<uint64_t>(w.out.size());
  header.put<uint64_t>(fnv1a64(w.out.data(), w.out.size()));
  return header.out + w.out;
}

Program tilefuse::deserializeProgram(const std::string &bytes) {
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    throw CompileError("not a tilefuse program (bad magic number)");
  Reader head(bytes, sizeof(kMagic));
  uint32_t version = head.get<uint32_t>("the format version");
  if (version != kProgramFormatVersion)
    throw CompileError("program format version " + std::to_string(version) +
                       " is not supported (this runtime reads version " +
                       std::to_string(kProgramFormatVersion) + "); recompile it");
  uint64_t size = head.get<uint64_t>("the payload size");
  uint64_t sum = head.get<uint64_t>("the checksum");
  size_t start = sizeof(kMagic) + 4 + 8 + 8;
  if (bytes.size() - start != size)
    throw CompileError("truncated program: the payload has " +
                       std::to_string(bytes.size() - start) + " bytes, the header says " +
                       std::to_string(size));
  if (fnv1a64(bytes.data() + start, size) != sum)
    throw CompileError("corrupt program: the checksum does not match its contents");

  Reader r(bytes, start);
  Program p;
  uint32_t nb = r.count("buffer", 8);
  for (uint32_t i = 0; i < nb; ++i) {
    BufferInfo b;
    b.name = r.str("a buffer name");
    uint8_t dtype = r.get<uint8_t>("a dtype"), role = r.get<uint8_t>("a role");
    if (dtype > uint8_t(DType::I1) || role > uint8_t(BufferInfo::Role::Intermediate))
      throw CompileError("corrupt program: buffer " + b.name + " has dtype " +
                         std::to_string(dtype) + " and role " + std::to_string(role));
    b.dtype = DType(dtype);
    b.role = BufferInfo::Role(role);
    uint32_t rank = r.count("dimension", 8);
    for (uint32_t d = 0; d < rank; ++d) {
      int64_t n = r.get<int64_t>("a dimension");
      if (n < 0)
        throw CompileError("corrupt program: buffer " + b.name + " has a negative dimension");
      b.shape.push_back(n);
    }
    b.data = r.bytes("constant data");
    b.splat = r.get<uint8_t>("a splat flag") != 0;
    p.buffers.push_back(std::move(b));
  }
  uint32_t nk = r.count("kernel", 8);
  for (uint32_t i = 0; i < nk; ++i) {
    ProgramKernel k;
    k.name = r.str("a kernel name");
    k.kind = r.str("a kernel kind");
    k.grid = r.get<int64_t>("a grid");
    k.block = r.get<int64_t>("a block size");
    k.elementsPerProgram = r.get<int64_t>("elements per program");
    k.threads = r.get<int64_t>("threads per block");
    uint32_t nops = r.count("fused op", 8);
    for (uint32_t o = 0; o < nops; ++o)
      k.fusedOps.push_back(r.str("a fused op"));
    p.kernels.push_back(std::move(k));
  }
  uint32_t ns = r.count("step", 8);
  for (uint32_t i = 0; i < ns; ++i) {
    Step s;
    uint8_t kind = r.get<uint8_t>("a step kind");
    if (kind > uint8_t(Step::Kind::Sort))
      throw CompileError("corrupt program: step " + std::to_string(i) + " has kind " +
                         std::to_string(kind));
    s.kind = Step::Kind(kind);
    uint32_t nbuf = r.count("step buffer", 4);
    for (uint32_t b = 0; b < nbuf; ++b)
      s.buffers.push_back(r.get<int32_t>("a step buffer"));
    s.outputs = r.get<int32_t>("an output count");
    s.kernel = r.get<int32_t>("a kernel index");
    s.batch = r.get<int64_t>("a GEMM batch");
    s.m = r.get<int64_t>("a GEMM size");
    s.n = r.get<int64_t>("a GEMM size");
    s.k = r.get<int64_t>("a GEMM size");
    s.transposeA = r.get<uint8_t>("a transpose flag") != 0;
    s.transposeB = r.get<uint8_t>("a transpose flag") != 0;
    s.descending = r.get<uint8_t>("a sort order") != 0;
    s.source = r.str("a step source");
    uint32_t nlines = r.count("source line", 8);
    for (uint32_t l = 0; l < nlines; ++l)
      s.sourceLines.push_back(r.str("a source line"));
    uint32_t nepi = r.count("epilogue op", 8);
    for (uint32_t e = 0; e < nepi; ++e)
      s.epilogue.push_back(r.str("an epilogue op"));
    AttentionParams &a = s.attention;
    for (int64_t *v : {&a.heads, &a.kvHeads, &a.queries, &a.keys, &a.headDim, &a.valueDim,
                       &a.maskBatchStride, &a.maskHeadStride})
      *v = r.get<int64_t>("an attention size");
    a.causal = r.get<uint8_t>("an attention flag") != 0;
    a.scale = r.get<double>("an attention scale");
    a.mask = r.get<int32_t>("an attention mask kind");
    a.dropoutP = r.get<double>("an attention dropout probability");
    a.stream = r.get<int64_t>("an attention dropout stream");
    ConvParams &c = s.conv;
    c.spatial = r.get<int32_t>("a convolution rank");
    for (int64_t *v : {&c.batch, &c.channels, &c.outChannels, &c.groups})
      *v = r.get<int64_t>("a convolution size");
    c.channelsLast = r.get<uint8_t>("a convolution layout") != 0;
    for (std::array<int64_t, 3> *a3 : {&c.input, &c.kernel, &c.output, &c.stride, &c.padLow,
                                       &c.padHigh, &c.dilation})
      for (int64_t &v : *a3)
        v = r.get<int64_t>("a convolution window size");
    CollectiveParams &col = s.collective;
    col.kind = CollectiveKind(r.get<uint8_t>("a collective kind"));
    col.reduce = ReduceOp(r.get<uint8_t>("a collective reduction"));
    col.group = r.get<int32_t>("a process group index");
    col.root = r.get<int64_t>("a broadcast root");
    col.ticket = r.get<int32_t>("a collective ticket");
    p.steps.push_back(std::move(s));
  }
  uint32_t ng = r.count("process group", 8);
  for (uint32_t i = 0; i < ng; ++i) {
    ProcessGroup g;
    g.name = r.str("a process group name");
    g.size = r.get<int64_t>("a process group size");
    p.groups.push_back(std::move(g));
  }
  for (std::vector<int> *list : {&p.arguments, &p.results}) {
    uint32_t n = r.count("argument or result", 4);
    for (uint32_t i = 0; i < n; ++i)
      list->push_back(r.get<int32_t>("an argument or result"));
  }
  uint32_t na = r.count("alias", 8);
  for (uint32_t i = 0; i < na; ++i) {
    int result = r.get<int32_t>("an aliased result");
    p.aliases.emplace_back(result, r.get<int32_t>("an aliased argument"));
  }
  p.plan.alignment = r.get<uint64_t>("the plan's alignment");
  p.plan.bytes = r.get<uint64_t>("the plan's arena size");
  uint32_t noffsets = r.count("planned offset", 8);
  for (uint32_t i = 0; i < noffsets; ++i)
    p.plan.offsets.push_back(r.get<uint64_t>("a planned offset"));
  if (!r.atEnd())
    throw CompileError("corrupt program: bytes left after the last field");
  p.validate();
  if (!p.plan.empty())
    checkMemoryPlan(p, p.plan);
  return p;
}
