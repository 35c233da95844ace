// One engine step's work, as plain host data. Tokens of all sequences are flattened; sequence s owns rows
// [q_start[s], q_start[s] + q_len[s]) and has kv_len[s] tokens in the cache once this step has stored its
// keys and values. logit_rows lists the rows whose logits the caller wants (the last row of each sequence
// in generation; every row when checking a model against a reference).
//
// A verify step (engine/spec_verify.h) lays each verifying sequence out as one entry per row (verify_entries):
// entry i holds the row at position p0 + i alone (q_len 1, kv_len p0 + i + 1) over the sequence's block table,
// so every row reads exactly the keys a plain decode step at its position reads, and a step of decode and verify
// rows has one query row per entry (a decode-shaped step: decode graphs, the decode attention kernel).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
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
  // Some entries read keys and values that other entries of this step write (the one-row entries of a verify
  // chunk): every row's K/V must be stored before any row's attention runs (no store fused into the attention).
  bool rows_share_kv = false;

  int32_t n_tokens() const { return int32_t(tokens.size()); }
  int32_t n_seqs() const { return int32_t(q_len.size()); }
};

// Appends the n rows of one sequence at positions pos0.. (tokens, their slots) as n one-row entries over that
// sequence's block table (table: at most b.max_blocks_per_seq ids), each row a logit row, and marks the batch
// rows_share_kv. Worked example: a sequence of 10 tokens verifying 3 proposals appends 4 rows at positions 9..12,
// entries of kv_len 10, 11, 12, 13; row 12 reads the keys rows 9..11 stored in this step.
inline void verify_entries(Batch& b, std::span<const int32_t> tokens, int32_t pos0, std::span<const int64_t> slots,
                           std::span<const int32_t> table) {
  const auto mb = size_t(b.max_blocks_per_seq);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto row = int32_t(b.tokens.size());
    b.tokens.push_back(tokens[i]);
    b.positions.push_back(pos0 + int32_t(i));
    b.slots.push_back(slots[i]);
    b.q_start.push_back(row);
    b.q_len.push_back(1);
    b.kv_len.push_back(pos0 + int32_t(i) + 1);
    const size_t at = b.block_tables.size();
    b.block_tables.resize(at + mb, -1);
    std::copy_n(table.begin(), std::min(table.size(), mb), b.block_tables.begin() + ptrdiff_t(at));
    b.logit_rows.push_back(row);
  }
  b.rows_share_kv = b.rows_share_kv || !tokens.empty();
}

}  // namespace ferry
