// Internal state of a Tokenizer (immutable after construction) and the per-kind encoders.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/vocab.h"

namespace ferry {

struct TokenizerImpl {
  explicit TokenizerImpl(Vocab v);

  Vocab vocab;
  std::unordered_map<std::string_view, int32_t> token_to_id;  // views into vocab.tokens
  // (left id << 32 | right id) -> {rank, merged id}
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merge_ranks;
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // byte-level BPE only
  SpecialTokenMatcher special;
  std::array<int32_t, 256> byte_token{};  // SPM: the <0xNN> token of each byte (-1: none)
  std::vector<std::string> pieces;        // id -> token_to_piece
  std::vector<uint8_t> eog;               // id -> end of generation

  int32_t find(std::string_view text) const {
    const auto it = token_to_id.find(text);
    return it == token_to_id.end() ? -1 : it->second;
  }
  TokenType type(int32_t id) const { return static_cast<TokenType>(vocab.token_types[id]); }
  const std::pair<int32_t, int32_t>* merge(int32_t left, int32_t right) const {
    if (left < 0 || right < 0) return nullptr;
    const auto it = merge_ranks.find((uint64_t(uint32_t(left)) << 32) | uint32_t(right));
    return it == merge_ranks.end() ? nullptr : &it->second;
  }
};

// Appends the ids of one run of raw text (no special tokens inside; valid UTF-8).
void encode_byte_level(const TokenizerImpl& impl, std::string_view text, std::vector<int32_t>& out);
void encode_spm(const TokenizerImpl& impl, std::string_view text, bool prefix_space, std::vector<int32_t>& out);

}  // namespace ferry
