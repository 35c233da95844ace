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
  int group_m = 8;     // tile rows per group of the tile order
  int64_t tiles = 0;   // output tiles
  int grid = 0;        // persistent blocks: min(tiles, SMs)
};

inline int64_t gemm_tiles(int64_t m, int64_t n, int block_n) {
  return ((m + 127) / 128) * ((n + block_n - 1) / block_n);
}

inline GemmPlan make_gemm_plan(int64_t m, int64_t n, int num_sms, const GemmTile* force = nullptr) {
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
  p.block_n = tile == GemmTile::k128x256 ? 256 : tile == GemmTile::k128x192 ? 192 : 128;
  p.tiles = gemm_tiles(m, n, p.block_n);
  p.grid = int(p.tiles < num_sms ? p.tiles : num_sms);
  return p;
}

}  // namespace ferry::cuda_ops
