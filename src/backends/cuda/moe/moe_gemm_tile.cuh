// The grouped GEMM's k-tile index math (host and device, so tests/cuda/moe_tile_emulation_test.cpp checks it
// without a GPU): a k-tile is the kMoeGemmTileK columns [k0, k0 + kMoeGemmTileK), k0 a multiple of the tile. It is
// decoded as the chunks k0 / kVals .. + kMoeGemmTileK / kVals, and value (r, j) of chunk c lands at column
// run_start(c, r) + j - k0 of the tile. For every decoder of matmul/weight_layout.cuh those columns are each of
// [0, kMoeGemmTileK) exactly once: Q4_K/Q5_K chunk pairs cover 64 aligned columns, Q6_K's pairs 128, the others
// their own contiguous runs.
#pragma once

#include <cstdint>

#include "backends/cuda/common/launch.cuh"  // FERRY_HD
#include "backends/cuda/moe/moe_experts.cuh"

namespace ferry::cuda_ops {

template <class D>
struct MoeTile {
  static constexpr int kChunks = kMoeGemmTileK / D::kVals;  // chunks per row of a k-tile
  static_assert(kMoeGemmTileK % D::kVals == 0, "a k-tile holds whole chunks");
  FERRY_HD static inline int64_t chunk(int64_t k0, int cc) { return k0 / D::kVals + cc; }
  // The tile column of value (r, j) of the tile's chunk cc.
  FERRY_HD static inline int column(int64_t k0, int cc, int r, int j) {
    return int(D::run_start(chunk(k0, cc), r) + j - k0);
  }
};

}  // namespace ferry::cuda_ops
