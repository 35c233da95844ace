// Partial selection of the most likely tokens, shared by the sampler and the logprobs report. None of these
// sorts the whole vocabulary.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ferry {

struct Candidate {
  int32_t id = 0;
  float logit = 0.0f;
  float weight = 0.0f;  // exp((logit - max_logit) / temperature), filled in by the sampler
};

// The one total order used everywhere (CPU and, later, GPU): higher logit first, ties -> lower id first.
inline bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// The first index of the largest entry of logits (n) f32, NaN ignored; -1 when no entry is > -inf.
int32_t argmax(std::span<const float> logits);

// The k best entries of logits (vocab_size) f32 by ranks_before into out, best first; -inf and NaN are
// never selected (so out may hold fewer than k). O(vocab_size) plus O(k log k) per improvement.
void select_top_k(std::span<const float> logits, int32_t k, std::vector<Candidate>& out);

// Nucleus selection by weight: reorders cand so that cand[0, m) are the m best-ranked candidates, where m is
// the smallest count whose summed weight reaches target (m = cand.size() when none does), and returns m.
// Weighted quickselect: expected O(n), with a sort of the remainder if pivots go badly. ranked: cand is
// already in ranks_before order (then it just walks).
size_t select_top_p(std::span<Candidate> cand, double target, bool ranked);

}  // namespace ferry
