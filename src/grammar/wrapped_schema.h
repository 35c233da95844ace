// A JSON schema's value written inside literal text, possibly several times in a row: the grammar of a tool
// call that a chat template's format requires, e.g. `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`
// (Hermes / Qwen), one to `max_repeats` of them separated by "\n":
//
//   root ::= prefix value suffix (separator prefix value suffix){0,max_repeats-1}
//
// where value is json_schema_to_gbnf(schema)'s root. The result is GBNF text (its own cache key).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ferry::grammar {

struct SchemaWrap {
  std::string prefix;      // literal text before each value ("" : none)
  std::string suffix;      // literal text after each value
  std::string separator;   // literal text between two repeats
  int32_t max_repeats = 1; // >= 1; 0: unbounded
};

// Throws ferry::Error for a bad schema (as json_schema_to_gbnf) or max_repeats < 0.
std::string wrapped_json_schema_gbnf(std::string_view schema_json, const SchemaWrap& wrap);

}  // namespace ferry::grammar
