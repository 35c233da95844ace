// Structured output through the serving engine (tiny fixture model, random weights: the constraint alone
// makes the output valid): JSON schema / regex / GBNF outputs match, finish is stop when the format is
// complete and length at max_tokens, bad schemas are refused by name at submit.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "serving_test_util.h"

namespace ferry {
namespace {

using test::collect;
using test::tiny_options;

GenerationRequest constrained(OutputFormatKind kind, std::string text, uint64_t seed, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt = test::random_prompt(seed, 6);
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = 0;
  r.sampling.top_p = 1.0f;
  r.sampling.min_p = 0.0f;
  r.sampling.seed = seed;
  r.max_tokens = max_tokens;
  r.format = {kind, std::move(text)};
  return r;
}

TEST(ServingGrammar, SchemaOutputsValidateAndStop) {
  ServingEngine s(tiny_options(256), {});
  const std::string schema = R"({"type":"object","properties":{"ok":{"type":"boolean"},
    "n":{"type":"integer","minimum":1,"maximum":99},"tag":{"enum":["a","b"]}},"required":["ok","n","tag"],
    "additionalProperties":false})";
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (uint64_t seed = 1; seed <= 4; ++seed) hs.push_back(s.submit(constrained(OutputFormatKind::JsonSchema, schema, seed, 200)));
  for (auto& h : hs) {
    const test::Collected c = collect(*h);
    ASSERT_EQ(c.finish, FinishReason::Stop) << c.text;
    const auto j = nlohmann::json::parse(c.text);  // throws (fails the test) when not JSON
    EXPECT_TRUE(j["ok"].is_boolean()) << c.text;
    EXPECT_TRUE(j["n"].is_number_integer() && j["n"].get<int>() >= 1 && j["n"].get<int>() <= 99) << c.text;
    EXPECT_TRUE(j["tag"] == "a" || j["tag"] == "b") << c.text;
    EXPECT_EQ(j.size(), 3u) << c.text;
  }
}

// Constrained rows are drawn on the device (the CPU backend's sampler here) with the matcher's mask, sealed after
// the step before was postprocessed, while asynchronous scheduling keeps steps overlapping: the same tokens as the
// host sampler's, bit for bit (the same draw from the same masked logits), and every draw made on the "device".
TEST(ServingGrammar, DeviceDrawsWithMasksMatchTheHostSampler) {
  const std::string schema = R"({"type":"object","properties":{"id":{"type":"integer"},
    "tags":{"type":"array","items":{"enum":["x","yy","zzz"]},"maxItems":3}},"required":["id","tags"]})";
  auto run = [&](bool device) {
    ServingOptions so;
    so.device_sampling = device;
    ServingEngine s(tiny_options(256), so);
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      GenerationRequest r = constrained(seed % 2 ? OutputFormatKind::JsonSchema : OutputFormatKind::Regex,
                                        seed % 2 ? schema : "[a-f]{3,9}(!|\\?)", seed, 60);
      if (seed == 4) r.sampling.temperature = 0;  // greedy among the allowed tokens
      hs.push_back(s.submit(r));
    }
    hs.push_back(s.submit(test::greedy_request(test::random_prompt(9, 5), 12)));  // an unconstrained row beside them
    std::vector<std::vector<int32_t>> ids;
    for (auto& h : hs) ids.push_back(collect(*h).ids());
    return std::pair(ids, s.stats());
  };
  const auto [host, host_stats] = run(false);
  const auto [dev, dev_stats] = run(true);
  EXPECT_EQ(dev, host);
  EXPECT_EQ(host_stats.device_sampled_tokens, 0);
  int64_t tokens = 0;
  for (const auto& v : dev) tokens += int64_t(v.size());
  EXPECT_GE(dev_stats.device_sampled_tokens, tokens);  // (with the rows wasted behind a finished request)
  EXPECT_GT(dev_stats.overlapped_steps, 0);
}

TEST(ServingGrammar, RegexAndGbnfAndLengthCutOff) {
  ServingEngine s(tiny_options(256), {});
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const test::Collected re = collect(*s.submit(constrained(OutputFormatKind::Regex, "(yes|no)-[0-9]{2}", seed, 50)));
    EXPECT_EQ(re.finish, FinishReason::Stop);
    EXPECT_TRUE(std::regex_match(re.text, std::regex("(yes|no)-[0-9]{2}"))) << re.text;
    const test::Collected g = collect(*s.submit(constrained(OutputFormatKind::Gbnf, "root ::= \"x\" [ab]{3} \"!\"", seed, 50)));
    EXPECT_EQ(g.finish, FinishReason::Stop);
    EXPECT_TRUE(std::regex_match(g.text, std::regex("x[ab]{3}!"))) << g.text;
  }
  // Any JSON object, cut off at 3 tokens: length, and the text is a prefix of an object.
  const test::Collected cut = collect(*s.submit(constrained(OutputFormatKind::JsonObject, "", 7, 3)));
  EXPECT_EQ(cut.finish, FinishReason::Length);
  EXPECT_EQ(cut.usage.completion_tokens, 3);
  ASSERT_FALSE(cut.text.empty());
  EXPECT_EQ(cut.text[0], '{');
}

TEST(ServingGrammar, LogitBiasSteersTheDraw) {
  ServingEngine s(tiny_options(256), {});
  GenerationRequest r = test::greedy_request(test::random_prompt(3, 6), 5);
  const std::vector<int32_t> plain = collect(*s.submit(r)).ids();
  ASSERT_EQ(plain.size(), 5u);
  r.logit_bias = {{42, 100.0f}};
  EXPECT_EQ(collect(*s.submit(r)).ids(), std::vector<int32_t>(5, 42));
  r.logit_bias = {{plain[0], -100.0f}};
  EXPECT_NE(collect(*s.submit(r)).ids()[0], plain[0]);
  // with a format: the bias applies among the allowed tokens only
  GenerationRequest g = constrained(OutputFormatKind::Regex, "[ab]{4}", 5, 10);
  g.sampling.temperature = 0;
  const std::string a = std::string(1, 'a');
  const std::vector<int32_t> a_ids = s.tokenize(a, false, false);
  ASSERT_EQ(a_ids.size(), 1u);
  g.logit_bias = {{a_ids[0], 100.0f}, {42, 100.0f}};
  const test::Collected c = collect(*s.submit(g));
  EXPECT_EQ(c.finish, FinishReason::Stop);
  EXPECT_EQ(c.text, "aaaa");
  r.logit_bias = {{1 << 30, 1.0f}};
  EXPECT_THROW(s.submit(r), Error);
}

TEST(ServingGrammar, UnsupportedSchemaIsRefusedAtSubmit) {
  ServingEngine s(tiny_options(256), {});
  try {
    s.submit(constrained(OutputFormatKind::JsonSchema, R"({"type":"string","format":"hostname"})", 1, 8));
    FAIL() << "accepted an unsupported format";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'hostname'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry
