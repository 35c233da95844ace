// The skinny GEMM (skinny_mma.cuh) against a float64 CPU reference on random bf16 inputs: token counts
// 5..128 (every n8 tile width the kernel instantiates, partial tiles included), rows not a multiple of 16
// (nor of 4: scalar stores), k not a multiple of the 64-wide stage, both block tiles, one split and forced
// split counts (cluster reductions of 2..8 blocks) besides the plan's own.
// Inputs are exactly representable in bf16 and the kernel accumulates in fp32, so the only error is fp32
// rounding over k terms: relative L2 <= 1e-5 (rounding the inputs to bf16 alone would give ~3e-3, so a wrong
// fragment, swizzle or reduction cannot pass). The output has a guard row past its end and is NaN-poisoned
// first: an unwritten element fails, a write past the end is caught. Two runs must agree bit for bit.
// Then CudaBackend::matmul on BF16 weights at 5..128 tokens against the CPU backend (activations rounded to
// bf16: <= 1e-2, as in matmul_test.cpp). Skips without a CUDA device of compute capability 9.x.
#ifdef FERRY_HAS_CUDA

#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "backends/cuda/matmul/skinny_mma.cuh"
#include "cuda_test_util.h"

namespace ferry::test {
namespace {

class SkinnyGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    num_sms_ = hopper_sm_count();
    if (num_sms_ == 0) GTEST_SKIP() << "no compute capability 9.x device";
  }

  // out (n, rows) = x (n, k) . w (rows, k)^T with the given tile / splits (null / 0: the plan's).
  void check(int64_t n, int64_t rows, int64_t k, const cuda_ops::SkinnyTile* tile, int splits, uint32_t seed) {
    const std::vector<uint16_t> xb = to_bf16_bits(random_floats(size_t(n * k), seed));
    const std::vector<uint16_t> wb = to_bf16_bits(random_floats(size_t(rows * k), seed + 1));
    const std::vector<float> ref = reference_gemm_bf16(xb, wb, n, rows, k);
    uint16_t *dx = nullptr, *dw = nullptr;
    float* dout = nullptr;
    const size_t out_elems = size_t((n + 1) * rows);  // one guard row past the output
    ASSERT_CUDA_OK(cudaMalloc(&dx, xb.size() * 2));
    ASSERT_CUDA_OK(cudaMalloc(&dw, wb.size() * 2));
    ASSERT_CUDA_OK(cudaMalloc(&dout, out_elems * 4));
    ASSERT_CUDA_OK(cudaMemcpy(dx, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
    ASSERT_CUDA_OK(cudaMemcpy(dw, wb.data(), wb.size() * 2, cudaMemcpyHostToDevice));
    const cuda_ops::SkinnyPlan plan = cuda_ops::make_skinny_plan(n, rows, k, num_sms_, tile, splits);
    const cuda_ops::SkinnyGemmParams p{.out = dout, .x = dx, .w = dw, .n = n, .rows = rows, .k = k};
    std::vector<float> got[2];
    cudaStream_t stream = nullptr;
    ASSERT_CUDA_OK(cudaStreamCreate(&stream));
    for (int run = 0; run < 2; ++run) {  // run 0 on the legacy stream (no PDL), run 1 on a stream (PDL)
      ASSERT_CUDA_OK(cudaMemset(dout, 0xFF, out_elems * 4));  // NaN
      cuda_ops::skinny_gemm(p, plan, run == 0 ? nullptr : stream);
      ASSERT_CUDA_OK(cudaDeviceSynchronize());
      got[run].resize(out_elems);
      ASSERT_CUDA_OK(cudaMemcpy(got[run].data(), dout, out_elems * 4, cudaMemcpyDeviceToHost));
    }
    ASSERT_CUDA_OK(cudaStreamDestroy(stream));
    ASSERT_CUDA_OK(cudaFree(dx));
    ASSERT_CUDA_OK(cudaFree(dw));
    ASSERT_CUDA_OK(cudaFree(dout));
    const std::string what = "n=" + std::to_string(n) + " " + std::to_string(rows) + "x" + std::to_string(k) +
                             (plan.tile == cuda_ops::SkinnyTile::k128 ? " tile128" : " tile256") +
                             " splits=" + std::to_string(plan.splits) + (tile == nullptr && splits == 0 ? " (plan)" : "");
    expect_two_runs_match(got, size_t(n * rows), ref, 1e-5, what);
  }

  int num_sms_ = 0;
};

TEST_F(SkinnyGemmTest, EveryTokenCountOnRaggedShapes) {
  // 200 x 520: rows not a multiple of 16 (the tile's second m16 half partly empty), k = 8 stages + 8 (a tail
  // stage of one chunk); 1001 x 1096: odd rows (scalar stores), several row tiles, k tail of 8 in a split.
  const cuda_ops::SkinnyTile t128 = cuda_ops::SkinnyTile::k128, t256 = cuda_ops::SkinnyTile::k256;
  uint32_t seed = 10;
  for (const int64_t n : {5, 8, 13, 16, 17, 33, 64, 100, 128}) {
    check(n, 200, 520, &t128, 1, seed++);
    check(n, 200, 520, &t256, 3, seed++);
    check(n, 1001, 1096, &t128, 0, seed++);
    check(n, 1001, 1096, &t256, 8, seed++);
  }
}

TEST_F(SkinnyGemmTest, PlansOfModelShapes) {
  // The plan's own tile and splits on shapes of the 8B model's size class (kept small enough for a CPU
  // reference): 1024 x 4096 and 1536 x 4096 (8 and 12 row tiles of 128, 8 splits); 5000 x 512 (40 row tiles,
  // 2 splits: the k of 8 stages caps them).
  uint32_t seed = 100;
  for (const int64_t n : {5, 64, 128}) {
    check(n, 1024, 4096, nullptr, 0, seed++);
    check(n, 1536, 4096, nullptr, 0, seed++);
    check(n, 5000, 512, nullptr, 0, seed++);
  }
  const cuda_ops::SkinnyTile t128 = cuda_ops::SkinnyTile::k128;
  for (const int s : {2, 4, 5, 7}) check(40, 384, 2048, &t128, s, seed++);
}

TEST(SkinnyGemmPlan, CoversKWithinTheClusterLimit) {  // host only: runs without a device
  for (const int64_t k : {8, 64, 520, 4096, 14336}) {
    for (const int64_t rows : {16, 4096, 28672}) {
      const cuda_ops::SkinnyPlan p = cuda_ops::make_skinny_plan(64, rows, k, 132);
      EXPECT_GE(p.splits * p.k_per_split, k);
      EXPECT_LT((p.splits - 1) * p.k_per_split, k);
      EXPECT_EQ(p.k_per_split % cuda_ops::kSkinnyStageK, 0);
      EXPECT_LE(p.splits, cuda_ops::kSkinnyMaxSplits);
    }
  }
  EXPECT_TRUE(cuda_ops::skinny_gemm_supports(128, 6144, 4096));
  EXPECT_FALSE(cuda_ops::skinny_gemm_supports(129, 6144, 4096));
  EXPECT_FALSE(cuda_ops::skinny_gemm_supports(64, 6144, 4100));  // k % 8
  EXPECT_FALSE(cuda_ops::skinny_gemm_supports(0, 64, 64));
}

// CudaBackend::matmul on BF16 weights at the token counts the skinny path serves, against the CPU backend.
class SkinnyBackendMatmul : public CudaOpsTest {};

TEST_F(SkinnyBackendMatmul, Bf16WeightsAgainstCpu) {
  const int64_t n_out = 1000, n_in = 2048;
  const std::vector<float> f = random_floats(size_t(n_out * n_in), 21, 0.5f);
  std::vector<uint16_t> wq(f.size());
  for (size_t i = 0; i < f.size(); ++i) wq[i] = f32_to_bf16(f[i]);
  const Tensor hw = Tensor::make(DType::BF16, {n_out, n_in}, wq.data());
  const Tensor gw = gpu_->prepare_weight(hw, keep_);
  const std::vector<float> b = random_floats(size_t(n_out), 22);
  for (const int64_t n : {5, 13, 64, 100, 128}) {
    std::vector<float> x = random_floats(size_t(n * n_in), 23 + uint32_t(n)), ref(size_t(n * n_out));
    cpu_.matmul(host(DType::F32, {n, n_out}, ref), host(DType::F32, {n, n_in}, x), hw,
                Tensor::make(DType::F32, {n_out}, const_cast<float*>(b.data())));
    const Tensor out = poisoned({n, n_out});
    gpu_->matmul(out, upload(DType::F32, {n, n_in}, x), gw, upload(DType::F32, {n_out}, b));
    const double err = rel_l2(download(out), ref);
    EXPECT_LE(err, 1e-2) << "n=" << n;
    std::printf("  backend BF16 n=%-4ld %ldx%ld +bias  rel L2 %.2e\n", long(n), long(n_out), long(n_in), err);
  }
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
