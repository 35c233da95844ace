// Causal flash attention for the rows of sequences with q_len >= 2 (prefill, chunked prefill), on tensor
// cores, over the paged bf16 KV cache (FlashAttention-2 structure, mma.sync bf16 -> f32).
// Grid (heads, query tiles): a block (4 warps) takes kTileQ = 64 * MT consecutive query rows of one
// sequence and one head (warp w: m16 tiles at rows 16w + 64i, i < MT, so every warp sees the same causal
// extent). Q is converted to bf16 (scale * log2e folded in) into shared memory once; K/V tiles of 64
// positions are gathered through the block table with cp.async (16 bytes per copy, positions past the end
// and bad blocks zero-filled; one table lookup per key, a tile ahead), two stages deep, so the next tile loads
// while this one is computed.
// S = Q·Kᵀ and O += P·V with mma.sync m16n8k16 (ldmatrix for Q and K, ldmatrix.trans for V); online
// softmax in fp32 registers in the log2 domain; the causal mask only on tiles that cross a row's own
// position. Query tiles are found on the device from q_len (no host mirrors); the grid is sized for the
// worst case and surplus blocks exit at once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/attention/attention.cuh"

namespace ferry::cuda_ops {

// head_dim 64, 128 or 256 (64-row tiles).
bool flash_prefill_supports(int head_dim);
// The prefill tile's K/V copies index the cache in 32-bit rows: fewer than 2^31 rows (n_blocks x block_size) of
// n_kv_heads x head_dim bf16 each (< 2^31 bytes). flash_prefill_attention and mixed_attention require it.
inline bool flash_prefill_cache_fits(const AttentionParams& p) {
  return int64_t(p.n_blocks) * p.block_size < (int64_t(1) << 31) && int64_t(p.n_kv_heads) * p.head_dim * 2 < (int64_t(1) << 31);
}
// Writes out rows of the sequences with q_len >= 2; leaves every other row alone.
void flash_prefill_attention(const AttentionParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
