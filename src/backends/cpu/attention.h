// Causal attention over the paged KV cache on the CPU (GQA): one task per (sequence, query, head),
// online softmax over the sequence's cache blocks. Same function for prefill and decode.
#pragma once

#include "core/thread_pool.h"
#include "ops/attention_meta.h"

namespace ferry {

// out, q: (n, n_heads, head_dim) f32; k_cache, v_cache: (n_blocks, block_size, n_kv_heads, head_dim) f32
void paged_attention_cpu(ThreadPool& pool, const Tensor& out, const Tensor& q, const Tensor& k_cache,
                         const Tensor& v_cache, const AttentionMeta& meta, float scale);

}  // namespace ferry
