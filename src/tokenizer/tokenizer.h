// Tokenizer: exact byte-level BPE (GPT-2 family: Llama 3, Qwen 2, SmolLM, DeepSeek, Falcon, StarCoder, ...)
// and SentencePiece-style BPE with byte fallback (Llama 2, Mistral, Phi-3), with special/added tokens, and
// an incremental detokenizer for streaming.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace ferry {

struct TokenizerImpl;

class Tokenizer {
 public:
  // Validates the vocab (throws ferry::Error naming the problem) and builds the lookup tables.
  explicit Tokenizer(Vocab vocab);

  // add_special: add BOS/EOS as the model's metadata says; parse_special: text like "<|im_start|>" becomes
  // its special token (user-defined added tokens are always matched). Invalid UTF-8 in text never crashes:
  // each invalid byte is treated as U+FFFD (callers should reject such input first, see utf8.h).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  // The raw bytes the token stands for (byte-level decoded; SPM "▁" -> space, <0xNN> -> the byte; control
  // and added tokens -> their text). Throws ferry::Error for an id out of range.
  std::string token_to_piece(int32_t id) const;
  // Concatenated pieces; control tokens are left out when skip_special. SentencePiece vocabs with
  // add_space_prefix drop the leading space of the first text token (the one encode added).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // End of generation: eos, eot, and tokens named <|im_end|>, <|eot_id|>, <|endoftext|>, ...
  bool is_eog(int32_t id) const;
  bool is_control(int32_t id) const;
  int32_t vocab_size() const;
  const Vocab& vocab() const;

 private:
  std::shared_ptr<const TokenizerImpl> impl_;  // immutable once built: copies share it, threads may too
};

// For streaming: push ids one at a time; the returned chunks never end inside a UTF-8 sequence, and their
// concatenation (with flush) equals decode() of all the ids pushed, for valid UTF-8 output.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok, bool skip_special = false);
  std::string push(int32_t id);  // newly completed text (empty while a UTF-8 sequence is incomplete)
  std::string flush();           // whatever remains (invalid bytes become U+FFFD)

 private:
  Tokenizer tok_;  // a cheap copy: shares the immutable tables
  bool skip_special_;
  bool seen_text_ = false;  // a text token was emitted already (for the SPM leading-space rule)
  std::string pending_;     // bytes not yet returned
};

}  // namespace ferry
