// What an attention op needs to know about the sequences in a step. The step's tokens are flattened:
// sequence s owns query rows [q_start[s], q_start[s] + q_len[s]) (q_len may be 0: a padding sequence with no rows,
// which every attention path skips) and, after this step's store_kv, has
// kv_len[s] tokens in the cache (its queries are the last q_len[s] of them, so query i of s sits at
// position kv_len[s] - q_len[s] + i and attends to positions 0..that one).
#pragma once

#include "core/tensor.h"

namespace ferry {

struct AttentionMeta {
  int32_t n_seqs = 0;
  int32_t block_size = 0;
  int32_t max_blocks_per_seq = 0;
  // All tensors live in backend memory; the host_* pointers mirror them on the host for CPU-side planning.
  Tensor q_start;       // (n_seqs) i32
  Tensor q_len;         // (n_seqs) i32
  Tensor kv_len;        // (n_seqs) i32
  Tensor block_tables;  // (n_seqs, max_blocks_per_seq) i32, unused entries -1
  const int32_t* host_q_start = nullptr;
  const int32_t* host_q_len = nullptr;
  const int32_t* host_kv_len = nullptr;
  const int32_t* host_block_tables = nullptr;
  // Every sequence has exactly one query row (a decode step), as the caller knows even without host mirrors
  // (a captured step): a backend may then run its decode kernel alone. False: not known, look at q_len.
  bool decode_only = false;
  // Some sequences' rows read K/V that other sequences of this step store (Batch::rows_share_kv: a verify chunk
  // laid out as one-row entries): a backend must store every row's K/V before any attention reads the cache.
  bool rows_share_kv = false;
  // Per layer (the model sets them on its copy for each layer; a backend without Backend::supports(
  // ModelFeature::SlidingWindow / SoftCap) refuses the model at load, so it never sees them set):
  int32_t window = 0;   // > 0: query at position p attends to positions max(0, p - window + 1) .. p; 0: to 0 .. p
  float softcap = 0;    // > 0: each score s = q·k * scale becomes softcap * tanh(s / softcap) before the softmax
};

}  // namespace ferry
