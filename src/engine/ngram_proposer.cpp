#include "engine/ngram_proposer.h"

#include <algorithm>

namespace ferry {

void NgramProposer::propose(std::span<const int32_t> history, int32_t max_tokens, std::vector<int32_t>& out) {
  out.clear();
  const auto n = int64_t(history.size());
  if (max_tokens <= 0 || n < kNgramMinMatch + 1) return;
  // For each earlier end e (the occurrence is history[e - len, e), followed by history[e]), the match length with
  // the suffix history[n - len, n). O(n * match) per call: ~4k tokens of context cost microseconds.
  int64_t best_end = -1;
  int32_t best_len = 0;
  for (int64_t e = n - 1; e >= kNgramMinMatch; --e) {
    int32_t len = 0;
    while (len < kNgramMaxMatch && e - 1 - len >= 0 && history[size_t(e - 1 - len)] == history[size_t(n - 1 - len)])
      ++len;
    if (len > best_len) {  // strictly longer: ties keep the most recent (larger e, seen first)
      best_len = len;
      best_end = e;
      if (len == kNgramMaxMatch) break;
    }
  }
  if (best_len < kNgramMinMatch) return;
  const int64_t stop = std::min(n, best_end + max_tokens);
  out.assign(history.begin() + best_end, history.begin() + stop);
}

}  // namespace ferry
