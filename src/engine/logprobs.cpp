#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "sampling/top_k.h"

namespace ferry {

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int32_t n_top) {
  const auto vocab_size = static_cast<int64_t>(logits.size());
  FERRY_CHECK(token >= 0 && token < vocab_size, "logprobs: token {} is outside the vocabulary [0, {})", token,
              vocab_size);
  FERRY_CHECK(n_top >= 0 && n_top <= vocab_size, "logprobs: n_top must be in [0, {}], got {}", vocab_size, n_top);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  auto clean = [](float l) { return std::isnan(l) ? kNegInf : std::min(l, std::numeric_limits<float>::max()); };

  float max_logit = kNegInf;
  for (const float l : logits) max_logit = std::max(max_logit, clean(l));
  FERRY_CHECK(max_logit != kNegInf, "logprobs: every logit is NaN or -inf");
  double sum = 0.0;
  for (const float l : logits) sum += std::exp(static_cast<double>(clean(l)) - max_logit);
  const double log_z = max_logit + std::log(sum);
  auto logprob = [&](float l) { return static_cast<float>(static_cast<double>(clean(l)) - log_z); };

  TokenLogprobs out;
  out.chosen = {token, logprob(logits[token])};
  if (n_top > 0) {
    std::vector<float> cleaned(logits.size());  // (vocab_size) f32
    std::transform(logits.begin(), logits.end(), cleaned.begin(), clean);
    std::vector<Candidate> best;
    select_top_k(cleaned, n_top, best);
    for (const Candidate& c : best) out.top.push_back({c.id, logprob(c.logit)});
  }
  return out;
}

}  // namespace ferry
