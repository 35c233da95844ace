// The wgmma skinny GEMM's persistent, evenly split schedule ("stream-K"): out (n, rows) f32 = x (n, k) bf16 .
// w (rows, k) bf16^T, the same operation, operands and math as WgSkinnyGemm (wgmma_skinny.cuh), another grid.
//
// Why: the cluster-split plan runs row tiles x splits blocks, and a cluster must fit in one GPC, so at 4096 x 4096
// (32 row tiles) 8 splits do not fit one wave (256 > 240 blocks) and 6 splits put 192 blocks on 132 SMs: the SMs
// with two blocks carry 21 stages against a mean of 15.5 (a ~73% ceiling; docs/perf-log.md "## wgskinny").
// Here the work is a flat list of units (row tile t, 64-k stage s), tile-major (unit t x k_stages + s), and a
// grid of one block per SM takes equal contiguous shares of it: block b owns units [U b / G, U (b + 1) / G).
// 4096 x 4096: 2048 units on 132 SMs, 15 or 16 each (97% balance), in one wave by construction.
//
// Kernel (wgmma_skinny_persist.cu): one block per SM (about 195 KB of shared memory: a ring of 192 KB at every
// n_tile), 288 threads: a producer warp streams the block's units through the ring without draining it at tile
// boundaries; two consumer warpgroups (one m64 of the 128-row tile each) run wgmma m64n{n_tile}k16 as the cluster
// kernel does. A block's share crosses at most a few tiles; each (block, tile) piece is a segment:
//  - a segment that is a whole tile stores its accumulators straight to out;
//  - a segment of a tile shared by p blocks (p = the tile's participants, the blocks whose shares meet it) writes
//    its partial (128 rows x n_tile f32, in the accumulator fragment's own order: coalesced float4 stores) to a
//    workspace slot and increments the tile's counter (release). At its end every block, for each shared tile
//    it took part in, waits (one thread, acquire) until all p partials are in, then sums its 1/p slice of the tile
//    over the p partials in participant order (first block first) and stores it to out. The fixed order makes
//    the result deterministic (bit-identical repeats); the slices spread the reduction over the participants
//    instead of one block reading p - 1 partials. Then it increments the counter again; the participant that
//    takes it to 2p sets it back to 0, so the workspace's counters are zero again after every launch.
//  Every block publishes all of its partials before it waits for anything, and the grid is at most one block per
//  SM, so every block of the grid is resident together and the waits cannot deadlock.
//
// Host-compilable (no device code): the harnesses and tests include it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/wgmma_skinny.cuh"

namespace ferry::cuda_ops {

inline constexpr int kWgPersistTileRows = 128;  // rows of a row tile (two consumer warpgroups of one m64 each)

// How one call runs: n_tile, the flat unit list and the grid that shares it.
struct WgPersistPlan {
  int n_tile = 64;         // wgmma N: wg_skinny_n_tile(n)
  int64_t row_tiles = 0;   // ceil(rows / 128)
  int64_t k_stages = 0;    // ceil(k / 64)
  int64_t units = 0;       // row_tiles x k_stages
  int grid = 0;            // blocks: min(SMs, units), one per SM
};

// The plan on a device of `num_sms` SMs (tests pass fewer to force other partitions; run() takes any grid up to
// the device's SM count).
WgPersistPlan make_wg_persist_plan(int64_t n, int64_t rows, int64_t k, int num_sms);

// Partition math, shared by the kernel and the host tests. Units [unit_begin(b), unit_begin(b + 1)) are block b's;
// every share is non-empty when grid <= units.
__host__ __device__ inline int64_t wg_persist_unit_begin(int64_t units, int grid, int64_t b) {
  return units * b / grid;
}
// The block whose share holds unit u (0 <= u < units): the b with unit_begin(b) <= u < unit_begin(b + 1).
__host__ __device__ inline int wg_persist_block_of(int64_t units, int grid, int64_t u) {
  return int(((u + 1) * grid + units - 1) / units - 1);
}
// Workspace slot of block b's segment of tile t: 2b for the first tile of b's share, 2b + 1 for its last (a share
// meets at most two shared tiles: the ones at its two ends; tiles wholly inside it are not shared).
__host__ __device__ inline int64_t wg_persist_slot(int b, bool last_tile_of_share) {
  return 2 * int64_t(b) + (last_tile_of_share ? 1 : 0);
}

// The workspace a plan needs: row_tiles uint32 counters (rounded up to 256 bytes), then 2 x grid partial slots
// of 128 x n_tile f32. The caller zeroes it once (cudaMemset) before its first use; every completed launch leaves
// the counters at zero again, so it is reused by later launches of any plan it is large enough for. One workspace
// serves one launch at a time (one stream, or calls ordered on the device); a launch that fails part-way leaves
// it unusable until zeroed again. At 4096 rows, n_tile 64, 132 SMs: 8.7 MB.
size_t wg_persist_workspace_bytes(const WgPersistPlan& plan);

class WgSkinnyPersistGemm {
 public:
  // As WgSkinnyGemm's constructor: available() only on compute capability 9.x with the tensor-map encoder.
  explicit WgSkinnyPersistGemm(int device);

  bool available() const { return encode_ != nullptr; }
  int num_sms() const { return num_sms_; }

  // One launch on `stream` (PDL when the stream is not the legacy default stream; no allocation, no host
  // synchronisation: capturable in a CUDA graph). workspace: wg_persist_workspace_bytes(plan) bytes, 256-byte
  // aligned, zeroed before its first use (see above). Preconditions (thrown as ferry::Error): available(),
  // wg_skinny_supports, x and w 16-byte aligned, a plan made for this shape with grid <= num_sms().
  void run(const WgSkinnyParams& p, const WgPersistPlan& plan, void* workspace, cudaStream_t stream) const;

 private:
  void* encode_ = nullptr;  // PFN_cuTensorMapEncodeTiled
  int num_sms_ = 0;
};

}  // namespace ferry::cuda_ops
