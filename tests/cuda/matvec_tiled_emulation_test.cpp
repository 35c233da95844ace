// Host-only (runs without a GPU): matvec v5's CUDA-core kernel emulated on the CPU with the kernel's own chunk
// math and work split (matvec_v5_paths.cuh, compiled for the host): grid of `sms` blocks, row groups per block,
// items (group, K-slice) per warp, lane l walking units c_lo + l, + 32 kU, partials summed in slice order, and
// the two-level int8 activation quantization of the pre-pass. Checks every weight type and token count on odd
// shapes against the CPU reference (relative L2 <= 1e-4, the matvec tests' bound) and, for the quantized types,
// against the reference fed the same quantized activations (<= 1e-5). What it cannot check: warp shuffles,
// PDL, register or memory-model issues, and the BF16 tensor-core path (its fragment layout is checked by
// TensorCoreFragmentOrder below on the host).
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/matmul/matvec_tiled.cuh"
#include "backends/cuda/matmul/matvec_tiled_paths.cuh"
#include "backends/cuda/matmul/weight_repack.h"
#include "fixtures/numeric.h"
#include "formats/quant.h"
#include "device_layout.h"

namespace ferry::cuda_ops {
namespace {

constexpr int kWarps = 16;  // as matvec_tiled.cu
constexpr size_t kMaxPartial = 160 * 1024;

// The pre-pass on the host (the kernel's warp version computes the same per value; sums are integers).
std::vector<uint8_t> prepass(const std::vector<float>& x, int n, int64_t k) {
  std::vector<uint8_t> scratch((2 * size_t(n) * size_t(k) + 15) / 16 * 16 + size_t(n) * size_t(k / 32) * 16 + 16);
  const size_t nk = size_t(n) * size_t(k);
  auto* hi = reinterpret_cast<int8_t*>(scratch.data());
  auto* lo = hi + nk;
  auto* meta = reinterpret_cast<float4*>(scratch.data() + (2 * nk + 15) / 16 * 16);
  for (size_t b = 0; b < nk / 32; ++b) {
    float amax = 0.0f;
    for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    int s[2] = {0, 0};
    for (size_t i = 0; i < 32; ++i) {
      int q1, q2;
      quantize_value(x[32 * b + i], amax, &q1, &q2);
      hi[32 * b + i] = int8_t(q1);
      lo[32 * b + i] = int8_t(q2);
      s[i / 16] += 256 * q1 + q2;
    }
    meta[b] = make_meta(amax / 127.0f * (1.0f / 256.0f), s[0], s[1]);
  }
  return scratch;
}

// x~ of the pre-pass as floats (for the same-quantization reference).
std::vector<float> dequantized(const std::vector<uint8_t>& scratch, int n, int64_t k) {
  const ActView a = act_view(scratch.data(), n, k);
  std::vector<float> out(size_t(n) * size_t(k));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = float(double(a.meta[i / 32].x) * double(256 * int(a.hi[i]) + int(a.lo[i])));
  return out;
}

// The CUDA-core kernel, serially: out (n, rows).
template <class D, int kTok>
std::vector<float> emulate(const WeightView& w, const std::vector<float>& x, const std::vector<uint8_t>& scratch,
                           int n, int sms) {
  using P = typename PathOf<D>::type;
  constexpr int kR = CoreShape<D, kTok>::kR, kU = CoreShape<D, kTok>::kU;
  Plan pl;
  const int grid = make_plan(w.rows, kR, P::units(w.cols), 32, size_t(kR) * kTok * 4, sms, kWarps, kMaxPartial, &pl);
  typename P::Ctx ctx;
  if constexpr (std::is_same_v<typename P::Ctx, ActView>) {
    ctx = act_view(scratch.data(), n, w.cols);
  } else {
    ctx = x.data();
  }
  std::vector<float> out(size_t(n) * size_t(w.rows), std::nanf(""));
  for (int b = 0; b < grid; ++b) {
    const int64_t g_begin = int64_t(b) * pl.n_groups / grid, g_end = int64_t(b + 1) * pl.n_groups / grid;
    const int64_t n_items = (g_end - g_begin) * pl.split;
    std::vector<float> partials(size_t(pl.gpb) * pl.split * kR * kTok, std::nanf(""));
    for (int warp = 0; warp < kWarps; ++warp) {
      for (int64_t item = warp; item < n_items; item += kWarps) {
        const int64_t g_local = item / pl.split;
        const int s = int(item % pl.split);
        const int64_t row0 = (g_begin + g_local) * kR;
        const int rows_here = int(std::min<int64_t>(kR, w.rows - row0));
        const int64_t c_lo = int64_t(s) * pl.slice, c_hi = std::min(c_lo + pl.slice, pl.n_units);
        float acc[32][kR][kTok] = {};
        for (int lane = 0; lane < 32; ++lane) {
          for (int64_t c0 = c_lo + lane; c0 < c_hi; c0 += 32 * kU) {
            for (int u = 0; u < kU; ++u) {
              const int64_t c = c0 + 32 * u;
              if (c >= c_hi) break;
              for (int t = 0; t < std::min(n, kTok); ++t) {
                const typename P::X xv = P::load_x(ctx, w.cols, t, c);
                for (int r = 0; r < rows_here; ++r) acc[lane][r][t] += P::dot(D::load(w, row0 + r, c), xv);
              }
            }
          }
        }
        for (int r = 0; r < kR; ++r) {
          for (int t = 0; t < kTok; ++t) {
            float v = 0.0f;
            for (int lane = 0; lane < 32; ++lane) v += acc[lane][r][t];
            const int64_t row = row0 + r;
            if (pl.split == 1) {
              if (row < w.rows && t < n) out[size_t(t) * size_t(w.rows) + size_t(row)] = v;
            } else {
              partials[size_t(((g_local * pl.split + s) * kR + r) * kTok + t)] = v;
            }
          }
        }
      }
    }
    if (pl.split > 1) {
      for (int64_t g = 0; g < g_end - g_begin; ++g) {
        for (int r = 0; r < kR; ++r) {
          const int64_t row = (g_begin + g) * kR + r;
          for (int t = 0; t < n && row < w.rows; ++t) {
            float v = 0.0f;
            for (int s = 0; s < pl.split; ++s) v += partials[size_t(((g * pl.split + s) * kR + r) * kTok + t)];
            out[size_t(t) * size_t(w.rows) + size_t(row)] = v;
          }
        }
      }
    }
  }
  return out;
}

template <class D>
std::vector<float> emulate_n(const WeightView& w, const std::vector<float>& x, const std::vector<uint8_t>& scratch,
                             int n, int sms) {
  if (n == 1) return emulate<D, 1>(w, x, scratch, n, sms);
  if (n == 2) return emulate<D, 2>(w, x, scratch, n, sms);
  if (n <= 4) return emulate<D, 4>(w, x, scratch, n, sms);
  if (n <= 8) return emulate<D, 8>(w, x, scratch, n, sms);
  return emulate<D, 16>(w, x, scratch, n, sms);
}

TEST(CudaMatvecV5Emulation, EveryTypeMatchesTheReference) {
  CpuBackend cpu{CpuBackendOptions{.kernels = CpuKernels::Reference, .n_threads = 0, .simd = SimdLevel::Scalar}};
  struct Shape {
    int64_t rows, cols;
    int sms;
  };
  // Few rows (K split among warps), many rows over few SMs (several groups per block, uneven), rows not a
  // multiple of 4, one row, and the H200's 132 SMs on a Llama-width row.
  const Shape shapes[] = {{70, 768, 132}, {1000, 512, 7}, {33, 2304, 132}, {1, 256, 132}, {300, 4096, 132}};
  double worst = 0, worst_q = 0;
  for (const Shape sh : shapes) {
    for (const DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                          DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                          DType::F8_E4M3_B128}) {
      for (const int n : {1, 2, 3, 5, 16}) {
        const uint32_t seed = uint32_t(sh.rows * 31 + n);
        const std::vector<float> f = test::random_floats(size_t(sh.rows * sh.cols), seed, 0.5f);
        std::vector<uint8_t> gguf(size_t(sh.rows) * row_bytes(t, sh.cols));
        for (int64_t r = 0; r < sh.rows; ++r)
          quantize_row(t, f.data() + r * sh.cols, gguf.data() + size_t(r) * row_bytes(t, sh.cols), sh.cols);
        std::vector<float> x = test::random_floats(size_t(n * sh.cols), seed + 1);
        for (size_t i = 0; i < x.size(); ++i) x[i] += 0.3f * float((i % size_t(sh.cols)) % 7) - 0.9f;
        const std::vector<uint8_t> dev = device_layout(t, gguf, sh.rows, sh.cols);
        const WeightView w{dev.data(), sh.rows, sh.cols, is_split_type(t) ? scales_offset(t, sh.rows, sh.cols) : 0};
        const std::vector<uint8_t> scratch = prepass(x, n, sh.cols);
        std::vector<float> got;
        ASSERT_TRUE(visit_decoder(t, [&]<class D>() { got = emulate_n<D>(w, x, scratch, n, sh.sms); }));
        const Tensor hw = Tensor::make(t, {sh.rows, sh.cols}, gguf.data());
        std::vector<float> ref(size_t(n * sh.rows));
        cpu.matmul(Tensor::make(DType::F32, {n, sh.rows}, ref.data()), Tensor::make(DType::F32, {n, sh.cols}, x.data()),
                   hw, Tensor{});
        const double e = test::rel_l2(got, ref);
        EXPECT_LE(e, 1e-4) << dtype_name(t) << " n=" << n << " " << sh.rows << "x" << sh.cols;
        worst = std::max(worst, e);
        // The integer (dp4a) paths quantize the activations; the others read them as f32.
        const bool quant = tiled_quantizes_acts(t);
        if (quant) {
          std::vector<float> xq = dequantized(scratch, n, sh.cols), ref_q(ref.size());
          cpu.matmul(Tensor::make(DType::F32, {n, sh.rows}, ref_q.data()),
                     Tensor::make(DType::F32, {n, sh.cols}, xq.data()), hw, Tensor{});
          const double eq = test::rel_l2(got, ref_q);
          EXPECT_LE(eq, 1e-5) << dtype_name(t) << " n=" << n << " " << sh.rows << "x" << sh.cols;
          worst_q = std::max(worst_q, eq);
        }
      }
    }
  }
  std::printf("v5 emulation: worst relative L2 %.2e vs the f32 reference, %.2e vs the same-quantization one\n", worst,
              worst_q);
}

// The tensor-core path's register assignment (matvec_tiled.cu, BF16 kernel), replayed on the host against the PTX
// m16n8k16 .row.col fragment layout: lane (g = lane / 4, q = lane % 4) holds a0 = A[g][2q, 2q+1], a1 = A[g+8][2q,
// 2q+1], a2 = A[g][2q+8, 2q+9], a3 = A[g+8][2q+8, 2q+9]; b0 = B[2q, 2q+1][g], b1 = B[2q+8, 2q+9][g]; and receives
// c0, c1 = C[g][2q, 2q+1], c2, c3 = C[g+8][2q, 2q+1]. The kernel's lane loads words W0..W3 (columns 8q + 0..7 of
// rows g and g + 8) and activations X (columns 8q + 0..7 of token g), and feeds MMA h: a0 = row g word 2h,
// a1 = row g+8 word 2h, a2 = row g word 2h+1, a3 = row g+8 word 2h+1, b0 = X[4h, 4h+1], b1 = X[4h+2, 4h+3].
// Summed over h = 0, 1 the MMAs must give the plain 16 x 8 product over the 32 columns.
TEST(CudaMatvecV5Emulation, TensorCoreFragmentOrder) {
  constexpr int kRows = 16, kCols = 32, kTokens = 8;
  float w[kRows][kCols], x[kTokens][kCols];
  for (int r = 0; r < kRows; ++r)
    for (int k = 0; k < kCols; ++k) w[r][k] = float((r * 7 + k * 3) % 13 - 6);
  for (int t = 0; t < kTokens; ++t)
    for (int k = 0; k < kCols; ++k) x[t][k] = float((t * 5 + k * 11) % 9 - 4);
  struct Pair {
    float lo, hi;
  };
  float c[kRows][kTokens] = {};
  for (int h = 0; h < 2; ++h) {
    Pair a[32][4], b[32][2];
    for (int lane = 0; lane < 32; ++lane) {  // the kernel's register assignment
      const int g = lane / 4, q = lane % 4;
      const auto word = [&](int row, int i) { return Pair{w[row][8 * q + 2 * i], w[row][8 * q + 2 * i + 1]}; };
      a[lane][0] = word(g, 2 * h);
      a[lane][1] = word(g + 8, 2 * h);
      a[lane][2] = word(g, 2 * h + 1);
      a[lane][3] = word(g + 8, 2 * h + 1);
      b[lane][0] = {x[g][8 * q + 4 * h], x[g][8 * q + 4 * h + 1]};
      b[lane][1] = {x[g][8 * q + 4 * h + 2], x[g][8 * q + 4 * h + 3]};
    }
    float av[16][16], bv[16][8];  // the MMA's view (PTX fragment layout)
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, q = lane % 4;
      const int rows[4] = {g, g + 8, g, g + 8}, cols[4] = {2 * q, 2 * q, 2 * q + 8, 2 * q + 8};
      for (int i = 0; i < 4; ++i) {
        av[rows[i]][cols[i]] = a[lane][i].lo;
        av[rows[i]][cols[i] + 1] = a[lane][i].hi;
      }
      bv[2 * q][g] = b[lane][0].lo;
      bv[2 * q + 1][g] = b[lane][0].hi;
      bv[2 * q + 8][g] = b[lane][1].lo;
      bv[2 * q + 9][g] = b[lane][1].hi;
    }
    for (int lane = 0; lane < 32; ++lane) {  // C fragment back to (row, token) as the kernel's put() reads it
      const int g = lane / 4, q = lane % 4;
      for (int i = 0; i < 4; ++i) {
        const int row = g + (i >= 2 ? 8 : 0), tok = 2 * q + (i & 1);
        float sum = 0.0f;
        for (int k = 0; k < 16; ++k) sum += av[row][k] * bv[k][tok];
        c[row][tok] += sum;
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < kTokens; ++t) {
      float want = 0.0f;
      for (int k = 0; k < kCols; ++k) want += w[r][k] * x[t][k];
      EXPECT_EQ(c[r][t], want) << "row " << r << " token " << t;  // small integers: exact
    }
  }
}

}  // namespace
}  // namespace ferry::cuda_ops

#endif  // FERRY_HAS_CUDA
