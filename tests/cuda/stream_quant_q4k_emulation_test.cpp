// Host-only (runs without a GPU): matvec v10's Q4_K consumer lanes emulated on the CPU with the kernel's own lane
// math (matvec_v10_math.cuh's Q4_K section, compiled for the host): warp w takes segments w, w + 8, ... of every
// row (a segment = 512 columns = 2 GGUF super-blocks), lane l the 16 activations and 8 quant bytes of
// q4k_lane_col's mapping, quantized per 32-value group (its max |x| over the 4 lanes holding it), the scales and mins decoded
// from the super-block header as the kernel decodes them (q4k_scale_min), exact int32 sums, two fp32 FMA pairs per
// (row, segment). Checked against the CPU reference (dequantize, fp32 dot) at the matvec tests' 1e-4, and against
// the reference fed the activations the lanes quantized at 1e-5 (only the summation order differs; this also
// checks that every column is read once, at the right place, with its group's scale and min). Also: the scale
// decode against ggml's get_scale_min_k4 for every group of random headers.
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/matmul/stream_quant_math.cuh"
#include "fixtures/numeric.h"
#include "formats/quant.h"
#include "stream_quant_emulation_inputs.h"

namespace ferry::cuda_ops::quant_stream {
namespace {

constexpr int kWarps = 8;  // consumer warps (matvec_stream_plan.cuh)

struct Emulated {
  std::vector<float> out;  // (rows)
  std::vector<float> xq;   // (cols): the activations as the lanes quantized them, dx2 (256 q1 + q2)
};

uint32_t word_at(const uint8_t* p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  return u;
}

// w: [rows, cols / 256] GGUF Q4_K super-blocks (as the device stores them); x: (cols).
Emulated emulate(const std::vector<uint8_t>& w, int64_t rows, int64_t cols, const std::vector<float>& x) {
  const int64_t segs = cols / kSegVals, row_bytes = cols / kKBlock * kQ4KBytes;
  Emulated e{std::vector<float>(size_t(rows), 0.0f), std::vector<float>(size_t(cols), std::nanf(""))};
  std::vector<LaneAct> act(size_t(segs) * 32);
  for (int64_t seg = 0; seg < segs; ++seg) {
    float xv[32][kLaneVals];
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < kLaneVals; ++i) xv[lane][i] = x[size_t(seg * kSegVals + q4k_lane_col(lane, i))];
    for (int lane = 0; lane < 32; ++lane) {
      // each group's max over the 4 lanes holding it (the kernel's shuffles: xor 1, then xor 2)
      float m[2];
      for (int g = 0; g < 2; ++g) {
        m[g] = 0.0f;
        for (const int l : {lane, lane ^ 1, lane ^ 2, lane ^ 3})
          for (int i = 8 * g; i < 8 * g + 8; ++i) m[g] = std::max(m[g], std::fabs(xv[l][i]));
      }
      LaneAct& a = act[size_t(seg * 32 + lane)];
      a = quantize_lane_q4k(xv[lane], m[0], m[1]);
      for (int i = 0; i < kLaneVals; ++i) {
        const int q1 = int8_t(a.hi[i / 4] >> (8 * (i % 4))), q2 = int8_t(a.lo[i / 4] >> (8 * (i % 4)));
        const float dx2 = i < 8 ? a.scale : a.scale_b;
        e.xq[size_t(seg * kSegVals + q4k_lane_col(lane, i))] = float(double(dx2) * double(256 * q1 + q2));
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    float total = 0.0f;
    for (int warp = 0; warp < kWarps; ++warp) {  // warp partials added in warp order, as the kernel
      float lanes = 0.0f;
      for (int lane = 0; lane < 32; ++lane) {
        const Q4KLaneSel sel = q4k_lane_sel(lane);
        float acc = 0.0f;
        for (int64_t seg = warp; seg < segs; seg += kWarps) {
          const LaneAct& a = act[size_t(seg * 32 + lane)];
          const uint8_t* sb = w.data() + size_t(r * row_bytes + seg * kQ4KSegBytes + (lane / 16) * kQ4KBytes);
          uint32_t q[2];
          std::memcpy(q, sb + 16 + 8 * (lane % 16), 8);
          const uint32_t hx = word_at(sb), hy = word_at(sb + 4), hz = word_at(sb + 8), hw = word_at(sb + 12);
          const Q4KSums t = dot_q4k_lane(q, a, q4k_scale_min(hy, hz, hw, sel));
          const float dd = half_bits_to_float(uint16_t(hx & 0xFFFFu)), dm = half_bits_to_float(uint16_t(hx >> 16));
          acc = std::fma(std::fma(-dm, float(t.m_a), dd * float(t.d_a)), a.scale, acc);
          acc = std::fma(std::fma(-dm, float(t.m_b), dd * float(t.d_b)), a.scale_b, acc);
        }
        lanes += acc;
      }
      total += lanes;
    }
    e.out[size_t(r)] = total;
  }
  return e;
}

TEST(CudaMatvecV10Q4KEmulation, LanesMatchTheReference) {
  CpuBackend cpu{CpuBackendOptions{.kernels = CpuKernels::Reference, .n_threads = 0, .simd = SimdLevel::Scalar}};
  const DType t = DType::Q4_K;
  double worst = 0, worst_q = 0;
  for (const EmulationCase c : kEmulationCases) {
    EmulationInputs in = emulation_inputs(t, c);
    std::vector<uint8_t>& gguf = in.gguf;
    std::vector<float>& x = in.x;
    const Emulated e = emulate(gguf, c.rows, c.cols, x);
    const Tensor hw = Tensor::make(t, {c.rows, c.cols}, gguf.data());
    std::vector<float> ref(size_t(c.rows)), ref_q(size_t(c.rows));
    cpu.matmul(Tensor::make(DType::F32, {1, c.rows}, ref.data()), Tensor::make(DType::F32, {1, c.cols}, x.data()), hw,
               Tensor{});
    std::vector<float> xq = e.xq;
    ASSERT_TRUE(std::none_of(xq.begin(), xq.end(), [](float v) { return std::isnan(v); }))
        << "a column no lane owns: " << c.cols;
    cpu.matmul(Tensor::make(DType::F32, {1, c.rows}, ref_q.data()), Tensor::make(DType::F32, {1, c.cols}, xq.data()),
               hw, Tensor{});
    const double err = test::rel_l2(e.out, ref), err_q = test::rel_l2(e.out, ref_q);
    EXPECT_LE(err, 1e-4) << c.rows << "x" << c.cols << " x_scale " << c.x_scale << " outlier " << c.outlier;
    EXPECT_LE(err_q, 1e-5) << c.rows << "x" << c.cols << " x_scale " << c.x_scale << " outlier " << c.outlier;
    std::printf("  %lldx%lld x_scale %g outlier %g: %.2e / %.2e\n", (long long)c.rows, (long long)c.cols, c.x_scale,
                c.outlier, err, err_q);
    worst = std::max(worst, err);
    worst_q = std::max(worst_q, err_q);
  }
  std::printf("v10 Q4_K emulation: worst relative L2 %.2e vs the f32 reference, %.2e vs the same-quantization one\n",
              worst, worst_q);
}

// The lane's scale decode equals ggml's get_scale_min_k4 for both of its groups, on random 12-byte headers.
TEST(CudaMatvecV10Q4KEmulation, ScaleDecodeMatchesTheFormat) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    uint8_t s[12];
    for (uint8_t& b : s) b = uint8_t(rng());
    const uint32_t y = word_at(s), z = word_at(s + 4), w = word_at(s + 8);
    for (int lane = 0; lane < 32; ++lane) {
      const int c = (lane % 16) / 4;
      const uint32_t got = q4k_scale_min(y, z, w, q4k_lane_sel(lane));
      for (int g = 0; g < 2; ++g) {
        const int j = 2 * c + g;
        int sc, mn;
        if (j < 4) {
          sc = s[j] & 63;
          mn = s[j + 4] & 63;
        } else {
          sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
          mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
        ASSERT_EQ(int((got >> (8 * g)) & 0xFFu), sc) << "lane " << lane << " group " << j;
        ASSERT_EQ(int((got >> (16 + 8 * g)) & 0xFFu), mn) << "lane " << lane << " group " << j;
      }
    }
  }
}

}  // namespace
}  // namespace ferry::cuda_ops::quant_stream

#endif  // FERRY_HAS_CUDA
