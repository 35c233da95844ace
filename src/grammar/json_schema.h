// JSON schema (the subset structured-output clients send) to GBNF, and the grammars of response_format:
// any JSON (json_object), a schema (json_schema), a regex, GBNF text. Supported: type (one or a list),
// object properties/required/additionalProperties, array items/minItems/maxItems, string enum/const/
// pattern/minLength/maxLength/format (date-time, date, time, uuid, email), number/integer with integer
// minimum/maximum/exclusive bounds, boolean, null, enum/const of any value, anyOf/oneOf, allOf of one
// schema, $ref to #, #/$defs/... and #/definitions/... (recursion included). Anything else is a
// ferry::Error naming the keyword: a schema is enforced exactly or refused, never silently loosened.
// Objects are generated with their properties in declared order (required ones always, optional ones
// optionally) and no other keys unless additionalProperties allows them on a schema without properties;
// oneOf is generated as anyOf after checking no value can match two branches (different JSON types, or
// enum/const lists without a common value); other oneOf schemas are an error.
#pragma once

#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace ferry::grammar {

// rule_prefix (letters, digits, '-'): put before the name of every rule the schema makes (not "root" and
// not the shared JSON primitives), so the grammars of several schemas can be joined in one text.
std::string json_schema_to_gbnf(std::string_view schema_json, std::string_view rule_prefix = "");
Grammar compile_json_schema(std::string_view schema_json);
// Any JSON object (response_format json_object).
Grammar compile_json_object();

}  // namespace ferry::grammar
