#include "tokenizer/special_tokens.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace ferry {

void SpecialTokenMatcher::Index::add(std::string_view text, int32_t id) {
  // A token that is not valid UTF-8 could split a character of the (valid) text: never match it.
  if (text.empty() || !is_valid_utf8(text)) return;
  if (map.emplace(text, id).second) lengths[static_cast<uint8_t>(text[0])].push_back(text.size());
}

void SpecialTokenMatcher::Index::finish() {
  for (auto& l : lengths) {
    std::sort(l.begin(), l.end(), std::greater<>());
    l.erase(std::unique(l.begin(), l.end()), l.end());
  }
}

int32_t SpecialTokenMatcher::Index::match_at(std::string_view text, size_t pos, size_t* len) const {
  for (uint32_t n : lengths[static_cast<uint8_t>(text[pos])]) {
    if (n > text.size() - pos) continue;
    const auto it = map.find(text.substr(pos, n));
    if (it != map.end()) {
      *len = n;
      return it->second;
    }
  }
  return -1;
}

SpecialTokenMatcher::SpecialTokenMatcher(const Vocab& vocab) {
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    const auto type = static_cast<TokenType>(vocab.token_types.empty() ? 1 : vocab.token_types[id]);
    if (type == TokenType::UserDefined) {
      all_.add(vocab.tokens[id], static_cast<int32_t>(id));
      always_.add(vocab.tokens[id], static_cast<int32_t>(id));
    } else if (type == TokenType::Control || type == TokenType::Unknown) {
      all_.add(vocab.tokens[id], static_cast<int32_t>(id));
    }
  }
  all_.finish();
  always_.finish();
}

std::vector<TextFragment> SpecialTokenMatcher::partition(std::string_view text, bool parse_special) const {
  const Index& index = parse_special ? all_ : always_;
  std::vector<TextFragment> out;
  size_t raw_begin = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = 0;
    const int32_t id = index.map.empty() ? -1 : index.match_at(text, pos, &len);
    if (id < 0) {
      const size_t char_len = utf8_sequence_length(text, pos);  // stay on character boundaries
      pos += char_len == 0 ? 1 : char_len;
      continue;
    }
    if (pos > raw_begin) out.push_back({text.substr(raw_begin, pos - raw_begin), -1});
    out.push_back({text.substr(pos, len), id});
    pos += len;
    raw_begin = pos;
  }
  if (raw_begin < text.size()) out.push_back({text.substr(raw_begin), -1});
  return out;
}

}  // namespace ferry
