// f16/bf16 conversions: exact values, ties to even, overflow to infinity, subnormals, NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cpu/dtype_convert.h"

namespace kvcache::cpu {
namespace {

TEST(DtypeConvert, F16RoundTripsExactValuesAndRoundsTiesToEven) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);       // largest finite f16
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);       // halfway to 65536 rounds up to inf
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);  // tie between 1 and 1+2^-10: even (1)
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie: rounds up to the even mantissa
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);       // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);       // half of it: tie to even (0)
  EXPECT_EQ(f32_to_f16(0x1.8p-24f), 0x0002);     // 1.5 units: tie to even (2)
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t h = 0; h < 0x7c00; ++h)  // every finite positive f16 survives a round trip
    ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h) << h;
}

TEST(DtypeConvert, Bf16KeepsTopBitsWithRoundingToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

}  // namespace
}  // namespace kvcache::cpu
