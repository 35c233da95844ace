// core/fp16.h against numpy (fp16) and torch (bf16): subnormals, infinities, nan, rounding ties, overflow.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "core/fp16.h"

namespace ferry {
namespace {

#include "quant/fp16_tables.inc"

TEST(Fp16, ToF32MatchesNumpy) {
  int n = 0;
  for (const auto& c : kFp16ToF32) {
    const float got = fp16_to_f32(uint16_t(c[0]));
    const float want = std::bit_cast<float>(c[1]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << c[0];
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(got), c[1]) << "fp16 0x" << std::hex << c[0];
    }
    ++n;
  }
  EXPECT_GT(n, 100);
}

TEST(Fp16, FromF32MatchesNumpy) {
  int n = 0;
  for (const auto& c : kF32ToFp16) {
    const float x = std::bit_cast<float>(c[0]);
    const uint16_t got = f32_to_fp16(x);
    if (std::isnan(x)) {
      EXPECT_EQ(got & 0x7C00, 0x7C00);
      EXPECT_NE(got & 0x03FF, 0) << "nan must stay nan";
    } else {
      EXPECT_EQ(got, c[1]) << "f32 " << x << " (0x" << std::hex << c[0] << ")";
    }
    ++n;
  }
  EXPECT_GT(n, 150);
}

TEST(Bf16, FromF32MatchesTorch) {
  int n = 0;
  for (const auto& c : kF32ToBf16) {
    const float x = std::bit_cast<float>(c[0]);
    EXPECT_EQ(f32_to_bf16(x), c[1]) << "f32 " << x << " (0x" << std::hex << c[0] << ")";
    ++n;
  }
  EXPECT_GT(n, 90);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST(Bf16, ToF32IsTheHighHalf) {
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xC040), -3.0f);
  EXPECT_EQ(bf16_to_f32(0x7F80), INFINITY);
  EXPECT_EQ(bf16_to_f32(0x0001), std::bit_cast<float>(0x00010000u));  // a subnormal stays subnormal
}

}  // namespace
}  // namespace ferry
