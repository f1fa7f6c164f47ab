//===- CpuBuiltins.cpp - every symbol JIT-compiled kernels may call -------===//
//
// The conversion builtins are written here rather than taken from the
// compiler's runtime library: libgcc has the half ones only since GCC 12 and
// the bfloat16 ones only since GCC 13, and a process finds them only if
// something it loaded linked them.
//
// Calling convention: LLVM (and the x86-64 psABI for _Float16 / __bf16)
// passes and returns half and bfloat16 values in the low 16 bits of an XMM
// register. C++ has no portable 16-bit float type, so these functions carry
// the bits in a `float`, which travels in the same register: the caller
// reads or writes only its low 16 bits.
//
//===----------------------------------------------------------------------===//
#include "codegen/cpu/CpuBuiltins.h"

#include <cmath>
#include <cstring>

using namespace tilefuse;

namespace {

uint64_t bitsOf(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

float floatFromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

uint32_t bitsOf(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

/// `x` rounded once, to nearest even, to a binary format with `expBits`
/// exponent and `mantBits` stored mantissa bits (at most 16 bits in all).
/// A float converts through double exactly, so one routine serves both.
uint16_t roundToNarrow(double x, int expBits, int mantBits) {
  uint64_t b = bitsOf(x);
  uint16_t sign = uint16_t((b >> 63) << (expBits + mantBits));
  int exp = int((b >> 52) & 0x7ff);
  uint64_t mant = b & ((uint64_t(1) << 52) - 1);
  uint16_t infBits = uint16_t(((1u << expBits) - 1) << mantBits);
  if (exp == 0x7ff) {
    if (mant == 0)
      return sign | infBits;
    // NaN: quiet, keeping the payload's top bits.
    uint16_t payload = uint16_t(mant >> (52 - mantBits));
    return sign | infBits | uint16_t(1u << (mantBits - 1)) | payload;
  }
  if (exp == 0)
    return sign; // double subnormals and zeros are far below the narrow range
  int bias = (1 << (expBits - 1)) - 1;
  int e = exp - 1023;                               // value = sig * 2^(e - 52)
  uint64_t sig = (uint64_t(1) << 52) | mant;        // 53 significant bits
  if (e > bias)
    return sign | infBits;
  int minNormal = 1 - bias;
  int shift = 52 - mantBits;                        // bits dropped from sig
  int biased = e + bias;                            // exponent field if normal
  if (e < minNormal) {                              // a subnormal result
    shift += minNormal - e;
    biased = 0;
  }
  if (shift > 60)
    return sign; // below half the smallest subnormal: rounds to zero
  uint64_t kept = sig >> shift;
  uint64_t rest = sig & ((uint64_t(1) << shift) - 1);
  uint64_t half = uint64_t(1) << (shift - 1);
  if (rest > half || (rest == half && (kept & 1)))
    ++kept; // a carry moves into the exponent field, up to infinity: correct
  uint32_t magnitude = biased == 0 ? uint32_t(kept)
                                   : (uint32_t(biased - 1) << mantBits) + uint32_t(kept);
  return sign | uint16_t(magnitude);
}

/// The value of a narrow bit pattern (exact in float: both narrow formats
/// are subsets of binary32).
float widenNarrow(uint16_t bits, int expBits, int mantBits) {
  uint32_t sign = uint32_t(bits >> (expBits + mantBits)) << 31;
  uint32_t exp = (bits >> mantBits) & ((1u << expBits) - 1);
  uint32_t mant = bits & ((1u << mantBits) - 1);
  int bias = (1 << (expBits - 1)) - 1;
  if (exp == (1u << expBits) - 1) // inf, or NaN made quiet with its payload kept
    return floatFromBits(sign | 0x7f800000u | (mant << (23 - mantBits)) |
                         (mant ? 0x00400000u : 0u));
  if (exp == 0) {
    if (mant == 0)
      return floatFromBits(sign);
    // Subnormal: mant * 2^(1 - bias - mantBits), exact in float.
    float v = std::ldexp(float(mant), 1 - bias - mantBits);
    return sign ? -v : v;
  }
  return floatFromBits(sign | ((exp - bias + 127) << 23) | (mant << (23 - mantBits)));
}

float carry16(uint16_t bits) { return floatFromBits(bits); }
uint16_t carried16(float carrier) { return uint16_t(bitsOf(carrier) & 0xffff); }

template <typename T> T powi(T base, int exponent) {
  bool reciprocal = exponent < 0;
  unsigned n = reciprocal ? 0u - unsigned(exponent) : unsigned(exponent);
  T r = 1;
  for (; n; n >>= 1, base *= base)
    if (n & 1)
      r *= base;
  return reciprocal ? T(1) / r : r;
}

// The builtins under names of our own; the table maps LLVM's names to them.
extern "C" {
float tilefuse_truncsfhf2(float x) { return carry16(roundToHalfBits(x)); }
float tilefuse_truncdfhf2(double x) { return carry16(roundToHalfBits(x)); }
float tilefuse_extendhfsf2(float h) { return halfBitsToFloat(carried16(h)); }
double tilefuse_extendhfdf2(float h) { return halfBitsToFloat(carried16(h)); }
float tilefuse_truncsfbf2(float x) { return carry16(roundToBFloat16Bits(x)); }
float tilefuse_truncdfbf2(double x) { return carry16(roundToBFloat16Bits(x)); }
float tilefuse_extendbfsf2(float b) { return bfloat16BitsToFloat(carried16(b)); }
float tilefuse_powisf2(float x, int n) { return powi(x, n); }
double tilefuse_powidf2(double x, int n) { return powi(x, n); }
__int128 tilefuse_divti3(__int128 a, __int128 b) { return a / b; }
__int128 tilefuse_modti3(__int128 a, __int128 b) { return a % b; }
unsigned __int128 tilefuse_udivti3(unsigned __int128 a, unsigned __int128 b) { return a / b; }
unsigned __int128 tilefuse_umodti3(unsigned __int128 a, unsigned __int128 b) { return a % b; }
}

using F1 = float (*)(float);
using D1 = double (*)(double);
using F2 = float (*)(float, float);
using D2 = double (*)(double, double);
using F3 = float (*)(float, float, float);
using D3 = double (*)(double, double, double);

template <typename Fn> void *address(Fn fn) { return reinterpret_cast<void *>(fn); }

} // namespace

uint16_t tilefuse::roundToHalfBits(double x) { return roundToNarrow(x, 5, 10); }
uint16_t tilefuse::roundToBFloat16Bits(double x) { return roundToNarrow(x, 8, 7); }
float tilefuse::halfBitsToFloat(uint16_t bits) { return widenNarrow(bits, 5, 10); }
float tilefuse::bfloat16BitsToFloat(uint16_t bits) { return widenNarrow(bits, 8, 7); }

const std::vector<std::pair<std::string, void *>> &tilefuse::cpuKernelSymbols() {
  // libm by address: the linker of this library found them, so they are
  // there whatever the process loaded.
#define TF_LIBM_1(name) {#name "f", address(static_cast<F1>(::name##f))}, \
                        {#name, address(static_cast<D1>(::name))}
#define TF_LIBM_2(name) {#name "f", address(static_cast<F2>(::name##f))}, \
                        {#name, address(static_cast<D2>(::name))}
  static const std::vector<std::pair<std::string, void *>> table = {
      // Half and bfloat16 conversions (compiler-rt / libgcc names).
      {"__truncsfhf2", address(&tilefuse_truncsfhf2)},
      {"__truncdfhf2", address(&tilefuse_truncdfhf2)},
      {"__extendhfsf2", address(&tilefuse_extendhfsf2)},
      {"__extendhfdf2", address(&tilefuse_extendhfdf2)},
      {"__truncsfbf2", address(&tilefuse_truncsfbf2)},
      {"__truncdfbf2", address(&tilefuse_truncdfbf2)},
      {"__extendbfsf2", address(&tilefuse_extendbfsf2)},
      // llvm.powi and 128-bit integer division.
      {"__powisf2", address(&tilefuse_powisf2)},
      {"__powidf2", address(&tilefuse_powidf2)},
      {"__divti3", address(&tilefuse_divti3)},
      {"__modti3", address(&tilefuse_modti3)},
      {"__udivti3", address(&tilefuse_udivti3)},
      {"__umodti3", address(&tilefuse_umodti3)},
      // Memory intrinsics.
      {"memcpy", address(&::memcpy)},
      {"memmove", address(&::memmove)},
      {"memset", address(&::memset)},
      // libm: what math intrinsics and the math-to-libm lowering become
      // where a CPU has no instruction (fma without FMA, rounding without
      // SSE4.1, frem everywhere).
      TF_LIBM_1(exp), TF_LIBM_1(exp2), TF_LIBM_1(exp10), TF_LIBM_1(expm1),
      TF_LIBM_1(log), TF_LIBM_1(log2), TF_LIBM_1(log10), TF_LIBM_1(log1p),
      TF_LIBM_1(sin), TF_LIBM_1(cos), TF_LIBM_1(tan), TF_LIBM_1(asin), TF_LIBM_1(acos),
      TF_LIBM_1(atan), TF_LIBM_1(sinh), TF_LIBM_1(cosh), TF_LIBM_1(tanh), TF_LIBM_1(asinh),
      TF_LIBM_1(acosh), TF_LIBM_1(atanh), TF_LIBM_1(erf), TF_LIBM_1(erfc), TF_LIBM_1(cbrt),
      TF_LIBM_1(sqrt), TF_LIBM_1(fabs), TF_LIBM_1(floor), TF_LIBM_1(ceil), TF_LIBM_1(trunc),
      TF_LIBM_1(round), TF_LIBM_1(rint), TF_LIBM_1(nearbyint), TF_LIBM_1(roundeven),
      TF_LIBM_2(pow), TF_LIBM_2(atan2), TF_LIBM_2(fmod), TF_LIBM_2(remainder),
      TF_LIBM_2(fmin), TF_LIBM_2(fmax), TF_LIBM_2(copysign), TF_LIBM_2(hypot),
      {"fmaf", address(static_cast<F3>(::fmaf))},
      {"fma", address(static_cast<D3>(::fma))},
      {"ldexpf", address(static_cast<float (*)(float, int)>(::ldexpf))},
      {"ldexp", address(static_cast<double (*)(double, int)>(::ldexp))},
      {"frexpf", address(static_cast<float (*)(float, int *)>(::frexpf))},
      {"frexp", address(static_cast<double (*)(double, int *)>(::frexp))},
      {"sincosf", address(static_cast<void (*)(float, float *, float *)>(::sincosf))},
      {"sincos", address(static_cast<void (*)(double, double *, double *)>(::sincos))},
      {"lroundf", address(static_cast<long (*)(float)>(::lroundf))},
      {"lround", address(static_cast<long (*)(double)>(::lround))},
      {"llroundf", address(static_cast<long long (*)(float)>(::llroundf))},
      {"llround", address(static_cast<long long (*)(double)>(::llround))},
      {"lrintf", address(static_cast<long (*)(float)>(::lrintf))},
      {"lrint", address(static_cast<long (*)(double)>(::lrint))},
      {"llrintf", address(static_cast<long long (*)(float)>(::llrintf))},
      {"llrint", address(static_cast<long long (*)(double)>(::llrint))},
  };
#undef TF_LIBM_1
#undef TF_LIBM_2
  return table;
}
