// A JSON schema's value written inside literal text, possibly several times in a row: the grammar of a tool
// call that a chat template's format requires, e.g. `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`
// (Hermes / Qwen), one to `max_repeats` of them separated by "\n":
//
//   root ::= open one (separator one){0,max_repeats-1} close
//   one  ::= prefix value suffix
//
// where value is json_schema_to_gbnf(schema)'s root. Markup that names the function outside the JSON
// (`<function=f>{...}</function>`) gives each function its own literal texts and schema:
//
//   one  ::= prefix_1 value_1 suffix_1 | prefix_2 value_2 suffix_2 | ...
//
// The result is GBNF text (its own cache key).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace ferry::grammar {

struct SchemaWrap {
  std::string prefix;      // literal text before each value ("" : none)
  std::string suffix;      // literal text after each value
  std::string separator;   // literal text between two repeats
  int32_t max_repeats = 1; // >= 1; 0: unbounded
  std::string open;        // literal text before the first value
  std::string close;       // literal text after the last value
};

struct TaggedSchema {
  std::string prefix;  // literal text before the value
  std::string schema;  // JSON schema text
  std::string suffix;  // literal text after the value
};

// Throws ferry::Error for a bad schema (as json_schema_to_gbnf) or max_repeats out of 0..1024.
std::string wrapped_json_schema_gbnf(std::string_view schema_json, const SchemaWrap& wrap);

// Each value is one of `alternatives` (at least one); wrap.prefix and wrap.suffix are unused.
std::string tagged_json_schemas_gbnf(std::span<const TaggedSchema> alternatives, const SchemaWrap& wrap);

}  // namespace ferry::grammar
