// The oracle proposer, for `ferry bench --spec oracle` only (Engine::replay_proposals; parse_spec and the
// server's request field know no such mode, so run, chat and serve cannot reach it): it replays a recorded token
// sequence, the target's own greedy output of an earlier plain run. While the history is a prefix of that sequence
// it proposes the recorded tokens after it, so a greedy verify step keeps all of them (acceptance 100%: the ceiling
// of the mechanism); a kept token that differs from the recording (an argmax that changed between the plain decode
// and the verify step) leaves the recording behind, and from there it proposes nothing.
//
// Worked example: recorded "p t1 t2 t3 t4", history "p t1", max_tokens 2: proposes "t2 t3"; history "p x": nothing.
#pragma once

#include <vector>

#include "engine/proposer.h"

namespace ferry {

class OracleProposer final : public Proposer {
 public:
  explicit OracleProposer(std::vector<int32_t> recorded) : recorded_(std::move(recorded)) {}
  void propose(std::span<const int32_t> history, int32_t max_tokens, std::vector<int32_t>& out) override;
  std::string_view name() const override { return "oracle"; }

 private:
  std::vector<int32_t> recorded_;  // (prompt + generated) tokens of the recorded run
};

}  // namespace ferry
