// GBNF, the grammar text llama-server accepts: `name ::= alternatives` rules, "literals", [classes] with
// ranges and ^, `.`, (groups), * + ? {m} {m,} {m,n}, # comments; the start rule is `root`.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace ferry::grammar {

// Throws ferry::Error naming the problem and its line for bad text (syntax, undefined or left-recursive
// rules, nesting deeper than 200 groups, repetitions above kMaxRepetition, grammars above the size limit).
Grammar parse_gbnf(std::string_view text);

}  // namespace ferry::grammar
