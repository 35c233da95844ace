#include "engine/output_format_grammar.h"

#include <vector>

#include "grammar/wrapped_schema.h"

namespace ferry {

bool is_wrapped(const OutputFormat& f) {
  return !f.prefix.empty() || !f.suffix.empty() || f.max_repeats != 1 || !f.alternatives.empty() || !f.open.empty() ||
         !f.close.empty();
}

std::string wrapped_schema_gbnf(const OutputFormat& f) {
  const grammar::SchemaWrap wrap{f.prefix, f.suffix, f.separator, f.max_repeats, f.open, f.close};
  if (f.alternatives.empty()) return grammar::wrapped_json_schema_gbnf(f.text, wrap);
  std::vector<grammar::TaggedSchema> alternatives;
  for (const OutputFormat::TaggedSchema& a : f.alternatives) alternatives.push_back({a.prefix, a.schema, a.suffix});
  return grammar::tagged_json_schemas_gbnf(alternatives, wrap);
}

}  // namespace ferry
