// Causal flash attention for the rows of sequences with q_len >= 2 on Hopper's wgmma (FlashAttention-3 structure),
// over the paged bf16 KV cache; the same contract as flash_prefill_attention (flash_prefill.cuh): q f32 in, out f32,
// GQA, any block size, rows of sequences with q_len < 2 left alone, query tiles found on the device from q_len.
// Block (384 threads, 1 per SM): 128 query rows of one sequence and one head.
//  - Warpgroup 0 (producer, 64 registers): gathers K/V tiles of 128 positions through the block table with cp.async
//    (16 bytes per copy, one table lookup per key, a tile ahead) into a ring of kStages shared-memory stages laid
//    out for wgmma (128-byte swizzle); each stage's K and V land on their own mbarrier (cp.async.mbarrier.arrive).
//  - Warpgroups 1 and 2 (consumers, 216 registers): 64 query rows each. Q is staged once as bf16 (scale * log2e
//    folded in) in the swizzled layout; per key tile S (64 x 128) = Q·Kᵀ by 8 (D / 16) wgmma m64n128k16 from shared
//    memory, the causal mask only on tiles that cross a row's position, online softmax on the accumulator fragments
//    (exp2), P rounded to bf16 in registers as the A operand of O += P·V (wgmma with A from registers, V as an
//    MN-major B). A consumer's warps release the stage on an mbarrier once their wgmmas are done.
// The arithmetic (bf16 Q, K, V, P; f32 accumulation and softmax) is that of the mma.sync kernel; the summation order
// inside the tensor cores differs, so the outputs agree to bf16 rounding, not bit for bit.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/attention/attention.cuh"

namespace ferry::cuda_ops {

// head_dim 64 or 128, on a device of compute capability 9.0 (the library is built for sm_90a).
bool flash_prefill_wgmma_supports(int head_dim);
// Writes out rows of the sequences with q_len >= 2; leaves every other row alone. Requires
// flash_prefill_cache_fits(p) (flash_prefill.cuh).
void flash_prefill_wgmma_attention(const AttentionParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
