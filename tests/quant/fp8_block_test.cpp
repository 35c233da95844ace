// F8_E4M3_B128 (formats/quant.h): ferry's block of FP8 checkpoint weights, 128 e4m3 codes and one f32 scale.
// dequantize_row must give exactly the f32 product e4m3(q) * d for every code (NaN codes give NaN);
// quantize_row picks d = amax / 448 and the nearest code of x / d (ties to even, formats/fp8.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/quant_dot.h"
#include "backends/cpu/simd.h"
#include "core/check.h"
#include "formats/fp8.h"
#include "formats/quant.h"

namespace ferry {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(F8Block, TypeInfo) {
  const DTypeInfo& info = dtype_info(DType::F8_E4M3_B128);
  EXPECT_EQ(info.name, "f8_e4m3_b128");
  EXPECT_EQ(info.block_elems, 128);
  EXPECT_EQ(info.block_bytes, 132);
  EXPECT_EQ(info.ggml_id, -1);  // internal: never read from or written to a GGUF file
  EXPECT_TRUE(info.quantized);
  EXPECT_EQ(dtype_from_name("F8_E4M3_B128"), DType::F8_E4M3_B128);
  EXPECT_EQ(row_bytes(DType::F8_E4M3_B128, 512), 528u);
  EXPECT_THROW(row_bytes(DType::F8_E4M3_B128, 200), Error);
  EXPECT_TRUE(can_quantize(DType::F8_E4M3_B128));
}

// Every one of the 256 codes, under random scales: bit-identical to fp8_e4m3_to_f32(q) * d.
TEST(F8Block, DequantizeIsTheF32ProductForEveryCode) {
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> scale(1e-6f, 3.0f);
  std::vector<BlockF8E4M3B128> blocks(6);
  for (size_t b = 0; b < blocks.size(); ++b) {
    for (int i = 0; i < kF8Block; ++i) blocks[b].qs[i] = uint8_t((b % 2) * 128 + i);  // block pairs cover 0..255
    blocks[b].d = b == 5 ? 1.0f : scale(rng);
  }
  std::vector<float> out(blocks.size() * kF8Block);
  dequantize_row(DType::F8_E4M3_B128, blocks.data(), out.data(), int64_t(out.size()));
  for (size_t b = 0; b < blocks.size(); ++b) {
    for (int i = 0; i < kF8Block; ++i) {
      const float want = fp8_e4m3_to_f32(blocks[b].qs[i]) * blocks[b].d;
      const float got = out[b * kF8Block + size_t(i)];
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << "code " << int(blocks[b].qs[i]);
      } else {
        EXPECT_EQ(bits(got), bits(want)) << "block " << b << " code " << int(blocks[b].qs[i]);
      }
    }
  }
  EXPECT_EQ(out[5 * kF8Block + 0x7E], -448.0f);  // block 5: codes 128..255, d = 1; code 0xFE is -448
}

TEST(F8Block, QuantizeUsesAmaxOver448AndNearestCodes) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 4 * kF8Block;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = normal(rng) * (i / kF8Block == 2 ? 1e-3f : 1.0f);
  for (int i = 0; i < kF8Block; ++i) x[size_t(3 * kF8Block + i)] = 0.0f;  // a block of zeros
  std::vector<BlockF8E4M3B128> q(size_t(n / kF8Block));
  quantize_row(DType::F8_E4M3_B128, x.data(), q.data(), n);
  std::vector<float> back(static_cast<size_t>(n));
  dequantize_row(DType::F8_E4M3_B128, q.data(), back.data(), n);
  for (size_t b = 0; b < 3; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < kF8Block; ++i) amax = std::fmax(amax, std::fabs(x[b * kF8Block + size_t(i)]));
    EXPECT_EQ(q[b].d, amax / 448.0f) << b;
    for (int i = 0; i < kF8Block; ++i) {
      const float v = x[b * kF8Block + size_t(i)];
      EXPECT_EQ(q[b].qs[i], f32_to_fp8_e4m3(v / q[b].d)) << b << " " << i;
      // e4m3 keeps 3 mantissa bits: within half a step (1/16 relative) of normals, 2^-10 d of subnormals
      EXPECT_LE(std::fabs(back[b * kF8Block + size_t(i)] - v), std::fabs(v) / 16.0f + q[b].d / 1024.0f) << b << " " << i;
    }
    size_t at_max = 0;
    for (int i = 0; i < kF8Block; ++i)
      if (std::fabs(x[b * kF8Block + size_t(i)]) == amax) at_max = b * kF8Block + size_t(i);
    EXPECT_EQ(std::fabs(back[at_max]), 448.0f * q[b].d) << "the block's largest value is code 0x7E times d";
  }
  EXPECT_EQ(q[3].d, 0.0f);
  for (int i = 0; i < kF8Block; ++i) EXPECT_EQ(q[3].qs[i], 0);
  for (int i = 0; i < kF8Block; ++i) EXPECT_EQ(back[3 * kF8Block + size_t(i)], 0.0f);
}

// The fast dot kernels decode every code exactly: against a unit vector e_i a row's dot is its value i (every other
// product is +-0), for every code but the two NaNs (which would make every dot NaN: they are zeros here) under two
// scales, at every SIMD level.
TEST(F8Block, FastDotDecodesEveryCodeExactly) {
  BlockF8E4M3B128 row[2];
  for (int i = 0; i < kF8Block; ++i) row[0].qs[i] = uint8_t(i), row[1].qs[i] = uint8_t(128 + i);
  row[0].qs[0x7F] = row[1].qs[0x7F] = 0;
  row[0].d = 0.013f;
  row[1].d = 3.7e-3f;
  std::vector<float> want(2 * kF8Block);
  dequantize_row(DType::F8_E4M3_B128, row, want.data(), 2 * kF8Block);
  for (SimdLevel level : supported_simd_levels()) {
    const DotKernels k = select_dot_kernels(level);
    for (int i = 0; i < 2 * kF8Block; ++i) {
      std::vector<float> x(2 * kF8Block, 0.0f);
      x[size_t(i)] = 1.0f;
      float got = 0.0f;
      dot_rows(k, DType::F8_E4M3_B128, 2 * kF8Block, row, x.data(), 0, 1, &got);
      EXPECT_EQ(got, want[size_t(i)]) << simd_level_name(level) << " code " << int(row[i / kF8Block].qs[i % kF8Block]);
    }
  }
}

// CpuBackend::matmul on F8_E4M3_B128 weights: the fast kernels (every SIMD level, rows split over 3 threads)
// against the reference (dequantize a row, dot in order) on random weights and activations, token counts from
// decode to a prompt tile, with a bias: rel L2 <= 1e-5 (both multiply the same f32 values; only the order of the
// float sums differs).
TEST(F8Block, FastMatmulMatchesTheReference) {
  const int64_t n_out = 70, n_in = 768;
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(n_out * n_in)), bias(static_cast<size_t>(n_out));
  for (float& v : wf) v = normal(rng) * 0.05f;
  for (float& v : bias) v = normal(rng);
  std::vector<uint8_t> w(size_t(n_out) * row_bytes(DType::F8_E4M3_B128, n_in));
  for (int64_t r = 0; r < n_out; ++r)
    quantize_row(DType::F8_E4M3_B128, wf.data() + r * n_in, w.data() + size_t(r) * row_bytes(DType::F8_E4M3_B128, n_in),
                 n_in);
  const Tensor tw = Tensor::make(DType::F8_E4M3_B128, {n_out, n_in}, w.data());
  const Tensor tb = Tensor::make(DType::F32, {n_out}, bias.data());
  CpuBackend ref_backend(CpuBackendOptions{.kernels = CpuKernels::Reference, .n_threads = 1, .simd = SimdLevel::Scalar});
  for (const int64_t n : {1, 3, 17}) {
    std::vector<float> x(static_cast<size_t>(n * n_in)), want(static_cast<size_t>(n * n_out));
    for (float& v : x) v = normal(rng);
    const Tensor tx = Tensor::make(DType::F32, {n, n_in}, x.data());
    ref_backend.matmul(Tensor::make(DType::F32, {n, n_out}, want.data()), tx, tw, tb);
    for (SimdLevel level : supported_simd_levels()) {
      CpuBackend fast(CpuBackendOptions{.kernels = CpuKernels::Fast, .n_threads = 3, .simd = level});
      std::vector<float> got(size_t(n * n_out), std::nanf(""));
      fast.matmul(Tensor::make(DType::F32, {n, n_out}, got.data()), tx, tw, tb);
      double err = 0, norm = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        norm += double(want[i]) * want[i];
      }
      EXPECT_LE(std::sqrt(err / norm), 1e-5) << simd_level_name(level) << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace ferry
