// The randomized serving run with prompt padding on (EngineOptions::prompt_graphs; on the CPU the padding runs
// without graph capture): requests arrive at random times with random prompt lengths (half share prefixes: the
// prefix cache is hit), some are cancelled, the KV cache is small enough that sequences are preempted, and the
// engine checks its KV bookkeeping after every step (the scratch blocks the padding writes are outside the pool, so
// a dummy row that touched a sequence's block would show up as a wrong token, not as a bookkeeping error). Every
// uncancelled greedy output must equal the request run alone with the option off (no padding); a cancelled one's
// tokens a prefix of it. Budgets 16 (below the 64-token granule: every prompt step runs at the budget) and 40.
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
  for (int i = 0; i < 3; ++i) roots.push_back(test::random_prompt(seed * 100 + uint64_t(i), 20));
  std::vector<Planned> out;
  for (int i = 0; i < n; ++i) {
    Planned p;
    const int len = 1 + int(rng() % 36);
    if (rng() % 2 == 0) {
      const auto& root = roots[rng() % roots.size()];
      const int shared = std::min<int>(len, int(root.size()));
      p.prompt.assign(root.begin(), root.begin() + shared);
      const std::vector<int32_t> tail = test::random_prompt(seed * 1000 + uint64_t(i), len - shared);
      p.prompt.insert(p.prompt.end(), tail.begin(), tail.end());
    } else {
      p.prompt = test::random_prompt(seed * 1000 + uint64_t(i), len);
    }
    p.max_tokens = std::min<int32_t>(1 + int32_t(rng() % 24), context - int32_t(p.prompt.size()));
    p.cancel = rng() % 6 == 0;
    p.cancel_after_updates = int(rng() % 4);
    out.push_back(std::move(p));
  }
  return out;
}

TEST(ServingPromptGraphs, RandomArrivalsMatchUnpaddedRunsAlone) {
  constexpr int kContext = 64;
  EngineOptions off = test::tiny_options(kContext, 4);
  EngineOptions on = off;
  on.prompt_graphs = true;
  int64_t preemptions = 0, cached = 0;
  for (const int budget : {16, 40}) {
    const uint64_t seed = uint64_t(budget);
    const std::vector<Planned> plan = plan_requests(seed, 30, kContext);
    std::vector<std::vector<int32_t>> alone;
    {
      ServingEngine solo(off, {.max_running = 1, .max_step_tokens = 64, .prefix_caching = false});
      for (const Planned& p : plan) alone.push_back(collect(*solo.submit(greedy_request(p.prompt, p.max_tokens))).ids());
    }
    // 80 KV tokens (20 blocks of 4) for up to 6 sequences: decodes run out of blocks and preempt.
    ServingEngine s(on, {.max_running = 6, .max_step_tokens = budget, .kv_tokens = 80, .check_invariants = true});
    EXPECT_EQ(s.stats().kv_blocks_total, 20) << "the scratch blocks must come on top of kv_tokens";
    std::mt19937_64 rng(seed + 77);
    std::vector<std::shared_ptr<RequestHandle>> hs;
    std::vector<test::Collected> got(plan.size());
    std::vector<int> updates(plan.size(), 0);
    std::vector<bool> done(plan.size(), false);
    size_t submitted = 0, n_done = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (n_done < plan.size() && std::chrono::steady_clock::now() < deadline) {
      for (int k = int(rng() % 4); k > 0 && submitted < plan.size(); --k, ++submitted)
        hs.push_back(s.submit(greedy_request(plan[submitted].prompt, plan[submitted].max_tokens)));
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
            done[i] = true;
            ++n_done;
            break;
          }
        }
        if (!done[i] && plan[i].cancel && updates[i] >= plan[i].cancel_after_updates) hs[i]->cancel();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
    }
    ASSERT_EQ(n_done, plan.size()) << "budget " << budget << ": requests did not all finish";
    for (size_t i = 0; i < plan.size(); ++i) {
      const test::Collected& c = got[i];
      ASSERT_NE(c.finish, FinishReason::Error) << "budget " << budget << " request " << i << ": " << c.error;
      const std::vector<int32_t> ids = c.ids();
      if (c.finish == FinishReason::Cancelled) {
        ASSERT_LE(ids.size(), alone[i].size());
        EXPECT_TRUE(std::equal(ids.begin(), ids.end(), alone[i].begin())) << "budget " << budget << " request " << i;
      } else {
        EXPECT_EQ(ids, alone[i]) << "budget " << budget << " request " << i;
      }
    }
    const ServingStats st = s.stats();
    EXPECT_EQ(st.kv_blocks_used, 0) << "blocks leaked";
    EXPECT_EQ(st.requests_failed, 0);
    preemptions += st.preemptions;
    cached += st.prompt_tokens_cached;
  }
  std::printf("preemptions %lld, cached prompt tokens %lld\n", (long long)preemptions, (long long)cached);
  EXPECT_GT(preemptions, 0) << "the small cache never forced a preemption: the test does not test it";
  EXPECT_GT(cached, 0) << "no prefix-cache hit";
}

}  // namespace
}  // namespace ferry
