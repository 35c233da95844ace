// Host-only (runs without a GPU): the streamed quantized matvec's K-quant consumer lanes (Q4_K, Q5_K, Q6_K) emulated
// on the CPU with the kernel's own lane math (stream_quant_kquant_math.cuh, compiled for the host): warp w takes
// segments w, w + 8, ... of every row (a segment = 512 columns = 2 super-blocks), lane l the 16 activations and
// the quant bytes of q4k_lane_col's / q6k_lane_col's mapping, quantized per 32-value group (its max |x| over the 4
// lanes holding it), the scales (and mins) decoded as the kernel decodes them, exact int32 sums, the kernel's fp32
// FMAs per (row, segment), in the device layout (Q4_K / Q5_K super-blocks as stored; Q6_K split by the repack
// prepare_weight uses). Checked against the CPU reference (dequantize, fp32 dot) at the matvec tests' 1e-4 (two
// levels) or 3e-2 (one level: ~0.5% per value), and against the reference fed the activations the lanes quantized at
// 1e-5 (only the summation order differs; this also checks that every column is read once, at the right place, with
// its group's scales). Also: the Q4_K / Q5_K scale decode against ggml's get_scale_min_k4 for random headers.
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/matmul/stream_quant_kquant_math.cuh"
#include "backends/cuda/matmul/weight_repack.h"
#include "fixtures/numeric.h"
#include "formats/quant.h"
#include "stream_quant_emulation_inputs.h"

namespace ferry::cuda_ops::quant_stream {
namespace {

constexpr int kWarps = 8;  // consumer warps (stream_plan.cuh)

struct Emulated {
  std::vector<float> out;  // (rows)
  std::vector<float> xq;   // (cols): the activations as the lanes quantized them
};

uint32_t word_at(const uint8_t* p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  return u;
}
void words_at(const uint8_t* p, uint32_t (&w)[2]) { std::memcpy(w, p, 8); }

int lane_col(DType t, int lane, int i) { return t == DType::Q6_K ? q6k_lane_col(lane, i) : q4k_lane_col(lane, i); }

// gguf: [rows, cols / 256] GGUF super-blocks of t; x: (cols). kOne: one activation level.
template <bool kOne>
Emulated emulate(DType t, const std::vector<uint8_t>& gguf, int64_t rows, int64_t cols, const std::vector<float>& x) {
  const int64_t segs = cols / kSegVals, nsb = cols / kKBlock;
  // The device layout: Q4_K / Q5_K as stored; Q6_K's quants [rows, nsb x 192] and records [rows, nsb x 18].
  std::vector<uint8_t> quants = gguf, records;
  if (t == DType::Q6_K) split_blocks(t, gguf.data(), rows, cols, quants, records);
  const int64_t row_bytes = t == DType::Q6_K ? nsb * kQ6KQuantBytes : nsb * (t == DType::Q4_K ? kQ4KBytes : kQ5KBytes);
  const int64_t seg_bytes = t == DType::Q6_K ? kQ6KSegBytes : t == DType::Q4_K ? kQ4KSegBytes : kQ5KSegBytes;
  Emulated e{std::vector<float>(size_t(rows), 0.0f), std::vector<float>(size_t(cols), std::nanf(""))};
  std::vector<LaneAct> act(size_t(segs) * 32);
  for (int64_t seg = 0; seg < segs; ++seg) {
    float xv[32][kLaneVals];
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < kLaneVals; ++i) xv[lane][i] = x[size_t(seg * kSegVals + lane_col(t, lane, i))];
    for (int lane = 0; lane < 32; ++lane) {
      // each group's max over the 4 lanes holding it (the kernel's shuffles: xor 1, then xor 2)
      float m[2];
      for (int g = 0; g < 2; ++g) {
        m[g] = 0.0f;
        for (const int l : {lane, lane ^ 1, lane ^ 2, lane ^ 3})
          for (int i = 8 * g; i < 8 * g + 8; ++i) m[g] = std::max(m[g], std::fabs(xv[l][i]));
      }
      LaneAct& a = act[size_t(seg * 32 + lane)];
      a = quantize_lane_kquant<kOne>(xv[lane], m[0], m[1]);
      for (int i = 0; i < kLaneVals; ++i) {
        const int q1 = int8_t(a.hi[i / 4] >> (8 * (i % 4))), q2 = int8_t(a.lo[i / 4] >> (8 * (i % 4)));
        const float dv = i < 8 ? a.scale : a.scale_b;
        e.xq[size_t(seg * kSegVals + lane_col(t, lane, i))] = float(double(dv) * double(kOne ? q1 : 256 * q1 + q2));
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    float total = 0.0f;
    for (int warp = 0; warp < kWarps; ++warp) {  // warp partials added in warp order, as the kernel
      float lanes = 0.0f;
      for (int lane = 0; lane < 32; ++lane) {
        const int k = lane % 16;
        const Q4KLaneSel sel = q4k_lane_sel(lane);
        float acc = 0.0f;
        for (int64_t seg = warp; seg < segs; seg += kWarps) {
          const LaneAct& a = act[size_t(seg * 32 + lane)];
          const uint8_t* sb = quants.data() + size_t(r * row_bytes + seg * seg_bytes + (lane / 16) * (seg_bytes / 2));
          if (t == DType::Q6_K) {
            uint32_t ql[2], qh[2];
            words_at(sb + 8 * k, ql);
            words_at(sb + 128 + 32 * (k / 8) + 8 * (k % 4), qh);
            const uint8_t* rec = records.data() + size_t((r * nsb + 2 * seg + lane / 16) * kQ6KRecBytes);
            const int s0 = 8 * (k / 8) + (k % 8) / 2;
            uint16_t dbits;
            std::memcpy(&dbits, rec + 16, 2);
            const Q6KSums s = dot_q6k_lane<kOne>(ql, qh, a, k);
            const float dd = half_bits_to_float(dbits);
            const float sa = float(int8_t(rec[s0])) * a.scale, sbv = float(int8_t(rec[s0 + 4])) * a.scale_b;
            acc = std::fma(dd, std::fma(sa, float(s.s_a), sbv * float(s.s_b)), acc);
            continue;
          }
          const uint32_t hx = word_at(sb), hy = word_at(sb + 4), hz = word_at(sb + 8), hw = word_at(sb + 12);
          const uint32_t scmn = q4k_scale_min(hy, hz, hw, sel);
          Q4KSums s;
          if (t == DType::Q5_K) {
            uint32_t qs[2], qh[2];
            words_at(sb + 48 + 8 * k, qs);
            words_at(sb + 16 + 8 * (k % 4), qh);
            s = dot_q5k_lane<kOne>(qs, qh, a, scmn, k / 4);
          } else {
            uint32_t q[2];
            words_at(sb + 16 + 8 * k, q);
            s = dot_q4k_lane<kOne>(q, a, scmn);
          }
          const float dd = half_bits_to_float(uint16_t(hx & 0xFFFFu)), dm = half_bits_to_float(uint16_t(hx >> 16));
          acc = std::fma(std::fma(-dm, float(s.m_a), dd * float(s.d_a)), a.scale, acc);
          acc = std::fma(std::fma(-dm, float(s.m_b), dd * float(s.d_b)), a.scale_b, acc);
        }
        lanes += acc;
      }
      total += lanes;
    }
    e.out[size_t(r)] = total;
  }
  return e;
}

template <bool kOne>
void check_type(DType t) {
  CpuBackend cpu{CpuBackendOptions{.kernels = CpuKernels::Reference, .n_threads = 0, .simd = SimdLevel::Scalar}};
  const double tol = kOne ? 3e-2 : 1e-4;
  double worst = 0, worst_q = 0;
  for (const EmulationCase c : kEmulationCases) {
    if (t == DType::Q6_K && c.cols % 2048 != 0) continue;  // Q6_K streams multiples of 2048 columns
    const EmulationInputs in = emulation_inputs(t, c);
    const Emulated e = emulate<kOne>(t, in.gguf, c.rows, c.cols, in.x);
    const Tensor hw = Tensor::make(t, {c.rows, c.cols}, const_cast<uint8_t*>(in.gguf.data()));
    std::vector<float> x = in.x, ref(size_t(c.rows)), ref_q(size_t(c.rows));
    cpu.matmul(Tensor::make(DType::F32, {1, c.rows}, ref.data()), Tensor::make(DType::F32, {1, c.cols}, x.data()), hw,
               Tensor{});
    std::vector<float> xq = e.xq;
    ASSERT_TRUE(std::none_of(xq.begin(), xq.end(), [](float v) { return std::isnan(v); }))
        << dtype_name(t) << ": a column no lane owns at " << c.cols;
    cpu.matmul(Tensor::make(DType::F32, {1, c.rows}, ref_q.data()), Tensor::make(DType::F32, {1, c.cols}, xq.data()),
               hw, Tensor{});
    const double err = test::rel_l2(e.out, ref), err_q = test::rel_l2(e.out, ref_q);
    EXPECT_LE(err, tol) << dtype_name(t) << " " << c.rows << "x" << c.cols << " x_scale " << c.x_scale << " outlier "
                        << c.outlier;
    EXPECT_LE(err_q, 1e-5) << dtype_name(t) << " " << c.rows << "x" << c.cols << " x_scale " << c.x_scale
                           << " outlier " << c.outlier;
    worst = std::max(worst, err);
    worst_q = std::max(worst_q, err_q);
  }
  std::printf("stream_quant %s emulation (%s): worst relative L2 %.2e vs the f32 reference, %.2e vs the "
              "same-quantization one\n",
              std::string(dtype_name(t)).c_str(), kOne ? "one level" : "two levels", worst, worst_q);
}

TEST(StreamQuantKQuantEmulation, LanesMatchTheReference) {
  for (const DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    check_type<false>(t);
    check_type<true>(t);
  }
}

// The lane's scale decode equals ggml's get_scale_min_k4 for both of its groups, on random 12-byte headers.
TEST(StreamQuantKQuantEmulation, ScaleDecodeMatchesTheFormat) {
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
