//===- PhiloxTest.cpp - Philox 4x32-10 known-answer tests -----------------===//
//
// The vectors are the published known answers of the Philox 4x32-10
// generator (Salmon et al., SC'11); any target's random op must match them.
//
//===----------------------------------------------------------------------===//
#include "codegen/reference/Philox.h"

#include <gtest/gtest.h>

using namespace tilefuse;

TEST(Philox, KnownAnswerZero) {
  auto r = philox4x32_10({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
}

TEST(Philox, KnownAnswerOnes) {
  auto r = philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u});
  EXPECT_EQ(r[0], 0x408f276du);
  EXPECT_EQ(r[1], 0x41c83b0eu);
  EXPECT_EQ(r[2], 0xa20bc7c6u);
  EXPECT_EQ(r[3], 0x6d5451fdu);
}

TEST(Philox, KnownAnswerPi) {
  auto r = philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                         {0xa4093822u, 0x299f31d0u});
  EXPECT_EQ(r[0], 0xd16cfe09u);
  EXPECT_EQ(r[1], 0x94fdccebu);
  EXPECT_EQ(r[2], 0x5001e420u);
  EXPECT_EQ(r[3], 0x24126ea1u);
}

TEST(Philox, UniformIsInUnitIntervalAndExact) {
  EXPECT_EQ(uniformFromBits(0xffffffffu, 24), 1.0 - 1.0 / (1 << 24));
  EXPECT_EQ(uniformFromBits(0xffffffffu, 8), 1.0 - 1.0 / 256);
  EXPECT_EQ(uniformFromBits(0u, 24), 0.0);
  // Consecutive elements take consecutive words of one Philox block.
  auto block = philox4x32_10({0, 0, 7, 0}, {42, 0});
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(philoxBits(42, 7, i), block[i]);
}
