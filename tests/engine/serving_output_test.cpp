// What a request's channel carries: stop strings (also split across tokens; text that could start one is held
// back, the stop string is excluded), logprobs equal token_logprobs over the logits of a teacher-forced
// score, seeded sampling (same seed, same tokens; equal to the synchronous Engine's), prefix caching (cached
// prompt tokens reported; output unchanged), and end-of-generation handling on the default model.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/logprobs.h"
#include "engine/serving_test_util.h"

namespace ferry {
namespace {

using test::collect;
using test::greedy_request;
using test::tiny_options;

// The tiny model's greedy continuation of a prompt, with each token's own text (logprobs on for the pieces).
struct Reference {
  std::vector<int32_t> ids;
  std::vector<std::string> pieces;
  std::string text;
};

Reference reference_run(ServingEngine& s, const std::vector<int32_t>& prompt, int max_tokens) {
  GenerationRequest r = greedy_request(prompt, max_tokens);
  r.logprobs = 0;
  const test::Collected c = collect(*s.submit(r));
  Reference ref;
  ref.ids = c.ids();
  for (const GeneratedToken& t : c.tokens) ref.pieces.push_back(t.chosen.text);
  ref.text = c.text;
  return ref;
}

// Whether a piece is plain printable ASCII (so its bytes appear unchanged in the streamed text).
bool plain_ascii(const std::string& s) {
  if (s.empty()) return false;
  for (const char ch : s)
    if (ch < 0x20 || ch > 0x7e) return false;
  return true;
}

TEST(ServingOutput, StopStringSplitAcrossTokens) {
  ServingEngine s(tiny_options(256), {.max_running = 4, .max_step_tokens = 16});
  int checked = 0;
  for (uint64_t seed = 1; seed < 40 && checked < 3; ++seed) {
    const std::vector<int32_t> prompt = test::random_prompt(seed, 9);
    const Reference ref = reference_run(s, prompt, 40);
    // Find two consecutive plain-ASCII pieces; the stop string is the last char of one + the first of the next.
    for (size_t k = 3; k + 1 < ref.pieces.size(); ++k) {
      if (!plain_ascii(ref.pieces[k]) || !plain_ascii(ref.pieces[k + 1])) continue;
      const std::string stop = ref.pieces[k].substr(ref.pieces[k].size() - 1) + ref.pieces[k + 1].substr(0, 1);
      const size_t at = ref.text.find(stop);
      ASSERT_NE(at, std::string::npos);
      GenerationRequest r = greedy_request(prompt, 40);
      r.stop = {"never-in-the-output-\x01", stop};
      const test::Collected c = collect(*s.submit(r));
      EXPECT_EQ(c.finish, FinishReason::Stop);
      EXPECT_EQ(c.text, ref.text.substr(0, at)) << "stop '" << stop << "'";
      EXPECT_EQ(c.text.find(stop), std::string::npos);
      // Tokens up to the one completing the stop string were generated, no more.
      EXPECT_LE(c.tokens.size(), k + 2);
      const std::vector<int32_t> ids = c.ids();
      EXPECT_TRUE(std::equal(ids.begin(), ids.end(), ref.ids.begin()));
      ++checked;
      break;
    }
  }
  EXPECT_GE(checked, 1) << "no ASCII token pair found to test with";
}

TEST(ServingOutput, HeldBackPrefixOfAStopStringIsReleasedWhenItDoesNotComplete) {
  ServingEngine s(tiny_options(256), {.max_running = 4, .max_step_tokens = 16});
  const std::vector<int32_t> prompt = test::random_prompt(3, 9);
  const Reference ref = reference_run(s, prompt, 30);
  // Every piece's text followed by a byte that never comes: each is held back for a while, then released.
  GenerationRequest r = greedy_request(prompt, 30);
  for (size_t k = 0; k < ref.pieces.size() && r.stop.size() < 16; ++k)
    if (plain_ascii(ref.pieces[k])) r.stop.push_back(ref.pieces[k] + "\x01");
  ASSERT_FALSE(r.stop.empty());
  const test::Collected c = collect(*s.submit(r));
  EXPECT_EQ(c.finish, FinishReason::Length);
  EXPECT_EQ(c.text, ref.text);
  EXPECT_EQ(c.ids(), ref.ids);
}

TEST(ServingOutput, LogprobsEqualTokenLogprobsOfAScore) {
  const std::vector<int32_t> prompt = test::random_prompt(11, 7);
  constexpr int kTop = 5, kMax = 12;
  std::vector<GeneratedToken> toks;
  {
    ServingEngine s(tiny_options(), {.max_running = 2, .max_step_tokens = 8});
    GenerationRequest r = greedy_request(prompt, kMax);
    r.logprobs = kTop;
    GenerationRequest other = greedy_request(test::random_prompt(12, 20), kMax);  // company in the batch
    auto h2 = s.submit(other);
    toks = collect(*s.submit(r)).tokens;
    collect(*h2);
  }
  ASSERT_EQ(toks.size(), size_t(kMax));
  Engine e(tiny_options());
  std::vector<int32_t> all = prompt;
  for (const GeneratedToken& t : toks) all.push_back(t.id);
  const std::vector<float> logits = e.score(all);  // (all.size(), vocab)
  const size_t V = logits.size() / all.size();
  for (size_t i = 0; i < toks.size(); ++i) {
    const std::span<const float> row(logits.data() + (prompt.size() - 1 + i) * V, V);
    const TokenLogprobs want = token_logprobs(row, toks[i].id, kTop);
    const GeneratedToken& g = toks[i];
    EXPECT_EQ(g.chosen.id, g.id);
    EXPECT_NEAR(g.chosen.logprob, want.chosen.logprob, 1e-4f * std::max(1.0f, std::fabs(want.chosen.logprob)));
    EXPECT_EQ(g.chosen.text, e.detokenize(std::vector<int32_t>{g.id}));
    ASSERT_EQ(g.top.size(), want.top.size());
    for (size_t j = 0; j < g.top.size(); ++j) {
      EXPECT_EQ(g.top[j].id, want.top[j].id) << "token " << i << " rank " << j;
      EXPECT_NEAR(g.top[j].logprob, want.top[j].logprob, 1e-4f * std::max(1.0f, std::fabs(want.top[j].logprob)));
      if (j > 0) {
        EXPECT_GE(g.top[j - 1].logprob, g.top[j].logprob);
      }
    }
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(g.top[0].id, g.id);
  }
}

TEST(ServingOutput, SeededSamplingIsReproducibleAndEqualsTheEngine) {
  const std::vector<int32_t> prompt = test::random_prompt(21, 10);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 1234;
  GenerationRequest r = greedy_request(prompt, 24);
  r.sampling = p;
  ServingEngine s(tiny_options(), {.max_running = 4, .max_step_tokens = 16});
  auto busy = s.submit(greedy_request(test::random_prompt(22, 30), 24));
  const std::vector<int32_t> a = collect(*s.submit(r)).ids();
  const std::vector<int32_t> b = collect(*s.submit(r)).ids();
  collect(*busy);
  EXPECT_EQ(a, b);
  GenerationRequest r2 = r;
  r2.sampling.seed = 99;
  EXPECT_NE(collect(*s.submit(r2)).ids(), a);
  Engine e(tiny_options());
  EXPECT_EQ(e.generate(prompt, p, 24, nullptr, false).tokens, a);
}

TEST(ServingOutput, PrefixCacheReportsReuseAndChangesNothing) {
  const std::vector<int32_t> prompt = test::random_prompt(31, 30);  // 7 full blocks of 4 + 2 tokens
  ServingEngine cached(tiny_options(128, 4), {.max_running = 4, .max_step_tokens = 16});
  ServingEngine plain(tiny_options(128, 4), {.max_running = 4, .max_step_tokens = 16, .prefix_caching = false});
  const test::Collected first = collect(*cached.submit(greedy_request(prompt, 10)));
  EXPECT_EQ(first.usage.cached_prompt_tokens, 0);
  // The same prompt again: every full block but none past the last prompt token.
  const test::Collected again = collect(*cached.submit(greedy_request(prompt, 10)));
  EXPECT_EQ(again.usage.cached_prompt_tokens, 28);
  EXPECT_EQ(again.ids(), first.ids());
  // A second turn: prompt + answer + new tokens reuses the prompt and the answer's full blocks.
  std::vector<int32_t> turn2 = prompt;
  const std::vector<int32_t> answer = first.ids();
  turn2.insert(turn2.end(), answer.begin(), answer.end());
  turn2.insert(turn2.end(), {40, 41, 42, 43, 44});
  const test::Collected second = collect(*cached.submit(greedy_request(turn2, 10)));
  EXPECT_EQ(second.usage.cached_prompt_tokens, 36);  // 39 computed tokens of the first run: 9 full blocks
  EXPECT_EQ(second.usage.prompt_tokens, int32_t(turn2.size()));
  EXPECT_EQ(second.ids(), collect(*plain.submit(greedy_request(turn2, 10))).ids());
  // An exact multiple of the block size: the last block is recomputed to get logits.
  const std::vector<int32_t> p28(prompt.begin(), prompt.begin() + 28);
  EXPECT_EQ(collect(*cached.submit(greedy_request(p28, 4))).usage.cached_prompt_tokens, 24);
  const ServingStats st = cached.stats();
  EXPECT_EQ(st.prompt_tokens_cached, 28 + 36 + 24);
  EXPECT_GT(st.prefix_hit_rate(), 0.0);
  EXPECT_EQ(plain.stats().prompt_tokens_cached, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
}

// Issue 23 row 10: cache_salt partitions the prefix cache, so cached_prompt_tokens says nothing about the
// prompts of requests with another salt (the server sets it from the API key and the request's cache_salt).
TEST(ServingOutput, CacheSaltPartitionsThePrefixCache) {
  const std::vector<int32_t> prompt = test::random_prompt(32, 30);
  ServingEngine cached(tiny_options(128, 4), {.max_running = 4, .max_step_tokens = 16});
  GenerationRequest tenant_a = greedy_request(prompt, 4), tenant_b = greedy_request(prompt, 4);
  tenant_a.cache_salt = 11;
  tenant_b.cache_salt = 22;
  const test::Collected a1 = collect(*cached.submit(tenant_a));
  EXPECT_EQ(a1.usage.cached_prompt_tokens, 0);
  const test::Collected b1 = collect(*cached.submit(tenant_b));
  EXPECT_EQ(b1.usage.cached_prompt_tokens, 0) << "another tenant's prompt must not be a hit";
  EXPECT_EQ(collect(*cached.submit(greedy_request(prompt, 4))).usage.cached_prompt_tokens, 0) << "nor the shared partition's";
  EXPECT_EQ(collect(*cached.submit(tenant_a)).usage.cached_prompt_tokens, 28) << "the same tenant still hits";
  EXPECT_EQ(a1.ids(), b1.ids());
  EXPECT_EQ(cached.stats().kv_blocks_used, 0);
}

TEST(ServingOutput, EndOfGenerationFinishesWithStopOnTheDefaultModel) {
  const std::optional<std::string> model = test::default_model();
  if (!model) GTEST_SKIP() << "default model not present";
  EngineOptions eo;
  eo.model_path = *model;
  eo.context = 256;
  eo.n_threads = 2;
  ServingEngine s(eo, {.max_running = 2, .max_step_tokens = 64});
  const std::vector<int32_t> prompt =
      s.tokenize(s.apply_chat_template({{"user", "Reply with the single word: yes"}}, true), true, true);
  GenerationRequest r = greedy_request(prompt, 48);
  r.ignore_eos = false;
  const test::Collected c = collect(*s.submit(r));
  EXPECT_EQ(c.finish, FinishReason::Stop);
  EXPECT_LT(c.tokens.size(), 48u);
  EXPECT_EQ(c.text.find("<|im_end|>"), std::string::npos);
  EXPECT_FALSE(c.text.empty());
}

}  // namespace
}  // namespace ferry
