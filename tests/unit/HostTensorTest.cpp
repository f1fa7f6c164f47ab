//===- HostTensorTest.cpp - dtype conversions of the runtime tensor -------===//
#include "runtime/HostTensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace tilefuse;

TEST(HostTensor, HalfRoundTripsEveryHalfValue) {
  // Every finite half converts to float and back unchanged.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00u) == 0x7c00u)
      continue; // inf / NaN
    EXPECT_EQ(floatToHalf(halfToFloat(uint16_t(h))), h) << "half bits " << h;
  }
}

TEST(HostTensor, HalfRoundsToNearestEven) {
  EXPECT_EQ(halfToFloat(floatToHalf(1.0f + 1.0f / 2048)), 1.0f); // tie -> even
  EXPECT_EQ(halfToFloat(floatToHalf(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);
  EXPECT_TRUE(std::isinf(halfToFloat(floatToHalf(65520.0f))));
  EXPECT_EQ(halfToFloat(floatToHalf(65504.0f)), 65504.0f);
  EXPECT_EQ(halfToFloat(floatToHalf(std::ldexp(1.0f, -24))), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(NAN))));
}

TEST(HostTensor, BF16RoundsToNearestEven) {
  EXPECT_EQ(bf16ToFloat(floatToBF16(1.0f)), 1.0f);
  EXPECT_EQ(bf16ToFloat(floatToBF16(1.0f + 1.0f / 256)), 1.0f); // tie -> even
  EXPECT_EQ(bf16ToFloat(floatToBF16(1.0f + 3.0f / 256)), 1.0f + 2.0f / 128);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBF16(NAN))));
}

TEST(HostTensor, SetAndGetRoundToTheDType) {
  HostTensor t(DType::BF16, {3});
  t.setDouble(0, 3.14159);
  EXPECT_EQ(t.getDouble(0), bf16ToFloat(floatToBF16(3.14159f)));
  HostTensor i(DType::I32, {1});
  i.setDouble(0, -2.7);
  EXPECT_EQ(i.getInt(0), -2);
  EXPECT_EQ(numElements({2, 0, 3}), 0);
  EXPECT_EQ(shapeToString({2, 3}), "[2, 3]");
  EXPECT_THROW(parseDType("u8"), std::invalid_argument);
}
