#include <cmath>

#include "core/check.h"
#include "tokenizer/vocab.h"

namespace ferry {

void validate_vocab(const Vocab& vocab) {
  const size_t n = vocab.tokens.size();
  FERRY_CHECK(n > 0, "vocabulary is empty");
  FERRY_CHECK(n < (size_t(1) << 31), "vocabulary has too many tokens ({})", n);
  FERRY_CHECK(vocab.scores.empty() || vocab.scores.size() == n,
              "vocabulary has {} tokens but {} scores", n, vocab.scores.size());
  FERRY_CHECK(vocab.token_types.empty() || vocab.token_types.size() == n,
              "vocabulary has {} tokens but {} token types", n, vocab.token_types.size());
  for (size_t i = 0; i < vocab.scores.size(); ++i) {
    FERRY_CHECK(std::isfinite(vocab.scores[i]), "score of token {} is not finite", i);
  }
  for (size_t i = 0; i < vocab.token_types.size(); ++i) {
    const int32_t t = vocab.token_types[i];
    FERRY_CHECK(t >= 0 && t <= 6, "token {} has invalid token type {}", i, t);
  }
  const std::pair<const char*, int32_t> ids[] = {{"bos", vocab.bos_id}, {"eos", vocab.eos_id},
                                                 {"eot", vocab.eot_id}, {"unknown", vocab.unk_id},
                                                 {"padding", vocab.pad_id}};
  for (const auto& [name, id] : ids) {
    FERRY_CHECK(id >= -1 && id < static_cast<int64_t>(n), "{} token id {} is out of range (vocab size {})", name,
                id, n);
  }
}

}  // namespace ferry
