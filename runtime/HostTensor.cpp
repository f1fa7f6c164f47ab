//===- HostTensor.cpp -----------------------------------------------------===//
#include "runtime/HostTensor.h"

#include <cmath>
#include <cstring>

namespace tilefuse {

size_t dtypeSize(DType t) {
  switch (t) {
  case DType::F64:
  case DType::I64:
    return 8;
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::I1:
    return 1;
  }
  return 0;
}

bool isFloatDType(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 ||
         t == DType::F64;
}

const char *dtypeName(DType t) {
  switch (t) {
  case DType::F32: return "f32";
  case DType::F16: return "f16";
  case DType::BF16: return "bf16";
  case DType::F64: return "f64";
  case DType::I32: return "i32";
  case DType::I64: return "i64";
  case DType::I1: return "i1";
  }
  return "?";
}

DType parseDType(const std::string &name) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32,
                  DType::I64, DType::I1})
    if (name == dtypeName(t))
      return t;
  throw std::invalid_argument("unknown dtype '" + name +
                              "'; expected f32, f16, bf16, f64, i32, i64 "
                              "or i1");
}

int64_t numElements(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string shapeToString(const Shape &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

HostTensor::HostTensor(DType dtype, Shape shape)
    : dtype(dtype), shape(std::move(shape)),
      bytes(numElements(this->shape) * dtypeSize(dtype)) {}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) // inf or NaN
    return sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u);
  if (absx >= 0x477ff000u) // rounds to >= 65520: overflow to inf
    return sign | 0x7c00u;
  if (absx < 0x38800000u) { // subnormal half (or zero)
    float a;
    std::memcpy(&a, &absx, 4);
    // Scale so that the half subnormal unit (2^-24) becomes 1, then round
    // to nearest even with the FPU.
    float scaled = a * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t mant = absx & 0x7fffffu;
  int32_t exp = static_cast<int32_t>(absx >> 23) - 127 + 15;
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
    ++h; // carries into the exponent correctly
  return sign | h;
}

float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  float out;
  if (exp == 0) {
    out = std::ldexp(static_cast<float>(mant), -24);
    if (sign)
      out = -out;
    return out;
  }
  uint32_t bits = exp == 31 ? sign | 0x7f800000u | (mant << 13)
                            : sign | ((exp - 15 + 127) << 23) | (mant << 13);
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t floatToBF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x40u); // quiet NaN
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

float bf16ToFloat(uint16_t h) {
  uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

namespace {
/// double -> float rounding to odd: truncate, then set the last bit if the
/// conversion was inexact. A second rounding of that float to a type with
/// far fewer bits (f16, bf16) is then the correctly rounded result, which
/// plain double -> float -> f16 is not (it can round twice).
float toFloatRoundToOdd(double v) {
  float f = static_cast<float>(v);
  if (static_cast<double>(f) == v || std::isnan(v))
    return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v))
    f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= 1u;
  std::memcpy(&f, &bits, 4);
  return f;
}
} // namespace

double roundToDType(double v, DType t) {
  switch (t) {
  case DType::F64: return v;
  case DType::F32: return static_cast<float>(v);
  case DType::F16: return halfToFloat(floatToHalf(toFloatRoundToOdd(v)));
  case DType::BF16: return bf16ToFloat(floatToBF16(toFloatRoundToOdd(v)));
  default: return v;
  }
}

double HostTensor::getDouble(int64_t i) const {
  switch (dtype) {
  case DType::F32: return data<float>()[i];
  case DType::F64: return data<double>()[i];
  case DType::F16: return halfToFloat(data<uint16_t>()[i]);
  case DType::BF16: return bf16ToFloat(data<uint16_t>()[i]);
  case DType::I32: return data<int32_t>()[i];
  case DType::I64: return static_cast<double>(data<int64_t>()[i]);
  case DType::I1: return data<uint8_t>()[i] ? 1.0 : 0.0;
  }
  return 0;
}

int64_t HostTensor::getInt(int64_t i) const {
  switch (dtype) {
  case DType::I32: return data<int32_t>()[i];
  case DType::I64: return data<int64_t>()[i];
  case DType::I1: return data<uint8_t>()[i] ? 1 : 0;
  default: return static_cast<int64_t>(getDouble(i));
  }
}

void HostTensor::setDouble(int64_t i, double v) {
  switch (dtype) {
  case DType::F32: data<float>()[i] = static_cast<float>(v); return;
  case DType::F64: data<double>()[i] = v; return;
  case DType::F16: data<uint16_t>()[i] = floatToHalf(toFloatRoundToOdd(v)); return;
  case DType::BF16: data<uint16_t>()[i] = floatToBF16(toFloatRoundToOdd(v)); return;
  default: setInt(i, static_cast<int64_t>(v)); return;
  }
}

void HostTensor::setInt(int64_t i, int64_t v) {
  switch (dtype) {
  case DType::I32: data<int32_t>()[i] = static_cast<int32_t>(v); return;
  case DType::I64: data<int64_t>()[i] = v; return;
  case DType::I1: data<uint8_t>()[i] = v != 0; return;
  default: setDouble(i, static_cast<double>(v)); return;
  }
}

} // namespace tilefuse

int64_t tilefuse::checkedRow(int64_t id, int64_t rows, const char *op) {
  if (id < 0 || id >= rows)
    throw CompileError(std::string(op) + ": index " + std::to_string(id) +
                       " is out of range for a table of " +
                       std::to_string(rows) + " rows");
  return id;
}
