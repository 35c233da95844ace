#include "grammar/wrapped_schema.h"

#include <set>
#include <sstream>

#include "core/check.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace ferry::grammar {
namespace {

constexpr std::string_view kValueRule = "wrapped-value";  // json_schema_to_gbnf never names a rule so
constexpr std::string_view kRoot = "root ::= ";

// A literal element, or nothing for empty text.
std::string literal_or_empty(const std::string& text) { return text.empty() ? std::string() : gbnf_literal(text, RegexTarget::Raw) + " "; }

// The schema's rules with its root renamed `value_rule`. Rules other than root carry `rule_prefix`, so the
// grammars of several schemas only share the JSON primitives, whose lines are the same in each.
std::string value_rules(std::string_view schema_json, const std::string& value_rule, std::string_view rule_prefix) {
  std::string rules = json_schema_to_gbnf(schema_json, rule_prefix);
  FERRY_CHECK(rules.rfind(kRoot, 0) == 0, "wrapped schema: the schema's grammar does not start with its root rule");
  FERRY_CHECK(rules.find(value_rule + " ::=") == std::string::npos, "wrapped schema: rule name clash");
  rules.replace(0, kRoot.size(), value_rule + " ::= ");
  return rules;
}

// root ::= open one (separator one){0,max_repeats-1} close, then the rules.
std::string repeated(const std::string& one, const SchemaWrap& wrap, const std::string& rules) {
  FERRY_CHECK(wrap.max_repeats >= 0 && wrap.max_repeats <= 1024, "wrapped schema: max_repeats {} out of range (0..1024)",
              wrap.max_repeats);
  std::string root = "root ::= " + literal_or_empty(wrap.open) + one;
  if (wrap.max_repeats != 1) {
    const std::string more = "(" + literal_or_empty(wrap.separator) + one + ")";
    root += wrap.max_repeats == 0 ? more + "*" : more + "{0," + std::to_string(wrap.max_repeats - 1) + "}";
  }
  root += " " + literal_or_empty(wrap.close);
  return root + "\n" + rules;
}

}  // namespace

std::string wrapped_json_schema_gbnf(std::string_view schema_json, const SchemaWrap& wrap) {
  const std::string value = std::string(kValueRule);
  const std::string one = "(" + literal_or_empty(wrap.prefix) + value + " " + literal_or_empty(wrap.suffix) + ")";
  return repeated(one, wrap, value_rules(schema_json, value, ""));
}

std::string tagged_json_schemas_gbnf(std::span<const TaggedSchema> alternatives, const SchemaWrap& wrap) {
  FERRY_CHECK(!alternatives.empty(), "wrapped schema: no alternatives");
  std::string one = "(", rules;
  std::set<std::string> lines;  // the primitives' rules, once
  for (size_t i = 0; i < alternatives.size(); ++i) {
    const TaggedSchema& a = alternatives[i];
    const std::string value = std::string(kValueRule) + "-" + std::to_string(i);
    one += (i ? " | " : "") + literal_or_empty(a.prefix) + value + " " + literal_or_empty(a.suffix);
    std::istringstream in(value_rules(a.schema, value, "t" + std::to_string(i) + "-"));
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && lines.insert(line).second) rules += line + "\n";
  }
  return repeated(one + ")", wrap, rules);
}

}  // namespace ferry::grammar
