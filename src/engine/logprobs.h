// Log-probabilities for the API's `logprobs` / `top_logprobs`: computed from the raw model logits (the
// model's distribution, before penalties and sampling filters), as vLLM reports them by default.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ferry {

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

struct TokenLogprobs {
  TokenLogprob chosen;              // the sampled token
  std::vector<TokenLogprob> top;    // the n_top most likely tokens, most likely first (ties: lower id);
                                    // fewer when fewer than n_top logits are finite
};

// logits: (vocab_size) f32; NaN counts as -inf, +inf as the largest float. token in [0, vocab_size),
// n_top in [0, vocab_size]. Throws ferry::Error when every logit is NaN/-inf.
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int32_t n_top);

}  // namespace ferry
