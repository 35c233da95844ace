// Vocab: everything a Tokenizer needs, loaded from GGUF metadata (tokenizer.ggml.*) or from a Hugging Face
// folder (tokenizer.json + tokenizer_config.json). Loaders validate everything and throw ferry::Error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ferry {

class GgufFile;

enum class TokenizerKind { BytePairGpt2, SentencePiece };

// Token types as llama.cpp / GGUF number them.
enum class TokenType : int32_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

struct Vocab {
  TokenizerKind kind = TokenizerKind::BytePairGpt2;
  // Pre-tokenizer name as in tokenizer.ggml.pre: "smollm", "llama-bpe", "qwen2", "gpt-2", "deepseek-llm", ...
  std::string pre;
  // When non-empty, these regexes (applied in order, each splitting every fragment, matches and gaps both
  // kept) replace the list that `pre` names. vocab_from_hf fills it from the tokenizer.json Split patterns.
  std::vector<std::string> pre_regexes;
  std::vector<std::string> tokens;      // id -> token text (byte-level BPE: GPT-2 byte-to-unicode mapped)
  std::vector<float> scores;            // SPM scores (empty for BPE)
  std::vector<int32_t> token_types;     // TokenType values, one per token
  std::vector<std::pair<std::string, std::string>> merges;  // BPE merges, rank = index
  int32_t bos_id = -1, eos_id = -1, eot_id = -1, unk_id = -1, pad_id = -1;
  bool add_bos = false, add_eos = false;
  bool add_space_prefix = false;  // SPM: prepend "▁"; byte-level: prepend " " (ByteLevel add_prefix_space)
  bool ignore_merges = false;     // byte-level: a whole pre-token found in the vocab is emitted as is (llama3)
  std::optional<std::string> chat_template;
};

Vocab vocab_from_gguf(const GgufFile& gguf);          // tokenizer.ggml.* keys
Vocab vocab_from_hf(const std::string& model_dir);    // tokenizer.json (+ tokenizer_config.json)

// Checks internal consistency (sizes, ids in range, token types); throws ferry::Error naming the problem.
void validate_vocab(const Vocab& vocab);

}  // namespace ferry
