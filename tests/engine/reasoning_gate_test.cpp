// The reasoning gate of a constrained request on a reasoning model: the format waits for "</think>", the
// draw before it is free but for end-of-generation tokens and for tokens that would end the reasoning with
// text the format cannot start with; the format starts on the bytes after the marker, blanks skipped.
// Then through the serving engine (tiny fixture model): free text up to the marker, the format after it,
// and max_tokens inside the reasoning.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <vector>

#include "engine/reasoning_gate.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "serving_test_util.h"

namespace ferry {
namespace {

using test::collect;
using test::tiny_options;

struct GateVocab {
  std::vector<std::string> pieces = {"</", "thi", "nk>", "nk>{", "nk>x", "</think>", "</think>]", " </think>\n\n{", "{", "}", "hm", "<eos>"};
  int32_t id(const std::string& p) const { return int32_t(std::find(pieces.begin(), pieces.end(), p) - pieces.begin()); }
};

std::unique_ptr<grammar::GrammarMatcher> object_matcher(const GateVocab& v) {
  auto vocab = std::make_shared<const grammar::TokenVocab>(v.pieces, std::vector<int32_t>{v.id("<eos>")});
  auto g = std::make_shared<grammar::CompiledGrammar>(grammar::parse_gbnf(grammar::json_schema_to_gbnf(R"({"type": "object"})")), vocab);
  return std::make_unique<grammar::GrammarMatcher>(g);
}

std::vector<bool> allowed(ReasoningGate& gate, size_t n) {
  std::vector<float> logits(n, 0.0f);
  gate.restrict(logits);
  std::vector<bool> out;
  for (const float l : logits) out.push_back(std::isfinite(l));
  return out;
}

TEST(ReasoningGate, FreeUntilTheMarkerThenTheFormat) {
  const GateVocab v;
  ReasoningGate gate("</think>", object_matcher(v));
  std::vector<bool> a = allowed(gate, v.pieces.size());
  EXPECT_FALSE(a[size_t(v.id("<eos>"))]);             // the answer must still come
  EXPECT_FALSE(a[size_t(v.id("</think>]"))]);         // "]" cannot start an object
  EXPECT_TRUE(a[size_t(v.id(" </think>\n\n{"))]);     // blanks after the marker are skipped
  EXPECT_TRUE(a[size_t(v.id("</think>"))]);
  EXPECT_TRUE(a[size_t(v.id("hm"))]);
  EXPECT_TRUE(a[size_t(v.id("nk>x"))]);               // no marker in sight: free
  EXPECT_EQ(gate.push("hm"), nullptr);
  EXPECT_EQ(gate.push("</"), nullptr);
  EXPECT_EQ(gate.push("thi"), nullptr);
  a = allowed(gate, v.pieces.size());                 // "</thi" so far: the next token may end it
  EXPECT_FALSE(a[size_t(v.id("nk>x"))]);
  EXPECT_TRUE(a[size_t(v.id("nk>{"))]);
  EXPECT_TRUE(a[size_t(v.id("nk>"))]);
  std::unique_ptr<grammar::GrammarMatcher> m = gate.push("nk>{");
  ASSERT_NE(m, nullptr);                              // the format starts after "{" was taken
  EXPECT_FALSE(m->is_complete());
  EXPECT_TRUE(m->accept_bytes("}"));
  EXPECT_TRUE(m->is_complete());
}

TEST(ReasoningGate, BadMarkerIsAnError) {
  const GateVocab v;
  EXPECT_THROW(ReasoningGate("", object_matcher(v)), Error);
  EXPECT_THROW(ReasoningGate(std::string(65, 'x'), object_matcher(v)), Error);
  EXPECT_THROW(ReasoningGate("</think>", nullptr), Error);
}

GenerationRequest gated(uint64_t seed, int32_t max_tokens, const std::string& marker) {
  GenerationRequest r = test::greedy_request(test::random_prompt(seed, 6), max_tokens);
  r.ignore_eos = false;
  r.format = {OutputFormatKind::Regex, "[ab]{4}"};
  r.format.starts_after = marker;
  return r;
}

// The marker is one token's text here, written first by a logit bias; after it the regex holds.
TEST(ServingReasoningGate, FormatAppliesAfterTheMarker) {
  ServingEngine s(tiny_options(256), {});
  const int32_t marker_id = 42;
  const std::string marker = s.detokenize(std::vector<int32_t>{marker_id});
  ASSERT_FALSE(marker.empty());
  GenerationRequest r = gated(3, 40, marker);
  r.logit_bias = {{marker_id, 100.0f}};
  const test::Collected c = collect(*s.submit(r));
  ASSERT_EQ(c.finish, FinishReason::Stop) << c.text;
  ASSERT_EQ(c.text.rfind(marker, 0), 0u) << c.text;
  std::string after = c.text.substr(marker.size());
  after.erase(0, after.find_first_not_of(" \n\t\r"));
  EXPECT_TRUE(std::regex_match(after, std::regex("[ab]{4}"))) << c.text;
}

// A model that never ends its reasoning runs to max_tokens: finish length, and no end-of-generation token
// ended it early (a bias on the end-of-sequence token does not get it drawn).
TEST(ServingReasoningGate, NeverClosedRunsToMaxTokens) {
  ServingEngine s(tiny_options(256), {});
  GenerationRequest r = gated(5, 12, "\x01never\x02");
  r.logit_bias = {{2, 100.0f}};  // the fixture's EOS
  const test::Collected c = collect(*s.submit(r));
  EXPECT_EQ(c.finish, FinishReason::Length);
  EXPECT_EQ(c.usage.completion_tokens, 12);
  GenerationRequest text = test::greedy_request(test::random_prompt(5, 6), 12);
  text.ignore_eos = false;
  text.logit_bias = {{2, 100.0f}};
  const test::Collected free = collect(*s.submit(text));  // without the gate the bias ends it at once
  EXPECT_EQ(free.finish, FinishReason::Stop);
  EXPECT_EQ(free.usage.completion_tokens, 0);
  text.format.starts_after = "</think>";
  EXPECT_THROW(s.submit(text), Error);  // a gate needs a format
}

}  // namespace
}  // namespace ferry
