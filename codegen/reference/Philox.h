//===- Philox.h - Philox 4x32-10, shared by every target ---------*- C++ -*-===//
//
// The counter-based generator behind graph.random_uniform. Header-only and
// free of MLIR so the CPU backend, the runtime and tests can all use the
// same bits (the CUDA renderer emits the same rounds as text).
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_CODEGEN_REFERENCE_PHILOX_H
#define TILEFUSE_CODEGEN_REFERENCE_PHILOX_H

#include <array>
#include <cstdint>

namespace tilefuse {

inline std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr,
                                             std::array<uint32_t, 2> key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kMul0) * ctr[0];
    uint64_t p1 = static_cast<uint64_t>(kMul1) * ctr[2];
    uint32_t hi0 = p0 >> 32, lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = p1 >> 32, lo1 = static_cast<uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return ctr;
}

/// The 32 random bits of element `index` of a graph.random_uniform result.
inline uint32_t philoxBits(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t block = index / 4;
  auto words = philox4x32_10(
      {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
       static_cast<uint32_t>(stream), 0u},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return words[index % 4];
}

/// Maps 32 random bits to [0, 1) using the top `mantissaBits` bits, so the
/// value is exact in the result dtype (24 for f32, 11 f16, 8 bf16, 32 f64).
inline double uniformFromBits(uint32_t bits, int mantissaBits) {
  double scale = 1.0 / static_cast<double>(uint64_t(1) << mantissaBits);
  return static_cast<double>(bits >> (32 - mantissaBits)) * scale;
}

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_REFERENCE_PHILOX_H
