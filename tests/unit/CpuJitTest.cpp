//===- CpuJitTest.cpp - the CPU JIT links the same on every x86-64 CPU ----===//
//
// Each function below makes LLVM's code generation call a builtin on some
// CPU (half/bfloat16 conversions, fma without FMA, floor without SSE4.1,
// frem, powi, 128-bit division). Every one is compiled for the host and for
// the x86-64 levels this machine can run, and checked against a reference
// computed here.
//
//===----------------------------------------------------------------------===//
#include "codegen/cpu/CpuBuiltins.h"
#include "codegen/cpu/CpuJit.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

using namespace tilefuse;

namespace {

constexpr const char *kBuiltinCallers = R"(
  llvm.func @f64_to_f16(%x: f64) -> i16 {
    %h = llvm.fptrunc %x : f64 to f16
    %b = llvm.bitcast %h : f16 to i16
    llvm.return %b : i16
  }
  llvm.func @f32_to_f16(%x: f32) -> i16 {
    %h = llvm.fptrunc %x : f32 to f16
    %b = llvm.bitcast %h : f16 to i16
    llvm.return %b : i16
  }
  llvm.func @f16_to_f32(%x: i16) -> f32 {
    %h = llvm.bitcast %x : i16 to f16
    %f = llvm.fpext %h : f16 to f32
    llvm.return %f : f32
  }
  llvm.func @f16_to_f64(%x: i16) -> f64 {
    %h = llvm.bitcast %x : i16 to f16
    %f = llvm.fpext %h : f16 to f64
    llvm.return %f : f64
  }
  llvm.func @f32_to_bf16(%x: f32) -> i16 {
    %h = llvm.fptrunc %x : f32 to bf16
    %b = llvm.bitcast %h : bf16 to i16
    llvm.return %b : i16
  }
  llvm.func @f64_to_bf16(%x: f64) -> i16 {
    %h = llvm.fptrunc %x : f64 to bf16
    %b = llvm.bitcast %h : bf16 to i16
    llvm.return %b : i16
  }
  llvm.func @bf16_to_f32(%x: i16) -> f32 {
    %h = llvm.bitcast %x : i16 to bf16
    %f = llvm.fpext %h : bf16 to f32
    llvm.return %f : f32
  }
  llvm.func @fma_f32(%a: f32, %b: f32, %c: f32) -> f32 {
    %r = llvm.intr.fma(%a, %b, %c) : (f32, f32, f32) -> f32
    llvm.return %r : f32
  }
  llvm.func @floor_f32(%a: f32) -> f32 {
    %r = llvm.intr.floor(%a) : (f32) -> f32
    llvm.return %r : f32
  }
  llvm.func @rem_f32(%a: f32, %b: f32) -> f32 {
    %r = llvm.frem %a, %b : f32
    llvm.return %r : f32
  }
  llvm.func @powi_f64(%a: f64, %n: i32) -> f64 {
    %r = llvm.intr.powi(%a, %n) : (f64, i32) -> f64
    llvm.return %r : f64
  }
  llvm.func @div_i128(%a: i64, %b: i64) -> i64 {
    %x = llvm.sext %a : i64 to i128
    %y = llvm.sext %b : i64 to i128
    %c = llvm.mlir.constant(4611686018427387904 : i128) : i128
    %big = llvm.mul %x, %c : i128
    %q = llvm.sdiv %big, %y : i128
    %r = llvm.trunc %q : i128 to i64
    llvm.return %r : i64
  }
)";

/// Sets TILEFUSE_CPU for one scope.
struct CpuOverride {
  explicit CpuOverride(const std::string &cpu) {
    if (cpu.empty())
      unsetenv("TILEFUSE_CPU");
    else
      setenv("TILEFUSE_CPU", cpu.c_str(), 1);
  }
  ~CpuOverride() { unsetenv("TILEFUSE_CPU"); }
};

using FailureOrCode = mlir::FailureOr<CpuCode>;

/// JIT-compiles `source` for `cpu`; the error text, if any, in `error`.
FailureOrCode compile(mlir::MLIRContext &context, const std::string &source,
                      const std::vector<std::string> &names, const std::string &cpu,
                      std::string &error) {
  CpuOverride override(cpu);
  mlir::ScopedDiagnosticHandler capture(&context, [&](mlir::Diagnostic &d) {
    error += d.str();
    return mlir::success();
  });
  auto module = mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  if (!module)
    return mlir::failure();
  return jitCpuKernels(*module, names);
}

template <typename Fn> Fn entry(const CpuCode &code, size_t i) {
  return reinterpret_cast<Fn>(code.kernels[i]);
}

uint32_t bitsOf(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
uint64_t bitsOf(double f) {
  uint64_t b;
  std::memcpy(&b, &f, 8);
  return b;
}

/// f32 -> bf16 by the textbook formula (round to nearest even on the bits).
uint16_t referenceBFloat16(float f) {
  uint32_t b = bitsOf(f);
  if (std::isnan(f))
    return uint16_t((b >> 16) | 0x40);
  return uint16_t((b + 0x7fff + ((b >> 16) & 1)) >> 16);
}

/// `x` rounded to nearest even in a narrow format, found independently of
/// CpuBuiltins' bit manipulation: binary search for the two neighbouring
/// values, then an exact comparison with their midpoint (exact in double).
uint16_t referenceNarrow(double x, uint16_t infBits, double pastMax, float (*widen)(uint16_t)) {
  if (std::isnan(x))
    return 0; // NaNs are checked separately
  uint16_t sign = std::signbit(x) ? uint16_t(0x8000) : uint16_t(0);
  double a = std::fabs(x);
  auto value = [&](uint16_t bits) { return bits == infBits ? pastMax : double(widen(bits)); };
  if (a >= pastMax)
    return sign | infBits;
  uint16_t lo = 0, hi = infBits; // value(lo) <= a < value(hi)
  while (hi - lo > 1) {
    uint16_t mid = uint16_t((lo + hi) / 2);
    (value(mid) <= a ? lo : hi) = mid;
  }
  double midpoint = (value(lo) + value(hi)) / 2;
  uint16_t pick = a < midpoint ? lo : a > midpoint ? hi : (lo & 1 ? hi : lo);
  return sign | pick;
}

/// Doubles that exercise rounding: ties, just-off ties, subnormals,
/// overflow edges, specials, plus random bit patterns in range.
std::vector<double> probeDoubles() {
  std::vector<double> v = {0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, 1e6,
                           std::ldexp(1.0, -24), std::ldexp(1.0, -25),
                           std::ldexp(1.0, -25) * (1 + 1e-12), std::ldexp(1.5, -24),
                           std::ldexp(1.0, -14), 1.0 + std::ldexp(1.0, -11),
                           1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40),
                           1.0 + std::ldexp(3.0, -11), std::ldexp(1.0, -133),
                           std::ldexp(1.0, -134), 3.4e38, 3.4028235677973366e38, 1e300,
                           std::ldexp(1.0, -1070), INFINITY, -INFINITY, NAN, -NAN};
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) {
    // Exponents around both narrow formats' ranges.
    double mant = std::uniform_real_distribution<double>(1.0, 2.0)(rng);
    int exp = std::uniform_int_distribution<int>(-140, 130)(rng);
    v.push_back((i & 1 ? -1 : 1) * std::ldexp(mant, exp));
  }
  return v;
}

class CpuJitBuiltins : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuJitBuiltins, EveryBuiltinCallLinksAndComputesTheReference) {
  const std::string cpu = GetParam();
  if (cpu == "x86-64-v3" && !__builtin_cpu_supports("avx2"))
    GTEST_SKIP() << "this CPU has no AVX2";
  if (cpu == "x86-64-v4" && !__builtin_cpu_supports("avx512f"))
    GTEST_SKIP() << "this CPU has no AVX-512";
  mlir::MLIRContext context;
  context.loadDialect<mlir::LLVM::LLVMDialect>();
  std::string error;
  auto code = compile(context, kBuiltinCallers,
                      {"f64_to_f16", "f32_to_f16", "f16_to_f32", "f16_to_f64", "f32_to_bf16",
                       "f64_to_bf16", "bf16_to_f32", "fma_f32", "floor_f32", "rem_f32",
                       "powi_f64", "div_i128"},
                      cpu, error);
  ASSERT_TRUE(succeeded(code)) << "CPU '" << cpu << "': " << error;
  auto f64ToF16 = entry<uint16_t (*)(double)>(*code, 0);
  auto f32ToF16 = entry<uint16_t (*)(float)>(*code, 1);
  auto f16ToF32 = entry<float (*)(uint16_t)>(*code, 2);
  auto f16ToF64 = entry<double (*)(uint16_t)>(*code, 3);
  auto f32ToBf16 = entry<uint16_t (*)(float)>(*code, 4);
  auto f64ToBf16 = entry<uint16_t (*)(double)>(*code, 5);
  auto bf16ToF32 = entry<float (*)(uint16_t)>(*code, 6);

  for (double x : probeDoubles()) {
    float f = float(x);
    if (std::isnan(x)) {
      // Quiet NaN, sign kept.
      ASSERT_EQ(f64ToF16(x) & 0x7e00, 0x7e00) << cpu;
      ASSERT_EQ(f64ToBf16(x) & 0x7fc0, 0x7fc0) << cpu;
      ASSERT_EQ(f32ToF16(f) & 0x7e00, 0x7e00) << cpu;
      ASSERT_EQ(f64ToF16(x) >> 15, uint16_t(std::signbit(x))) << cpu;
      continue;
    }
    ASSERT_EQ(f64ToF16(x), referenceNarrow(x, 0x7c00, 65536.0, halfBitsToFloat))
        << cpu << " f64->f16 of " << x;
    ASSERT_EQ(f64ToBf16(x), referenceNarrow(x, 0x7f80, std::ldexp(1.0, 128), bfloat16BitsToFloat))
        << cpu << " f64->bf16 of " << x;
    ASSERT_EQ(f32ToF16(f), referenceNarrow(f, 0x7c00, 65536.0, halfBitsToFloat))
        << cpu << " f32->f16 of " << f;
    // AVX512-BF16's vcvtneps2bf16 treats subnormal inputs as zero (a
    // documented property of the instruction; tile kernels never emit it,
    // they expand bf16 rounding into integer ops).
    bool flushes = cpu.empty() && __builtin_cpu_supports("avx512bf16") &&
                   std::fabs(f) < std::numeric_limits<float>::min();
    if (!flushes)
      ASSERT_EQ(f32ToBf16(f), referenceBFloat16(f)) << cpu << " f32->bf16 of " << f;
  }
  for (uint32_t b = 0; b < 65536; ++b) {
    float h = f16ToF32(uint16_t(b));
    ASSERT_EQ(bitsOf(h), bitsOf(halfBitsToFloat(uint16_t(b)))) << cpu << " f16->f32 of " << b;
    ASSERT_EQ(bitsOf(f16ToF64(uint16_t(b))), bitsOf(double(h))) << cpu << " f16->f64 of " << b;
    if (!std::isnan(h))
      ASSERT_EQ(roundToHalfBits(h), b) << "half " << b << " does not round-trip";
    uint32_t wide = b << 16;
    float want;
    std::memcpy(&want, &wide, 4);
    ASSERT_EQ(bitsOf(bf16ToF32(uint16_t(b))), bitsOf(want)) << cpu << " bf16->f32 of " << b;
  }
  EXPECT_EQ(entry<float (*)(float, float, float)>(*code, 7)(0.1f, 10.0f, -1.0f),
            std::fma(0.1f, 10.0f, -1.0f));
  EXPECT_EQ(entry<float (*)(float)>(*code, 8)(-2.5f), -3.0f);
  EXPECT_EQ(entry<float (*)(float, float)>(*code, 9)(7.5f, 2.0f), 1.5f);
  EXPECT_EQ(entry<double (*)(double, int)>(*code, 10)(2.0, -3), 0.125);
  EXPECT_EQ(entry<int64_t (*)(int64_t, int64_t)>(*code, 11)(6, 1LL << 40), 6LL << 22);
}

INSTANTIATE_TEST_SUITE_P(HostAndX86Levels, CpuJitBuiltins,
                         ::testing::Values("", "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"),
                         [](const auto &info) {
                           std::string n = info.param.empty() ? "host" : info.param;
                           for (char &c : n)
                             if (c == '-')
                               c = '_';
                           return n;
                         });

TEST(CpuJit, ACallNoBuiltinProvidesIsRefusedByNameAndKernel) {
  mlir::MLIRContext context;
  context.loadDialect<mlir::LLVM::LLVMDialect>();
  std::string error;
  auto code = compile(context, R"(
    llvm.func @tilefuse_no_such_builtin(f32) -> f32
    llvm.func @calls_it(%x: f32) -> f32 {
      %r = llvm.call @tilefuse_no_such_builtin(%x) : (f32) -> f32
      llvm.return %r : f32
    })", {"calls_it"}, "", error);
  ASSERT_TRUE(failed(code));
  EXPECT_NE(error.find("'tilefuse_no_such_builtin', called by calls_it"), std::string::npos)
      << error;
}

TEST(CpuJit, AnUnknownOrUnrunnableCpuIsRefusedWithTheReason) {
  mlir::MLIRContext context;
  context.loadDialect<mlir::LLVM::LLVMDialect>();
  std::string error;
  const char *source = "llvm.func @k() { llvm.return }";
  EXPECT_TRUE(failed(compile(context, source, {"k"}, "pentium-9000", error)));
  EXPECT_NE(error.find("TILEFUSE_CPU='pentium-9000' is not a CPU LLVM knows"), std::string::npos)
      << error;
  if (!__builtin_cpu_supports("avx512fp16")) {
    error.clear();
    EXPECT_TRUE(failed(compile(context, source, {"k"}, "sapphirerapids", error)));
    EXPECT_NE(error.find("needs CPU features this machine lacks"), std::string::npos) << error;
    EXPECT_NE(error.find("avx512fp16"), std::string::npos) << error;
  }
}

} // namespace
