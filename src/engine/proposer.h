// A proposer guesses the next tokens of one sequence for a verify step (engine/spec_verify.h). One instance per
// sequence (a draft model's proposer holds that sequence's draft KV). Proposals are point guesses: the target's
// verify step keeps proposal i exactly when the token it draws itself at that position equals it, which is the
// rejection-sampling rule for a proposal distribution with all its mass on one token (spec_verify.h). A head that
// proposes from a distribution (EAGLE, MTP) would return it beside the tokens, for accept_or_resample.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace ferry {

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Fills `out` (cleared first) with at most max_tokens guesses for the tokens after `history` (prompt + generated,
  // the last one accepted but maybe not yet computed by the target); none is a valid answer (the step decodes
  // plainly).
  virtual void propose(std::span<const int32_t> history, int32_t max_tokens, std::vector<int32_t>& out) = 0;
  virtual std::string_view name() const = 0;
};

}  // namespace ferry
