// The wgmma skinny GEMM (wgmma_skinny.cuh) against a float64 CPU reference on random bf16 inputs: token counts
// 33..255 (every n_tile instance 64/128/192/256, partial token tiles included, and the edges 1 and 256), rows
// not a multiple of the 128/256-row tile (nor of 4: scalar stores), k not a multiple of the 64-wide stage, all
// three block tiles, one split, the plan's splits and forced splits of 2..8 (cluster reductions, uneven ones too).
// Inputs are exactly representable in bf16 and the kernel accumulates in fp32, so the only error is fp32
// rounding over k terms: relative L2 <= 1e-5 (k <= 4096: about sqrt(k) x 2^-24 ~ 4e-6 at worst; rounding the
// inputs to bf16 alone would give ~3e-3, so a wrong fragment, swizzle, stage or reduction cannot pass). The
// output has a guard row past its end and is NaN-poisoned first: an unwritten element fails, a write past the
// end is caught. Two runs (legacy stream, then a stream with PDL) must agree bit for bit.
// The persistent schedule (wgmma_skinny_persist.cuh) gets the same checks on its own partitions (the device's SMs
// and fewer, so that shared tiles of 2..18 participants, whole tiles and one-unit shares all occur), plus: its
// workspace counters are zero again after every launch and nothing is written past the workspace.
// Then CudaBackend::matmul on BF16 weights where the dispatch picks this kernel, against the CPU backend
// (activations rounded to bf16: <= 1e-2, as in matmul_test.cpp). Skips without a CUDA device of compute capability 9.x.
#ifdef FERRY_HAS_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/wgmma_skinny.cuh"
#include "backends/cuda/wgmma_skinny_persist.cuh"
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
    persist_ = std::make_unique<cuda_ops::WgSkinnyPersistGemm>(0);
    ASSERT_TRUE(persist_->available());
  }
  void TearDown() override {
    for (void* p : {static_cast<void*>(dx_), static_cast<void*>(dw_), static_cast<void*>(dout_)}) {
      if (p != nullptr) {
        EXPECT_EQ(cudaFree(p), cudaSuccess);
      }
    }
    dx_ = dw_ = nullptr;
    dout_ = nullptr;
    if (ws_ != nullptr) {
      EXPECT_EQ(cudaFree(ws_), cudaSuccess);
    }
    ws_ = nullptr;
    ws_bytes_ = 0;
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

  // The current problem on the persistent schedule with a grid of min(sms, units) blocks (sms <= the device's).
  // The workspace (the plan's bytes, then a guard of kGuard bytes of 0x5A) is zeroed once per problem; after each
  // of the two runs its counters must be zero again and the guard intact.
  void check_persist(int sms) {
    constexpr size_t kGuard = 4096;
    const cuda_ops::WgPersistPlan plan = cuda_ops::make_wg_persist_plan(n_, rows_, k_, sms);
    const size_t need = cuda_ops::wg_persist_workspace_bytes(plan);
    if (ws_ == nullptr || ws_bytes_ != need) {
      if (ws_ != nullptr) {
        ASSERT_CUDA_OK(cudaFree(ws_));
      }
      ASSERT_CUDA_OK(cudaMalloc(&ws_, need + kGuard));
      ws_bytes_ = need;
      ASSERT_CUDA_OK(cudaMemset(ws_, 0, need));
      ASSERT_CUDA_OK(cudaMemset(static_cast<uint8_t*>(ws_) + need, 0x5A, kGuard));
    }
    const cuda_ops::WgSkinnyParams p{.out = dout_, .x = dx_, .w = dw_, .n = n_, .rows = rows_, .k = k_};
    const size_t out_elems = size_t((n_ + 1) * rows_);
    std::vector<float> got[2];
    cudaStream_t stream = nullptr;
    ASSERT_CUDA_OK(cudaStreamCreate(&stream));
    for (int run = 0; run < 2; ++run) {  // run 0 on the legacy stream (no PDL), run 1 on a stream (PDL)
      ASSERT_CUDA_OK(cudaMemset(dout_, 0xFF, out_elems * 4));  // NaN
      persist_->run(p, plan, ws_, run == 0 ? nullptr : stream);
      ASSERT_CUDA_OK(cudaDeviceSynchronize());
      got[run].resize(out_elems);
      ASSERT_CUDA_OK(cudaMemcpy(got[run].data(), dout_, out_elems * 4, cudaMemcpyDeviceToHost));
      std::vector<uint32_t> counters(size_t(plan.row_tiles));
      ASSERT_CUDA_OK(cudaMemcpy(counters.data(), ws_, counters.size() * 4, cudaMemcpyDeviceToHost));
      size_t nonzero = 0;
      for (const uint32_t v : counters) nonzero += v != 0;
      EXPECT_EQ(nonzero, 0u) << "counters left non-zero after run " << run;
      std::vector<uint8_t> guard(kGuard);
      ASSERT_CUDA_OK(cudaMemcpy(guard.data(), static_cast<uint8_t*>(ws_) + need, kGuard, cudaMemcpyDeviceToHost));
      size_t changed = 0;
      for (const uint8_t g : guard) changed += g != 0x5A;
      EXPECT_EQ(changed, 0u) << "a write past the workspace in run " << run;
    }
    ASSERT_CUDA_OK(cudaStreamDestroy(stream));
    const std::string what = "persist n=" + std::to_string(n_) + " " + std::to_string(rows_) + "x" +
                             std::to_string(k_) + " grid=" + std::to_string(plan.grid) + " units=" +
                             std::to_string(plan.units);
    expect_two_runs_match(got, size_t(n_ * rows_), ref_, 1e-5, what);
  }

  std::unique_ptr<cuda_ops::WgSkinnyGemm> gemm_;
  std::unique_ptr<cuda_ops::WgSkinnyPersistGemm> persist_;
  void* ws_ = nullptr;
  size_t ws_bytes_ = 0;
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

TEST_F(WgSkinnyTest, PersistentEveryTokenCountOnRaggedShapes) {
  // 1001 x 1096: 8 row tiles x 18 stages = 144 units on the device's SMs (132 on an H200: shares of 1-2 units,
  // tiles shared by up to 18 blocks) and on 7 (shares of 20-21: whole tiles and shared ones); 200 x 520: 2 tiles
  // x 9 stages, one unit a block (the second tile half past the rows, k's last stage one 16-byte chunk).
  const int sms = persist_->num_sms();
  uint32_t seed = 300;
  for (const int64_t n : {33, 40, 47, 55, 57, 64, 1, 65, 128, 129, 200, 255, 256}) {
    make_case(n, 1001, 1096, seed++);
    check_persist(sms);
    check_persist(7);
    make_case(n, 200, 520, seed++);
    check_persist(sms);
  }
}

TEST_F(WgSkinnyTest, PersistentModelSizedShapes) {
  // 1024 / 1536 x 4096 (8 / 12 row tiles x 64 stages on the device's SMs: shares of ~4-6 stages, 11-17 blocks a
  // tile), 5000 x 520 (40 tiles x 9 stages: 360 units, shares of 2-3) and 3000 x 2056 on 31 blocks (24 x 33 = 792
  // units, shares of 25-26: a share covers parts of two tiles).
  const int sms = persist_->num_sms();
  uint32_t seed = 400;
  for (const int64_t n : {40, 56, 64, 100}) {
    make_case(n, 1024, 4096, seed++);
    check_persist(sms);
    make_case(n, 1536, 4096, seed++);
    check_persist(sms);
    make_case(n, 5000, 520, seed++);
    check_persist(sms);
    make_case(n, 3000, 2056, seed++);
    check_persist(31);
  }
}

TEST(WgPersistPlan, SharesPartitionTheUnits) {  // host only
  // Every unit in exactly one share, block_of inverts unit_begin, and the workspace slot of a (block, shared tile)
  // is unique: a share meets shared tiles only at its two ends.
  for (const int64_t rows : {16, 200, 1001, 4096, 6144, 28672}) {
    for (const int64_t k : {8, 520, 1096, 4096, 14336}) {
      for (const int sms : {1, 7, 31, 132}) {
        const cuda_ops::WgPersistPlan plan = cuda_ops::make_wg_persist_plan(64, rows, k, sms);
        ASSERT_EQ(plan.units, plan.row_tiles * plan.k_stages);
        ASSERT_EQ(plan.grid, int(std::min<int64_t>(sms, plan.units)));
        ASSERT_EQ(cuda_ops::wg_persist_unit_begin(plan.units, plan.grid, 0), 0);
        ASSERT_EQ(cuda_ops::wg_persist_unit_begin(plan.units, plan.grid, plan.grid), plan.units);
        std::vector<int> slot_uses(size_t(2 * plan.grid), 0);
        for (int b = 0; b < plan.grid; ++b) {
          const int64_t u0 = cuda_ops::wg_persist_unit_begin(plan.units, plan.grid, b);
          const int64_t u1 = cuda_ops::wg_persist_unit_begin(plan.units, plan.grid, b + 1);
          ASSERT_LT(u0, u1) << "an empty share";
          for (const int64_t u : {u0, (u0 + u1) / 2, u1 - 1}) {
            ASSERT_EQ(cuda_ops::wg_persist_block_of(plan.units, plan.grid, u), b) << "unit " << u;
          }
          const int64_t t0 = u0 / plan.k_stages, t1 = (u1 - 1) / plan.k_stages;
          for (int64_t t = t0; t <= t1; ++t) {
            const int first = cuda_ops::wg_persist_block_of(plan.units, plan.grid, t * plan.k_stages);
            const int last = cuda_ops::wg_persist_block_of(plan.units, plan.grid, (t + 1) * plan.k_stages - 1);
            ASSERT_LE(first, b);
            ASSERT_GE(last, b);
            if (first == last) continue;
            ASSERT_TRUE(t == t0 || t == t1) << "a shared tile inside a share";
            ++slot_uses[size_t(cuda_ops::wg_persist_slot(b, t != t0))];
            if (b > first) {
              ASSERT_EQ(t, t0) << "a later participant's share starts inside the tile";
            }
          }
        }
        for (const int u : slot_uses) ASSERT_LE(u, 1);
        const size_t ws = cuda_ops::wg_persist_workspace_bytes(plan);
        EXPECT_GE(ws, size_t(plan.row_tiles) * 4 + size_t(2 * plan.grid) * 128 * 64 * 4);
      }
    }
  }
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
  // The plan against the configuration that led the H200 sweep (docs/perf-log.md "## wgskinny", % of 4.30 TB/s)
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
