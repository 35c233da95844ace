#include "grammar/wrapped_schema.h"

#include "core/check.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace ferry::grammar {
namespace {

constexpr std::string_view kValueRule = "wrapped-value";  // json_schema_to_gbnf never names a rule so

// A literal element, or nothing for empty text.
std::string literal_or_empty(const std::string& text) { return text.empty() ? std::string() : gbnf_literal(text, RegexTarget::Raw) + " "; }

}  // namespace

std::string wrapped_json_schema_gbnf(std::string_view schema_json, const SchemaWrap& wrap) {
  FERRY_CHECK(wrap.max_repeats >= 0 && wrap.max_repeats <= 1024, "wrapped schema: max_repeats {} out of range (0..1024)",
              wrap.max_repeats);
  std::string rules = json_schema_to_gbnf(schema_json);
  constexpr std::string_view kRoot = "root ::= ";
  FERRY_CHECK(rules.rfind(kRoot, 0) == 0, "wrapped schema: the schema's grammar does not start with its root rule");
  FERRY_CHECK(rules.find(std::string(kValueRule) + " ::=") == std::string::npos, "wrapped schema: rule name clash");
  rules.replace(0, kRoot.size(), std::string(kValueRule) + " ::= ");
  const std::string one = literal_or_empty(wrap.prefix) + std::string(kValueRule) + " " + literal_or_empty(wrap.suffix);
  std::string root = "root ::= " + one;
  if (wrap.max_repeats != 1) {
    const std::string more = "(" + literal_or_empty(wrap.separator) + one + ")";
    root += wrap.max_repeats == 0 ? more + "*" : more + "{0," + std::to_string(wrap.max_repeats - 1) + "}";
  }
  return root + "\n" + rules;
}

}  // namespace ferry::grammar
