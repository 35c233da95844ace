#include "engine/spec_step.h"

#include <algorithm>

#include "core/check.h"

namespace ferry {

void propose_draft(Sequence& seq, int32_t context) {
  seq.draft.clear();
  if (!seq.proposer || seq.n_pending() != 1 || seq.steps_in_flight > 0 || seq.n_placeholders > 0) return;
  // The step emits accepted + 1 tokens and writes the K/V of tokens.size() + n positions.
  const int32_t cap = std::min({seq.spec_length->next(), seq.request.max_tokens - seq.usage.completion_tokens - 1,
                                context - int32_t(seq.tokens.size())});
  if (cap > 0) seq.proposer->propose(seq.tokens, cap, seq.draft);
}

int32_t verify_chunk(const ScheduledChunk& c, size_t i, const ModelRunner& runner, BlockManager& blocks,
                     std::vector<int32_t>& history, std::vector<int32_t>& emitted) {
  Sequence& seq = *c.seq;
  FERRY_ASSERT(c.n_draft > 0 && c.n_draft <= int32_t(seq.draft.size()) && seq.n_inflight == 0);
  const std::span<const int32_t> proposals(seq.draft.data(), size_t(c.n_draft));
  const size_t base = seq.tokens.size();  // row r's draw follows tokens + proposals[0 .. r)
  history.assign(seq.tokens.begin(), seq.tokens.end());
  history.insert(history.end(), proposals.begin(), proposals.end());
  const int32_t accepted = verify_point_proposals(proposals, [&](size_t r) {
    return seq.sampler->sample(runner.logits(i, r), std::span<const int32_t>(history).first(base + r));
  }, emitted);
  blocks.truncate(seq, seq.n_computed() - (c.n_draft - accepted));  // the rejected proposals' K/V
  seq.spec_length->update(c.n_draft, accepted);
  return accepted;
}

}  // namespace ferry
