// The wgmma skinny GEMM's plan (skinny_wgmma.cuh): which block tile, how many K splits.
//
// Measured on one H200 (wgmma_skinny_bench sweep, 2026-11-30; docs/perf-log.md "## 2026-11-30: the wgmma skinny GEMM"; % of 4.30 TB/s):
//  - Splits: a launch must fit in one wave. The device holds 264 blocks of the two-per-SM instances in clusters
//    of 1-2, 248 in clusters of 4 and 240 in clusters of 8 (cudaOccupancyMaxActiveClusters: a cluster must fit
//    in one GPC); 132 / 132 / 120 / 120 of the one-per-SM instances. Crossing that line costs a second wave:
//    4096 x 4096, n = 64, k128x1: 6 splits (192 blocks) 57.1%, 8 splits (256 > 240) 41.0%; n = 255 (one per
//    SM): 3 splits (96 blocks) 39.6%, 4 (128 > 120) 25.6%. Below the line, more blocks is better (4 splits
//    54.3%). Hence: the most splits of {1, 2, 3, 4, 6, 8} with row tiles x splits <= slots (splits <= 2) or
//    <= 0.9 slots (clusters of 3 and more), slots = SMs x blocks per SM of the instance.
//  - One exception: where the row tiles alone fill one wave of two-per-SM blocks unevenly (28672 x 4096: 224
//    blocks on 264 slots, 92 SMs with two and 40 with one), two splits (448 blocks, 1.7 waves) were better:
//    n = 48, 88.9% (k128x2) / 87.8% (k128x1) against 84.7% with one split.
//  - Tiles: k128x1 and k128x2 were within 2% of each other up to n = 64 (k128x1 ahead on the split shapes:
//    4096 x 4096 n = 64, 6 splits: 57.1% vs 54.8%); k256 (one per SM, 160 KB of weights in flight per SM, half
//    the x traffic per weight byte) led on long k and, from n = 65, on many rows: 4096 x 14336 n = 64 k256/6
//    78.9% vs k128x1/6 75.2%; 128256 x 4096 n = 96 k256/1 88.1% vs k128x2/1 82.4%; 4096 x 2048 n = 96 k256
//    31.4% vs k128x2 33.8%. Hence k256 when n <= 128 and (k >= 7168, or n > 64 and rows >= 14336); else
//    k128x1 up to n = 64 and k128x2 above.
// Worked examples (132 SMs): 4096 x 4096 n = 64: k128x1, 32 row tiles, 6 splits (192 <= 237.6 blocks; 8 would
// be 256). 6144 x 4096 n = 64: 48 tiles -> 4 splits (192; 6 would be 288). 3072 x 4096: 24 tiles -> 8 (192).
// 14336 x 4096: 112 tiles -> 2 (224 <= 264). 28672 x 4096 n <= 64: 224 tiles -> 1, the exception -> 2.
// 4096 x 14336 n <= 128: k256, 16 tiles -> 6 (96 <= 118.8; 8 would be 128). 4096 x 4096 n = 200: k128x2 one
// per SM, 32 tiles -> 3 (96; 4 would be 128).
#include <algorithm>

#include "backends/cuda/matmul/skinny_wgmma.cuh"

namespace ferry::cuda_ops {

namespace {

constexpr int64_t kMinStagesPerSplit = 4;
constexpr int kSplitCandidates[] = {1, 2, 3, 4, 6, 8};  // the counts the sweep measured

// Blocks of one instance an SM holds (shared memory; skinny_wgmma.cu's Instance table).
int64_t blocks_per_sm(WgSkinnyTile tile, int64_t n) {
  if (tile == WgSkinnyTile::k256) return 1;
  return wg_skinny_n_tile(n) <= 128 ? 2 : 1;
}

WgSkinnyTile default_tile(int64_t n, int64_t rows, int64_t k) {
  if (n <= 128 && (k >= 7168 || (n > 64 && rows >= 14336))) return WgSkinnyTile::k256;
  return n <= 64 ? WgSkinnyTile::k128x1 : WgSkinnyTile::k128x2;
}

// The most splits that keep the launch in one wave (see above); at least 1.
int64_t default_splits(int64_t row_tiles, int64_t slots, int64_t blocks_per_sm, int64_t max_splits) {
  int64_t best = 1;
  for (const int s : kSplitCandidates) {
    if (s > max_splits) break;
    const double capacity = double(slots) * (s <= 2 ? 1.0 : 0.9);  // clusters of 3+ fit fewer blocks per GPC
    if (double(row_tiles * s) <= capacity) best = s;
  }
  if (best == 1 && blocks_per_sm == 2 && row_tiles <= slots && max_splits >= 2) best = 2;  // 28672 x 4096
  return best;
}

}  // namespace

bool wg_skinny_supports(int64_t n, int64_t rows, int64_t k) {
  return n >= 1 && n <= kWgSkinnyMaxTokens && rows >= 1 && rows < (int64_t(1) << 31) && k >= 8 && k % 8 == 0 &&
         k < (int64_t(1) << 31) && (rows + 127) / 128 <= 65535;
}

WgSkinnyPlan make_wg_skinny_plan(int64_t n, int64_t rows, int64_t k, int num_sms, const WgSkinnyTile* force_tile,
                                 int force_splits) {
  WgSkinnyPlan plan;
  plan.tile = force_tile ? *force_tile : default_tile(n, rows, k);
  if (n > wg_skinny_tile_max_tokens(plan.tile)) plan.tile = WgSkinnyTile::k128x2;
  const int64_t bm = wg_skinny_tile_rows(plan.tile);
  plan.row_tiles = (rows + bm - 1) / bm;
  const int64_t k_stages = (k + kWgSkinnyStageK - 1) / kWgSkinnyStageK;
  const int64_t per_sm = blocks_per_sm(plan.tile, n);
  const int64_t slots = int64_t(std::max(num_sms, 1)) * per_sm;
  int64_t splits = force_splits > 0
                       ? force_splits
                       : default_splits(plan.row_tiles, slots, per_sm, std::max<int64_t>(1, k_stages / kMinStagesPerSplit));
  splits = std::clamp<int64_t>(splits, 1, std::min<int64_t>(kWgSkinnyMaxSplits, k_stages));
  const int64_t stages_per_split = (k_stages + splits - 1) / splits;
  plan.splits = int((k_stages + stages_per_split - 1) / stages_per_split);  // no empty split
  plan.k_per_split = stages_per_split * kWgSkinnyStageK;
  return plan;
}

}  // namespace ferry::cuda_ops
