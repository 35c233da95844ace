// Bandwidth-bound GEMM for 33..255 tokens on Hopper (sm_90a): out (n, rows) f32 = x (n, k) bf16 . w (rows, k)
// bf16^T, fp32 accumulation. At these token counts a matmul is still bound by the weight read (2n FLOP per
// 2-byte weight element: 64 FLOP/byte at n = 64, ~250 TFLOP/s at 90% of 4.30 TB/s; only from n ~ 200 does the
// tensor-core time per weight byte reach the HBM time per byte).
//
// Kernel (skinny_wgmma.cu), "swap AB" on wgmma: weight rows are wgmma's M (m64 per instruction), tokens its N
// (the instance's n_tile: 64, 128, 192 or 256; tokens n..n_tile-1 arrive as zeros and are never stored).
//  - A block owns a tile of bm weight rows (128 or 256) and one K range. One producer warp issues TMA loads
//    (cp.async.bulk.tensor, 128-byte swizzle) of the weight tile (bm rows x 64 k) and of x (n_tile rows x 64 k)
//    into a ring of shared-memory stages (full/empty mbarriers); weights are issued before pdl_wait() for the
//    first ring's worth of stages, x only after it. The weights carry an L2 evict-first hint (read once).
//  - One or two consumer warpgroups issue wgmma m64n{n_tile}k16 with both operands K-major in shared memory
//    (the descriptors of hopper.cuh), accumulating in registers: tile k128x1 = one warpgroup doing both m64
//    halves of 128 rows; k128x2 = two warpgroups of one m64 each; k256 = two warpgroups of two m64 each.
//  - Split K when the row tiles alone do not fill the SMs: the `splits` blocks of one row tile form a
//    thread-block cluster. Every block writes its partial (n x bm f32, token-major) into its own shared memory
//    (over the drained ring); after a cluster barrier every block sums an equal share of the tile over the
//    cluster's blocks in rank order 0..splits-1 through distributed shared memory and stores it with float4
//    stores. Deterministic (one order for a given shape and plan), no workspace, no second launch, no atomics.
//    Chosen over a fixed-order second pass because that pass would write and re-read splits x n x rows f32
//    (at 4096 x 4096, n = 128, 8 splits: 16 MB against 32 MB of weights) and add a launch per matmul.
//
// Host-compilable (no device code), so cuda_backend.cpp and the harnesses include it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferry::cuda_ops {

inline constexpr int64_t kWgSkinnyMaxTokens = 256;  // the kernel takes n = 1..256 (dispatch: matmul/plan.h)
inline constexpr int kWgSkinnyStageK = 64;          // k values per ring stage (one 128-byte swizzle row of bf16)
inline constexpr int kWgSkinnyMaxSplits = 8;        // portable cluster size

// The block tile. k128x1: 128 weight rows, one consumer warpgroup (160 threads, two blocks per SM; n_tile <= 128).
// k128x2: 128 rows, two consumer warpgroups (288 threads; two blocks per SM up to n_tile 128, one above).
// k256: 256 rows, two consumer warpgroups of 128 rows each (288 threads, one block per SM; n_tile <= 128).
enum class WgSkinnyTile { k128x1, k128x2, k256 };

inline int wg_skinny_tile_rows(WgSkinnyTile t) { return t == WgSkinnyTile::k256 ? 256 : 128; }
// The largest token count a tile has an instance for.
inline int64_t wg_skinny_tile_max_tokens(WgSkinnyTile t) { return t == WgSkinnyTile::k128x2 ? 256 : 128; }
// The N of the wgmma for n tokens: 64, 128, 192 or 256.
inline int wg_skinny_n_tile(int64_t n) { return n <= 64 ? 64 : n <= 128 ? 128 : n <= 192 ? 192 : 256; }

struct WgSkinnyParams {
  float* out;          // (n, rows) f32 row-major
  const uint16_t* x;   // (n, k) bf16 bits row-major, 16-byte aligned
  const uint16_t* w;   // (rows, k) bf16 bits row-major, 16-byte aligned
  int64_t n;           // tokens, 1..kWgSkinnyMaxTokens
  int64_t rows;        // weight rows (output columns), >= 1
  int64_t k;           // reduction length, a multiple of 8 (16-byte rows for TMA), >= 8
};

// How one call runs: the tile, the K split (cluster size) and the K range per split.
struct WgSkinnyPlan {
  WgSkinnyTile tile = WgSkinnyTile::k128x1;
  int splits = 1;            // blocks per row tile = cluster size, 1..kWgSkinnyMaxSplits
  int64_t k_per_split = 0;   // a multiple of kWgSkinnyStageK; splits * k_per_split >= k > (splits-1) * k_per_split
  int64_t row_tiles = 0;     // ceil(rows / tile rows)
};

// Whether the kernel takes this shape: n in 1..256, k a multiple of 8 (below 2^31), rows >= 1 with at most
// 65535 row tiles of 128. Pointer alignment is checked by WgSkinnyGemm::run.
bool wg_skinny_supports(int64_t n, int64_t rows, int64_t k);

// The plan for a shape on a device of `num_sms` SMs (the heuristic lives in wgmma_skinny_plan.cpp, with its
// worked examples). force_tile / force_splits (> 0): a fixed tile or split count (tests and benchmarks); a
// forced tile that has no instance for n (wg_skinny_tile_max_tokens) is replaced by k128x2.
WgSkinnyPlan make_wg_skinny_plan(int64_t n, int64_t rows, int64_t k, int num_sms,
                                 const WgSkinnyTile* force_tile = nullptr, int force_splits = 0);

class WgSkinnyGemm {
 public:
  // Reads the device's SM count and compute capability; finds cuTensorMapEncodeTiled through the runtime's
  // driver entry point (no libcuda link) and raises the kernels' shared-memory limits. available() is false
  // on anything but compute capability 9.x or when the entry point is missing; run() must not be called then.
  explicit WgSkinnyGemm(int device);

  bool available() const { return encode_ != nullptr; }
  int num_sms() const { return num_sms_; }

  // One launch on `stream` (PDL when the stream is not the legacy default stream; no allocation, no host
  // synchronisation: capturable in a CUDA graph). Preconditions (thrown as ferry::Error): available(),
  // wg_skinny_supports, x and w 16-byte aligned, a plan made for this shape.
  void run(const WgSkinnyParams& p, const WgSkinnyPlan& plan, cudaStream_t stream) const;
  // The same with make_wg_skinny_plan's plan for this device.
  void run(const WgSkinnyParams& p, cudaStream_t stream) const {
    run(p, make_wg_skinny_plan(p.n, p.rows, p.k, num_sms_), stream);
  }
  // How many clusters of this plan's launch (n tokens) the device holds at once (cudaOccupancyMaxActiveClusters):
  // times plan.splits, the blocks of one wave. For the harness and the plan's tuning.
  int max_active_clusters(int64_t n, const WgSkinnyPlan& plan) const;

 private:
  void* encode_ = nullptr;  // PFN_cuTensorMapEncodeTiled
  int num_sms_ = 0;
};

}  // namespace ferry::cuda_ops
