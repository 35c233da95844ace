// The serving engine's speculative halves for one sequence (engine/serving_engine.cpp calls them): the proposals
// before schedule() and the verification of a verify chunk after the step ran (engine/spec_verify.h has the rule).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/block_manager.h"
#include "engine/model_runner.h"
#include "engine/sequence.h"

namespace ferry {

// Fills seq.draft with the proposer's tokens for the next step when seq decodes next (one pending token, nothing
// in flight), capped so the step's accepted + 1 tokens fit max_tokens and its K/V the context; else clears it.
void propose_draft(Sequence& seq, int32_t context);

// After the step of chunk c (sampling chunk i of runner's last run): the target's draws at the chunk's rows decide
// the kept proposals; the table keeps their K/V and drops the rest (BlockManager::truncate); seq.spec_length
// learns the outcome. Fills `emitted` with the kept proposals and the token after them (the caller emits them in
// order) and returns how many proposals were kept. history: scratch. Throws ferry::Error when a row cannot be
// sampled.
int32_t verify_chunk(const ScheduledChunk& c, size_t i, const ModelRunner& runner, BlockManager& blocks,
                     std::vector<int32_t>& history, std::vector<int32_t>& emitted);

}  // namespace ferry
