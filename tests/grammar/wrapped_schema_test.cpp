// The grammar of a forced tool call: a schema's value inside literal markup, repeated (Hermes' <tool_call>
// blocks) or once; what it accepts and refuses, and the error for a bad schema.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/check.h"
#include "grammar/gbnf.h"
#include "grammar/wrapped_schema.h"
#include "grammar_test_util.h"

namespace ferry::grammar {
namespace {

using testing::accepts;

std::shared_ptr<CompiledGrammar> wrapped(const std::string& schema, const SchemaWrap& wrap) {
  return std::make_shared<CompiledGrammar>(parse_gbnf(wrapped_json_schema_gbnf(schema, wrap)), testing::small_vocab());
}

constexpr const char* kCall =
    R"({"type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}},
        "required": ["name", "arguments"], "additionalProperties": false})";

TEST(WrappedSchema, HermesBlocksRepeated) {
  const auto g = wrapped(kCall, {"<tool_call>\n", "\n</tool_call>", "\n", 0, "", ""});
  const std::string one = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  EXPECT_TRUE(accepts(g, one));
  EXPECT_TRUE(accepts(g, one + "\n" + one + "\n" + one));
  EXPECT_FALSE(accepts(g, ""));
  EXPECT_FALSE(accepts(g, one + one));  // the separator is required
  EXPECT_FALSE(accepts(g, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"));  // no markup
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"other\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));  // city required
}

TEST(WrappedSchema, OnceAndBounded) {
  const std::string call = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}";
  const auto once = wrapped(kCall, {});
  EXPECT_TRUE(accepts(once, call));
  EXPECT_FALSE(accepts(once, call + call));
  const auto two = wrapped(kCall, {"[", "]", ";", 2, "", ""});
  EXPECT_TRUE(accepts(two, "[" + call + "]"));
  EXPECT_TRUE(accepts(two, "[" + call + "];[" + call + "]"));
  EXPECT_FALSE(accepts(two, "[" + call + "];[" + call + "];[" + call + "]"));
  // Markup text with characters GBNF escapes.
  const auto quoted = wrapped(R"({"type": "integer"})", {"\"\\\n", "\t]", "", 1, "", ""});
  EXPECT_TRUE(accepts(quoted, "\"\\\n42\t]"));
}

// Reproduction: a schema whose grammar has rules named root-1, root-2 (anyOf branches) inside a repeated
// wrap made the GBNF parser name its generated group rules the same ("rule 'root-2' is defined twice").
TEST(WrappedSchema, AnyOfBranchesRepeated) {
  const std::string schema = R"({"anyOf": [{"type": "object", "properties": {"name": {"const": "a"}}, "required": ["name"],
      "additionalProperties": false}, {"type": "object", "properties": {"name": {"const": "b"}}, "required": ["name"],
      "additionalProperties": false}]})";
  const auto g = wrapped(schema, {"<c>", "</c>", "\n", 0, "", ""});
  EXPECT_TRUE(accepts(g, R"(<c>{"name": "a"}</c>)" "\n" R"(<c>{"name": "b"}</c>)"));
  EXPECT_FALSE(accepts(g, R"(<c>{"name": "c"}</c>)"));
}

// Markup that names the function outside the JSON: each name goes with its own schema, and open / close
// enclose the whole list (DeepSeek's calls section).
TEST(WrappedSchema, TaggedAlternativesTieNameToSchema) {
  const std::vector<TaggedSchema> alts = {
      {"<function=a>", R"({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"], "additionalProperties": false})", "</function>"},
      {"<function=b>", R"({"type": "object", "properties": {"s": {"type": "string", "enum": ["u", "v"]}}, "required": ["s"], "additionalProperties": false})", "</function>"}};
  const auto g = std::make_shared<CompiledGrammar>(
      parse_gbnf(tagged_json_schemas_gbnf(alts, {"", "", "\n", 0, "[[", "]]"})), testing::small_vocab());
  EXPECT_TRUE(accepts(g, R"([[<function=a>{"x": 1}</function>]])"));
  EXPECT_TRUE(accepts(g, "[[<function=a>{\"x\": 1}</function>\n<function=b>{\"s\": \"v\"}</function>]]"));
  EXPECT_FALSE(accepts(g, R"([[<function=a>{"s": "u"}</function>]])"));  // b's arguments under a's name
  EXPECT_FALSE(accepts(g, R"([[<function=b>{"x": 1}</function>]])"));
  EXPECT_FALSE(accepts(g, R"(<function=a>{"x": 1}</function>)"));  // open and close are required
  const auto once = std::make_shared<CompiledGrammar>(parse_gbnf(tagged_json_schemas_gbnf(alts, {})), testing::small_vocab());
  EXPECT_FALSE(accepts(once, R"(<function=a>{"x": 1}</function><function=a>{"x": 2}</function>)"));
  EXPECT_THROW(tagged_json_schemas_gbnf({}, {}), Error);
}

TEST(WrappedSchema, BadInputIsAnError) {
  EXPECT_THROW(wrapped_json_schema_gbnf("{", {}), Error);
  EXPECT_THROW(wrapped_json_schema_gbnf(R"({"type": "object"})", {"", "", "", -1, "", ""}), Error);
  EXPECT_THROW(wrapped_json_schema_gbnf(R"({"not": {}})", {"<a>", "</a>", "", 1, "", ""}), Error);  // unsupported keyword
}

}  // namespace
}  // namespace ferry::grammar
