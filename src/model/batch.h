// One engine step's work, as plain host data. Tokens of all sequences are flattened; sequence s owns rows
// [q_start[s], q_start[s] + q_len[s]) and has kv_len[s] tokens in the cache once this step has stored its
// keys and values. logit_rows lists the rows whose logits the caller wants (the last row of each sequence
// in generation; every row when checking a model against a reference).
#pragma once

#include <cstdint>
#include <vector>

namespace ferry {

struct Batch {
  std::vector<int32_t> tokens;        // (n)
  std::vector<int32_t> positions;     // (n)
  std::vector<int64_t> slots;         // (n) KV slot of each token: block_id * block_size + pos % block_size
  std::vector<int32_t> q_start;       // (n_seqs)
  std::vector<int32_t> q_len;         // (n_seqs)
  std::vector<int32_t> kv_len;        // (n_seqs)
  std::vector<int32_t> block_tables;  // (n_seqs, max_blocks_per_seq), unused entries -1
  int32_t max_blocks_per_seq = 0;
  std::vector<int32_t> logit_rows;    // (n_logits) rows of the step whose logits are returned

  int32_t n_tokens() const { return int32_t(tokens.size()); }
  int32_t n_seqs() const { return int32_t(q_len.size()); }
};

}  // namespace ferry
