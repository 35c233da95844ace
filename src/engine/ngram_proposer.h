// Prompt lookup (n-gram) proposals, no extra model: the longest suffix of the history (kNgramMaxMatch tokens at
// most, kNgramMinMatch at least) that occurred earlier in the history (prompt + output so far), and the tokens that
// followed that earlier occurrence are the proposal. Ties go to the most recent occurrence. Text that repeats its
// input (rewriting, summarizing, editing code) is where this pays.
//
// Worked example: history "a b c d x a b" proposes "c d x" for max_tokens 3 (the suffix "a b" matches at 0).
#pragma once

#include "engine/proposer.h"

namespace ferry {

inline constexpr int32_t kNgramMinMatch = 2;  // a single repeated token guesses too often wrong
inline constexpr int32_t kNgramMaxMatch = 8;  // longer matches rank no differently in practice

class NgramProposer final : public Proposer {
 public:
  void propose(std::span<const int32_t> history, int32_t max_tokens, std::vector<int32_t>& out) override;
  std::string_view name() const override { return "ngram"; }
};

}  // namespace ferry
