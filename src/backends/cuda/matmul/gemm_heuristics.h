// Tile shape and tile order of the Hopper GEMM (gemm_sm90.cu) for one problem. Host-only, no CUDA headers.
//
// The kernel computes out (m, n) = x (m, k) . w (n, k)^T in output tiles of kBlockM = 128 rows (two consumer
// warpgroups of 64 rows each) by block_n = 128, 192 or 256 columns, one tile at a time per persistent block
// (grid = min(tiles, SMs)). A wider tile does more math per byte of shared memory read (each wgmma
// m64nNk16 reads the same A slice whatever N is), so 256 is preferred unless it leaves SMs idle: the cost
// of a choice is (waves of tiles, rounded up) x (time of one tile), a tile's time taken relative to a
// 128 x 256 one as 0.83 (128 x 192) and 0.54 (128 x 128). Calibrated on the H200 (2026-11-29, gemm_bench,
// one wave each): m = 512, n = 4096: 128x128 469 TFLOP/s vs 128x256 283 (0.60); m = 512, n = 6144: 128x192
// 605 vs 128x256 500 (0.83); over many waves a 128x128 tile ran at about the same rate per flop as a
// 128x256 one (0.50), hence 0.54. A first calibration (0.78 / 0.58) picked 128x192 at m = 512, n = 28672,
// where it ran 589 against 634 for 128x128 (and 547 for 128x256). Wave-quantization is softer than this model (a partial last wave runs
// faster per tile), so choices within ~5% of each other are a coin toss; runs vary by about that much.
//
// Worked examples on an H200 (132 SMs):
//  - m = 512, n = 4096: 256 -> 4 x 16 = 64 tiles, 1 wave, cost 1.00; 192 -> 4 x 22 = 88 tiles, 1 wave,
//    0.83; 128 -> 4 x 32 = 128 tiles, 1 wave, 0.54 -> 128x128 (256 would leave 68 SMs idle).
//  - m = 512, n = 6144: 256 -> 96 tiles, 1 wave, 1.00; 192 -> 4 x 32 = 128 tiles, 1 wave, 0.83; 128 -> 192
//    tiles, 2 waves, 1.08 -> 128x192 (measured: 605 TFLOP/s; 128x256 500, 128x128 497, cuBLASLt 568).
//  - m = 512, n = 28672: 256 -> 448 tiles, 4 waves, 4.00; 192 -> 4 x 150 = 600 tiles, 5 waves, 4.15;
//    128 -> 896 tiles, 7 waves, 3.78 -> 128x128.
//  - m = 1024, n = 6144: 256 -> 192 tiles, 2 waves, 2.00; 192 -> 256 tiles, 2 waves, 1.66; 128 -> 384
//    tiles, 3 waves, 1.62 -> 128x128 (measured 665 vs 677 for 128x192 and 531 for 128x256: a near tie).
//  - m = 4096, n = 4096: 256 -> 32 x 16 = 512 tiles, 4 waves (3.88), 4.00; 192 -> 704 tiles, 6 waves,
//    4.98; 128 -> 1024 tiles, 8 waves, 4.32 -> 128x256.
//  - m = 8192, n = 28672: 256 -> 64 x 112 = 7168 tiles, 55 waves (54.3), 55; 192 -> 9600 tiles, 73 waves,
//    60.6; 128 -> 109 waves, 58.9 -> 128x256.
// Stream-K (GemmPlan::stream_k; gemm_sm90.cu): the (tile, 64-wide k step) walk is cut into `grid` equal contiguous
// shares, one per block, so every SM does the same work. A tile cut between blocks is summed deterministically: the
// block that holds its k = 0 share adds the other shares' partials (left in a fixed workspace by their blocks, whose
// first share it always is) in k order, so the result depends on the shape and plan only, never on timing.
// Measured on one H200 (gemm_bench narrow, 2026-11-30, TFLOP/s, 5 back-to-back calls; "tiles" = the whole-tile plan
// below, skN = stream-K with 128xN tiles over 132 blocks, split = 128x256 tiles each cut into 2..5 equal k ranges):
//                        M    tiles  sk128  sk192  sk256  split  cuBLASLt
//   wo 4096x4096        256   325.7  343.6  374.3  291.5  321.4   423.7
//                       512   603.1  453.6  500.2  457.3  508.6   623.4
//   qkv 6144x4096       256   478.9  376.4  401.8  352.3  384.9   495.1
//                       512   657.7  457.4  529.5  428.1    -     655.7
//   tp2 qkv 3072x4096   256   249.7  301.4  261.5  239.5  254.5   414.9
//                       512   494.9  414.3  401.6  396.2  395.6   603.5
//   tp2 wo 4096x2048    256   291.1  245.6  261.8  199.7  229.0   405.5
//   down 4096x14336     256   406.8  478.8  595.2  393.4  567.5   601.6
//                       512   732.7  530.5  660.6  585.4  714.1   674.6
// So at ~512 tokens whole tiles win everywhere (by 15-35%: the cut tiles' partial stores, reads and restarted
// pipelines cost more than the idle SMs of one partial wave; the one-tile-per-SM wo ran 603 TFLOP/s back to back,
// not the 474 of the serving profile). Stream-K wins only where whole tiles leave at least half the SMs idle and
// the k walk is long: wo and down at M = 256 (64 tiles of 128x128: sk192 1.15x, 1.46x), TP=2 qkv at 256 (48 tiles:
// sk192 1.05x). Rule (stream_k_wins): the whole-tile plan has at most num_sms / 2 tiles, k >= 4096, m >= 256 and
// n >= 3072 (the measured shapes; smaller ones unmeasured) -> stream-K with 128x192 tiles over every SM.
// Worked examples on an H200 (132 SMs): wo at m = 256: 128x128 -> 2 x 32 = 64 tiles <= 66 -> stream-K 128x192,
// 132 blocks, 2 x 22 tiles x 64 steps = 2816 steps, 21-22 each; wo at m = 512: 128 tiles > 66 -> whole 128x128
// tiles; tp2 wo at m = 256: k = 2048 -> whole tiles; qkv at m = 256: 96 tiles of 128x128 -> whole tiles.
// Tile order: tiles are walked in groups of group_m tile rows (m-fastest inside a group), so the blocks of
// one wave share a few rows of x and a few column blocks of w in L2 instead of streaming all of x per
// column block. group_m = 8 row tiles = 1024 rows of x.
#pragma once

#include <cstdint>

namespace ferry::cuda_ops {

enum class GemmTile { k128x128, k128x192, k128x256 };

struct GemmPlan {
  GemmTile tile = GemmTile::k128x256;
  int block_n = 256;
  int group_m = 8;        // tile rows per group of the tile order
  int64_t tiles = 0;      // output tiles
  int grid = 0;           // blocks: min(tiles, SMs), or the stream-K share count
  bool stream_k = false;  // grid equal shares of the (tile, k step) walk instead of whole tiles per block
};

inline int64_t gemm_tiles(int64_t m, int64_t n, int block_n) {
  return ((m + 127) / 128) * ((n + block_n - 1) / block_n);
}

inline int gemm_block_n(GemmTile t) { return t == GemmTile::k128x256 ? 256 : t == GemmTile::k128x192 ? 192 : 128; }

// Whole tiles, one at a time per persistent block: the tile the wave model picks (or `force`).
inline GemmPlan make_tile_plan(int64_t m, int64_t n, int num_sms, const GemmTile* force = nullptr) {
  const auto waves = [&](int64_t tiles) { return double((tiles + num_sms - 1) / num_sms); };
  GemmTile tile = GemmTile::k128x256;
  if (force != nullptr) {
    tile = *force;
  } else {
    const double cost256 = waves(gemm_tiles(m, n, 256)) * 1.0;
    const double cost192 = waves(gemm_tiles(m, n, 192)) * 0.83;
    const double cost128 = waves(gemm_tiles(m, n, 128)) * 0.54;
    tile = GemmTile::k128x256;
    double best = cost256;
    if (cost192 < best) tile = GemmTile::k128x192, best = cost192;
    if (cost128 < best) tile = GemmTile::k128x128;
  }
  GemmPlan p;
  p.tile = tile;
  p.block_n = gemm_block_n(tile);
  p.tiles = gemm_tiles(m, n, p.block_n);
  p.grid = int(p.tiles < num_sms ? p.tiles : num_sms);
  return p;
}

// Stream-K over `units` blocks (at most num_sms: an owner block waits for blocks with higher indices, which must be
// resident; at most tiles x k steps: every share holds at least one k step).
inline GemmPlan make_stream_k_plan(int64_t m, int64_t n, int64_t k, int num_sms, GemmTile tile, int units) {
  GemmPlan p;
  p.tile = tile;
  p.block_n = gemm_block_n(tile);
  p.tiles = gemm_tiles(m, n, p.block_n);
  const int64_t steps = p.tiles * ((k + 63) / 64);
  int64_t g = units < num_sms ? units : num_sms;
  if (g > steps) g = steps;
  if (g < 1) g = 1;
  p.grid = int(g);
  p.stream_k = true;
  return p;
}

// Where stream-K with 128x192 tiles over every SM replaces whole tiles (the table above): whole tiles would leave at
// least half the SMs idle, on a long k walk, at the measured sizes.
inline bool stream_k_wins(int64_t m, int64_t n, int64_t k, int num_sms) {
  return m >= 256 && n >= 3072 && k >= 4096 && 2 * make_tile_plan(m, n, num_sms).tiles <= int64_t(num_sms);
}

// The plan run() uses. force: that tile, whole tiles (batch-invariant mode and the harness's forced columns);
// force_units > 0 with force: stream-K with that tile over that many blocks (tests and the harness).
inline GemmPlan make_gemm_plan(int64_t m, int64_t n, int64_t k, int num_sms, const GemmTile* force = nullptr,
                               int force_units = 0) {
  if (force != nullptr) {
    return force_units > 0 ? make_stream_k_plan(m, n, k, num_sms, *force, force_units)
                           : make_tile_plan(m, n, num_sms, force);
  }
  if (stream_k_wins(m, n, k, num_sms)) return make_stream_k_plan(m, n, k, num_sms, GemmTile::k128x192, num_sms);
  return make_tile_plan(m, n, num_sms);
}

}  // namespace ferry::cuda_ops
