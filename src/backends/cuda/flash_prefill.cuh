// Causal flash attention for the rows of sequences with q_len >= 2 (prefill, chunked prefill), on tensor
// cores. Grid (query tiles, heads): a block takes kPrefillTileQ = 64 consecutive query rows of one sequence
// and one head (4 warps, 16 rows each); it walks the sequence's keys in tiles of 64 positions, gathers each
// K/V tile from the paged f32 cache through the block table, converts it to f16 in shared memory, and
// computes S = Q·Kᵀ and O += P·V with mma.sync m16n8k16 (f16 in, fp32 accumulate). Softmax is online, in
// fp32, in the log2 domain (scale·log2e folded into Q). Query tiles are found on the device from q_len
// (no host mirrors); the grid is sized for the worst case and surplus blocks exit at once.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/attention.cuh"

namespace ferry::cuda_ops {

// head_dim 64 or 128.
bool flash_prefill_supports(int head_dim);
// Writes out rows of the sequences with q_len >= 2; leaves every other row alone.
void flash_prefill_attention(const AttentionParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
