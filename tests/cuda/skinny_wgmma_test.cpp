// The wgmma skinny GEMM (skinny_wgmma.cuh) against a float64 CPU reference on random bf16 inputs: token counts
// 33..255 (every n_tile instance 64/128/192/256, partial token tiles included, and the edges 1 and 256), rows
// not a multiple of the 128/256-row tile (nor of 4: scalar stores), k not a multiple of the 64-wide stage, all
// three block tiles, one split, the plan's splits and forced splits of 2..8 (cluster reductions, uneven ones too).
// Inputs are exactly representable in bf16 and the kernel accumulates in fp32, so the only error is fp32
// rounding over k terms: relative L2 <= 1e-5 (k <= 4096: about sqrt(k) x 2^-24 ~ 4e-6 at worst; rounding the
// inputs to bf16 alone would give ~3e-3, so a wrong fragment, swizzle, stage or reduction cannot pass). The
// output has a guard row past its end and is NaN-poisoned first: an unwritten element fails, a write past the
// end is caught. Two runs (legacy stream, then a stream with PDL) must agree bit for bit.
// Then CudaBackend::matmul on BF16 weights where the dispatch picks this kernel, against the CPU backend
// (activations rounded to bf16: <= 1e-2, as in matmul_test.cpp). Skips without a CUDA device of compute capability 9.x.
#ifdef FERRY_HAS_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/matmul/skinny_wgmma.cuh"
#include "cuda_test_util.h"

namespace ferry::test {
namespace {

using cuda_ops::WgSkinnyTile;

const char* tile_name(WgSkinnyTile t) {
  return t == WgSkinnyTile::k128x1 ? "k128x1" : t == WgSkinnyTile::k128x2 ? "k128x2" : "k256";
}

class WgSkinnyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (hopper_sm_count() == 0) GTEST_SKIP() << "no compute capability 9.x device";
    gemm_ = std::make_unique<cuda_ops::WgSkinnyGemm>(0);
    ASSERT_TRUE(gemm_->available());
  }
  void TearDown() override {
    for (void* p : {static_cast<void*>(dx_), static_cast<void*>(dw_), static_cast<void*>(dout_)}) {
      if (p != nullptr) {
        EXPECT_EQ(cudaFree(p), cudaSuccess);
      }
    }
    dx_ = dw_ = nullptr;
    dout_ = nullptr;
  }

  // A new problem out (n, rows) = x (n, k) . w (rows, k)^T: random bf16 inputs on the device, the float64
  // reference on the host.
  void make_case(int64_t n, int64_t rows, int64_t k, uint32_t seed) {
    TearDown();
    n_ = n;
    rows_ = rows;
    k_ = k;
    const std::vector<uint16_t> xb = to_bf16_bits(random_floats(size_t(n * k), seed));
    const std::vector<uint16_t> wb = to_bf16_bits(random_floats(size_t(rows * k), seed + 1));
    ref_ = reference_gemm_bf16(xb, wb, n, rows, k);
    ASSERT_CUDA_OK(cudaMalloc(&dx_, xb.size() * 2));
    ASSERT_CUDA_OK(cudaMalloc(&dw_, wb.size() * 2));
    ASSERT_CUDA_OK(cudaMalloc(&dout_, size_t((n + 1) * rows) * 4));  // one guard row past the output
    ASSERT_CUDA_OK(cudaMemcpy(dx_, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
    ASSERT_CUDA_OK(cudaMemcpy(dw_, wb.data(), wb.size() * 2, cudaMemcpyHostToDevice));
  }

  // The current problem with the given tile / splits (null / 0: the plan's).
  void check(const WgSkinnyTile* tile, int splits) {
    const cuda_ops::WgSkinnyPlan plan =
        cuda_ops::make_wg_skinny_plan(n_, rows_, k_, gemm_->num_sms(), tile, splits);
    const cuda_ops::WgSkinnyParams p{.out = dout_, .x = dx_, .w = dw_, .n = n_, .rows = rows_, .k = k_};
    const size_t out_elems = size_t((n_ + 1) * rows_);
    std::vector<float> got[2];
    cudaStream_t stream = nullptr;
    ASSERT_CUDA_OK(cudaStreamCreate(&stream));
    for (int run = 0; run < 2; ++run) {  // run 0 on the legacy stream (no PDL), run 1 on a stream (PDL)
      ASSERT_CUDA_OK(cudaMemset(dout_, 0xFF, out_elems * 4));  // NaN
      gemm_->run(p, plan, run == 0 ? nullptr : stream);
      ASSERT_CUDA_OK(cudaDeviceSynchronize());
      got[run].resize(out_elems);
      ASSERT_CUDA_OK(cudaMemcpy(got[run].data(), dout_, out_elems * 4, cudaMemcpyDeviceToHost));
    }
    ASSERT_CUDA_OK(cudaStreamDestroy(stream));
    const std::string what = "n=" + std::to_string(n_) + " " + std::to_string(rows_) + "x" + std::to_string(k_) +
                             " " + tile_name(plan.tile) + " splits=" + std::to_string(plan.splits) +
                             (tile == nullptr && splits == 0 ? " (plan)" : "");
    expect_two_runs_match(got, size_t(n_ * rows_), ref_, 1e-5, what);
  }

  std::unique_ptr<cuda_ops::WgSkinnyGemm> gemm_;
  int64_t n_ = 0, rows_ = 0, k_ = 0;
  std::vector<float> ref_;
  uint16_t* dx_ = nullptr;
  uint16_t* dw_ = nullptr;
  float* dout_ = nullptr;
};

TEST_F(WgSkinnyTest, EveryTokenCountOnRaggedShapes) {
  // 200 x 520: rows not a multiple of 128 (the k256 tile's second half and part of an m64 empty), k = 8 stages
  // + 8 (a tail stage of one 16-byte chunk, the rest zeros); 1001 x 1096: odd rows (scalar stores), 8 row tiles
  // of 128, k = 17 stages + 8 (the tail inside the last split).
  const WgSkinnyTile tiles[3] = {WgSkinnyTile::k128x1, WgSkinnyTile::k128x2, WgSkinnyTile::k256};
  uint32_t seed = 10;
  for (const int64_t n : {1, 33, 40, 57, 64, 100, 128, 129, 200, 255, 256}) {
    make_case(n, 200, 520, seed++);
    for (const WgSkinnyTile& t : tiles) {
      if (n <= cuda_ops::wg_skinny_tile_max_tokens(t)) check(&t, 1);
    }
    check(&tiles[1], 3);
    make_case(n, 1001, 1096, seed++);
    check(nullptr, 0);
    for (const WgSkinnyTile& t : tiles) {
      if (n <= cuda_ops::wg_skinny_tile_max_tokens(t)) check(&t, 8);
    }
  }
}

TEST_F(WgSkinnyTest, PlansOfModelShapes) {
  // The plan's own tile and splits on shapes of the 8B model's size class (kept small enough for a CPU
  // reference): 1024 x 4096 and 1536 x 4096 (8 and 12 row tiles of 128: 8 splits); 5000 x 512 (40 row tiles, 2
  // splits: the k of 8 stages caps them). Then every split count 2..8 (uneven shares of the reduction).
  uint32_t seed = 100;
  for (const int64_t n : {40, 64, 128, 200}) {
    make_case(n, 1024, 4096, seed++);
    check(nullptr, 0);
    make_case(n, 1536, 4096, seed++);
    check(nullptr, 0);
    make_case(n, 5000, 512, seed++);
    check(nullptr, 0);
  }
  const WgSkinnyTile t128 = WgSkinnyTile::k128x2, t256 = WgSkinnyTile::k256;
  make_case(72, 384, 2048, seed++);
  for (const int s : {2, 3, 4, 5, 6, 7, 8}) check(&t128, s);
  check(&t256, 5);
  make_case(250, 384, 2048, seed++);
  for (const int s : {2, 7}) check(&t128, s);
}

TEST(WgSkinnyPlan, CoversKWithinTheClusterLimit) {  // host only: runs without a device
  for (const int64_t n : {33, 64, 129, 255}) {
    for (const int64_t k : {8, 64, 520, 4096, 14336}) {
      for (const int64_t rows : {16, 4096, 28672}) {
        const cuda_ops::WgSkinnyPlan p = cuda_ops::make_wg_skinny_plan(n, rows, k, 132);
        EXPECT_GE(p.splits * p.k_per_split, k);
        EXPECT_LT((p.splits - 1) * p.k_per_split, k);
        EXPECT_EQ(p.k_per_split % cuda_ops::kWgSkinnyStageK, 0);
        EXPECT_LE(p.splits, cuda_ops::kWgSkinnyMaxSplits);
        EXPECT_LE(n, cuda_ops::wg_skinny_tile_max_tokens(p.tile));
        EXPECT_EQ(p.row_tiles * cuda_ops::wg_skinny_tile_rows(p.tile) >= rows, true);
      }
    }
  }
  const WgSkinnyTile t256 = WgSkinnyTile::k256;  // no instance past 128 tokens: replaced
  EXPECT_EQ(cuda_ops::make_wg_skinny_plan(200, 4096, 4096, 132, &t256).tile, WgSkinnyTile::k128x2);
  EXPECT_TRUE(cuda_ops::wg_skinny_supports(255, 6144, 4096));
  EXPECT_TRUE(cuda_ops::wg_skinny_supports(256, 6144, 4096));
  EXPECT_FALSE(cuda_ops::wg_skinny_supports(257, 6144, 4096));
  EXPECT_FALSE(cuda_ops::wg_skinny_supports(64, 6144, 4100));  // k % 8
  EXPECT_FALSE(cuda_ops::wg_skinny_supports(0, 64, 64));
}

TEST(WgSkinnyPlan, ModelShapesGetTheSweepsWinners) {  // host only
  // The plan against the configuration that led the H200 sweep (docs/perf-log.md "## 2026-11-30: the wgmma skinny GEMM", % of 4.30 TB/s)
  // on the shapes the dispatch sends to this kernel; 132 SMs.
  struct Case {
    int64_t n, rows, k;
    WgSkinnyTile tile;
    int splits;
  };
  const Case cases[] = {
      {48, 4096, 4096, WgSkinnyTile::k128x1, 6},     // 59.4% (8 splits, two waves: 41.9%)
      {32, 3072, 4096, WgSkinnyTile::k128x1, 8},     // 52.5% (k128x2/8: 53.1%)
      {64, 28672, 4096, WgSkinnyTile::k128x1, 2},    // 87.9% (1 split: 84.7%)
      {64, 128256, 4096, WgSkinnyTile::k128x1, 1},   // 92.8%
      {64, 4096, 14336, WgSkinnyTile::k256, 6},      // 78.9% (k128x1/6: 75.2%)
      {200, 4096, 4096, WgSkinnyTile::k128x2, 3},    // n = 192: 44.9% (4 splits, two waves: 30.0%)
  };
  for (const Case& c : cases) {
    const cuda_ops::WgSkinnyPlan p = cuda_ops::make_wg_skinny_plan(c.n, c.rows, c.k, 132);
    EXPECT_EQ(p.tile, c.tile) << c.rows << "x" << c.k << " n=" << c.n;
    EXPECT_EQ(p.splits, c.splits) << c.rows << "x" << c.k << " n=" << c.n;
  }
}

// CudaBackend::matmul on BF16 weights at the token counts and shapes matmul_dispatch.h sends to the wgmma skinny
// GEMM (16500 x 264: >= 16384 rows, n = 33..64; 1000 x 4096: n <= 48 on <= 4096 rows with k >= 4096), and one
// it leaves to cuBLASLt (n = 100), against the CPU backend.
class WgSkinnyBackendMatmul : public CudaOpsTest {};

TEST_F(WgSkinnyBackendMatmul, Bf16WeightsAgainstCpu) {
  struct Case {
    int64_t n, n_out, n_in;
  };
  uint32_t seed = 31;
  for (const Case c : {Case{33, 16500, 264}, Case{64, 16500, 264}, Case{40, 1000, 4096}, Case{100, 1000, 4096}}) {
    const std::vector<float> f = random_floats(size_t(c.n_out * c.n_in), seed++, 0.5f);
    std::vector<uint16_t> wq = to_bf16_bits(f);
    const Tensor hw = Tensor::make(DType::BF16, {c.n_out, c.n_in}, wq.data());
    const Tensor gw = gpu_->prepare_weight(hw, keep_);
    const std::vector<float> b = random_floats(size_t(c.n_out), seed++);
    std::vector<float> x = random_floats(size_t(c.n * c.n_in), seed++), ref(size_t(c.n * c.n_out));
    cpu_.matmul(host(DType::F32, {c.n, c.n_out}, ref), host(DType::F32, {c.n, c.n_in}, x), hw,
                Tensor::make(DType::F32, {c.n_out}, const_cast<float*>(b.data())));
    const Tensor out = poisoned({c.n, c.n_out});
    gpu_->matmul(out, upload(DType::F32, {c.n, c.n_in}, x), gw, upload(DType::F32, {c.n_out}, b));
    const double err = rel_l2(download(out), ref);
    EXPECT_LE(err, 1e-2) << "n=" << c.n << " " << c.n_out << "x" << c.n_in;
    std::printf("  backend BF16 n=%-4ld %ldx%ld +bias  rel L2 %.2e\n", long(c.n), long(c.n_out), long(c.n_in), err);
  }
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
