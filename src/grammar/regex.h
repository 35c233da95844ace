// Regular expressions (the subset JSON-schema patterns and structured-output clients use) to GBNF:
// literals, escapes (\d \w \s \D \W \S \n \t \uXXXX ...), `.`, [classes], (groups), (?:...), |, * + ? {m}
// {m,} {m,n} (lazy suffixes ignored: the language is the same), ^ and $ at the ends. Backreferences,
// lookaround and inline flags are an error naming the feature.
#pragma once

#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace ferry::grammar {

enum class RegexTarget {
  Raw,         // the match itself
  JsonString,  // the match as the body of a JSON string literal (", \ and control characters escaped)
};

// A GBNF expression (one group) for the whole-string match of pattern.
std::string regex_to_gbnf(std::string_view pattern, RegexTarget target);
// The grammar that accepts exactly the strings the pattern matches in full.
Grammar compile_regex(std::string_view pattern);

// GBNF text for one codepoint of ranges, with the JSON-string escaping of target. Used by json_schema.
std::string gbnf_class(const std::vector<std::pair<uint32_t, uint32_t>>& ranges, RegexTarget target);
// A GBNF literal for the UTF-8 text, JSON-string escaped when target says so.
std::string gbnf_literal(std::string_view utf8, RegexTarget target);

}  // namespace ferry::grammar
