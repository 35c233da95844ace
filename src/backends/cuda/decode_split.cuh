// Split-KV decode attention: the rows of sequences with q_len == 1. The KV range of each (sequence, KV
// head) is cut into plan.n_splits chunks of plan.chunk positions, one block per (chunk, sequence, KV head,
// row group); a block takes up to kRows query heads of the GQA group, so each K/V row it loads serves all
// of them. Each block writes an unnormalised partial (acc, running max m, denominator l) to scratch, and a
// combine kernel merges the chunks of each (sequence, head) into the output row. fp32 throughout.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/attention.cuh"

namespace ferry::cuda_ops {

struct DecodeSplitPlan {
  int32_t n_splits;      // chunks per (sequence, KV head)
  int32_t chunk;         // KV positions per chunk (a multiple of 16)
  int32_t rows;          // query heads per block: 1, 2, 4 or 8
  int32_t n_row_groups;  // ceil(group / rows)
};

// head_dim 32, 64, 128 or 256.
bool decode_split_supports(int head_dim);
// Chosen from host-side sizes only (the upper bound max_blocks_per_seq * block_size of every kv_len), so
// the same launch shape serves a captured graph at any context up to that bound.
DecodeSplitPlan plan_decode_split(const AttentionParams& p, int n_sms);
// Partials: acc (n_seqs, n_heads, n_splits, head_dim) f32, then (m, l) (n_seqs, n_heads, n_splits, 2) f32.
size_t decode_split_scratch_bytes(const AttentionParams& p, const DecodeSplitPlan& plan);
// Writes out rows of the sequences with q_len == 1; leaves every other row alone.
void decode_split_attention(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream);

}  // namespace ferry::cuda_ops
