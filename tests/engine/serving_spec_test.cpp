// Speculative decoding in the serving engine (CPU backend, tiny fixture model): speculating and plain requests
// share steps (the scheduler counts the proposals in the step budget), each request's tokens equal its plain
// solo run (greedy and seeded sampling), the KV bookkeeping holds after every step (rejected proposals' blocks
// released, no leak), the counters move, and bad per-request settings are refused at submit.
#include <gtest/gtest.h>

#include "engine/serving_test_util.h"

namespace ferry {
namespace {

using test::collect;
using test::greedy_request;

std::vector<int32_t> grounded_prompt(uint64_t seed, int n) {
  std::vector<int32_t> p = test::random_prompt(seed, n);
  const std::vector<int32_t> copy(p.begin() + 2, p.end());
  p.insert(p.end(), copy.begin(), copy.end() - 3);
  return p;
}

GenerationRequest request(uint64_t seed, bool sampled, std::optional<SpecMode> spec, int32_t spec_k = 0) {
  GenerationRequest r = greedy_request(grounded_prompt(seed, 6 + int(seed) * 3), 40);
  if (sampled) {
    r.sampling.temperature = 0.8f;
    r.sampling.seed = seed;
  }
  r.spec = spec;
  r.spec_k = spec_k;
  return r;
}

// Six requests (greedy and seeded, two opting out, one with its own k) on a server that speculates by default, each
// against its plain solo run on a plain server of the same parallel world (`tp` CPU-thread ranks).
void expect_mixed_steps_keep_plain_tokens(int tp) {
  const ServingOptions so{.max_running = 6, .max_step_tokens = 24, .prefix_caching = true, .check_invariants = true};
  EngineOptions eo = test::tiny_options(256, 4);
  eo.tp = tp;
  std::vector<std::vector<int32_t>> alone;
  {
    ServingEngine plain(eo, so);
    for (uint64_t i = 0; i < 6; ++i) alone.push_back(collect(*plain.submit(request(i, i % 2 == 1, std::nullopt))).ids());
  }
  eo.spec = {.mode = SpecMode::Ngram, .k = 8};  // the default; requests 0 and 3 opt out
  ServingEngine busy(eo, so);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (uint64_t i = 0; i < 6; ++i)
    hs.push_back(busy.submit(request(i, i % 2 == 1, i % 3 == 0 ? std::optional(SpecMode::Off) : std::nullopt,
                                     i == 4 ? 2 : 0)));
  for (size_t i = 0; i < hs.size(); ++i) {
    const test::Collected c = collect(*hs[i]);
    EXPECT_TRUE(c.error.empty()) << c.error;
    EXPECT_EQ(c.ids(), alone[i]) << "request " << i << ", tp " << tp;
  }
  const ServingStats st = busy.stats();
  EXPECT_GT(st.spec_proposed, 0);
  EXPECT_GT(st.spec_accepted, 0);
  EXPECT_LT(st.spec_accepted, st.spec_proposed);
  EXPECT_GT(st.spec_steps, 0);
  EXPECT_EQ(st.requests_failed, 0);
  EXPECT_EQ(st.kv_blocks_used, 0) << "blocks leaked";
}

TEST(ServingSpec, MixedStepsGiveEveryRequestItsPlainTokens) { expect_mixed_steps_keep_plain_tokens(1); }

// Under --tp rank 0 proposes and the verify steps reach the other ranks like any step.
TEST(ServingSpec, TensorParallelServerSpeculatesWithThePlainTokens) { expect_mixed_steps_keep_plain_tokens(2); }

TEST(ServingSpec, ADraftModelAtTensorParallelWorldTwoIsOneClearError) {
  EngineOptions eo = test::tiny_options(256, 4);
  eo.tp = 2;
  eo.spec = {.mode = SpecMode::Draft, .k = 3, .draft_model = test::tiny_llama()};
  try {
    ServingEngine engine(eo, {.max_running = 2, .max_step_tokens = 16});
    FAIL() << "a draft model at --tp 2 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("draft model runs at parallel world 1"), std::string::npos) << e.what();
  }
}

TEST(ServingSpec, PerRequestSpeculationOnAPlainServerAndBadSettings) {
  ServingEngine engine(test::tiny_options(256, 4), {.max_running = 2, .max_step_tokens = 16, .check_invariants = true});
  const std::vector<int32_t> plain = collect(*engine.submit(request(7, false, std::nullopt))).ids();
  EXPECT_EQ(engine.stats().spec_proposed, 0);
  const test::Collected c = collect(*engine.submit(request(7, false, SpecMode::Ngram, 4)));
  EXPECT_EQ(c.ids(), plain);
  EXPECT_GT(engine.stats().spec_proposed, 0);
  EXPECT_THROW(engine.submit(request(7, false, SpecMode::Draft)), Error);  // no draft model loaded
  EXPECT_THROW(engine.submit(request(7, false, SpecMode::Ngram, kMaxSpecTokens + 1)), Error);
}

TEST(ServingSpec, DraftModelProposalsKeepTheTokens) {
  const ServingOptions so{.max_running = 3, .max_step_tokens = 32, .check_invariants = true};
  std::vector<std::vector<int32_t>> alone;
  {
    ServingEngine plain(test::tiny_options(256, 4), so);
    for (uint64_t i = 0; i < 3; ++i) alone.push_back(collect(*plain.submit(request(i, i == 1, std::nullopt))).ids());
  }
  EngineOptions eo = test::tiny_options(256, 4);
  eo.spec = {.mode = SpecMode::Draft, .k = 3, .draft_model = test::tiny_llama()};  // the target as its own draft
  ServingEngine busy(eo, so);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (uint64_t i = 0; i < 3; ++i) hs.push_back(busy.submit(request(i, i == 1, std::nullopt)));
  for (size_t i = 0; i < hs.size(); ++i) EXPECT_EQ(collect(*hs[i]).ids(), alone[i]) << "request " << i;
  const ServingStats st = busy.stats();
  EXPECT_GT(st.spec_accepted, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
}

}  // namespace
}  // namespace ferry
