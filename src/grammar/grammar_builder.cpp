#include "grammar/grammar_builder.h"

#include "core/check.h"

namespace ferry::grammar {

uint32_t GrammarBuilder::rule_id(std::string_view name) {
  const auto it = ids_.find(std::string(name));
  if (it != ids_.end()) return it->second;
  const auto id = static_cast<uint32_t>(names_.size());
  FERRY_CHECK(id < kMaxGrammarElements, "grammar: too many rules (more than {})", kMaxGrammarElements);
  names_.emplace_back(name);
  bodies_.emplace_back();
  defined_.push_back(false);
  ids_.emplace(std::string(name), id);
  return id;
}

uint32_t GrammarBuilder::fresh_rule(std::string_view base) {
  for (size_t n = names_.size();; ++n) {
    // '#' is not a name character of GBNF text, so a generated rule never takes the name of a rule the text
    // defines further down (root ::= ("a")* then root-1 ::= ... was "defined twice").
    const std::string name = std::string(base) + "#" + std::to_string(n);
    if (!ids_.contains(name)) return rule_id(name);
  }
}

void GrammarBuilder::count(size_t n) {
  n_elements_ += n;
  FERRY_CHECK(n_elements_ <= kMaxGrammarElements, "grammar: too large (more than {} elements)",
              kMaxGrammarElements);
}

void GrammarBuilder::define(uint32_t rule, Alternatives alternatives) {
  FERRY_CHECK(!defined_[rule], "grammar: rule '{}' is defined twice", names_[rule]);
  for (const auto& alt : alternatives) count(alt.size() + 1);
  bodies_[rule] = std::move(alternatives);
  defined_[rule] = true;
}

bool GrammarBuilder::defined(uint32_t rule) const { return defined_[rule]; }

Element GrammarBuilder::bytes(const ByteSet& set) {
  std::string key = set.to_string();
  const auto it = byte_set_ids_.find(key);
  if (it != byte_set_ids_.end()) return {ElementKind::Bytes, it->second};
  const auto id = static_cast<uint32_t>(byte_sets_.size());
  byte_sets_.push_back(set);
  byte_set_ids_.emplace(std::move(key), id);
  return {ElementKind::Bytes, id};
}

Element GrammarBuilder::codepoints(const std::vector<CodepointRange>& ranges, std::string_view base) {
  const auto seqs = utf8_sequences(ranges);
  ByteSet ascii;
  Alternatives alts;
  for (const auto& seq : seqs) {
    if (seq.size() == 1) {
      for (int b = seq[0].lo; b <= seq[0].hi; ++b) ascii.set(b);
      continue;
    }
    Sequence s;
    for (const auto& r : seq) {
      ByteSet set;
      for (int b = r.lo; b <= r.hi; ++b) set.set(b);
      s.push_back(bytes(set));
    }
    alts.push_back(std::move(s));
  }
  if (alts.empty() && ascii.any()) return bytes(ascii);
  if (ascii.any()) alts.insert(alts.begin(), Sequence{bytes(ascii)});
  const uint32_t r = fresh_rule(base);
  define(r, std::move(alts));  // an empty class gives a rule with no alternatives: it matches nothing
  return {ElementKind::Rule, r};
}

void GrammarBuilder::literal(std::string_view utf8, Sequence& seq) {
  count(utf8.size());
  for (unsigned char c : utf8) {
    ByteSet set;
    set.set(c);
    seq.push_back(bytes(set));
  }
}

Element GrammarBuilder::as_one_element(Sequence x, std::string_view base) {
  if (x.size() == 1) return x[0];
  const uint32_t r = fresh_rule(base);
  define(r, {std::move(x)});
  return {ElementKind::Rule, r};
}

void GrammarBuilder::repeat(Sequence x, uint32_t min, int64_t max, std::string_view base, Sequence& seq) {
  FERRY_CHECK(min <= kMaxRepetition && max <= static_cast<int64_t>(kMaxRepetition),
              "grammar: repetition count above {} in '{}'", kMaxRepetition, base);
  FERRY_CHECK(max < 0 || max >= static_cast<int64_t>(min), "grammar: repetition {{{},{}}} has max < min in '{}'",
              min, max, base);
  const Element e = as_one_element(std::move(x), base);
  count(min);
  for (uint32_t i = 0; i < min; ++i) seq.push_back(e);
  if (max < 0) {  // star: R ::= e R | ""
    const uint32_t r = fresh_rule(base);
    define(r, {{e, {ElementKind::Rule, r}}, {}});
    seq.push_back({ElementKind::Rule, r});
    return;
  }
  // n-m nested optionals: R_k ::= e R_{k-1} | "", R_1 ::= e | ""
  const auto n_opt = static_cast<uint32_t>(max - min);
  if (n_opt == 0) return;
  uint32_t inner = fresh_rule(base);
  define(inner, {{e}, {}});
  for (uint32_t k = 1; k < n_opt; ++k) {
    const uint32_t r = fresh_rule(base);
    define(r, {{e, {ElementKind::Rule, inner}}, {}});
    inner = r;
  }
  seq.push_back({ElementKind::Rule, inner});
}

Grammar GrammarBuilder::finish(std::string_view root_name) {
  const auto it = ids_.find(std::string(root_name));
  FERRY_CHECK(it != ids_.end() && defined_[it->second], "grammar: no rule named '{}'", root_name);
  Grammar g;
  g.root = it->second;
  g.byte_sets = std::move(byte_sets_);
  g.rules.resize(names_.size());
  for (size_t r = 0; r < names_.size(); ++r) {
    FERRY_CHECK(defined_[r], "grammar: rule '{}' is used but never defined", names_[r]);
    g.rules[r].name = names_[r];
    for (auto& alt : bodies_[r]) {
      g.rules[r].alternatives.push_back(static_cast<uint32_t>(g.elements.size()));
      g.elements.insert(g.elements.end(), alt.begin(), alt.end());
      g.elements.push_back({ElementKind::End, 0});
    }
  }
  validate_grammar(g);
  return g;
}

}  // namespace ferry::grammar
