// Finds special and added tokens in text before normal tokenization, leftmost-longest (as Hugging Face's
// added-token matcher does). User-defined tokens (type 4) are always matched; control (3) and unknown (2)
// tokens only when parse_special is set.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace ferry {

struct TextFragment {
  std::string_view text;  // the raw text (id < 0) or the matched token text
  int32_t id = -1;        // the special token, or -1 for raw text to tokenize normally
};

class SpecialTokenMatcher {
 public:
  explicit SpecialTokenMatcher(const Vocab& vocab);  // keeps views into vocab.tokens: vocab must outlive it
  std::vector<TextFragment> partition(std::string_view text, bool parse_special) const;
  bool empty() const { return all_.map.empty(); }

 private:
  struct Index {
    std::unordered_map<std::string_view, int32_t> map;
    std::array<std::vector<uint32_t>, 256> lengths;  // by first byte: distinct token lengths, longest first
    void add(std::string_view text, int32_t id);
    void finish();
    int32_t match_at(std::string_view text, size_t pos, size_t* len) const;  // -1 when none
  };
  Index all_;     // control, unknown and user-defined tokens
  Index always_;  // user-defined tokens only
};

}  // namespace ferry
