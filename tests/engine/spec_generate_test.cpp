// Speculative decoding in Engine::generate on the tiny fixture models, CPU backend (batch invariant: a row's
// logits do not depend on the other rows of its step):
//  - greedy and seeded sampling give bit for bit the tokens of the plain decode, for n-gram and draft proposals
//    and every k, with proposals kept and rejected along the way;
//  - a draft that is the target itself has every greedy proposal kept;
//  - the distribution of the first generated tokens under sampling, over disjoint seeds, matches the plain one
//    within a stated total-variation bound;
//  - bad options give one-line errors.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/serving_test_util.h"
#include "ferry/engine.h"

namespace ferry {
namespace {

std::string fixture(const char* name) { return test::source_dir() + "/tests/fixtures/models/" + name; }

EngineOptions options(SpecOptions spec = {}) {
  EngineOptions o = test::tiny_options(256, 4);
  o.spec = std::move(spec);
  return o;
}

// A prompt with a repeated stretch (n-gram lookups find it) and random tokens around it.
std::vector<int32_t> grounded_prompt(uint64_t seed) {
  std::vector<int32_t> p = test::random_prompt(seed, 24);
  const std::vector<int32_t> copy(p.begin() + 4, p.begin() + 20);
  p.insert(p.end(), copy.begin(), copy.end());
  p.resize(p.size() - 6);  // the copy stops midway: its rest is the natural continuation
  return p;
}

SamplingParams greedy() {
  SamplingParams s;
  s.temperature = 0;
  return s;
}

SamplingParams sampled(uint64_t seed) {
  SamplingParams s;
  s.temperature = 0.9f;
  s.top_k = 40;
  s.seed = seed;
  return s;
}

TEST(SpecGenerate, GreedyAndSampledTokensEqualThePlainDecode) {
  Engine plain(options());
  int64_t proposed = 0, accepted = 0;
  for (const SpecOptions& spec : {SpecOptions{.mode = SpecMode::Ngram, .k = 1}, SpecOptions{.mode = SpecMode::Ngram, .k = 4},
                                  SpecOptions{.mode = SpecMode::Ngram, .k = 16},
                                  SpecOptions{.mode = SpecMode::Draft, .k = 3, .draft_model = fixture("tiny-qwen2")}}) {
    Engine fast(options(spec));
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      for (const SamplingParams& sp : {greedy(), sampled(seed)}) {
        const std::vector<int32_t> prompt = grounded_prompt(seed);
        plain.reset();
        fast.reset();
        const GenerateResult a = plain.generate(prompt, sp, 60, nullptr, false);
        const GenerateResult b = fast.generate(prompt, sp, 60, nullptr, false);
        ASSERT_EQ(a.tokens, b.tokens) << spec_mode_name(spec.mode) << " k " << spec.k << " seed " << seed
                                      << " temperature " << sp.temperature;
        EXPECT_EQ(a.target_steps, 59);  // one step per token but the last
        EXPECT_EQ(b.tokens.size(), 60u);
        EXPECT_EQ(b.target_steps + b.spec_accepted, 59) << "each step emits its kept proposals and one more token";
        EXPECT_LE(b.spec_accepted, b.spec_proposed);
        proposed += b.spec_proposed;
        accepted += b.spec_accepted;
      }
    }
  }
  // Both sides of the rule ran: proposals kept and proposals rejected.
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, proposed);
}

TEST(SpecGenerate, StopsAtMaxTokensAndTheContextLikeThePlainDecode) {
  Engine plain(test::tiny_options(40, 4));
  EngineOptions o = test::tiny_options(40, 4);
  o.spec = {.mode = SpecMode::Ngram, .k = 8};
  Engine fast(o);
  for (int max_tokens : {1, 2, 5, 100}) {
    const std::vector<int32_t> prompt = grounded_prompt(9);  // 34 tokens in a context of 40
    plain.reset();
    fast.reset();
    const GenerateResult a = plain.generate(prompt, greedy(), max_tokens, nullptr, false);
    const GenerateResult b = fast.generate(prompt, greedy(), max_tokens, nullptr, false);
    EXPECT_EQ(a.tokens, b.tokens) << "max_tokens " << max_tokens;
  }
}

TEST(SpecGenerate, ADraftEqualToTheTargetHasEveryGreedyProposalKept) {
  Engine plain(options());
  Engine fast(options({.mode = SpecMode::Draft, .k = 4, .draft_model = test::tiny_llama()}));
  const std::vector<int32_t> prompt = test::random_prompt(3, 10);
  const GenerateResult a = plain.generate(prompt, greedy(), 41, nullptr, false);
  const GenerateResult b = fast.generate(prompt, greedy(), 41, nullptr, false);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_GT(b.spec_proposed, 30);
  EXPECT_EQ(b.spec_accepted, b.spec_proposed);
  EXPECT_EQ(b.target_steps, 8);  // 40 tokens after the first: 5 per step
}

// The first three generated tokens' joint distribution under sampling (temperature 1, top-k 4: at most 64
// outcomes), N draws each with disjoint seeds, plain against speculative with a draft that disagrees often. L1
// distance of two empirical distributions of N draws from the same law over K outcomes: each lies within
// sqrt(K / N) + t of the law with probability >= 1 - exp(-N t^2 / 2) (McDiarmid: the L1 distance moves by <= 2/N
// per draw), so || a - b ||_1 <= 2 (sqrt(K / N) + t) fails by chance with probability <= 2 exp(-N t^2 / 2).
// N = 3000, K = 64, t = 0.09: bound 0.47, false failure <= 1.1e-5. A verify step that kept every proposal would
// follow the draft's greedy text instead of the target's law.
TEST(SpecGenerate, SampledFirstTokensFollowThePlainDistribution) {
  constexpr int kDraws = 3000, kOutcomes = 64;
  constexpr double kT = 0.09;
  const double bound = 2 * (std::sqrt(double(kOutcomes) / kDraws) + kT);
  const std::vector<int32_t> prompt = test::random_prompt(11, 12);
  const auto histogram = [&](Engine& e, uint64_t seed0, int64_t* accepted, int64_t* proposed) {
    std::map<std::vector<int32_t>, int> h;
    for (int i = 0; i < kDraws; ++i) {
      SamplingParams s;
      s.temperature = 1.0f;
      s.top_k = 4;
      s.seed = seed0 + uint64_t(i);
      const GenerateResult r = e.generate(prompt, s, 3, nullptr, false);
      ++h[r.tokens];
      if (accepted) *accepted += r.spec_accepted;
      if (proposed) *proposed += r.spec_proposed;
    }
    return h;
  };
  Engine plain(options());
  // The FP8 copy of the target drafts: its greedy token is often, not always, the one the target samples.
  Engine fast(options({.mode = SpecMode::Draft, .k = 2, .draft_model = fixture("tiny-llama-fp8-block")}));
  int64_t accepted = 0, proposed = 0;
  const auto a = histogram(plain, 1, nullptr, nullptr);
  const auto b = histogram(fast, 1 + kDraws, &accepted, &proposed);
  double l1 = 0;
  std::map<std::vector<int32_t>, std::pair<int, int>> both;
  for (const auto& [k, n] : a) both[k].first = n;
  for (const auto& [k, n] : b) both[k].second = n;
  for (const auto& [k, n] : both) l1 += std::abs(double(n.first) - double(n.second)) / kDraws;
  EXPECT_LE(both.size(), size_t(kOutcomes));
  EXPECT_LE(l1, bound) << "plain and speculative sampling differ in distribution";
  RecordProperty("l1", std::to_string(l1));
  RecordProperty("accepted_of_proposed", std::to_string(accepted) + "/" + std::to_string(proposed));
  EXPECT_GE(proposed, kDraws);                 // the draft proposed in every generation
  EXPECT_GT(accepted, 0);                      // some were kept,
  EXPECT_LT(accepted, proposed * 9 / 10);      // many were not: the rule's both sides are exercised
}

TEST(SpecGenerate, BadOptionsAreOneLineErrors) {
  EXPECT_THROW(parse_spec("eagle", 4), Error);
  EXPECT_THROW(parse_spec("ngram", 0), Error);
  EXPECT_THROW(parse_spec("ngram", kMaxSpecTokens + 1), Error);
  EXPECT_THROW(parse_spec("draft", 4), Error);  // no model
  EXPECT_EQ(parse_spec("draft:m.gguf", 3).draft_model, "m.gguf");
  EXPECT_EQ(parse_spec("draft", 3, "x").draft_model, "x");
  EXPECT_EQ(parse_spec("off", 3).mode, SpecMode::Off);
  // A draft with another vocabulary: the SmolLM2-shaped random model (49152 entries) against the tiny one (512).
  const std::string other = test::write_small_bf16_model("spec_other_vocab.gguf", 5);
  try {
    Engine e(options({.mode = SpecMode::Draft, .k = 2, .draft_model = other}));
    FAIL() << "a draft with another vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry
