// The stacked quantized matvec (stream_quant_stacked: a K-quant mix's q|k|v, q|k in Q4_K or Q5_K and v in Q6_K, in
// one launch whose blocks take the parts by row range) through the CUDA backend's stacked weight
// (CudaBackend::prepare_stacked_weight), on fresh random weights and activations (never zeros):
//  - against the CPU reference (the parts' rows dequantized exactly, f32 dot: CpuBackend's reference matmul part by
//    part): relative L2 <= 1e-4 with two int8 activation levels (the op tests' backend, cuda_test_util.h), as the
//    single-type kStreamQuant (matvec_test's kTol);
//  - bit for bit against the single-type launches of each part (the same rows, the same prologue), plain and with
//    the RMSNorm in the prologue (rms_norm_matmul), with and without a bias, one and two activation levels;
//  - at more tokens (the GEMM over both parts dequantized into one bf16 matrix) within the bf16 GEMM bound, 1e-2.
// Shapes: the Llama-3-8B q|k|v (4096 -> 4096 + 1024 | 1024), a 1B-like one (2048 -> 2048 + 512 | 512) and odd rows.
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/matmul/matvec.cuh"
#include "backends/cuda/matmul/plan.h"
#include "backends/cuda/matmul/stream_quant.cuh"
#include "backends/cuda/matmul/weight_layout.cuh"
#include "cuda_test_util.h"
#include "formats/quant.h"

namespace ferry::test {
namespace {

class CudaStackedMatvec : public CudaOpsTest {
 protected:
  // head rows of `head` then tail rows of `tail`, cols columns: the stacked matvec against the CPU reference and
  // against the two single-type launches.
  void check(DType head, int64_t head_rows, DType tail, int64_t tail_rows, int64_t cols, uint32_t seed) {
    const std::string what = fmt::format("{}x{} + {}x{} ({} cols)", dtype_name(head), head_rows, dtype_name(tail),
                                         tail_rows, cols);
    const int64_t rows = head_rows + tail_rows;
    std::vector<uint8_t> wh = make_weight(head, head_rows, cols, seed), wt = make_weight(tail, tail_rows, cols, seed + 1);
    const Tensor hh = Tensor::make(head, {head_rows, cols}, wh.data()), ht = Tensor::make(tail, {tail_rows, cols}, wt.data());
    const Tensor runs[] = {hh, ht};
    const Tensor stack = gpu_->prepare_stacked_weight(runs, keep_);  // (rows, cols) DType::Stacked
    ASSERT_FALSE(stack.empty()) << what;
    ASSERT_EQ(stack.dtype, DType::Stacked);
    ASSERT_EQ(stack.rows(), rows);
    // The single-type parts as the single-type launches read them.
    const Tensor gh = gpu_->prepare_weight(hh, keep_), gt = gpu_->prepare_weight(ht, keep_);

    // x (1, cols) f32 with a per-column offset (real hidden states have a non-zero mean per block); bias (rows).
    std::vector<float> x = random_floats(size_t(cols), seed + 2);
    for (size_t i = 0; i < x.size(); ++i) x[i] += 0.3f * float(i % 7) - 0.9f;
    const std::vector<float> bias = random_floats(size_t(rows), seed + 3);
    const std::vector<float> norm_w = random_floats(size_t(cols), seed + 4, 1.0f);
    const Tensor gx = upload(DType::F32, {1, cols}, x), gb = upload(DType::F32, {rows}, bias);
    const Tensor gn = upload(DType::F32, {cols}, norm_w);

    // CPU reference, part by part: ref (1, rows) = x . [wh; wt]^T + bias.
    std::vector<float> ref(static_cast<size_t>(rows)), ref_t(static_cast<size_t>(tail_rows)), xb = x;
    std::vector<float> bh(bias.begin(), bias.begin() + head_rows), bt(bias.begin() + head_rows, bias.end());
    cpu_.matmul(host(DType::F32, {1, head_rows}, ref), host(DType::F32, {1, cols}, xb), hh,
                host(DType::F32, {head_rows}, bh));
    cpu_.matmul(host(DType::F32, {1, tail_rows}, ref_t), host(DType::F32, {1, cols}, xb), ht,
                host(DType::F32, {tail_rows}, bt));
    std::copy(ref_t.begin(), ref_t.end(), ref.begin() + head_rows);

    // The backend's plan: one stacked launch at one token.
    const Tensor out = poisoned({1, rows});
    gpu_->matmul(out, gx, stack, gb);
    const std::vector<float> got = download(out);
    const double err = rel_l2(got, ref);
    std::printf("%s: stacked stream_quant rel L2 %.2e\n", what.c_str(), err);
    EXPECT_LE(err, 1e-4) << what;

    // Bit for bit against the two single-type launches, plain and with the norm prologue, both activation levels.
    const auto stream = [&](DType t, const Tensor& w, const float* b, float* o, bool one, bool norm) {
      cuda_ops::matvec(t,
                       {.w = {static_cast<const uint8_t*>(w.data), w.rows(), cols,
                              cuda_ops::is_split_type(t) ? cuda_ops::scales_offset(t, w.rows(), cols) : 0},
                        .x = norm ? nullptr : gx.ptr<float>(), .bias = b, .out = o, .n_tokens = 1,
                        .kernel = cuda_ops::MatvecKernel::kStreamQuant,
                        .in_norm = {.residual = norm ? gx.ptr<float>() : nullptr, .delta = nullptr,
                                    .weight = norm ? gn.ptr<float>() : nullptr, .eps = 1e-5f},
                        .one_level_acts = one},
                       nullptr);
    };
    const StackedParts parts = stacked_views(gh, gt, cols);
    for (const bool one : {false, true}) {
      for (const bool norm : {false, true}) {
        for (const bool with_bias : {false, true}) {
          const Tensor a = poisoned({1, rows}), b = poisoned({1, rows});
          gpu_->synchronize();
          const float* bp = with_bias ? gb.ptr<float>() : nullptr;
          stream(head, gh, bp, a.ptr<float>(), one, norm);
          stream(tail, gt, bp ? bp + head_rows : nullptr, a.ptr<float>() + head_rows, one, norm);
          cuda_ops::stream_quant_stacked(
              head, tail,
              {.w = parts.head, .x = norm ? nullptr : gx.ptr<float>(), .bias = bp, .out = b.ptr<float>(),
               .n_tokens = 1, .kernel = cuda_ops::MatvecKernel::kStreamQuant,
               .in_norm = {.residual = norm ? gx.ptr<float>() : nullptr, .delta = nullptr,
                           .weight = norm ? gn.ptr<float>() : nullptr, .eps = 1e-5f},
               .one_level_acts = one},
              parts.tail, nullptr);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          EXPECT_EQ(download(a), download(b)) << what << " one level " << one << " norm " << norm << " bias "
                                              << with_bias;
        }
      }
    }

    // The backend's rms_norm_matmul on the stack (the plan's in_norm): the same bits as the stacked launch above
    // with the norm (two levels: the op tests' backend), and not a NaN left.
    {
      const Tensor o = poisoned({1, rows}), normed = poisoned({1, cols});
      gpu_->rms_norm_matmul(o, normed, gx, gn, 1e-5f, stack, gb);
      const Tensor a = poisoned({1, rows});
      gpu_->synchronize();
      stream(head, gh, gb.ptr<float>(), a.ptr<float>(), false, true);
      stream(tail, gt, gb.ptr<float>() + head_rows, a.ptr<float>() + head_rows, false, true);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(download(o), download(a)) << what << " rms_norm_matmul";
    }

    // More tokens: the GEMM over the stack's rows (dequantized into one bf16 matrix), the bf16 bound.
    for (const int64_t n : {2, 9, 40}) {
      std::vector<float> xs = random_floats(size_t(n * cols), seed + 5 + uint32_t(n));
      std::vector<float> want(size_t(n * rows)), want_h(size_t(n * head_rows)), want_t(size_t(n * tail_rows));
      cpu_.matmul(host(DType::F32, {n, head_rows}, want_h), host(DType::F32, {n, cols}, xs), hh, Tensor{});
      cpu_.matmul(host(DType::F32, {n, tail_rows}, want_t), host(DType::F32, {n, cols}, xs), ht, Tensor{});
      for (int64_t i = 0; i < n; ++i) {
        std::copy_n(want_h.begin() + i * head_rows, head_rows, want.begin() + i * rows);
        std::copy_n(want_t.begin() + i * tail_rows, tail_rows, want.begin() + i * rows + head_rows);
      }
      const Tensor o = poisoned({n, rows});
      gpu_->matmul(o, upload(DType::F32, {n, cols}, xs), stack, Tensor{});
      EXPECT_LE(rel_l2(download(o), want), 1e-2) << what << " n=" << n;
    }
  }

  struct StackedParts {
    cuda_ops::WeightView head, tail;
  };
  static StackedParts stacked_views(const Tensor& gh, const Tensor& gt, int64_t cols) {
    const auto view = [&](const Tensor& w) {
      return cuda_ops::WeightView{static_cast<const uint8_t*>(w.data), w.rows(), cols,
                                  cuda_ops::is_split_type(w.dtype) ? cuda_ops::scales_offset(w.dtype, w.rows(), cols) : 0};
    };
    return {view(gh), view(gt)};
  }
};

TEST_F(CudaStackedMatvec, Llama3QkvQ4KQ6K) {
  check(DType::Q4_K, 4096 + 1024, DType::Q6_K, 1024, 4096, 11);  // the 8B q|k|v of a Q4_K_M layer with v in Q6_K
}

TEST_F(CudaStackedMatvec, SmallShapesBothPairs) {
  check(DType::Q4_K, 2048 + 512, DType::Q6_K, 512, 2048, 21);  // a 1B-like q|k|v (8 rows a stage in both parts)
  check(DType::Q5_K, 2048 + 512, DType::Q6_K, 512, 2048, 31);
  check(DType::Q5_K, 1100, DType::Q6_K, 300, 4096, 41);  // Q5_K_M at 4096 columns (4 rows a stage in both), odd rows
  check(DType::Q4_K, 77, DType::Q6_K, 13, 4096, 51);     // fewer rows than SMs in both parts
}

TEST_F(CudaStackedMatvec, DeclinedWhereThePlanDoesNotStream) {
  // Q4_0 + Q6_K (no stacked instance) and 8192 columns (two segments a warp): the parts stay apart.
  for (const auto& [h, cols] : {std::pair{DType::Q4_0, int64_t(4096)}, std::pair{DType::Q4_K, int64_t(8192)}}) {
    std::vector<uint8_t> wh = make_weight(h, 64, cols, 3), wt = make_weight(DType::Q6_K, 32, cols, 4);
    const Tensor runs[] = {Tensor::make(h, {64, cols}, wh.data()), Tensor::make(DType::Q6_K, {32, cols}, wt.data())};
    EXPECT_TRUE(gpu_->prepare_stacked_weight(runs, keep_).empty()) << dtype_name(h) << " " << cols;
  }
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
