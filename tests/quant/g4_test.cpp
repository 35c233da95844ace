// The G4 activation formats (Q8_0G4, Q8_1G4: one scale per 4 values) and the tiled dot kernels that use
// them: dtype table entries, hand-worked quantization and dots, SIMD quantizers byte-identical to
// quantize_row, tiles bit-identical to single calls, and the accuracy gain over one scale per 32 values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/quant_dot.h"
#include "core/check.h"
#include "core/fp16.h"
#include "formats/quant.h"

namespace ferry {
namespace {

TEST(G4, DTypeTable) {
  EXPECT_EQ(dtype_info(DType::Q8_0G4).block_elems, 32);
  EXPECT_EQ(dtype_info(DType::Q8_0G4).block_bytes, 64);
  EXPECT_EQ(dtype_info(DType::Q8_1G4).block_bytes, 68);
  EXPECT_EQ(dtype_info(DType::Q8_0G4).ggml_id, -1);
  EXPECT_EQ(dtype_info(DType::Q8_1G4).ggml_id, -1);
  EXPECT_EQ(dtype_from_name("Q8_0G4"), DType::Q8_0G4);
  EXPECT_EQ(row_bytes(DType::Q8_1G4, 64), 136u);
  // file type ids still resolve, and no id (in particular 0xFFFFFFFF, -1 as u32) reaches an internal type
  EXPECT_EQ(dtype_from_ggml(8), DType::Q8_0);
  EXPECT_EQ(dtype_from_ggml(30), DType::BF16);
  EXPECT_EQ(dtype_from_ggml(0xFFFFFFFFu), std::nullopt);
  EXPECT_EQ(dtype_from_ggml(0xFFFFFFFEu), std::nullopt);
  for (uint32_t id = 0; id < 64; ++id) {
    const auto t = dtype_from_ggml(id);
    if (t) {
      EXPECT_NE(dtype_info(*t).ggml_id, -1) << id;
    }
  }
}

TEST(G4, QuantizeHandWorked) {
  float x[32] = {};
  // group 0: amax 127 -> d 1, values round half to even: 2.5 -> 2, -3.5 -> -4
  x[0] = 127.0f, x[1] = 2.5f, x[2] = -3.5f, x[3] = 0.4f;
  // group 1: all zero -> d 0, q 0
  // group 2: amax 2.54 -> d 0.02; 1.27 -> 63.5 -> 64 (rounding of 1.27 / 0.02 lands just above .5 or on it)
  x[8] = -2.54f, x[9] = 0.02f, x[10] = 0.0f, x[11] = -0.04f;
  for (int i = 12; i < 32; ++i) x[i] = float(i - 20);  // groups 3..7
  BlockQ8_1G4 b{};
  quantize_row(DType::Q8_1G4, x, &b, 32);
  EXPECT_EQ(b.d[0], 1.0f);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 2);
  EXPECT_EQ(b.qs[2], -4);
  EXPECT_EQ(b.qs[3], 0);
  EXPECT_EQ(b.d[1], 0.0f);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(b.qs[i], 0);
  EXPECT_FLOAT_EQ(b.d[2], 2.54f / 127);
  EXPECT_EQ(b.qs[8], -127);
  EXPECT_EQ(b.qs[9], 1);
  EXPECT_EQ(b.qs[10], 0);
  EXPECT_EQ(b.qs[11], -2);
  // group 3: -8 -5 -6 -7? no: values 12..15 - 20 = -8, -7, -6, -5 -> amax 8, q = x * 127 / 8
  EXPECT_FLOAT_EQ(b.d[3], 8.0f / 127);
  EXPECT_EQ(b.qs[12], -127);
  EXPECT_EQ(b.qs[15], int(std::lround(-5 * 127 / 8.0)));  // -79.375 -> -79
  float y[32];
  dequantize_row(DType::Q8_1G4, &b, y, 32);
  double sum = 0;
  for (int i = 0; i < 32; ++i) {
    EXPECT_LE(std::fabs(y[i] - x[i]), 0.5f * b.d[i / 4] * 1.0001f + 1e-7f) << i;
    EXPECT_EQ(y[i], b.d[i / 4] * float(b.qs[i]));
    sum += y[i];
  }
  EXPECT_NEAR(b.s, sum, 1e-4 * std::fabs(sum) + 1e-5);
  BlockQ8_0G4 c{};
  quantize_row(DType::Q8_0G4, x, &c, 32);
  EXPECT_EQ(std::memcmp(c.d, b.d, sizeof c.d), 0);
  EXPECT_EQ(std::memcmp(c.qs, b.qs, sizeof c.qs), 0);
  EXPECT_THROW(quantize_row(DType::Q8_0G4, x, &c, 16), Error);
}

TEST(G4, SimdQuantizersMatchQuantizeRow) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 32 * 37;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = normal(rng) * (i % 29 == 0 ? 60.0f : 1.0f);
  for (int i = 64; i < 68; ++i) x[size_t(i)] = 0.0f;                 // a zero group
  for (int i = 96; i < 100; ++i) x[size_t(i)] = float(i - 97) * 0.5f;  // exact halves: -0.5, 0, 0.5, 1
  for (int i = 128; i < 132; ++i) x[size_t(i)] = 1e-30f * float(i - 129);  // tiny (subnormal scale)
  for (DType at : {DType::Q8_0G4, DType::Q8_1G4}) {
    std::vector<uint8_t> want(row_bytes(at, n)), got(row_bytes(at, n));
    quantize_row(at, x.data(), want.data(), n);
    for (SimdLevel level : supported_simd_levels()) {
      std::fill(got.begin(), got.end(), uint8_t(0xAB));
      quantize_activations(select_dot_kernels(level), at, x.data(), got.data(), n);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0)
          << dtype_name(at) << " level " << simd_level_name(level);
    }
  }
}

// Hand-worked: Q8_0 weights d = 1, q[i] = i - 16; Q8_0G4 activations d[g] = g + 1, q = 1:
// sum_g (g + 1) * sum_{i in g} (i - 16) = sum_g (g + 1)(16g - 58) = 600.
TEST(G4, HandWorkedDotQ8_0) {
  BlockQ8_0 w{};
  w.d = f32_to_fp16(1.0f);
  for (int i = 0; i < 32; ++i) w.qs[i] = int8_t(i - 16);
  BlockQ8_0G4 x{};
  for (int g = 0; g < 8; ++g) x.d[g] = float(g + 1);
  for (int i = 0; i < 32; ++i) x.qs[i] = 1;
  for (SimdLevel level : supported_simd_levels()) {
    float out = 0;
    dot_rows(select_dot_kernels(level), DType::Q8_0, 32, &w, &x, sizeof x, 1, &out);
    EXPECT_EQ(out, 600.0f) << simd_level_name(level);
  }
}

// Hand-worked: Q4_1 weights d = 0.5, m = -1, value i has nibble i % 16; Q8_1G4 activations d[g] =
// 0.25 (g + 1), q = 2, -1, 2, -1, ... Each group's integer sum is 2 * (4g mod 16), so
// sum_g d[g] S_g = 0.25 * 512 = 128; s = sum_g d[g] * 2 = 18; dot = 0.5 * 128 - 18 = 46.
TEST(G4, HandWorkedDotQ4_1) {
  BlockQ4_1 w{};
  w.d = f32_to_fp16(0.5f);
  w.m = f32_to_fp16(-1.0f);
  for (int j = 0; j < 16; ++j) w.qs[j] = uint8_t(j | (j << 4));
  BlockQ8_1G4 x{};
  for (int g = 0; g < 8; ++g) x.d[g] = 0.25f * float(g + 1);
  for (int i = 0; i < 32; ++i) x.qs[i] = int8_t(i % 2 ? -1 : 2);
  x.s = 18.0f;
  std::vector<float> wd(32), xd(32);
  dequantize_row(DType::Q4_1, &w, wd.data(), 32);
  dequantize_row(DType::Q8_1G4, &x, xd.data(), 32);
  double check = 0;
  for (int i = 0; i < 32; ++i) check += double(wd[i]) * xd[i];
  ASSERT_EQ(check, 46.0);  // the worked value is right
  for (SimdLevel level : supported_simd_levels()) {
    float out = 0;
    dot_rows(select_dot_kernels(level), DType::Q4_1, 32, &w, &x, sizeof x, 1, &out);
    EXPECT_EQ(out, 46.0f) << simd_level_name(level);
  }
}

// Every weight type, every level, every tile shape: each result equals the one-row, one-token call bit for
// bit, lands at out[j * stride + i], and nothing else in out is written.
TEST(G4, TilesAreBitIdenticalToSingleCalls) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const DType types[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                         DType::Q5_1, DType::Q8_0, DType::Q8_1, DType::Q4_K, DType::Q6_K, DType::Q8_K};
  for (DType wt : types) {
    const int64_t n = 512;
    const DType at = activation_type(wt);
    const size_t wr = row_bytes(wt, n) + 8, xr = row_bytes(at, n) + 12;
    std::vector<uint8_t> w(wr * kMaxDotWeightRows + 8), x(xr * kMaxDotRows + 8);
    std::vector<float> f(static_cast<size_t>(n));
    for (int i = 0; i < kMaxDotWeightRows; ++i) {
      for (auto& v : f) v = normal(rng);
      quantize_row(wt, f.data(), w.data() + i * wr, n);
    }
    for (int j = 0; j < kMaxDotRows; ++j) {
      for (auto& v : f) v = normal(rng) * (rng() % 13 == 0 ? 20.0f : 1.0f);
      quantize_row(at, f.data(), x.data() + j * xr, n);
    }
    for (SimdLevel level : supported_simd_levels()) {
      const DotKernels k = select_dot_kernels(level);
      float single[kMaxDotRows][kMaxDotWeightRows];
      for (int i = 0; i < kMaxDotWeightRows; ++i)
        for (int j = 0; j < kMaxDotRows; ++j)
          dot_rows(k, wt, n, w.data() + i * wr, x.data() + j * xr, xr, 1, &single[j][i]);
      for (int n_w = 1; n_w <= kMaxDotWeightRows; ++n_w) {
        for (int n_x = 1; n_x <= kMaxDotRows; ++n_x) {
          const size_t stride = size_t(n_w) + 3;
          std::vector<float> out(stride * kMaxDotRows, -7.0f);
          dot_tile(k, wt, {.n = n, .w = w.data(), .w_row_bytes = wr, .n_w = n_w, .x = x.data(),
                           .x_row_bytes = xr, .n_x = n_x, .out = out.data(), .out_stride = stride});
          for (int j = 0; j < kMaxDotRows; ++j) {
            for (size_t i = 0; i < stride; ++i) {
              const auto where = std::string(dtype_name(wt)) + " " + std::string(simd_level_name(level)) +
                                 " tile " + std::to_string(n_w) + "x" + std::to_string(n_x) + " at (" +
                                 std::to_string(j) + ", " + std::to_string(i) + ")";
              if (j < n_x && int(i) < n_w) {
                EXPECT_EQ(out[j * stride + i], single[j][i]) << where;
              } else {
                EXPECT_EQ(out[j * stride + i], -7.0f) << where << " written outside the tile";
              }
            }
          }
        }
      }
    }
  }
}

// Activations with one large outlier per block of 32 (SmolLM2's outlier channels): one scale per 4 values
// keeps the other 7 groups' resolution, so the dot error is far smaller than with Q8_0's one scale per 32.
TEST(G4, FinerScalesBeatPer32OnOutliers) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pos(0, 31);
  const int64_t n = 1024;
  const int rows = 64;
  for (DType wt : {DType::Q4_0, DType::Q4_1, DType::Q8_0}) {
    const DType at = activation_type(wt);
    std::vector<float> wf(static_cast<size_t>(n)), wd(static_cast<size_t>(n)), x(static_cast<size_t>(n)), x32(static_cast<size_t>(n));
    std::vector<uint8_t> w(row_bytes(wt, n)), xq(row_bytes(at, n)), q32(row_bytes(DType::Q8_0, n));
    for (SimdLevel level : supported_simd_levels()) {
      const DotKernels k = select_dot_kernels(level);
      double se_g4 = 0, se_32 = 0;
      for (int r = 0; r < rows; ++r) {
        for (auto& v : wf) v = normal(rng);
        quantize_row(wt, wf.data(), w.data(), n);
        dequantize_row(wt, w.data(), wd.data(), n);
        for (auto& v : x) v = normal(rng);
        for (int64_t b = 0; b < n / 32; ++b) x[size_t(b * 32 + pos(rng))] = 60.0f * (rng() % 2 ? 1.0f : -1.0f);
        double exact = 0;
        for (int64_t i = 0; i < n; ++i) exact += double(wd[size_t(i)]) * x[size_t(i)];
        // per-32: x through Q8_0, then the exact dot with the same weights
        quantize_row(DType::Q8_0, x.data(), q32.data(), n);
        dequantize_row(DType::Q8_0, q32.data(), x32.data(), n);
        double per32 = 0;
        for (int64_t i = 0; i < n; ++i) per32 += double(wd[size_t(i)]) * x32[size_t(i)];
        quantize_activations(k, at, x.data(), xq.data(), n);
        float g4 = 0;
        dot_rows(k, wt, n, w.data(), xq.data(), xq.size(), 1, &g4);
        se_g4 += (g4 - exact) * (g4 - exact);
        se_32 += (per32 - exact) * (per32 - exact);
      }
      const double rms_g4 = std::sqrt(se_g4 / rows), rms_32 = std::sqrt(se_32 / rows);
      // expected ratio ~ sqrt(3 / 31) ~ 0.31 (3 coarse values per block instead of 31)
      EXPECT_LT(rms_g4, 0.45 * rms_32) << dtype_name(wt) << " " << simd_level_name(level) << ": G4 rms "
                                       << rms_g4 << " vs per-32 rms " << rms_32;
      EXPECT_GT(rms_32, 0.0);
    }
  }
}

}  // namespace
}  // namespace ferry
