// Causal attention over the paged KV cache on the CPU (GQA). Same functions for prefill and decode.
//  - paged_attention_cpu: the reference (plain loops, one task per (sequence, query, head), online softmax
//    key by key with std::exp). The oracle the fast one is tested against.
//  - paged_attention_fast: tiles of queries x the heads of one GQA group per task, so each K/V row read
//    from the cache serves every row of the tile; SIMD scores, exp and P V (vec_kernels.h).
#pragma once

#include "backends/cpu/vec_kernels.h"
#include "core/thread_pool.h"
#include "ops/attention_meta.h"

namespace ferry {

// out, q: (n, n_heads, head_dim) f32; k_cache, v_cache: (n_blocks, block_size, n_kv_heads, head_dim) f32
void paged_attention_cpu(ThreadPool& pool, const Tensor& out, const Tensor& q, const Tensor& k_cache,
                         const Tensor& v_cache, const AttentionMeta& meta, float scale);

// Same contract and arguments; falls back to paged_attention_cpu for head dims the tiles do not take (not a
// multiple of 16, or above kAttentionMaxHeadDim).
void paged_attention_fast(ThreadPool& pool, const VecKernels& kernels, const Tensor& out, const Tensor& q,
                          const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta, float scale);

}  // namespace ferry
