// Host-only (runs without a GPU): the index math of the CUDA MoE kernels.
//  - The grouped GEMM's k-tiles (moe/moe_gemm_tile.cuh): for every decoder, every tile of a row, decoded the way
//    the kernel decodes it (chunks k0 / kVals .., values at MoeTile::column), fills each tile column exactly once
//    with dequantize_row's value at k0 + column; in the last, partial tile of a row (cols not a multiple of the
//    tile) the chunks past the row's end are the columns past it.
//  - moe_max_tiles bounds the tiles moe_group lists (sum over experts of ceil(count / tile rows)) for random and
//    extreme routings.
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/matmul/weight_layout.cuh"
#include "backends/cuda/matmul/weight_repack.h"
#include "backends/cuda/moe/moe_experts.cuh"
#include "backends/cuda/moe/moe_gemm_tile.cuh"
#include "backends/cuda/moe/moe_routing.cuh"
#include "formats/quant.h"
#include "device_layout.h"

namespace ferry::cuda_ops {
namespace {

// Decodes every k-tile of every row as moe_gemm.cu does; checks coverage and values.
void check_tiles(DType t, int64_t rows, int64_t cols) {
  std::mt19937 rng(uint32_t(t) * 7 + uint32_t(cols));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> f(size_t(rows * cols));
  for (float& x : f) x = dist(rng);
  std::vector<uint8_t> gguf(size_t(rows) * row_bytes(t, cols));
  for (int64_t r = 0; r < rows; ++r) quantize_row(t, f.data() + r * cols, gguf.data() + size_t(r) * row_bytes(t, cols), cols);
  const std::vector<uint8_t> dev = device_layout(t, gguf, rows, cols);
  const WeightView w{dev.data(), rows, cols, is_split_type(t) ? scales_offset(t, rows, cols) : 0};
  const bool ok = visit_decoder(t, [&]<class D>() {
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> ref(static_cast<size_t>(cols));
      dequantize_row(t, gguf.data() + size_t(r) * row_bytes(t, cols), ref.data(), cols);
      for (int64_t k0 = 0; k0 < cols; k0 += kMoeGemmTileK) {
        std::vector<int> seen(kMoeGemmTileK, 0);
        std::vector<float> tile(kMoeGemmTileK, NAN);
        for (int cc = 0; cc < MoeTile<D>::kChunks; ++cc) {
          const int64_t c = MoeTile<D>::chunk(k0, cc);
          float v[D::kVals];
          const bool in_row = c < D::chunks(cols);
          if (in_row) D::decode(D::load(w, r, c), v);
          for (int run = 0; run < D::kRuns; ++run)
            for (int j = 0; j < D::kRunLen; ++j) {
              const int col = MoeTile<D>::column(k0, cc, run, j);
              ASSERT_TRUE(col >= 0 && col < kMoeGemmTileK) << dtype_name(t) << " k0 " << k0 << " chunk " << cc;
              ++seen[size_t(col)];
              // a chunk in the row holds columns in the row, a chunk past it columns past it
              ASSERT_EQ(in_row, k0 + col < cols) << dtype_name(t) << " k0 " << k0 << " column " << col;
              tile[size_t(col)] = in_row ? v[run * D::kRunLen + j] : 0.0f;
            }
        }
        for (int col = 0; col < kMoeGemmTileK; ++col) {
          ASSERT_EQ(seen[size_t(col)], 1) << dtype_name(t) << " k0 " << k0 << " column " << col;
          if (k0 + col < cols) {
            const float want = ref[size_t(k0 + col)];
            ASSERT_NEAR(tile[size_t(col)], want, 1e-6f * (1.0f + std::fabs(want)))
                << dtype_name(t) << " row " << r << " column " << k0 + col;
          }
        }
      }
    }
  });
  EXPECT_TRUE(ok) << dtype_name(t);
}

TEST(CudaMoeEmulation, GemmTilesCoverEveryColumnOnceWithItsValue) {
  for (const DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                        DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    check_tiles(t, 3, 768);  // 768 = 6 whole tiles, 3 super-blocks
  // a partial last tile (cols not a multiple of 128): the types whose blocks allow it
  for (const DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q5_1}) {
    check_tiles(t, 2, 64);
    check_tiles(t, 2, 160);
  }
}

TEST(CudaMoeEmulation, MaxTilesBoundsEveryRouting) {
  std::mt19937 rng(5);
  for (const int E : {1, 8, 128, 1024})
    for (const int64_t n_slots : {int64_t(1), int64_t(2), int64_t(31), int64_t(32), int64_t(33), int64_t(600),
                                  int64_t(2400), int64_t(32768)}) {
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<int64_t> count(static_cast<size_t>(E), 0);
        std::uniform_int_distribution<int> pick(0, trial % 3 == 0 ? 0 : E - 1);  // every third: all on one expert
        for (int64_t s = 0; s < n_slots; ++s) ++count[size_t(pick(rng))];
        if (trial == 1)  // as spread as possible
          for (int e = 0; e < E; ++e) count[size_t(e)] = n_slots / E + (e < n_slots % E ? 1 : 0);
        int64_t tiles = 0;
        for (const int64_t c : count) tiles += (c + kMoeGemmTileM - 1) / kMoeGemmTileM;
        EXPECT_LE(tiles, moe_max_tiles(n_slots, E, kMoeGemmTileM)) << "E " << E << " slots " << n_slots;
      }
    }
}

}  // namespace
}  // namespace ferry::cuda_ops

#endif  // FERRY_HAS_CUDA
