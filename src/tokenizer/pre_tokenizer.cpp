#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre_tokenizer.h"

#include <pcre2.h>

#include "core/check.h"
#include "tokenizer/utf8.h"

namespace ferry {

namespace {

// Oniguruma (which Hugging Face uses) counts U+0085 (NEL) as \s; PCRE2 with UCP does not. Rewrite \s and \S
// so both engines agree: outside a class \s -> [\s\x{85}], \S -> [^\s\x{85}]; inside a class \s -> \s\x{85}.
std::string adapt_pattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (e == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

struct PreTokenizer::Compiled {
  std::string pattern;
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::vector<std::string>& regexes) {
  for (const std::string& pattern : regexes) {
    auto compiled = std::make_unique<Compiled>();
    compiled->pattern = pattern;
    const std::string adapted = adapt_pattern(pattern);
    int error = 0;
    PCRE2_SIZE offset = 0;
    compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(adapted.data()), adapted.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (compiled->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      fail("pre-tokenizer regex '{}' does not compile at offset {}: {}", pattern, offset,
           reinterpret_cast<const char*>(message));
    }
    pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
    regexes_.push_back(std::move(compiled));
  }
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  if (regexes_.empty()) return pieces;

  const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match_owner(
      pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
  pcre2_match_data* match = match_owner.get();
  FERRY_CHECK(match != nullptr, "out of memory creating regex match data");
  std::vector<std::string_view> next;
  for (const auto& regex : regexes_) {
    next.clear();
    next.reserve(pieces.size() * 2);
    for (std::string_view piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t start = 0;  // where the next search begins
      size_t emitted = 0;  // end of what has been emitted so far
      while (start < piece.size()) {
        const int rc = pcre2_match(regex->code, subject, piece.size(), start, PCRE2_NO_UTF_CHECK, match,
                                   nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR message[256];
          pcre2_get_error_message(rc, message, sizeof(message));
          fail("pre-tokenizer regex '{}' failed: {}", regex->pattern, reinterpret_cast<const char*>(message));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
        const size_t m_begin = ov[0], m_end = ov[1];
        if (m_end == m_begin) {  // empty match: step over one character
          const size_t len = utf8_sequence_length(piece, m_begin);
          start = m_begin + (len == 0 ? 1 : len);
          continue;
        }
        if (m_begin > emitted) next.push_back(piece.substr(emitted, m_begin - emitted));
        next.push_back(piece.substr(m_begin, m_end - m_begin));
        emitted = start = m_end;
      }
      if (emitted < piece.size()) next.push_back(piece.substr(emitted));
    }
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace ferry
