// Byte-level BPE: pre-tokenize with the regex list, map each fragment's bytes to GPT-2 code points, then
// merge adjacent symbols by merge rank (lowest first).
#include "tokenizer/bpe_merge.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace ferry {

namespace {

void encode_word(const TokenizerImpl& impl, std::string_view word, std::vector<int32_t>& out) {
  const std::string mapped = byte_level_encode(word);  // 1 or 2 UTF-8 bytes per input byte
  if (impl.vocab.ignore_merges) {
    const int32_t whole = impl.find(mapped);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  // symbols: one per input byte, over `mapped`
  std::vector<BpeSymbol> symbols;
  symbols.reserve(word.size());
  for (size_t pos = 0; pos < mapped.size();) {
    const size_t len = utf8_sequence_length(mapped, pos);
    BpeSymbol s;
    s.start = static_cast<uint32_t>(pos);
    s.len = static_cast<uint32_t>(len);
    s.id = impl.find(std::string_view(mapped).substr(pos, len));
    s.prev = static_cast<int32_t>(symbols.size()) - 1;
    s.next = static_cast<int32_t>(symbols.size()) + 1;
    symbols.push_back(s);
    pos += len;
  }
  symbols.back().next = -1;
  bpe_merge(symbols, [&](const BpeSymbol& a, const BpeSymbol& b) {
    const auto* m = impl.merge(a.id, b.id);
    return m == nullptr ? BpeMerge{} : BpeMerge{static_cast<double>(m->first), m->second};
  });
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    if (symbols[i].id >= 0) {
      out.push_back(symbols[i].id);
    } else if (impl.vocab.unk_id >= 0) {
      out.push_back(impl.vocab.unk_id);  // a byte the vocab lacks (Hugging Face drops it without unk)
    }
  }
}

}  // namespace

void encode_byte_level(const TokenizerImpl& impl, std::string_view text, std::vector<int32_t>& out) {
  std::string prefixed;
  if (impl.vocab.add_space_prefix && !text.empty() && text[0] != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  for (std::string_view word : impl.pre_tokenizer->split(text)) encode_word(impl, word, out);
}

}  // namespace ferry
