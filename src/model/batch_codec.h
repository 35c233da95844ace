// A Batch as bytes, for rank 0 to broadcast each step to the tensor-parallel followers. Layout: a header of
// 7 int32 (n_tokens, n_seqs, max_blocks_per_seq, n_logit_rows, n_table_entries, rows_share_kv, magic), then the vectors in
// Batch's field order (raw little-endian, the same build on every rank). An empty message means "stop".
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "model/batch.h"

namespace ferry {

inline constexpr int32_t kBatchMagic = 0x54424654;  // "TFBT"

inline void encode_batch(const Batch& b, std::vector<uint8_t>& out) {
  const int32_t header[7] = {b.n_tokens(), b.n_seqs(), b.max_blocks_per_seq, int32_t(b.logit_rows.size()),
                             int32_t(b.block_tables.size()), b.rows_share_kv ? 1 : 0, kBatchMagic};
  out.clear();
  const auto put = [&](const void* p, size_t bytes) {
    const size_t at = out.size();
    out.resize(at + bytes);
    if (bytes) std::memcpy(out.data() + at, p, bytes);
  };
  const auto vec = [&](const auto& v) { put(v.data(), v.size() * sizeof(v[0])); };
  put(header, sizeof(header));
  vec(b.tokens);
  vec(b.positions);
  vec(b.slots);
  vec(b.q_start);
  vec(b.q_len);
  vec(b.kv_len);
  vec(b.block_tables);
  vec(b.logit_rows);
}

inline Batch decode_batch(const std::vector<uint8_t>& in) {
  int32_t h[7];
  FERRY_CHECK(in.size() >= sizeof(h), "tensor-parallel step message of {} bytes is truncated", in.size());
  std::memcpy(h, in.data(), sizeof(h));
  FERRY_CHECK(h[6] == kBatchMagic && h[0] >= 0 && h[1] >= 0 && h[2] >= 0 && h[3] >= 0 && h[4] >= 0 &&
                  (h[5] == 0 || h[5] == 1),
              "tensor-parallel step message is corrupt");
  size_t off = sizeof(h);
  Batch b;
  const auto get = [&](auto& v, int32_t count) {
    const size_t bytes = size_t(count) * sizeof(v[0]);
    FERRY_CHECK(off + bytes <= in.size(), "tensor-parallel step message is truncated");
    v.resize(size_t(count));
    if (bytes) std::memcpy(v.data(), in.data() + off, bytes);
    off += bytes;
  };
  get(b.tokens, h[0]);
  get(b.positions, h[0]);
  get(b.slots, h[0]);
  get(b.q_start, h[1]);
  get(b.q_len, h[1]);
  get(b.kv_len, h[1]);
  get(b.block_tables, h[4]);
  get(b.logit_rows, h[3]);
  b.max_blocks_per_seq = h[2];
  b.rows_share_kv = h[5] == 1;
  FERRY_CHECK(off == in.size(), "tensor-parallel step message has {} trailing bytes", in.size() - off);
  return b;
}

}  // namespace ferry
