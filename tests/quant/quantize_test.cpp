// quantize_row: ggml's rounding on hand-made blocks, and quantize -> dequantize round trips on random data
// within per-element bounds derived from each format's step size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "formats/quant.h"

namespace ferry {
namespace {

template <typename Block>
Block quantize_one(DType t, const std::vector<float>& x) {
  Block b{};
  quantize_row(t, x.data(), &b, int64_t(x.size()));
  return b;
}

int nibble(const uint8_t* qs, int i) { return i < 16 ? (qs[i] & 0xF) : (qs[i - 16] >> 4); }

TEST(Quantize, Q8_0RoundsHalfAwayFromZero) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // amax 127 -> d = 1
  x[1] = -63.5f;
  x[2] = 0.5f;
  x[3] = -0.5f;
  x[4] = 2.5f;
  x[5] = 2.49f;
  const auto b = quantize_one<BlockQ8_0>(DType::Q8_0, x);
  EXPECT_EQ(fp16_to_f32(b.d), 1.0f);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], -64);
  EXPECT_EQ(b.qs[2], 1);
  EXPECT_EQ(b.qs[3], -1);
  EXPECT_EQ(b.qs[4], 3);
  EXPECT_EQ(b.qs[5], 2);
  EXPECT_EQ(b.qs[6], 0);
}

TEST(Quantize, Q8_1CarriesScaledSum) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = float(i % 7) - 2.0f;  // amax 4 -> d = 4/127
  const auto b = quantize_one<BlockQ8_1>(DType::Q8_1, x);
  int sum = 0;
  for (int i = 0; i < 32; ++i) sum += b.qs[i];
  EXPECT_EQ(b.qs[6], 127);  // x = 4, the amax
  EXPECT_EQ(b.qs[3], 32);   // x = 1 -> 31.75 -> 32
  EXPECT_NEAR(fp16_to_f32(b.s), fp16_to_f32(b.d) * float(sum), std::fabs(fp16_to_f32(b.s)) * 1e-3f);
}

TEST(Quantize, Q8_KRoundsHalfToEvenAndSumsGroups) {
  std::vector<float> x(256, 0.0f);
  x[0] = -127.0f;  // the signed max: iscale = -127 / -127 = 1
  x[1] = 2.5f;
  x[2] = 3.5f;
  x[3] = -0.5f;
  x[17] = 100.0f;
  const auto b = quantize_one<BlockQ8_K>(DType::Q8_K, x);
  EXPECT_EQ(b.d, 1.0f);
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[1], 2);
  EXPECT_EQ(b.qs[2], 4);
  EXPECT_EQ(b.qs[3], 0);
  EXPECT_EQ(b.bsums[0], -127 + 2 + 4);
  EXPECT_EQ(b.bsums[1], 100);
  EXPECT_EQ(b.bsums[2], 0);
}

TEST(Quantize, Q4_0TruncatesAfterHalfOffset) {
  std::vector<float> x(32, 0.0f);
  x[0] = -8.0f;  // the signed max: d = -8 / -8 = 1
  x[1] = 7.0f;
  x[2] = 8.0f;   // 16.5 -> 16, clamped to 15
  x[3] = 0.4f;   // 8.9 -> 8
  x[4] = 0.5f;   // 9.0 -> 9
  x[5] = -0.6f;  // 7.9 -> 7
  x[16] = 3.0f;  // high nibble of byte 0: 11.5 -> 11
  const auto b = quantize_one<BlockQ4_0>(DType::Q4_0, x);
  EXPECT_EQ(fp16_to_f32(b.d), 1.0f);
  EXPECT_EQ(nibble(b.qs, 0), 0);
  EXPECT_EQ(nibble(b.qs, 1), 15);
  EXPECT_EQ(nibble(b.qs, 2), 15);
  EXPECT_EQ(nibble(b.qs, 3), 8);
  EXPECT_EQ(nibble(b.qs, 4), 9);
  EXPECT_EQ(nibble(b.qs, 5), 7);
  EXPECT_EQ(nibble(b.qs, 16), 11);
}

TEST(Quantize, Q4_1UsesMinAndRange) {
  std::vector<float> x(32, 0.0f);
  x[0] = -1.0f;
  x[1] = 14.0f;  // range 15 -> d = 1, m = -1
  x[2] = 0.5f;   // (0.5 + 1) + 0.5 = 2.0 -> 2
  x[3] = 0.49f;  // 1.99 -> 1
  const auto b = quantize_one<BlockQ4_1>(DType::Q4_1, x);
  EXPECT_EQ(fp16_to_f32(b.d), 1.0f);
  EXPECT_EQ(fp16_to_f32(b.m), -1.0f);
  EXPECT_EQ(nibble(b.qs, 0), 0);
  EXPECT_EQ(nibble(b.qs, 1), 15);
  EXPECT_EQ(nibble(b.qs, 2), 2);
  EXPECT_EQ(nibble(b.qs, 3), 1);
  EXPECT_EQ(nibble(b.qs, 4), 1);  // x = 0: 1.5 -> 1
}

TEST(Quantize, Q5_0PutsFifthBitInQh) {
  std::vector<float> x(32, 0.0f);
  x[0] = 16.0f;   // the signed max: d = 16 / -16 = -1
  x[1] = -15.0f;  // 15 + 16.5 -> 31
  x[2] = -16.0f;  // 32.5 -> 32, clamped to 31
  x[3] = 3.0f;    // -3 + 16.5 -> 13
  x[20] = -4.0f;  // 20.5 -> 20 = 16 | 4
  const auto b = quantize_one<BlockQ5_0>(DType::Q5_0, x);
  EXPECT_EQ(fp16_to_f32(b.d), -1.0f);
  const uint32_t qh = uint32_t(b.qh[0]) | uint32_t(b.qh[1]) << 8 | uint32_t(b.qh[2]) << 16 | uint32_t(b.qh[3]) << 24;
  auto q5 = [&](int i) { return nibble(b.qs, i) | int((qh >> i) & 1) << 4; };
  EXPECT_EQ(q5(0), 0);
  EXPECT_EQ(q5(1), 31);
  EXPECT_EQ(q5(2), 31);
  EXPECT_EQ(q5(3), 13);
  EXPECT_EQ(q5(20), 20);
  EXPECT_EQ(q5(4), 16);  // x = 0: 16.5 -> 16
}

// Round trip: every element of every block within `bound(block)` of the input.
struct RoundTrip {
  DType type;
  const char* why;  // how the bound follows from the format
};

float block_amax(const float* x, int n) {
  float a = 0.0f;
  for (int i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
  return a;
}

// Per-element error bound for the block of `n` values starting at x (n = the type's block size).
float error_bound(DType t, const float* x, int n) {
  const float amax = block_amax(x, n);
  float lo = x[0], hi = x[0];
  for (int i = 0; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  const float fp16_slop = 2.0f * amax / 1024.0f;  // fp16 rounding of d (and m), times the largest code
  switch (t) {
    case DType::Q4_0: return 1.0f * amax / 8 + fp16_slop;   // one step: the top code clamps at 15
    case DType::Q5_0: return 1.0f * amax / 16 + fp16_slop;  // one step: the top code clamps at 31
    case DType::Q4_1: return 0.5f * (hi - lo) / 15 + fp16_slop;
    case DType::Q5_1: return 0.5f * (hi - lo) / 31 + fp16_slop;
    case DType::Q8_0: case DType::Q8_1: return 0.5f * amax / 127 + amax / 1024.0f;
    case DType::Q8_K: return 0.5f * amax / 127 * 1.001f;
    case DType::Q4_K: {
      // groups of 32: half a step (range/15 plus one 6-bit unit of d) plus half a 6-bit unit of dmin; the
      // error-minimizing scale search may clip a group's extreme value to spare the rest: up to 1.5 steps there
      float max_scale = 0.0f, max_min = 0.0f, worst = 0.0f;
      for (int g = 0; g < 8; ++g) {
        float glo = 0.0f, ghi = x[32 * g];
        for (int l = 0; l < 32; ++l) glo = std::min(glo, x[32 * g + l]), ghi = std::max(ghi, x[32 * g + l]);
        max_scale = std::max(max_scale, (ghi - glo) / 15);
        max_min = std::max(max_min, -glo);
        worst = std::max(worst, (ghi - glo) / 15);
      }
      return 1.5f * (worst + max_scale / 63) + 0.5f * max_min / 63 + fp16_slop;
    }
    case DType::Q6_K: {
      // groups of 16 with step amax_g/32 (+ half an int8 unit of d): one step at the clamped top code
      float max_scale = 0.0f, worst = 0.0f;
      for (int g = 0; g < 16; ++g) {
        const float s = block_amax(x + 16 * g, 16) / 32;
        max_scale = std::max(max_scale, s);
        worst = std::max(worst, s);
      }
      return 1.0f * (worst + max_scale / 128) + fp16_slop;
    }
    case DType::F16: return amax / 2048.0f;
    case DType::BF16: return amax / 256.0f;
    case DType::F32: return 0.0f;
    default: return 0.0f;
  }
}

TEST(Quantize, RoundTripWithinStepBounds) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale_dist(-4.0f, 3.0f);
  const DType types[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                         DType::Q5_1, DType::Q8_0, DType::Q8_1, DType::Q8_K, DType::Q4_K, DType::Q6_K};
  const int64_t n = 256 * 8;
  for (DType t : types) {
    std::vector<float> x(n);
    // blocks of 256 at scales 1e-4 .. 1e3, with a shifted mean in some (exercises the mins)
    for (int64_t b = 0; b < n / 256; ++b) {
      const float s = std::pow(10.0f, scale_dist(rng));
      const float shift = (b % 3 == 0) ? 1.5f * s : 0.0f;
      for (int i = 0; i < 256; ++i) x[b * 256 + i] = s * normal(rng) + shift;
    }
    std::vector<uint8_t> q(row_bytes(t, n));
    std::vector<float> y(n);
    quantize_row(t, x.data(), q.data(), n);
    dequantize_row(t, q.data(), y.data(), n);
    const int block = dtype_info(t).block_elems == 1 ? 32 : dtype_info(t).block_elems;
    double err2 = 0.0, x2 = 0.0;
    for (int64_t b = 0; b < n / block; ++b) {
      const float bound = error_bound(t, x.data() + b * block, block);
      for (int i = 0; i < block; ++i) {
        const int64_t k = b * block + i;
        ASSERT_LE(std::fabs(y[k] - x[k]), bound) << dtype_name(t) << " element " << k << " x=" << x[k];
        err2 += double(y[k] - x[k]) * (y[k] - x[k]);
        x2 += double(x[k]) * x[k];
      }
    }
    // and on average well inside the bound: RMS error relative to RMS value
    const double rel_rms = std::sqrt(err2 / x2);
    const double kMaxRelRms = t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q4_K ? 0.12
                              : t == DType::Q5_0 || t == DType::Q5_1                  ? 0.06
                              : t == DType::F32                                        ? 0.0
                                                                                       : 0.03;
    EXPECT_LE(rel_rms, kMaxRelRms) << dtype_name(t);
  }
}

TEST(Quantize, AllZeroBlocksStayZero) {
  const DType types[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                         DType::Q8_1, DType::Q8_K, DType::Q4_K, DType::Q6_K};
  for (DType t : types) {
    std::vector<float> x(256, 0.0f), y(256, 1.0f);
    std::vector<uint8_t> q(row_bytes(t, 256), 0xAB);
    quantize_row(t, x.data(), q.data(), 256);
    dequantize_row(t, q.data(), y.data(), 256);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
}

}  // namespace
}  // namespace ferry
