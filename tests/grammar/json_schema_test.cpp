// JSON schema, json_object and regex grammars: hand-checked strings, unsupported features refused by name,
// masks equal to brute force on a real vocabulary, and a corpus of 120 schemas whose random walks through
// the mask (seeded) all end in JSON that the schema validates (jsonschema, via
// reference/validate_schema_outputs.py, when the test venv has it; JSON parsing always).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/check.h"
#include "fixtures/sanitizer.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar_test_util.h"

namespace ferry::grammar {
namespace {

using testing::accepts;

std::shared_ptr<CompiledGrammar> schema(const std::string& text) {
  return std::make_shared<CompiledGrammar>(compile_json_schema(text), testing::small_vocab());
}

std::string error_of(const std::string& text) {
  try {
    compile_json_schema(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonSchema, ObjectsWithRequiredAndOptionalProperties) {
  const auto g = schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
    "c":{"type":"boolean"}},"required":["b"],"additionalProperties":false})");
  EXPECT_TRUE(accepts(g, R"({"b":"x"})"));
  EXPECT_TRUE(accepts(g, R"({"a": -12, "b": "x", "c": true})"));
  EXPECT_TRUE(accepts(g, "{\n  \"a\": 0,\n  \"b\": \"\\u00e9\\n\"\n}"));
  EXPECT_FALSE(accepts(g, R"({"a":1})"));              // b is required
  EXPECT_FALSE(accepts(g, R"({"b":"x","d":1})"));      // no other keys
  EXPECT_FALSE(accepts(g, R"({"b":"x",})"));
  EXPECT_FALSE(accepts(g, R"({"a":01,"b":"x"})"));     // no leading zeros
  EXPECT_FALSE(accepts(g, R"({"a":1.5,"b":"x"})"));    // integer
  EXPECT_FALSE(accepts(g, "{\"b\":\"a\nb\"}"));         // raw control characters are not JSON
}

TEST(JsonSchema, ArraysEnumsBoundsAndFormats) {
  const auto arr = schema(R"({"type":"array","items":{"enum":["x",2,null]},"minItems":2,"maxItems":3})");
  EXPECT_TRUE(accepts(arr, R"(["x", 2])"));
  EXPECT_TRUE(accepts(arr, R"([null,null,"x"])"));
  EXPECT_FALSE(accepts(arr, R"(["x"])"));
  EXPECT_FALSE(accepts(arr, R"([2,2,2,2])"));
  EXPECT_FALSE(accepts(arr, R"(["y",2])"));
  const auto num = schema(R"({"type":"integer","minimum":-15,"maximum":230})");
  for (int v = -40; v <= 300; ++v) EXPECT_EQ(accepts(num, std::to_string(v)), v >= -15 && v <= 230) << v;
  const auto real = schema(R"({"type":"number","exclusiveMinimum":-2,"maximum":3})");
  EXPECT_TRUE(accepts(real, "-1.99"));
  EXPECT_TRUE(accepts(real, "3"));
  EXPECT_TRUE(accepts(real, "2.999"));
  EXPECT_FALSE(accepts(real, "-2"));
  EXPECT_FALSE(accepts(real, "-2.5"));
  EXPECT_FALSE(accepts(real, "3.5"));
  const auto unit = schema(R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})");
  EXPECT_TRUE(accepts(unit, "0.5"));
  EXPECT_TRUE(accepts(unit, "0.001"));
  EXPECT_FALSE(accepts(unit, "0.0"));
  EXPECT_FALSE(accepts(unit, "0"));
  EXPECT_FALSE(accepts(unit, "1"));
  const auto neg = schema(R"({"type":"number","minimum":-5,"exclusiveMaximum":-2})");
  EXPECT_TRUE(accepts(neg, "-2.5"));
  EXPECT_TRUE(accepts(neg, "-5"));
  EXPECT_TRUE(accepts(neg, "-4.75"));
  EXPECT_FALSE(accepts(neg, "-2"));
  EXPECT_FALSE(accepts(neg, "-1.5"));
  EXPECT_FALSE(accepts(neg, "-5.5"));
  const auto when = schema(R"({"type":"string","format":"date-time"})");
  EXPECT_TRUE(accepts(when, R"("2026-12-01T23:20:00Z")"));
  EXPECT_TRUE(accepts(when, R"("2024-02-28T01:02:03.123+05:30")"));
  EXPECT_FALSE(accepts(when, R"("2026-02-30T00:00:00Z")"));
  EXPECT_FALSE(accepts(when, R"("2026-12-01 23:20:00Z")"));
  const auto id = schema(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(accepts(id, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(accepts(id, R"("123e4567e89b12d3a456426614174000")"));
  const auto pat = schema(R"({"type":"string","pattern":"^[a-c\"]+-\\d{2}$"})");
  EXPECT_TRUE(accepts(pat, R"("ab\"c-42")"));
  EXPECT_FALSE(accepts(pat, R"("ab"c-42")"));
  EXPECT_FALSE(accepts(pat, R"("abd-42")"));
}

TEST(JsonSchema, RefsAndRecursion) {
  const auto g = schema(R"({"$defs":{"t":{"type":"object","properties":{"v":{"type":"integer"},
    "kids":{"type":"array","items":{"$ref":"#/$defs/t"}}},"required":["v"],"additionalProperties":false}},
    "$ref":"#/$defs/t"})");
  EXPECT_TRUE(accepts(g, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
  EXPECT_FALSE(accepts(g, R"({"v":1,"kids":[{"w":2}]})"));
  const auto any = std::make_shared<CompiledGrammar>(compile_json_object(), testing::small_vocab());
  EXPECT_TRUE(accepts(any, R"({"a":[1,{"b":null}],"c":"\u00e9"})"));
  EXPECT_FALSE(accepts(any, R"([1])"));
  EXPECT_FALSE(accepts(any, R"({"a":tru})"));
}

TEST(JsonSchema, UnsupportedFeaturesAreNamed) {
  EXPECT_NE(error_of(R"({"type":"object","patternProperties":{}})").find("'patternProperties'"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"string","format":"hostname"})").find("'hostname'"), std::string::npos);
  EXPECT_NE(error_of(R"({"allOf":[{},{}]})").find("allOf"), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref":"http://x/y"})").find("unsupported"), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref":"#/$defs/missing"})").find("does not resolve"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"number","minimum":0.5})").find("fractional"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"array","uniqueItems":true})").find("uniqueItems"), std::string::npos);
  EXPECT_NE(error_of(R"j({"type":"string","pattern":"(?=a)"})j").find("lookaround"), std::string::npos);
  EXPECT_NE(error_of(R"j({"type":"string","pattern":"(a)\\1"})j").find("backreferences"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"array","maxItems":100000000})").find("maxItems"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"object","properties":{"a":{}},"required":["b"]})").find("'b'"), std::string::npos);
  EXPECT_NE(error_of("{\"type\":").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"oneOf":[{"type":"number"},{"type":"integer"}]})").find("'oneOf'"), std::string::npos);
  EXPECT_NE(error_of(R"({"oneOf":[{"enum":["a",null]},{"const":null}]})").find("both allow null"), std::string::npos);
  EXPECT_EQ(error_of(R"({"oneOf":[{"enum":["a","b"]},{"const":"c"},{"type":"object"}]})"), "");
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += R"({"type":"array","items":)";
  deep += "{}" + std::string(100, '}');
  EXPECT_NE(error_of(deep).find("nested deeper"), std::string::npos);
}

TEST(Regex, MatchesWholeStrings) {
  const auto g = std::make_shared<CompiledGrammar>(compile_regex("^(ab|c)*[x-z]{1,2}\\.\\d+$"), testing::small_vocab());
  EXPECT_TRUE(accepts(g, "abcx.1"));
  EXPECT_TRUE(accepts(g, "zz.123"));
  EXPECT_FALSE(accepts(g, "a.1"));
  EXPECT_FALSE(accepts(g, "xxx.1"));
  EXPECT_FALSE(accepts(g, "x."));
}

TEST(JsonSchema, MasksEqualBruteForceOnARealVocabulary) {
  const auto vocab = testing::real_vocab("gpt-2");
  if (!vocab) GTEST_SKIP() << "no ../shared/testdata";
  const auto g = std::make_shared<CompiledGrammar>(
      compile_json_schema(R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},
        "n":{"type":"integer","minimum":-3,"maximum":1200},"tags":{"type":"array","items":{"enum":["ab","cd"]}},
        "when":{"type":"string","format":"date"}},"required":["name","tags"],"additionalProperties":false})"),
      vocab);
  for (const std::string prefix : {"", "{", "{\"name\"", "{\"name\": \"ab", "{\"name\": \"abcdef", "{\"name\":\"\",",
                                   "{\"name\":\"\", \"n\": 1", "{\"name\":\"\",\"n\":-", "{\"name\":\"\",\"tags\":[",
                                   "{\"name\":\"\",\"tags\":[\"ab\"", "{\"name\":\"\",\"tags\":[],\"when\":\"2026-0"}) {
    GrammarMatcher m(g);
    ASSERT_TRUE(m.accept_bytes(prefix)) << prefix;
    std::vector<uint64_t> mask(vocab->mask_words());
    m.fill_mask(mask);
    const auto expected = testing::brute_force_mask(g, prefix);
    EXPECT_EQ(mask, expected) << "prefix: " << prefix << " (" << testing::count_bits(mask) << " vs "
                              << testing::count_bits(expected) << " allowed)";
    EXPECT_GT(testing::count_bits(expected), 0u);
  }
}

// A random walk through the mask: uniform over allowed tokens, then (after a budget) preferring tokens that
// close strings and containers and the stop token, so walks end.
std::string random_walk(const std::shared_ptr<CompiledGrammar>& g, std::mt19937& rng, bool& finished,
                        const std::string& schema_text) {
  GrammarMatcher m(g);
  const TokenVocab& v = g->vocab();
  std::vector<uint64_t> mask(v.mask_words());
  std::string out;
  finished = false;
  for (int step = 0; step < 400; ++step) {
    m.fill_mask(mask);
    std::vector<int32_t> allowed, closing;
    for (size_t w = 0; w < mask.size(); ++w) {
      for (uint64_t bits = mask[w]; bits; bits &= bits - 1) {
        const auto id = static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(bits)));
        allowed.push_back(id);
        const std::string& b = v.bytes(id);
        if (m.is_complete() ? b.empty() : (!b.empty() && b.size() <= 2 && b.find_first_of("\"]}0") != std::string::npos)) {
          closing.push_back(id);
        }
      }
    }
    EXPECT_FALSE(allowed.empty()) << "dead end after '" << out << "' in " << schema_text;
    if (allowed.empty()) return out;
    const bool finish = step > 30 && !closing.empty() && rng() % 4 != 0;
    const auto& pick_from = finish ? closing : allowed;
    const int32_t id = pick_from[rng() % pick_from.size()];
    EXPECT_TRUE(m.accept_token(id));
    if (m.is_terminated()) {
      finished = true;
      return out;
    }
    out += v.bytes(id);
  }
  return out;
}

TEST(JsonSchema, CorpusRandomWalksAllValidate) {
  const auto vocab = testing::real_vocab("gpt-2");
  if (!vocab) GTEST_SKIP() << "no ../shared/testdata";
  std::ifstream in(std::string(FERRY_SOURCE_DIR) + "/tests/grammar/data/schema_corpus.jsonl");
  ASSERT_TRUE(in) << "corpus missing";
  const std::string out_path = std::string(FERRY_BINARY_DIR) + "/grammar_corpus_outputs.jsonl";
  std::ofstream out(out_path);
  std::mt19937 rng(29);
  std::string line;
  int n_schemas = 0, n_finished = 0, n_outputs = 0;
  // Under AddressSanitizer (10x slower) every 4th schema is walked; all of them compile.
  const int stride = test::kAddressSanitizer ? 4 : 1;
  int n_walked = 0;
  while (std::getline(in, line)) {
    ++n_schemas;
    if ((n_schemas - 1) % stride != 0) {
      compile_json_schema(line);
      continue;
    }
    ++n_walked;
    const auto g = std::make_shared<CompiledGrammar>(compile_json_schema(line), vocab);
    for (int walk = 0; walk < 2; ++walk) {
      bool finished = false;
      const std::string text = random_walk(g, rng, finished, line);
      if (!finished) continue;
      ++n_finished;
      EXPECT_TRUE(nlohmann::json::accept(text)) << "not JSON: " << text << "\nschema: " << line;
      out << nlohmann::json{{"schema", nlohmann::json::parse(line)}, {"output", text}}.dump() << "\n";
      ++n_outputs;
    }
  }
  out.close();
  EXPECT_GE(n_schemas, 100);
  EXPECT_GE(n_finished, n_walked * 2 * 9 / 10) << "too many walks did not finish";
  const std::string python = std::string(FERRY_BINARY_DIR) + "/.venv-test/bin/python";
  if (std::system((python + " -c 'import jsonschema' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << n_outputs << " outputs are JSON; no venv with jsonschema for the schema check "
                 << "(scripts/install_test_deps.sh)";
  }
  const std::string cmd = python + " " + FERRY_SOURCE_DIR + "/reference/validate_schema_outputs.py " + out_path;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace ferry::grammar
