// Pre-tokenizer: splits text into fragments with a list of regexes (PCRE2, UTF + UCP, JIT). Each regex in
// turn splits every current fragment; both the matches and the text between them become fragments
// (Hugging Face Split with behavior "Isolated"). BPE merges never cross a fragment boundary.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

// The regex list of a named pre-tokenizer (tokenizer.ggml.pre), written as Hugging Face (Oniguruma)
// patterns. Throws ferry::Error for an unknown name.
std::vector<std::string> pre_tokenizer_regexes(std::string_view pre);

// The pattern Hugging Face's ByteLevel pre-tokenizer uses when use_regex is true.
extern const char* const kGpt2Regex;
// Hugging Face's Punctuation pre-tokenizer: Unicode P* plus ASCII punctuation that Unicode calls symbols.
extern const char* const kPunctuationClass;

class PreTokenizer {
 public:
  // Compiles the patterns; throws ferry::Error naming a pattern PCRE2 rejects.
  explicit PreTokenizer(const std::vector<std::string>& regexes);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // text must be valid UTF-8. Returns views into text, in order, covering it exactly; never empty pieces.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> regexes_;
};

}  // namespace ferry
