// SentencePiece-style BPE (Llama 2, Mistral, Phi-3): spaces become "▁", an optional "▁" prefix, symbols
// are UTF-8 characters merged while the concatenation is a vocabulary token, highest score first (or, for
// vocabularies from tokenizer.json, lowest merge rank first); characters outside the vocab fall back to
// <0xNN> byte tokens.
#include "tokenizer/bpe_merge.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace ferry {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 "▁"

bool mergeable(TokenType t) { return t == TokenType::Normal || t == TokenType::UserDefined; }

}  // namespace

void encode_spm(const TokenizerImpl& impl, std::string_view text, bool prefix_space, std::vector<int32_t>& out) {
  std::string norm;
  norm.reserve(text.size() + 16);
  if (prefix_space) norm += kSpaceMark;
  for (char c : text) {
    if (c == ' ') {
      norm += kSpaceMark;
    } else {
      norm += c;
    }
  }
  if (norm.empty()) return;

  std::vector<BpeSymbol> symbols;
  for (size_t pos = 0; pos < norm.size();) {
    size_t len = utf8_sequence_length(norm, pos);
    if (len == 0) len = 1;  // cannot happen for sanitized input; stay safe
    BpeSymbol s;
    s.start = static_cast<uint32_t>(pos);
    s.len = static_cast<uint32_t>(len);
    s.id = impl.find(std::string_view(norm).substr(pos, len));
    s.prev = static_cast<int32_t>(symbols.size()) - 1;
    s.next = static_cast<int32_t>(symbols.size()) + 1;
    symbols.push_back(s);
    pos += len;
  }
  symbols.back().next = -1;

  const std::string_view view = norm;
  const bool by_rank = impl.vocab.scores.empty() && !impl.merge_ranks.empty();
  bpe_merge(symbols, [&](const BpeSymbol& a, const BpeSymbol& b) -> BpeMerge {
    if (by_rank) {
      const auto* m = impl.merge(a.id, b.id);
      return m == nullptr ? BpeMerge{} : BpeMerge{static_cast<double>(m->first), m->second};
    }
    const int32_t id = impl.find(view.substr(a.start, a.len + b.len));
    if (id < 0 || !mergeable(impl.type(id))) return {};
    const double score = impl.vocab.scores.empty() ? 0.0 : impl.vocab.scores[id];
    return {-score, id};
  });

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const BpeSymbol& s = symbols[i];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    for (uint32_t k = 0; k < s.len; ++k) {
      const int32_t byte_id = impl.byte_token[static_cast<uint8_t>(norm[s.start + k])];
      if (byte_id >= 0) {
        out.push_back(byte_id);
      } else if (impl.vocab.unk_id >= 0) {
        out.push_back(impl.vocab.unk_id);
        break;  // one <unk> per character without byte tokens
      }
    }
  }
}

}  // namespace ferry
