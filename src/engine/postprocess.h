// The postprocess half of a serving step for one sequence whose chunk produced logits: sample the next token
// with the request's own Sampler, compute logprobs from the raw logits, stream its text (stop strings held
// back), and decide whether the request is finished (end-of-generation token, stop string, max_tokens,
// context full). Posts the update to the request's channel unless it finished (the caller finishes it).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/sequence.h"
#include "tokenizer/tokenizer.h"

namespace ferry {

struct TokenOutcome {
  bool finished = false;
  FinishReason reason = FinishReason::Length;
  std::string text;                     // the last text to send with the final update
  std::vector<GeneratedToken> tokens;   // the last tokens to send with the final update
};

// logits: (vocab_size) f32, the raw logits after seq.tokens. context: the per-sequence token limit.
// Throws ferry::Error when the logits cannot be sampled (every one NaN/-inf): the caller fails the request.
TokenOutcome postprocess_token(Sequence& seq, std::span<const float> logits, const Tokenizer& tokenizer,
                               int32_t context);

}  // namespace ferry
