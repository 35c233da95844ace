// Skinny GEMM for 5..128 tokens (serving decode steps, short prefill chunks): out (n, rows) f32 =
// x (n, k) bf16 . w (rows, k) bf16^T, fp32 accumulation. At these token counts the matmul is bound by the
// weight read (2*n FLOP per 2-byte weight element: 128 FLOP/byte at n = 128, ~550 TFLOP/s at 4.3 TB/s).
//
// Kernel (skinny_mma.cu), "swap AB": weight rows are the M of mma.sync m16n8k16 (bf16 -> f32), tokens its N.
//  - A block owns a tile of BM weight rows (128 or 256) and one K range; the tile's weight rows and the n
//    tokens' x values of that K range stream through a ring of shared-memory stages (64 k per stage, 128 bytes
//    per row, cp.async 16-byte chunks, XOR swizzle so every lds.128 is conflict-free). Weights are issued
//    before pdl_wait(), x only after it.
//  - Each warp owns 32 weight rows (two m16 tiles) and every token (kNt/8 n8 tiles). A thread's fragment
//    is one 16-byte chunk (8 k values) per row: the k order inside a 32-wide step is permuted identically for
//    weights and x, so the products pair up exactly as in the plain order (no ldmatrix needed).
//  - Split K when the row tiles alone do not fill the SMs: the `splits` blocks of one row tile form a
//    thread-block cluster; each writes its partial (kNt x BM f32) into its own shared memory, and after a
//    cluster barrier every block sums an equal share of the tile over the cluster's blocks in rank order
//    0..splits-1 through distributed shared memory and stores it. Deterministic (a fixed order for a given
//    shape and plan), no workspace, no second launch, no atomics.
//
// Host-compilable (no device code), so cuda_backend.cpp and the harnesses include it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferry::cuda_ops {

inline constexpr int64_t kSkinnyMinTokens = 1;
inline constexpr int64_t kSkinnyMaxTokens = 128;
inline constexpr int kSkinnyStageK = 64;    // k values per ring stage (128 bytes of a bf16 row)
inline constexpr int kSkinnyMaxSplits = 8;  // portable cluster size

// The block tile: 128 weight rows with 4 warps (two blocks per SM fit) or 256 rows with 8 warps (one per SM,
// half the x traffic per weight byte).
enum class SkinnyTile { k128, k256 };

inline int skinny_tile_rows(SkinnyTile t) { return t == SkinnyTile::k128 ? 128 : 256; }

struct SkinnyGemmParams {
  float* out;          // (n, rows) f32 row-major
  const uint16_t* x;   // (n, k) bf16 bits row-major, 16-byte aligned
  const uint16_t* w;   // (rows, k) bf16 bits row-major, 16-byte aligned
  int64_t n;           // tokens, kSkinnyMinTokens..kSkinnyMaxTokens
  int64_t rows;        // weight rows (output columns), >= 1
  int64_t k;           // reduction length, a multiple of 8 (16-byte rows), >= 8
};

// How one call runs: the tile, the K split (cluster size) and the stages of K per split.
struct SkinnyPlan {
  SkinnyTile tile = SkinnyTile::k256;
  int splits = 1;            // blocks per row tile = cluster size, 1..kSkinnyMaxSplits
  int64_t k_per_split = 0;   // a multiple of kSkinnyStageK; splits * k_per_split >= k > (splits-1) * k_per_split
  int64_t row_tiles = 0;     // ceil(rows / tile rows)
};

// Whether the kernel takes this shape: n in 1..128, k a multiple of 8 (and below 2^31), rows >= 1 with at
// most 65535 row tiles of 128. Pointer alignment is checked by skinny_gemm().
bool skinny_gemm_supports(int64_t n, int64_t rows, int64_t k);

// The plan for a shape on a device of `num_sms` SMs (the heuristic lives in skinny_gemm_plan.cpp, with its
// worked examples). force_tile / force_splits (> 0): a fixed tile or split count (tests and benchmarks).
SkinnyPlan make_skinny_plan(int64_t n, int64_t rows, int64_t k, int num_sms, const SkinnyTile* force_tile = nullptr,
                            int force_splits = 0);

// One launch on `stream` (PDL when the stream is not the legacy default stream; no allocation, no host
// synchronisation: capturable in a CUDA graph). Preconditions (thrown as ferry::Error): skinny_gemm_supports,
// x and w 16-byte aligned, a plan made for this shape.
void skinny_gemm(const SkinnyGemmParams& p, const SkinnyPlan& plan, cudaStream_t stream);

}  // namespace ferry::cuda_ops
