// Layout of the work (see flash_prefill.cuh for the contract; the block's code: flash_prefill_block.cuh):
//  - Block: 4 warps, kTileQ = 64 * MT query rows, one query head. Warp w owns the m16 tiles at rows
//    16w + 64i (i < MT) of the block's tile.
//  - Shared memory (bf16, rows padded to D + 8 elements: the row stride is 16 bytes mod 128, so the eight
//    16-byte row reads of an ldmatrix hit eight different bank groups):
//      qs (kTileQ, D + 8)            Q · scale · log2e, written once
//      ks, vs (2, kTileK, D + 8)     two stages of K and V tiles, filled by cp.async
//  - K/V tile copies: each warp resolves a quarter of the tile's keys through the block table (one lookup per key,
//    by one lane, fetched a tile ahead so its latency hides behind the math); the copying threads take the rows by
//    shuffle (KvCopyMap, flash_prefill_block.cuh). (A first version looked every 16-byte copy up itself:
//    docs/perf-log.md.)
//  - Per key tile (kTileK = KT positions, 64 by default): wait for this tile's copies, one barrier, issue the next
//    tile's copies into the other stage, then per m16 tile of the warp: S (16 x 64) = Q·Kᵀ from (D/16) x 4
//    ldmatrix.x4 of K and (D/16) x 8 mma (Q fragments in registers across key tiles at MT = 1); mask only when the
//    tile crosses the m-tile's first position; online softmax per row (2 rows per thread, max over the 4 lanes of
//    a quad), O rescaled only when some row of the warp has a new max; P rounded to bf16 in registers and reused
//    as the A fragment of P·V (the C layout of two adjacent n8 tiles is the A layout of one k16 step); V
//    B-fragments via ldmatrix.x4.trans, each shared by the MT m-tiles.
//  - A warp whose m-tiles all end before the key tile skips its math.
//  - Tiles of one sequence run last-first (the longest causal ranges start first); heads are the fast grid
//    dimension, so the blocks in flight share their K/V tiles in L2 (GQA groups too).
//  - The kernel waits for its predecessor (pdl_wait) before reading anything; it is launched plainly (PDL gave
//    nothing in mixed steps and cost time on a prefill alone: docs/perf-log.md).
//  - One shape is compiled: 128 query rows (MT = 2) by 64-position key tiles, the fastest measured; the 64-row,
//    32-key, 8-warp and first-walk variants lost (docs/perf-log.md, "## 2026-11-29: CUDA attention (bf16 KV cache, FA2-style prefill, split-KV decode)").
#include "backends/cuda/attention/flash_prefill.cuh"

#include <cmath>

#include "backends/cuda/attention/flash_prefill_block.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

using prefill_detail::find_tile;
using prefill_detail::flash_prefill_tile;
using prefill_detail::kMinBlocks;
using prefill_detail::PrefillShape;

template <int D, int MT, int KT, int NW = prefill_detail::kWarps, bool kWindowCap = false>
__global__ void __launch_bounds__(NW * 32, (kMinBlocks<D, MT, NW>)) flash_prefill_kernel(AttentionParams p) {
  pdl_allow_dependents();
  pdl_wait();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  int s = 0, tile = 0;
  if (!find_tile(p, PrefillShape<D, MT, KT, NW>::kTileQ, int(blockIdx.y), s, tile)) return;  // same in every warp
  // kSkipDiag: the diagonal skip at MT = 2.
  flash_prefill_tile<D, MT, KT, NW, true, kWindowCap>(p, s, tile, int(blockIdx.x), smem_raw);
}

template <int D, int MT, int KT, int NW = prefill_detail::kWarps, bool kWindowCap = false>
void launch_prefill(const AttentionParams& p, cudaStream_t stream) {
  using Sh = PrefillShape<D, MT, KT, NW>;
  // Tiles: sum over sequences of ceil(q_len / kTileQ) <= n_tokens / kTileQ + n_seqs.
  const int64_t max_tiles = (int64_t(p.n_tokens) + Sh::kTileQ - 1) / Sh::kTileQ + p.n_seqs;
  FERRY_CUDA_REQUIRE(max_tiles <= 65535);
  const auto kernel = flash_prefill_kernel<D, MT, KT, NW, kWindowCap>;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Sh::kSmemBytes)));
  const dim3 grid(unsigned(p.n_heads), unsigned(max_tiles));
  kernel<<<grid, Sh::kThreads, Sh::kSmemBytes, stream>>>(p);
  FERRY_CUDA_CHECK_LAUNCH(flash_prefill_kernel);
}

}  // namespace

bool flash_prefill_supports(int head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

void flash_prefill_attention(const AttentionParams& p, cudaStream_t stream) {
  if (p.n_tokens == 0 || p.n_seqs == 0) return;
  FERRY_CUDA_REQUIRE(flash_prefill_supports(p.head_dim));
  FERRY_CUDA_REQUIRE(p.n_heads <= 65535 && p.n_kv_heads >= 1 && p.n_heads % p.n_kv_heads == 0);
  FERRY_CUDA_REQUIRE(flash_prefill_cache_fits(p));
  // head_dim 256 (Gemma): 64-row tiles (MT = 1), Q fragments read from shared memory at each step; the window and
  // soft-cap instance only, since every model of that head_dim ferry reads has one or the other.
  if (p.head_dim == 256) {
    launch_prefill<256, 1, 64, prefill_detail::kWarps, true>(p, stream);
    return;
  }
  // A window or a soft-cap: the instance that applies them (flash_prefill_walk's kWindowCap).
  if (p.window > 0 || p.softcap > 0) {
    p.head_dim == 64 ? launch_prefill<64, 2, 64, prefill_detail::kWarps, true>(p, stream)
                     : launch_prefill<128, 2, 64, prefill_detail::kWarps, true>(p, stream);
    return;
  }
  p.head_dim == 64 ? launch_prefill<64, 2, 64>(p, stream) : launch_prefill<128, 2, 64>(p, stream);
}

}  // namespace ferry::cuda_ops
