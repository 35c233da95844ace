// A context-free grammar over bytes, the form every constraint compiles to (GBNF text, JSON schema, regex).
// Rules are alternatives of element sequences; an element is a byte set (one input byte, 256-bit mask) or a
// reference to a rule. Codepoint classes were already lowered to UTF-8 byte sequences (utf8_ranges.h), so
// the matcher consumes bytes and a token that ends inside a UTF-8 sequence is handled like any prefix.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry::grammar {

enum class ElementKind : uint8_t { Bytes, Rule, End };

struct Element {
  ElementKind kind = ElementKind::End;
  uint32_t index = 0;  // Bytes: index into Grammar::byte_sets; Rule: rule id; End: unused
};

using ByteSet = std::bitset<256>;

struct Rule {
  std::string name;
  std::vector<uint32_t> alternatives;  // start offsets into Grammar::elements; each alternative ends at an End
};

// The compiled, immutable grammar: elements is the flat program (alternatives laid out back to back, each
// terminated by an End element); rules[root] is where matching starts.
struct Grammar {
  std::vector<Element> elements;
  std::vector<ByteSet> byte_sets;
  std::vector<Rule> rules;
  uint32_t root = 0;
};

// Size limits that keep hostile input bounded (a clear ferry::Error when exceeded).
inline constexpr size_t kMaxGrammarElements = 1u << 21;
inline constexpr uint32_t kMaxRepetition = 10000;

// Checks the grammar can be matched: every alternative ends with End, references are in range, and no
// rule is left-recursive (directly or through nullable prefixes); throws ferry::Error naming the rule.
void validate_grammar(const Grammar& grammar);

}  // namespace ferry::grammar
