// The skinny GEMM's plan (skinny_mma.cuh): which block tile, how many K splits.
//
// Measured on one H200 (skinny_gemm_bench, 2026-11-30; docs/perf-log.md "## 2026-11-30: the mma.sync skinny GEMM"): the 128-row tile
// (4 warps, up to two blocks per SM) beat the 256-row tile (8 warps, one per SM) on every split shape, and
// the best split count put about 1.5 blocks per SM on the device, not 1 or 2:
//   6144 x 4096:  48 row tiles -> best 4 splits (192 blocks); n = 8: 77.7% of 4.30 TB/s (256-row plan: 53.5%)
//   4096 x 4096:  32 row tiles -> best 6 splits (192 blocks); n = 8: 71.2% (256-row, 8 splits: 46.3%)
//   3072 x 4096:  24 row tiles -> best 8 splits (192 blocks); n = 8: 63.1%
//   14336 x 4096: 112 row tiles -> best 2 splits (224 blocks); n = 8: 88.4%
//   28672 x 4096: 224 row tiles -> 1 split; 128256 x 4096: 1002 row tiles -> 1 split.
// Hence splits = round(1.5 * SMs / row tiles), clamped to 1..8 (the portable cluster size) and to at least
// kMinStagesPerSplit stages of 64 k per split, so the ring's prologue is amortized.
#include <algorithm>

#include "backends/cuda/matmul/skinny_mma.cuh"

namespace ferry::cuda_ops {

namespace {

constexpr int64_t kMinStagesPerSplit = 4;
constexpr int64_t kTargetBlocksPerSmX2[2] = {2, 3};  // twice the blocks per SM aimed at: 256-row tile, 128-row tile

}  // namespace

bool skinny_gemm_supports(int64_t n, int64_t rows, int64_t k) {
  return n >= kSkinnyMinTokens && n <= kSkinnyMaxTokens && rows >= 1 && k >= 8 && k % 8 == 0 &&
         k < (int64_t(1) << 31) && (rows + 127) / 128 <= 65535 && rows < (int64_t(1) << 31);
}

SkinnyPlan make_skinny_plan(int64_t n, int64_t rows, int64_t k, int num_sms, const SkinnyTile* force_tile,
                            int force_splits) {
  SkinnyPlan plan;
  plan.tile = force_tile ? *force_tile : SkinnyTile::k128;
  const int64_t bm = skinny_tile_rows(plan.tile);
  plan.row_tiles = (rows + bm - 1) / bm;
  const int64_t k_stages = (k + kSkinnyStageK - 1) / kSkinnyStageK;
  // round(1.5 * SMs / row tiles) for the 128-row tile; round(SMs / row tiles) for the 256-row one (one per SM).
  const int64_t target_blocks = int64_t(std::max(num_sms, 1)) * kTargetBlocksPerSmX2[plan.tile == SkinnyTile::k128];
  int64_t splits = force_splits > 0 ? force_splits : (target_blocks + plan.row_tiles) / (2 * plan.row_tiles);
  if (force_splits <= 0) splits = std::min<int64_t>(splits, std::max<int64_t>(1, k_stages / kMinStagesPerSplit));
  splits = std::clamp<int64_t>(splits, 1, std::min<int64_t>(kSkinnyMaxSplits, k_stages));
  const int64_t stages_per_split = (k_stages + splits - 1) / splits;
  plan.splits = int((k_stages + stages_per_split - 1) / stages_per_split);  // no empty split
  plan.k_per_split = stages_per_split * kSkinnyStageK;
  (void)n;  // the tile and splits do not depend on the token count (measured: the same pick at n = 8..32)
  return plan;
}

}  // namespace ferry::cuda_ops
