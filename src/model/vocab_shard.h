// The vocabulary shard of a tensor-parallel rank: plain data the model reads (which embedding / lm-head rows
// this rank holds, how to reassemble the gathered logits). The sharding plan that makes it is
// parallel/sharding.h; the model never depends on src/parallel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/check.h"

namespace ferry {

struct VocabShard {
  int32_t begin = 0;       // first vocabulary id this rank holds
  int32_t part = 0;        // Vp: ids [begin, begin + part) (the last rank's may run past the vocabulary)
  int32_t full = 0;        // V: the whole vocabulary
  int32_t local_rows = 0;  // rows of this rank's embedding/lm-head tables (= config.vocab_size of the rank):
                           // V at world 1, Vp + 1 otherwise (row Vp is zeros: other ranks' ids map to it)

  // World 1: the whole vocabulary.
  static VocabShard whole(int32_t vocab_size) { return {0, vocab_size, vocab_size, vocab_size}; }
};

// Maps a vocabulary id to this rank's embedding row: id - begin when held here, else the zero row (part).
// ferry::Error for ids outside [0, full).
inline int32_t local_vocab_row(const VocabShard& v, int32_t id) {
  FERRY_CHECK(id >= 0 && id < v.full, "token id {} out of range (vocabulary of {})", id, v.full);
  const int32_t local = id - v.begin;
  return local >= 0 && local < v.part ? local : v.part;
}

// Reassembles gathered vocab-parallel logits: gathered (world, m, local_rows) -> logits (m, full), row-major.
inline void assemble_logits(const VocabShard& v, int world, int64_t m, const float* gathered, float* logits) {
  for (int r = 0; r < world; ++r) {
    const int64_t begin = int64_t(r) * v.part;
    const int64_t cols = std::max<int64_t>(0, std::min<int64_t>(v.part, v.full - begin));
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(logits + size_t(i) * size_t(v.full) + size_t(begin),
                  gathered + (size_t(r) * size_t(m) + size_t(i)) * size_t(v.local_rows), size_t(cols) * 4);
    }
  }
}

}  // namespace ferry
