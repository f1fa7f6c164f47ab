//===- HostTensor.h - a dense tensor in host memory --------------*- C++ -*-===//
//
// The currency between users and every executor: a dtype, a shape and
// row-major bytes. No MLIR here (see runtime/CMakeLists.txt).
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_HOSTTENSOR_H
#define TILEFUSE_RUNTIME_HOSTTENSOR_H

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace tilefuse {

/// memcpy that accepts the null pointers of empty buffers when `n` is 0
/// (memcpy itself must never see a null pointer, even for 0 bytes).
inline void copyBytes(void *dst, const void *src, size_t n) {
  if (n)
    std::memcpy(dst, src, n);
}

enum class DType { F32, F16, BF16, F64, I32, I64, I1 };

/// Bytes per element as stored (i1 is one byte).
size_t dtypeSize(DType t);
bool isFloatDType(DType t);
/// "f32", "bf16", "i1", ...
const char *dtypeName(DType t);
/// Parses a dtype name; throws std::invalid_argument for unknown names.
DType parseDType(const std::string &name);

using Shape = std::vector<int64_t>;
int64_t numElements(const Shape &shape);
/// "[2, 3]"
std::string shapeToString(const Shape &shape);

/// The error every layer throws for a user mistake (Python: CompileError).
class CompileError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Row-major tensor owning its bytes.
struct HostTensor {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<uint8_t> bytes;

  HostTensor() = default;
  HostTensor(DType dtype, Shape shape);
  int64_t size() const { return numElements(shape); }
  template <typename T> T *data() { return reinterpret_cast<T *>(bytes.data()); }
  template <typename T> const T *data() const {
    return reinterpret_cast<const T *>(bytes.data());
  }
  /// Element i converted to double (f16/bf16 widened exactly).
  double getDouble(int64_t i) const;
  /// Element i as int64 (integers and i1; floats truncate).
  int64_t getInt(int64_t i) const;
  /// Stores `v` rounded to the tensor's dtype (round to nearest even).
  void setDouble(int64_t i, double v);
  void setInt(int64_t i, int64_t v);
};

/// `id` if it indexes one of `rows` table rows; otherwise throws
/// CompileError("<op>: index <id> is out of range for a table of <rows> rows").
int64_t checkedRow(int64_t id, int64_t rows, const char *op);

/// IEEE half and bfloat16 conversions (round to nearest even).
uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
uint16_t floatToBF16(float f);
float bf16ToFloat(uint16_t h);
/// Rounds `v` to the nearest value representable in `t` (floats only).
double roundToDType(double v, DType t);

/// dtype + shape of one function argument or result.
struct TensorSignature {
  DType dtype;
  Shape shape;
  std::string str() const { return std::string(dtypeName(dtype)) + shapeToString(shape); }
};

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_HOSTTENSOR_H
