// Paged causal attention with grouped-query heads, prefill and decode alike (ops/attention_meta.h): query
// row i of sequence s sits at position kv_len[s] - q_len[s] + i and attends to cached positions 0..that.
// Reads the per-sequence metadata from device memory only (no host mirrors), so a step can be captured.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/device_errors.h"

namespace ferry::cuda_ops {

struct AttentionParams {
  float* out;                   // (n, n_heads, head_dim) f32
  const float* q;               // (n, n_heads, head_dim) f32
  const float* k_cache;         // (n_blocks, block_size, n_kv_heads, head_dim) f32
  const float* v_cache;         // same shape
  const int32_t* q_start;       // (n_seqs) i32, device
  const int32_t* q_len;         // (n_seqs) i32, device
  const int32_t* kv_len;        // (n_seqs) i32, device
  const int32_t* block_tables;  // (n_seqs, max_blocks_per_seq) i32, device; a block id out of range in use
                                // sets kBadBlock and that key is skipped
  int32_t n_seqs, max_blocks_per_seq, block_size, n_blocks;
  int32_t n_tokens, n_heads, n_kv_heads, head_dim;
  float scale;                  // softmax scale (1/sqrt(head_dim) usually)
  DeviceErrors* errors;
};

// head_dim <= 256.
void attention(const AttentionParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
