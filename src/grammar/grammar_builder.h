// Builds a Grammar rule by rule: names map to ids (a reference may come before its definition), byte sets
// are interned, codepoint classes become helper rules of UTF-8 byte sequences, and repetitions become
// helper rules (x* -> R ::= x R | "", x{m,n} -> m copies then n-m nested optionals), all bounded.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/utf8_ranges.h"

namespace ferry::grammar {

using Sequence = std::vector<Element>;
using Alternatives = std::vector<Sequence>;

class GrammarBuilder {
 public:
  // The id of the rule called name (created undefined on first mention).
  uint32_t rule_id(std::string_view name);
  // A fresh helper rule named "<base>#<n>" (never a name GBNF text can define).
  uint32_t fresh_rule(std::string_view base);
  void define(uint32_t rule, Alternatives alternatives);
  bool defined(uint32_t rule) const;

  Element bytes(const ByteSet& set);
  // One codepoint of the (normalized) ranges, as a single byte set when all are ASCII, else a helper rule.
  Element codepoints(const std::vector<CodepointRange>& ranges, std::string_view base);
  // The UTF-8 bytes of a literal string, appended to seq.
  void literal(std::string_view utf8, Sequence& seq);
  // x repeated min..max times (max < 0: unbounded); x is wrapped into a helper rule first when longer than 1.
  void repeat(Sequence x, uint32_t min, int64_t max, std::string_view base, Sequence& seq);

  // Checks every referenced rule is defined and the root exists; then validate_grammar.
  Grammar finish(std::string_view root_name);

 private:
  Element as_one_element(Sequence x, std::string_view base);
  void count(size_t n);

  std::vector<std::string> names_;
  std::vector<Alternatives> bodies_;
  std::vector<bool> defined_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<ByteSet> byte_sets_;
  std::unordered_map<std::string, uint32_t> byte_set_ids_;
  size_t n_elements_ = 0;
};

}  // namespace ferry::grammar
