#include "tokenizer/tokenizer.h"

#include <array>

#include "core/check.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace ferry {

namespace {

// Token texts that end generation in the chat models we know, whatever the metadata says.
constexpr std::array<std::string_view, 12> kEogNames = {
    "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|end_of_text|>", "<|end|>",
    "<end_of_turn>", "<|END_OF_TURN_TOKEN|>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "<EOT>", "</s>", "<|return|>",
};

// "<0xNN>" -> NN, or -1.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    value *= 16;
    if (c >= '0' && c <= '9') value += c - '0';
    else if (c >= 'A' && c <= 'F') value += c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') value += c - 'a' + 10;
    else return -1;
  }
  return value;
}

std::string spm_piece(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.substr(i, 3) == "\xE2\x96\x81") {
      out += ' ';
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

}  // namespace

TokenizerImpl::TokenizerImpl(Vocab v) : vocab(std::move(v)), special((validate_vocab(vocab), vocab)) {
  const auto n = static_cast<int32_t>(vocab.tokens.size());
  if (vocab.token_types.empty()) vocab.token_types.assign(n, static_cast<int32_t>(TokenType::Normal));
  token_to_id.reserve(n * 2);
  for (int32_t id = 0; id < n; ++id) token_to_id[vocab.tokens[id]] = id;  // the last duplicate wins

  merge_ranks.reserve(vocab.merges.size() * 2);
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const auto& [left, right] = vocab.merges[rank];
    const int32_t a = find(left), b = find(right), merged = find(left + right);
    if (a < 0 || b < 0 || merged < 0) continue;  // cannot apply: a part or the result is not a token
    merge_ranks.emplace((uint64_t(uint32_t(a)) << 32) | uint32_t(b),
                        std::pair<int32_t, int32_t>(static_cast<int32_t>(rank), merged));
  }

  if (vocab.kind == TokenizerKind::BytePairGpt2) {
    pre_tokenizer = std::make_unique<PreTokenizer>(
        vocab.pre_regexes.empty() ? pre_tokenizer_regexes(vocab.pre) : vocab.pre_regexes);
  }

  byte_token.fill(-1);
  pieces.resize(n);
  for (int32_t id = 0; id < n; ++id) {
    const std::string& text = vocab.tokens[id];
    const TokenType t = type(id);
    if (t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) {
      pieces[id] = text;
    } else if (vocab.kind == TokenizerKind::BytePairGpt2) {
      pieces[id] = byte_level_decode(text);
    } else if (const int byte = parse_byte_token(text); t == TokenType::Byte && byte >= 0) {
      pieces[id] = std::string(1, static_cast<char>(byte));
      if (byte_token[byte] < 0) byte_token[byte] = id;
    } else {
      pieces[id] = spm_piece(text);
    }
  }

  eog.assign(n, 0);
  for (int32_t id : {vocab.eos_id, vocab.eot_id}) {
    if (id >= 0) eog[id] = 1;
  }
  for (std::string_view name : kEogNames) {
    const int32_t id = find(name);
    if (id >= 0 && id != vocab.bos_id && type(id) != TokenType::Normal) eog[id] = 1;
  }
}

Tokenizer::Tokenizer(Vocab vocab) : impl_(std::make_shared<const TokenizerImpl>(std::move(vocab))) {}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const TokenizerImpl& impl = *impl_;
  std::string sanitized;
  if (!is_valid_utf8(text)) {
    sanitized = utf8_sanitize(text);
    text = sanitized;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && impl.vocab.add_bos && impl.vocab.bos_id >= 0) out.push_back(impl.vocab.bos_id);
  bool after_special = true;  // SPM: the first text run, and any after a special token, get the "▁" prefix
  for (const TextFragment& f : impl.special.partition(text, parse_special)) {
    if (f.id >= 0) {
      out.push_back(f.id);
      after_special = true;
      continue;
    }
    if (impl.vocab.kind == TokenizerKind::BytePairGpt2) {
      encode_byte_level(impl, f.text, out);
    } else {
      encode_spm(impl, f.text, impl.vocab.add_space_prefix && after_special, out);
    }
    after_special = false;
  }
  if (add_special && impl.vocab.add_eos && impl.vocab.eos_id >= 0) out.push_back(impl.vocab.eos_id);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  FERRY_CHECK(id >= 0 && id < vocab_size(), "token id {} is out of range (vocab size {})", id, vocab_size());
  return impl_->pieces[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  // SPM vocabs that add a "▁" prefix drop the leading space of the first text token again.
  bool strip_space = impl_->vocab.kind == TokenizerKind::SentencePiece && impl_->vocab.add_space_prefix;
  std::string out;
  for (int32_t id : ids) {
    FERRY_CHECK(id >= 0 && id < vocab_size(), "token id {} is out of range (vocab size {})", id, vocab_size());
    const bool control = is_control(id);
    if (control && skip_special) continue;
    std::string_view piece = impl_->pieces[id];
    if (strip_space && !control) {
      if (!piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
      strip_space = false;
    }
    out += piece;
  }
  return out;
}

bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && id < vocab_size() && impl_->eog[id] != 0; }

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->type(id) == TokenType::Control;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->vocab.tokens.size()); }

const Vocab& Tokenizer::vocab() const { return impl_->vocab; }

}  // namespace ferry
