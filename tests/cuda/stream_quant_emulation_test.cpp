// Host-only (runs without a GPU): matvec v10's consumer lanes emulated on the CPU with the kernel's own lane math
// (matvec_v10_math.cuh, compiled for the host): warp w takes segments w, w + 8, ... of every row, lane l the
// activations and quant bytes of matvec_v10_math.cuh's mapping, its 16 activations quantized from the block's
// max |x| (its own and its partner lane's), exact dp4a sums, one fp32 FMA per (row, segment) with the fp16
// scale. Checked against the CPU reference (dequantize, fp32 dot): relative L2 <= 1e-4 (the matvec tests'
// bound), and against the reference fed the activations the lanes quantized (<= 1e-5: only the summation order
// differs; this also checks that every column is read once, at the right place). The one-level form
// (MatvecParams::one_level_acts) the same way, at 3e-2 against the f32 reference. What it cannot check: the
// ring, the barriers, the shuffles (reduce_rows), PDL; test_cuda's CudaMatvec tests do on a GPU.
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/matmul/stream_quant_math.cuh"
#include "backends/cuda/matmul/weight_repack.h"
#include "fixtures/numeric.h"
#include "formats/quant.h"
#include "stream_quant_emulation_inputs.h"

namespace ferry::cuda_ops::quant_stream {
namespace {

constexpr int kWarps = 8;  // consumer warps (matvec_stream_plan.cuh)

// Column of value i (0..15, LaneAct order) of lane `lane` in segment `seg`.
int64_t lane_col(DType t, int64_t seg, int lane, int i) {
  if (t == DType::Q8_0) return seg * kSegVals + lane * kLaneVals + i;
  const int64_t block = seg * (kSegVals / kQBlock) + lane / 2;
  return block * kQBlock + (i < 8 ? 8 * (lane % 2) + i : 16 + 8 * (lane % 2) + (i - 8));
}

struct Emulated {
  std::vector<float> out;  // (rows)
  std::vector<float> xq;   // (cols): the activations as the lanes quantized them, dx2 (256 q1 + q2)
};

// quants: [rows, nb x 32|16], scales: [rows, nb] fp16 (split_blocks); x: (cols). one: one int8 level.
Emulated emulate(DType t, const std::vector<uint8_t>& quants, const std::vector<uint8_t>& scales, int64_t rows,
                 int64_t cols, const std::vector<float>& x, bool one) {
  const bool q4 = t == DType::Q4_0;
  const int64_t segs = cols / kSegVals, nb = cols / kQBlock, qrow = nb * (q4 ? 16 : 32);
  const int lane_bytes = q4 ? 8 : 16;
  Emulated e{std::vector<float>(size_t(rows), 0.0f), std::vector<float>(size_t(cols), std::nanf(""))};
  // Activations of every (segment, lane), as the kernel makes them before its stage loop.
  std::vector<LaneAct> act(size_t(segs) * 32);
  for (int64_t seg = 0; seg < segs; ++seg) {
    float xv[32][kLaneVals];
    float amax[32] = {};
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < kLaneVals; ++i) {
        xv[lane][i] = x[size_t(lane_col(t, seg, lane, i))];
        amax[lane] = std::max(amax[lane], std::fabs(xv[lane][i]));
      }
    }
    for (int lane = 0; lane < 32; ++lane) {
      const float m = std::max(amax[lane], amax[lane ^ 1]);
      LaneAct& a = act[size_t(seg * 32 + lane)];
      a = one ? (q4 ? quantize_lane<true, true>(xv[lane], m) : quantize_lane<false, true>(xv[lane], m))
              : (q4 ? quantize_lane<true>(xv[lane], m) : quantize_lane<false>(xv[lane], m));
      const float dv = q4 ? a.scale * 16.0f : a.scale;  // the value of v = 1
      for (int i = 0; i < kLaneVals; ++i) {
        const int q1 = int8_t(a.hi[i / 4] >> (8 * (i % 4))), q2 = int8_t(a.lo[i / 4] >> (8 * (i % 4)));
        e.xq[size_t(lane_col(t, seg, lane, i))] = float(double(dv) * double(one ? q1 : 256 * q1 + q2));
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    float total = 0.0f;
    for (int warp = 0; warp < kWarps; ++warp) {  // warp partials added in warp order, as the kernel
      float lanes = 0.0f;
      for (int lane = 0; lane < 32; ++lane) {
        float acc = 0.0f;
        for (int64_t seg = warp; seg < segs; seg += kWarps) {
          const LaneAct& a = act[size_t(seg * 32 + lane)];
          const uint8_t* qp = quants.data() + size_t(r * qrow + seg * 32 * lane_bytes + lane * lane_bytes);
          const int64_t block = seg * (kSegVals / kQBlock) + lane / 2;
          uint16_t d;
          std::memcpy(&d, scales.data() + size_t(r * nb + block) * 2, 2);
          int si;
          if (q4) {
            uint32_t q[2];
            std::memcpy(q, qp, 8);
            si = one ? dot_q4_lane<true>(q, a) : dot_q4_lane(q, a);
          } else {
            uint32_t q[4];
            std::memcpy(q, qp, 16);
            si = one ? dot_q8_lane<true>(q, a) : dot_q8_lane(q, a);
          }
          acc = std::fma(half_bits_to_float(d) * a.scale, float(si), acc);
        }
        lanes += acc;
      }
      total += lanes;
    }
    e.out[size_t(r)] = total;
  }
  return e;
}

TEST(CudaMatvecV10Emulation, LanesMatchTheReference) {
  CpuBackend cpu{CpuBackendOptions{.kernels = CpuKernels::Reference, .n_threads = 0, .simd = SimdLevel::Scalar}};
  double worst[2] = {0, 0}, worst_q[2] = {0, 0};
  for (const EmulationCase c : kEmulationCases) {
    for (const DType t : {DType::Q8_0, DType::Q4_0}) {
      for (const bool one : {false, true}) {
        EmulationInputs in = emulation_inputs(t, c);
        std::vector<uint8_t>& gguf = in.gguf;
        std::vector<float>& x = in.x;
        std::vector<uint8_t> quants, scales;
        split_blocks(t, gguf.data(), c.rows, c.cols, quants, scales);
        const Emulated e = emulate(t, quants, scales, c.rows, c.cols, x, one);
        const Tensor hw = Tensor::make(t, {c.rows, c.cols}, gguf.data());
        std::vector<float> ref(size_t(c.rows)), ref_q(size_t(c.rows));
        cpu.matmul(Tensor::make(DType::F32, {1, c.rows}, ref.data()), Tensor::make(DType::F32, {1, c.cols}, x.data()),
                   hw, Tensor{});
        std::vector<float> xq = e.xq;
        ASSERT_TRUE(std::none_of(xq.begin(), xq.end(), [](float v) { return std::isnan(v); }))
            << "a column no lane owns: " << dtype_name(t) << " " << c.cols;
        cpu.matmul(Tensor::make(DType::F32, {1, c.rows}, ref_q.data()),
                   Tensor::make(DType::F32, {1, c.cols}, xq.data()), hw, Tensor{});
        const double err = test::rel_l2(e.out, ref), err_q = test::rel_l2(e.out, ref_q);
        const std::string what = std::string(dtype_name(t)) + " " + std::to_string(c.rows) + "x" +
                                 std::to_string(c.cols) + " x_scale " + std::to_string(c.x_scale) +
                                 (one ? " one level" : " two levels");
        // One level: ~0.5% per value; the rows' sums cancel (random signs), so their relative error is larger
        // (1.35e-2 at the 2 x 16384 case).
        EXPECT_LE(err, one ? 3e-2 : 1e-4) << what;
        EXPECT_LE(err_q, 1e-5) << what;
        worst[one] = std::max(worst[one], err);
        worst_q[one] = std::max(worst_q[one], err_q);
      }
    }
  }
  for (const bool one : {false, true})
    std::printf("v10 emulation, %s: worst relative L2 %.2e vs the f32 reference, %.2e vs the same-quantization one\n",
                one ? "one level" : "two levels", worst[one], worst_q[one]);
}

// A block whose values are all zero (or below kTinyBlock) quantizes to zero words and a zero scale; a lane whose
// 16 values are zero but whose partner's are not keeps the partner's scale and zero words.
TEST(CudaMatvecV10Emulation, ZeroAndTinyBlocks) {
  float zeros[kLaneVals] = {};
  for (const float amax : {0.0f, 1e-31f}) {
    const LaneAct a = quantize_lane<true>(zeros, amax);
    EXPECT_EQ(a.scale, 0.0f);
    EXPECT_EQ(a.offset, 0);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(a.hi[w] | a.lo[w], 0u);
  }
  const LaneAct b = quantize_lane<false>(zeros, 3.0f);
  EXPECT_GT(b.scale, 0.0f);
  for (int w = 0; w < 4; ++w) EXPECT_EQ(b.hi[w] | b.lo[w], 0u);
}

}  // namespace
}  // namespace ferry::cuda_ops::quant_stream

#endif  // FERRY_HAS_CUDA
