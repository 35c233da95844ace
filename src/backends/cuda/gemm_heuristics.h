// Tile shape and tile order of the Hopper GEMM (gemm_sm90.cu) for one problem. Host-only, no CUDA headers.
//
// The kernel computes out (m, n) = x (m, k) . w (n, k)^T in output tiles of kBlockM = 128 rows (two consumer
// warpgroups of 64 rows each) by block_n = 128 or 256 columns, one tile at a time per persistent block
// (grid = min(tiles, SMs)). A 128 x 256 tile does twice the math per byte of shared memory read of a
// 128 x 128 tile (each wgmma m64n256k16 reads the same A slice as an n128 one), so it is preferred unless it
// leaves SMs idle: the cost of a choice is (waves of tiles) x (time of one tile), with a 128 x 128 tile
// taken as 0.55 of a 128 x 256 tile (half the math, plus its lower efficiency).
//
// Worked examples on an H200 (132 SMs):
//  - m = 512, n = 4096: 128x256 -> 4 x 16 = 64 tiles, 1 wave, cost 1.00; 128x128 -> 4 x 32 = 128 tiles,
//    1 wave, cost 0.55 -> 128x128 (the 256 tiling would leave 68 SMs idle).
//  - m = 512, n = 28672: 128x256 -> 4 x 112 = 448 tiles, 4 waves (3.39 rounded up), cost 4.00; 128x128 ->
//    896 tiles, 7 waves (6.79), cost 3.85 -> 128x128, by a hair; both leave the last wave partly empty.
//  - m = 4096, n = 4096: 128x256 -> 32 x 16 = 512 tiles, 4 waves (3.88), cost 4.00; 128x128 -> 1024 tiles,
//    8 waves (7.76), cost 4.40 -> 128x256.
//  - m = 8192, n = 28672: 128x256 -> 64 x 112 = 7168 tiles, 55 waves (54.3), cost 55; 128x128: 109 waves,
//    cost 59.95 -> 128x256.
// Tile order: tiles are walked in groups of group_m tile rows (m-fastest inside a group), so the blocks of
// one wave share a few rows of x and a few column blocks of w in L2 instead of streaming all of x per
// column block. group_m = 8 row tiles = 1024 rows of x.
#pragma once

#include <cstdint>

namespace ferry::cuda_ops {

enum class GemmTile { k128x128, k128x256 };

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
    const double cost128 = waves(gemm_tiles(m, n, 128)) * 0.55;
    tile = cost128 < cost256 ? GemmTile::k128x128 : GemmTile::k128x256;
  }
  GemmPlan p;
  p.tile = tile;
  p.block_n = tile == GemmTile::k128x256 ? 256 : 128;
  p.tiles = gemm_tiles(m, n, p.block_n);
  p.grid = int(p.tiles < num_sms ? p.tiles : num_sms);
  return p;
}

}  // namespace ferry::cuda_ops
