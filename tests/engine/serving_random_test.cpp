// A randomized run of the serving engine with a KV cache so small that preemption really happens: requests
// arrive at random times with random prompt lengths (many sharing prefixes, so the prefix cache is hit and
// evicted), some are cancelled, and the engine checks its KV bookkeeping after every step
// (ServingOptions::check_invariants: ref counts equal the references held, no leak, pool/prefix-map
// consistency). Every request must finish; every uncancelled greedy output must equal the request run alone;
// a cancelled one's tokens must be a prefix of it; no block may stay used at the end. Run with and without
// asynchronous scheduling (a step launched before the previous step's tokens are known: placeholders, wasted rows
// of requests that ended, preemption of a sequence whose token is in flight) and with prompt padding
// (EngineOptions::prompt_graphs) on.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <thread>

#include "engine/serving_test_util.h"

namespace ferry {
namespace {

using test::collect;
using test::greedy_request;

struct Planned {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 0;
  bool cancel = false;
  int cancel_after_updates = 0;
};

std::vector<Planned> plan_requests(uint64_t seed, int n, int context) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> roots;
  for (int i = 0; i < 4; ++i) roots.push_back(test::random_prompt(seed * 100 + uint64_t(i), 24));
  std::vector<Planned> out;
  for (int i = 0; i < n; ++i) {
    Planned p;
    const int len = 1 + int(rng() % 40);
    if (rng() % 2 == 0) {  // shares a prefix with one of the roots (prefix cache hits)
      const auto& root = roots[rng() % roots.size()];
      const int shared = std::min<int>(len, int(root.size()));
      p.prompt.assign(root.begin(), root.begin() + shared);
      const std::vector<int32_t> tail = test::random_prompt(seed * 1000 + uint64_t(i), len - shared);
      p.prompt.insert(p.prompt.end(), tail.begin(), tail.end());
    } else {
      p.prompt = test::random_prompt(seed * 1000 + uint64_t(i), len);
    }
    p.max_tokens = 1 + int32_t(rng() % 30);
    p.max_tokens = std::min<int32_t>(p.max_tokens, context - int32_t(p.prompt.size()));
    p.cancel = rng() % 5 == 0;
    p.cancel_after_updates = int(rng() % 4);
    out.push_back(std::move(p));
  }
  return out;
}

// One randomized run with the batched engine's options `eo` (the references run alone with the option-free
// tiny options) at step budget `budget`; adds the run's preemptions and prefix-cache hits.
void run_random_serving(const EngineOptions& eo, uint64_t seed, int32_t budget, int64_t& preemptions, int64_t& cached,
                        bool async_scheduling = true) {
  constexpr int kContext = 64;
  const std::vector<Planned> plan = plan_requests(seed, 40, kContext);
  // References: each request alone, without the prefix cache (and without prompt padding), sampled on the host
  // one step after the other (no device sampling, no asynchronous scheduling).
  std::vector<std::vector<int32_t>> alone;
  {
    ServingEngine solo(test::tiny_options(kContext, 4), {.max_running = 1, .max_step_tokens = 64, .prefix_caching = false,
                                                         .device_sampling = false, .async_scheduling = false});
    for (const Planned& p : plan) alone.push_back(collect(*solo.submit(greedy_request(p.prompt, p.max_tokens))).ids());
  }
  // 80 KV tokens (20 blocks of 4) for up to 6 sequences of up to 64 tokens: decodes run out of blocks.
  ServingEngine s(eo, {.max_running = 6, .max_step_tokens = budget, .kv_tokens = 80,
                       .async_scheduling = async_scheduling, .check_invariants = true});
  EXPECT_EQ(s.stats().kv_blocks_total, 20) << "scratch blocks (prompt padding) must come on top of kv_tokens";
  std::mt19937_64 rng(seed + 77);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  std::vector<test::Collected> got(plan.size());
  std::vector<int> updates(plan.size(), 0);
  std::vector<bool> done(plan.size(), false);
  size_t submitted = 0;
  size_t n_done = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (n_done < plan.size() && std::chrono::steady_clock::now() < deadline) {
    // Arrivals: a random burst of 0..3 new requests.
    for (int k = int(rng() % 4); k > 0 && submitted < plan.size(); --k, ++submitted)
      hs.push_back(s.submit(greedy_request(plan[submitted].prompt, plan[submitted].max_tokens)));
    // Drain whatever arrived; cancel some requests after a few updates.
    for (size_t i = 0; i < hs.size(); ++i) {
      if (done[i]) continue;
      RequestUpdate u;
      while (hs[i]->wait(u, std::chrono::milliseconds(0))) {
        ++updates[i];
        for (GeneratedToken& t : u.tokens) got[i].tokens.push_back(std::move(t));
        if (u.finished) {
          got[i].finished = true;
          got[i].finish = u.finish;
          got[i].error = u.error;
          got[i].usage = u.usage;
          done[i] = true;
          ++n_done;
          break;
        }
      }
      if (!done[i] && plan[i].cancel && updates[i] >= plan[i].cancel_after_updates) hs[i]->cancel();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
  }
  ASSERT_EQ(n_done, plan.size()) << "seed " << seed << ": requests did not all finish";
  for (size_t i = 0; i < plan.size(); ++i) {
    const test::Collected& c = got[i];
    ASSERT_NE(c.finish, FinishReason::Error) << "seed " << seed << " request " << i << ": " << c.error;
    const std::vector<int32_t> ids = c.ids();
    if (c.finish == FinishReason::Cancelled) {
      ASSERT_LE(ids.size(), alone[i].size());
      EXPECT_TRUE(std::equal(ids.begin(), ids.end(), alone[i].begin())) << "seed " << seed << " request " << i;
    } else {
      EXPECT_EQ(ids, alone[i]) << "seed " << seed << " request " << i;
      EXPECT_EQ(c.usage.completion_tokens, int32_t(ids.size()));
    }
    EXPECT_EQ(c.usage.prompt_tokens, int32_t(plan[i].prompt.size()));
  }
  const ServingStats st = s.stats();
  EXPECT_EQ(st.kv_blocks_used, 0) << "blocks leaked";
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 0);
  EXPECT_EQ(st.requests_failed, 0);
  EXPECT_EQ(st.requests_finished + st.requests_cancelled, int64_t(plan.size()));
  if (async_scheduling) {
    std::printf("seed %llu: %lld of %lld steps overlapped\n", (unsigned long long)seed, (long long)st.overlapped_steps,
                (long long)st.steps);
    EXPECT_GT(st.overlapped_steps, st.steps / 2) << "seed " << seed << ": asynchronous scheduling rarely overlapped";
  } else {
    EXPECT_EQ(st.overlapped_steps, 0);
  }
  preemptions += st.preemptions;
  cached += st.prompt_tokens_cached;
}

TEST(ServingRandom, ArrivalsCancellationsAndPreemptions) {
  // With asynchronous scheduling (the default where the backend samples: the CPU backend does) and without it.
  for (const bool async : {true, false}) {
    int64_t preemptions = 0, cached = 0;
    for (uint64_t seed : {1, 2, 3})
      run_random_serving(test::tiny_options(64, 4), seed, 16, preemptions, cached, async);
    std::printf("async %d: preemptions %lld, cached prompt tokens %lld\n", int(async), (long long)preemptions,
                (long long)cached);
    EXPECT_GT(preemptions, 0) << "the small cache never forced a preemption: the test does not test it";
    EXPECT_GT(cached, 0) << "no prefix-cache hit";
  }
}

// The same with prompt padding on (EngineOptions::prompt_graphs; on the CPU the padding runs without graph
// capture): the padding writes only scratch blocks outside the pool, so a dummy row that touched a sequence's block
// would show up as a wrong token. Budgets 16 (below the 64-token granule: every prompt step runs at the budget) and
// 40.
TEST(ServingRandom, PromptPaddingMatchesUnpaddedRunsAlone) {
  EngineOptions on = test::tiny_options(64, 4);
  on.prompt_graphs = true;
  int64_t preemptions = 0, cached = 0;
  for (const int32_t budget : {16, 40}) run_random_serving(on, uint64_t(budget), budget, preemptions, cached);
  std::printf("preemptions %lld, cached prompt tokens %lld\n", (long long)preemptions, (long long)cached);
  EXPECT_GT(preemptions, 0) << "the small cache never forced a preemption: the test does not test it";
  EXPECT_GT(cached, 0) << "no prefix-cache hit";
}

}  // namespace
}  // namespace ferry
