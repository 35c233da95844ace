// The AttentionParams every attention kernel test fills the same way, from the device tensors of one step: the
// queries, the paged K/V caches and the per-sequence layout. Sizes come from the tensors' shapes; the caller sets
// the output, the error word and any option after (designated members of the returned struct).
#pragma once

#ifdef FERRY_HAS_CUDA

#include "backends/cuda/attention/attention.cuh"
#include "core/tensor.h"

namespace ferry::test {

struct AttentionStep {
  const Tensor& q;             // (n_tokens, n_heads, head_dim) f32
  const Tensor& k_cache;       // (n_blocks, block_size, n_kv_heads, head_dim) bf16
  const Tensor& v_cache;       // same shape
  const Tensor& q_start;       // (n_seqs) i32
  const Tensor& q_len;         // (n_seqs) i32
  const Tensor& kv_len;        // (n_seqs) i32
  const Tensor& block_tables;  // (n_seqs, max_blocks_per_seq) i32
  float scale;                 // softmax scale
};

// out = nullptr and errors = nullptr: set them (or out_bf16) on the result.
inline cuda_ops::AttentionParams attention_params(const AttentionStep& s) {
  return cuda_ops::AttentionParams{
      .out = nullptr, .q = s.q.ptr<float>(), .k_cache = s.k_cache.ptr<__nv_bfloat16>(),
      .v_cache = s.v_cache.ptr<__nv_bfloat16>(), .q_start = s.q_start.ptr<int32_t>(),
      .q_len = s.q_len.ptr<int32_t>(), .kv_len = s.kv_len.ptr<int32_t>(),
      .block_tables = s.block_tables.ptr<int32_t>(), .n_seqs = int32_t(s.q_start.numel()),
      .max_blocks_per_seq = int32_t(s.block_tables.shape[1]), .block_size = int32_t(s.k_cache.shape[1]),
      .n_blocks = int32_t(s.k_cache.shape[0]), .n_tokens = int32_t(s.q.shape[0]), .n_heads = int32_t(s.q.shape[1]),
      .n_kv_heads = int32_t(s.k_cache.shape[2]), .head_dim = int32_t(s.q.shape[2]), .scale = s.scale,
      .errors = nullptr};
}

}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
