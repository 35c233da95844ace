// The grouped GEMM's index math (host and device, so tests/cuda/moe_tile_emulation_test.cpp checks it without a
// GPU): which thread loads what, where a value sits in shared memory, and which lanes read it into which mma.sync
// fragment.
//  - k-tiles: a k-step is the kMoeGemmTileK columns [k0, k0 + kMoeGemmTileK), k0 a multiple of the tile. It is
//    decoded as the chunks k0 / kVals .. + kMoeGemmTileK / kVals, and value (r, j) of chunk c lands at column
//    run_start(c, r) + j - k0 of the tile. For every decoder of matmul/weight_layout.cuh those columns are each of
//    [0, kMoeGemmTileK) exactly once: Q4_K/Q5_K chunk pairs cover 64 aligned columns, Q2_K/Q3_K/Q6_K pairs 128, the
//    others their own contiguous runs. A run starts at a multiple of its store unit (8 bf16, or the whole run when
//    shorter: F32's 4), so each unit is one 16- or 8-byte shared-memory store.
//  - Shared-memory tiles: bf16, one row (a weight row or a slot) per kMoeGemmTileK columns = 256 bytes = 16 chunks
//    of 16 bytes (8 bf16). Chunk c of row r sits at position c ^ (r & 7) of its row (XOR swizzle), so the 8 rows
//    that one ldmatrix phase reads (one 16-byte chunk each, rows 8i .. 8i + 7) fall in 8 distinct bank groups.
//  - Fragments (mma.sync m16n8k16 bf16, "swap AB": weight rows are M, slots are N): warp w owns weight rows
//    16 w .. 16 w + 15 of the block tile; ldmatrix.x4 gives A (lanes 0-15 rows 0-15 at k 0-7, lanes 16-31 rows
//    0-15 at k 8-15: a0..a3) and, from the slot tile, B for two n8 tiles at once (lanes 8q + i: slot i + 8 (q / 2),
//    k 8 (q % 2): b0, b1 of the first n8 tile, then of the second).
#pragma once

#include <cstdint>

#include "backends/cuda/common/launch.cuh"  // FERRY_HD
#include "backends/cuda/moe/moe_experts.cuh"

namespace ferry::cuda_ops {

inline constexpr int kMoeGemmThreads = 256;                       // 8 warps
inline constexpr int kMoeGemmWarpRows = 16;                       // weight rows per warp: one m16 tile
inline constexpr int kMoeRowBytes = kMoeGemmTileK * 2;            // one bf16 tile row of a k-step
inline constexpr int kMoeActQuads = kMoeGemmTileK / 4;            // float4s of one slot's activations a k-step
inline constexpr int kMoeRowThreads = kMoeGemmThreads / kMoeGemmTileN;   // threads loading one weight row: 2
inline constexpr int kMoeSlotThreads = kMoeGemmThreads / kMoeGemmTileM;  // threads loading one slot's row: 4
inline constexpr int kMoeActLoads = kMoeActQuads / kMoeSlotThreads;      // float4s per thread a k-step: 8
static_assert(kMoeGemmThreads / 32 * kMoeGemmWarpRows == kMoeGemmTileN, "the warps' m16 tiles make the block tile");
static_assert(kMoeGemmTileM % 16 == 0, "slots come in pairs of n8 tiles");
static_assert(kMoeGemmThreads % kMoeGemmTileN == 0 && kMoeGemmThreads % kMoeGemmTileM == 0 &&
                  kMoeActQuads % kMoeSlotThreads == 0,
              "every thread loads from one weight row and one slot");

template <class D>
struct MoeTile {
  static constexpr int kChunks = kMoeGemmTileK / D::kVals;  // chunks per row of a k-tile
  static_assert(kMoeGemmTileK % D::kVals == 0, "a k-tile holds whole chunks");
  // Weight chunks per thread a k-step: thread tid's load l is chunk load_chunk(tid, l) of tile row load_row(tid),
  // one row a thread (its pointer stays in registers), neighbouring threads on neighbouring chunks (a warp's load l
  // reads 16 rows x 2 adjacent chunks: whole 32-byte sectors).
  static constexpr int kLoads = kChunks / kMoeRowThreads;
  static_assert(kChunks % kMoeRowThreads == 0, "weight loads spread evenly");
  // Values per shared-memory store: 8 bf16 (16 bytes), or a whole run when it is shorter.
  static constexpr int kStoreVals = D::kRunLen < 8 ? D::kRunLen : 8;
  static_assert(D::kRunLen % kStoreVals == 0, "a run is whole store units");

  FERRY_HD static inline int64_t chunk(int64_t k0, int cc) { return k0 / D::kVals + cc; }
  // The tile column of value (r, j) of the tile's chunk cc.
  FERRY_HD static inline int column(int64_t k0, int cc, int r, int j) {
    return int(D::run_start(chunk(k0, cc), r) + j - k0);
  }
  FERRY_HD static inline int load_row(int tid) { return tid / kMoeRowThreads; }
  FERRY_HD static inline int load_chunk(int tid, int l) { return l * kMoeRowThreads + tid % kMoeRowThreads; }
};

// Thread tid's activation load l: float4 moe_act_quad(tid, l) (columns 4 q .. 4 q + 3 of the k-step) of tile slot
// moe_act_slot(tid): one slot a thread, its 4 threads on 64 contiguous bytes a load.
FERRY_HD inline int moe_act_slot(int tid) { return tid / kMoeSlotThreads; }
FERRY_HD inline int moe_act_quad(int tid, int l) { return l * kMoeSlotThreads + tid % kMoeSlotThreads; }

// Byte offset of bf16 value (row, col) in a swizzled tile (weight rows or slots, kMoeGemmTileK columns).
FERRY_HD inline uint32_t moe_smem_offset(int row, int col) {
  return uint32_t(row) * kMoeRowBytes + (uint32_t((col >> 3) ^ (row & 7)) << 4) + uint32_t(col & 7) * 2;
}

// The tile row and column whose 16-byte chunk lane gives to ldmatrix.x4.
struct MoeLaneRow {
  int row, col;
};
// A: the warp's 16 weight rows from r0, the k16 step kk of the k-step. Steps kk and kk + 4 are 64 columns = 128
// bytes apart (chunk bit 3 is not swizzled), so a lane keeps the offsets of steps 0..3 and adds 128.
FERRY_HD inline MoeLaneRow moe_a_lane(int r0, int kk, int lane) { return {r0 + (lane & 15), 16 * kk + 8 * (lane >> 4)}; }
// B: tile slots m0 .. m0 + 15 (two n8 tiles), the k16 step kk (m0 a multiple of 16: pair p is 16 p rows = 4096 bytes
// past pair 0, the swizzle the same).
FERRY_HD inline MoeLaneRow moe_b_lane(int m0, int kk, int lane) {
  const int q = lane >> 3;
  return {m0 + (lane & 7) + 8 * (q >> 1), 16 * kk + 8 * (q & 1)};
}
// Accumulator element i (0..3) of lane's m16n8 fragment: its row of the m16 tile and its slot of the n8 tile.
FERRY_HD inline int moe_acc_row(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
FERRY_HD inline int moe_acc_slot(int lane, int i) { return 2 * (lane & 3) + (i & 1); }
// The byte offset of lane's ldmatrix row for k16 step kk, from the offsets of steps 0..3 (see moe_a_lane).
FERRY_HD inline uint32_t moe_step_offset(const uint32_t (&first4)[4], int kk) {
  return first4[kk & 3] + uint32_t(kk >> 2) * 128;
}

}  // namespace ferry::cuda_ops
