//===- Npy.cpp ------------------------------------------------------------===//
//
// Format 1.0/2.0/3.0: "\x93NUMPY", major, minor, header length (u16 for
// 1.x, u32 after), then a Python dict literal with 'descr',
// 'fortran_order' and 'shape', padded with spaces and a newline.
//
//===----------------------------------------------------------------------===//
#include "runtime/Npy.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

using namespace tilefuse;

namespace {
struct Descr {
  const char *text;
  DType dtype;
};
constexpr Descr kDescrs[] = {{"<f4", DType::F32}, {"<f8", DType::F64}, {"<f2", DType::F16},
                             {"<i4", DType::I32}, {"<i8", DType::I64}, {"|b1", DType::I1}};
} // namespace

HostTensor tilefuse::readNpy(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw CompileError("cannot open " + path);
  std::stringstream all;
  all << in.rdbuf();
  std::string data = all.str();
  auto bad = [&](const std::string &why) { return CompileError(path + ": " + why); };
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0)
    throw bad("not a .npy file (bad magic)");
  uint8_t major = uint8_t(data[6]);
  size_t headerLen = 0, start = 0;
  if (major == 1) {
    headerLen = uint8_t(data[8]) | size_t(uint8_t(data[9])) << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (data.size() < 12)
      throw bad("truncated header");
    for (int i = 0; i < 4; ++i)
      headerLen |= size_t(uint8_t(data[8 + i])) << (8 * i);
    start = 12;
  } else {
    throw bad(".npy format version " + std::to_string(major) + " is not supported");
  }
  if (data.size() < start + headerLen)
    throw bad("truncated header");
  std::string header = data.substr(start, headerLen);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')")))
    throw bad("the header has no 'descr'");
  std::string descr = m[1].str();
  const Descr *d = nullptr;
  for (const Descr &k : kDescrs)
    if (descr == k.text)
      d = &k;
  if (!d)
    throw bad("dtype '" + descr + "' is not one tilefuse reads (little-endian f2/f4/f8/i4/i8, "
              "bool)");
  if (std::regex_search(header, std::regex(R"('fortran_order'\s*:\s*True)")))
    throw bad("the array is in Fortran order; save a C-ordered one (np.ascontiguousarray)");
  if (!std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")))
    throw bad("the header has no 'shape'");
  Shape shape;
  std::string dims = m[1].str();
  // Comma-separated whole numbers, a trailing comma allowed ("(3,)").
  std::regex item(R"(^\s*(\d+)\s*$)"), blank(R"(^\s*$)");
  size_t from = 0;
  while (from <= dims.size()) {
    size_t comma = std::min(dims.find(',', from), dims.size());
    std::string token = dims.substr(from, comma - from);
    std::smatch n;
    if (std::regex_match(token, n, item)) {
      errno = 0;
      char *end = nullptr;
      long long v = std::strtoll(n[1].str().c_str(), &end, 10);
      if (errno == ERANGE)
        throw bad("dimension " + n[1].str() + " of its shape does not fit in 64 bits");
      shape.push_back(v);
    } else if (!(std::regex_match(token, blank) && comma == dims.size())) {
      throw bad("its shape (" + dims + ") has '" + token + "', not a dimension");
    }
    from = comma + 1;
  }
  // The byte count, checked before anything is allocated.
  int64_t bytes = int64_t(dtypeSize(d->dtype));
  for (int64_t dim : shape)
    if (__builtin_mul_overflow(bytes, dim, &bytes))
      throw bad("its shape (" + dims + ") has more bytes than a 64-bit size can count");
  size_t offset = start + headerLen;
  if (uint64_t(data.size() - offset) != uint64_t(bytes))
    throw bad("holds " + std::to_string(data.size() - offset) + " bytes of data, its header says " +
              std::to_string(bytes));
  HostTensor t(d->dtype, shape);
  copyBytes(t.bytes.data(), data.data() + offset, t.bytes.size());
  return t;
}

void tilefuse::writeNpy(const std::string &path, const HostTensor &tensor) {
  HostTensor t = tensor;
  if (t.dtype == DType::BF16) { // numpy has no bfloat16
    HostTensor wide(DType::F32, t.shape);
    for (int64_t i = 0; i < t.size(); ++i)
      wide.setDouble(i, t.getDouble(i));
    t = std::move(wide);
  }
  const char *descr = nullptr;
  for (const Descr &k : kDescrs)
    if (k.dtype == t.dtype)
      descr = k.text;
  std::string shape;
  for (int64_t d : t.shape)
    shape += std::to_string(d) + ", ";
  if (t.shape.size() > 1)
    shape.resize(shape.size() - 2);
  else if (t.shape.size() == 1)
    shape.resize(shape.size() - 1);
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': (" + shape + "), }";
  // Data starts at a multiple of 64 bytes; the header ends with a newline.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  out += header;
  out.append(reinterpret_cast<const char *>(t.bytes.data()), t.bytes.size());
  std::ofstream f(path, std::ios::binary);
  f.write(out.data(), std::streamsize(out.size()));
  if (!f)
    throw CompileError("cannot write " + path);
}
