// The verify step's rule and the adaptive proposal length, shared by Engine::generate and the serving engine.
//
// Verification: a step runs the last accepted token t0 and the proposals x1..xn of one sequence (n + 1 rows, the
// logits of every row). Row i's logits are the target's distribution p_i for the token after t0 x1..xi, so the
// target's own draw there decides: y_i = draw(row i) (the request's sampler with the history up to that row); while
// y_i == x_{i+1} the proposal is kept, and the first y_i that differs (or y_n after all n were kept) is emitted too.
// Every step therefore emits accepted + 1 tokens, each drawn by the target from the logits the plain decode would
// have computed for it.
//
// Why this is the rejection-sampling rule (Leviathan et al. 2023, Chen et al. 2023) for point proposals: with a
// proposal distribution q = one-hot(x), the rule accepts x with probability min(1, p(x) / q(x)) = p(x) and on
// rejection draws from norm(max(p - q, 0)) = p restricted to tokens != x. Drawing y ~ p and accepting when y == x
// accepts with probability p(x), and a rejected y is distributed as p given y != x: the same law. The sampler's draw
// at a position depends only on (logits, history, params) (sampling/sampler.h), and the CPU kernels are batch
// invariant, so on the CPU the tokens are bit for bit those of the plain decode, sampled or greedy.
//
// Proposal length: SpecLength starts at k_max; a step whose proposals were all kept grows it by one (up to k_max),
// a step with a rejection sets it to accepted + 1 (at least 1): the next step proposes a little more than the run
// of kept tokens just seen. Worked example (k_max 4): kept 4/4 -> 4, kept 1/4 -> 2, kept 2/2 -> 3, kept 0/3 -> 1.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace ferry {

// draw(i): the target's token from verify row i (0 .. proposals.size()). Fills `emitted` with the kept proposals
// and the one token after them; returns how many proposals were kept.
int32_t verify_point_proposals(std::span<const int32_t> proposals, const std::function<int32_t(size_t row)>& draw,
                               std::vector<int32_t>& emitted);

class SpecLength {
 public:
  explicit SpecLength(int32_t k_max);
  int32_t next() const { return k_; }  // proposals to ask for in the next step
  void update(int32_t proposed, int32_t accepted);

 private:
  int32_t k_max_;
  int32_t k_;
};

}  // namespace ferry
