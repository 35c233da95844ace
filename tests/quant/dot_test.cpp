// Fast dot kernels against the references, for every weight type, every SIMD level this CPU supports, and
// 1..4 activation rows. Two references:
//  - tight: the dequantized weight row times the dequantized (already quantized) activation rows in
//    double. The kernels only reorder float sums of exact integer group sums, so they must agree to
//    kTight relative to sum |w||x|.
//  - loose: dot_ref with the float activations; the gap is the activation quantization (Q8: at most
//    half a step of 1/127 of the block or group max per element; BF16: 2^-9 relative), within kLoose of
//    sum |w||x|.
// Tiles of several weight rows and tokens must give bit-identical results to one-row, one-token calls.
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

constexpr double kTight = 2e-5;
constexpr double kLoose = 1e-2;

const DType kAllWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                                 DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q8_1, DType::Q2_K,
                                 DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K,
                                 DType::F8_E4M3_B128};

void set_fp16(uint8_t* p, float v) {
  const uint16_t h = f32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// A weight row of random bytes, with every scale field replaced by a sane finite value: random bytes are
// valid blocks once the fp16 scales are (all bit patterns of the quants are meaningful).
std::vector<uint8_t> random_weight_bytes(DType t, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> w(row_bytes(t, n));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f), offset(-0.1f, 0.1f);
  for (auto& b : w) b = uint8_t(byte(rng));
  const size_t bb = size_t(dtype_info(t).block_bytes);
  for (size_t off = 0; off < w.size(); off += bb) {
    uint8_t* p = w.data() + off;
    switch (t) {
      case DType::F16: case DType::BF16: {  // keep finite values of moderate size
        const float v = offset(rng) * 10.0f;
        const uint16_t h = t == DType::F16 ? f32_to_fp16(v) : f32_to_bf16(v);
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::F32: {
        const float v = offset(rng) * 10.0f;
        std::memcpy(p, &v, 4);
        break;
      }
      case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: set_fp16(p, scale(rng)); break;
      case DType::Q4_1: case DType::Q5_1: case DType::Q8_1:
        set_fp16(p, scale(rng));
        set_fp16(p + 2, offset(rng));
        break;
      case DType::Q2_K: set_fp16(p + 80, scale(rng)); set_fp16(p + 82, scale(rng)); break;
      case DType::Q3_K: set_fp16(p + 108, scale(rng) * 0.1f); break;
      case DType::Q4_K: case DType::Q5_K: set_fp16(p, scale(rng) * 0.1f); set_fp16(p + 2, scale(rng) * 0.1f); break;
      case DType::Q6_K: set_fp16(p + 208, scale(rng) * 0.1f); break;
      case DType::Q8_K: {
        const float d = scale(rng);
        std::memcpy(p, &d, 4);
        break;
      }
      case DType::F8_E4M3_B128: {  // every code but the two NaNs (S.1111.111 -> S.1111.110), a sane f32 scale
        for (int i = 0; i < kF8Block; ++i)
          if ((p[i] & 0x7F) == 0x7F) p[i] ^= 1;
        const float d = scale(rng) * 0.01f;
        std::memcpy(p + kF8Block, &d, 4);
        break;
      }
      default: break;
    }
  }
  return w;
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = normal(rng) * (i % 97 == 0 ? 8.0f : 1.0f);  // a few outliers
  return x;
}

struct Case {
  DType wt;
  int64_t n;
  bool quantized_weights;  // weights from quantize_row of random floats (else random bytes)
};

void check_case(const Case& c, std::mt19937& rng) {
  const DType xt = activation_type(c.wt);
  const int64_t n = c.n;
  std::vector<uint8_t> w;
  if (c.quantized_weights) {
    const auto wf = random_floats(n, rng);
    w.resize(row_bytes(c.wt, n));
    quantize_row(c.wt, wf.data(), w.data(), n);
  } else {
    w = random_weight_bytes(c.wt, n, rng);
  }
  std::vector<float> wd(static_cast<size_t>(n));
  dequantize_row(c.wt, w.data(), wd.data(), n);

  // activation rows: float, quantized (padded by 16 bytes to exercise x_row_bytes), dequantized
  const size_t x_row_bytes = row_bytes(xt, n) + 16;
  std::vector<std::vector<float>> xf(kMaxDotRows), xd(kMaxDotRows, std::vector<float>(size_t(n)));
  std::vector<uint8_t> xq(x_row_bytes * kMaxDotRows + 64);
  // keep the blocks' natural alignment only (float fields: 4 bytes, fp16 fields: 2)
  uint8_t* xbase = xq.data() + (dtype_info(xt).block_bytes % 4 == 0 ? 4 : 2);
  for (int j = 0; j < kMaxDotRows; ++j) {
    xf[j] = random_floats(n, rng);
    quantize_row(xt, xf[j].data(), xbase + j * x_row_bytes, n);
    dequantize_row(xt, xbase + j * x_row_bytes, xd[j].data(), n);
  }

  double ref_tight[kMaxDotRows], abs_q[kMaxDotRows], ref_loose[kMaxDotRows], abs_f[kMaxDotRows];
  for (int j = 0; j < kMaxDotRows; ++j) {
    double s = 0, a = 0, af = 0;
    for (int64_t i = 0; i < n; ++i) {
      s += double(wd[size_t(i)]) * xd[j][size_t(i)];
      a += std::fabs(double(wd[size_t(i)]) * xd[j][size_t(i)]);
      af += std::fabs(double(wd[size_t(i)]) * xf[j][size_t(i)]);
    }
    ref_tight[j] = s;
    abs_q[j] = a;
    ref_loose[j] = dot_ref(c.wt, w.data(), xf[j].data(), n);
    abs_f[j] = af;
  }

  std::vector<float> first_level;
  for (SimdLevel level : supported_simd_levels()) {
    const DotKernels k = select_dot_kernels(level);
    float single[kMaxDotRows];
    for (int j = 0; j < kMaxDotRows; ++j)
      dot_rows(k, c.wt, n, w.data(), xbase + j * x_row_bytes, x_row_bytes, 1, &single[j]);
    for (int n_x = 1; n_x <= kMaxDotRows; ++n_x) {
      float out[kMaxDotRows];
      dot_rows(k, c.wt, n, w.data(), xbase, x_row_bytes, n_x, out);
      for (int j = 0; j < n_x; ++j) {
        const std::string where = std::string(dtype_name(c.wt)) + " n=" + std::to_string(n) + " level=" +
                                  std::string(simd_level_name(level)) + " n_x=" + std::to_string(n_x) +
                                  " row " + std::to_string(j) + (c.quantized_weights ? " (quantized)" : " (bytes)");
        ASSERT_TRUE(std::isfinite(out[j])) << where;
        EXPECT_EQ(out[j], single[j]) << where << ": sharing the weight pass must not change a row's result";
        EXPECT_LE(std::fabs(out[j] - ref_tight[j]), kTight * abs_q[j] + 1e-30) << where << " tight";
        EXPECT_LE(std::fabs(out[j] - ref_loose[j]), kLoose * abs_f[j] + 1e-30) << where << " vs dot_ref";
      }
    }
  }
}

TEST(Dot, EveryTypeEveryLevelEveryRowCount) {
  std::mt19937 rng(7);
  int cases = 0;
  for (DType wt : kAllWeightTypes) {
    const int block = dtype_info(wt).block_elems;
    std::vector<int64_t> sizes = {512, 1024 + 256};
    if (block == 32) sizes.push_back(96);
    if (block == 1) sizes.insert(sizes.end(), {45, 77, 1});
    for (int64_t n : sizes) {
      check_case({wt, n, false}, rng);
      ++cases;
      if (can_quantize(wt)) {
        check_case({wt, n, true}, rng);
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 40);
}

TEST(Dot, ActivationTypes) {
  EXPECT_EQ(activation_type(DType::Q4_0), DType::Q8_0G4);
  EXPECT_EQ(activation_type(DType::Q5_0), DType::Q8_0G4);
  EXPECT_EQ(activation_type(DType::Q8_0), DType::Q8_0G4);
  EXPECT_EQ(activation_type(DType::Q4_1), DType::Q8_1G4);
  EXPECT_EQ(activation_type(DType::Q5_1), DType::Q8_1G4);
  EXPECT_EQ(activation_type(DType::Q8_1), DType::Q8_1);
  EXPECT_EQ(activation_type(DType::Q4_K), DType::Q8_K);
  EXPECT_EQ(activation_type(DType::BF16), DType::BF16);
  EXPECT_EQ(activation_type(DType::Q6_K), DType::Q8_K);
  EXPECT_EQ(activation_type(DType::F16), DType::F32);
  EXPECT_EQ(activation_type(DType::F8_E4M3_B128), DType::F32);
  EXPECT_THROW(activation_type(DType::I32), Error);
}

TEST(Dot, RejectsBadCalls) {
  const DotKernels k = select_dot_kernels(SimdLevel::Scalar);
  const size_t xr = row_bytes(DType::Q8_0G4, 64), wr = row_bytes(DType::Q4_0, 64);
  std::vector<uint8_t> w(wr * 8), x(xr * 8);
  float out[64];
  EXPECT_THROW(dot_rows(k, DType::Q4_0, 64, w.data(), x.data(), xr, 5, out), Error);
  EXPECT_THROW(dot_rows(k, DType::Q4_0, 64, w.data(), x.data(), xr, 0, out), Error);
  EXPECT_THROW(dot_rows(k, DType::Q4_0, 48, w.data(), x.data(), xr, 1, out), Error);
  EXPECT_THROW(dot_rows(k, DType::Q4_0, 64, w.data(), x.data(), 10, 2, out), Error);
  EXPECT_THROW(dot_rows(k, DType::I8, 64, w.data(), x.data(), xr, 1, out), Error);
  const DotTile ok{.n = 64, .w = w.data(), .w_row_bytes = wr, .n_w = 2, .x = x.data(), .x_row_bytes = xr,
                   .n_x = 2, .out = out, .out_stride = 2};
  EXPECT_NO_THROW(dot_tile(k, DType::Q4_0, ok));
  DotTile bad = ok;
  bad.n_w = 5;
  EXPECT_THROW(dot_tile(k, DType::Q4_0, bad), Error);
  bad = ok;
  bad.n_w = 0;
  EXPECT_THROW(dot_tile(k, DType::Q4_0, bad), Error);
  bad = ok;
  bad.w_row_bytes = wr - 1;
  EXPECT_THROW(dot_tile(k, DType::Q4_0, bad), Error);
  bad = ok;
  bad.out_stride = 1;
  EXPECT_THROW(dot_tile(k, DType::Q4_0, bad), Error);
}

TEST(Simd, ParseAndResolve) {
  EXPECT_EQ(parse_simd_level("scalar"), SimdLevel::Scalar);
  EXPECT_EQ(parse_simd_level("AVX2"), SimdLevel::Avx2);
  EXPECT_EQ(parse_simd_level("avx512"), SimdLevel::Avx512);
  EXPECT_THROW(parse_simd_level("sse9"), Error);
  EXPECT_EQ(resolve_simd_level(std::nullopt), detect_simd());
  EXPECT_EQ(resolve_simd_level(std::string("scalar")), SimdLevel::Scalar);
  EXPECT_THROW(resolve_simd_level(std::string("neon")), Error);
  for (SimdLevel l : {SimdLevel::Avx2, SimdLevel::Avx512}) {
    if (cpu_supports(l)) {
      EXPECT_EQ(select_dot_kernels(l).level, l);
    } else {
      EXPECT_THROW(resolve_simd_level(std::string(simd_level_name(l))), Error);
      EXPECT_THROW(select_dot_kernels(l), Error);
    }
  }
}

}  // namespace
}  // namespace ferry
