// The persistent wgmma skinny GEMM's plan and workspace size (wgmma_skinny_persist.cuh).
//
// Worked examples (132 SMs, n_tile 64; balance = mean share / largest share):
//  4096 x 4096: 32 row tiles x 64 stages = 2048 units, 15-16 a block (97%), a tile shared by 5-6 blocks.
//  6144 x 4096: 48 x 64 = 3072 units, 23-24 (97%), 3-4 blocks a tile.
//  3072 x 4096 (TP=2 qkv): 24 x 64 = 1536 units, 11-12 (97%), 6-7 blocks a tile.
//  28672 x 4096: 224 x 64 = 14336 units, 108-109 (99.6%), a block covers 1-3 tiles, most of them whole.
//  4096 x 14336: 32 x 224 = 7168 units, 54-55 (98.7%).
#include <algorithm>

#include "backends/cuda/wgmma_skinny_persist.cuh"

namespace ferry::cuda_ops {

WgPersistPlan make_wg_persist_plan(int64_t n, int64_t rows, int64_t k, int num_sms) {
  WgPersistPlan plan;
  plan.n_tile = wg_skinny_n_tile(n);
  plan.row_tiles = (rows + kWgPersistTileRows - 1) / kWgPersistTileRows;
  plan.k_stages = (k + kWgSkinnyStageK - 1) / kWgSkinnyStageK;
  plan.units = plan.row_tiles * plan.k_stages;
  plan.grid = int(std::clamp<int64_t>(plan.units, 1, std::max(num_sms, 1)));
  return plan;
}

size_t wg_persist_workspace_bytes(const WgPersistPlan& plan) {
  const size_t counters = (size_t(plan.row_tiles) * 4 + 255) / 256 * 256;
  return counters + 2 * size_t(plan.grid) * kWgPersistTileRows * size_t(plan.n_tile) * 4;
}

}  // namespace ferry::cuda_ops
