// A bench test at a depth (measure/bench_run.h) on a tiny random model on the CPU: the timed part finds exactly the
// depth's tokens in the KV cache, and they are really there: generation after them gives the tokens of one
// uninterrupted run over the same history, not those of a run without it.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/check.h"
#include "measure/bench_run.h"

namespace ferry {
namespace {

EngineOptions tiny_engine() {
  EngineOptions eo;
  eo.model_path = "random:tiny:f32";
  eo.n_threads = 2;
  eo.context = 96;
  eo.max_step_tokens = 16;  // the depth's fill and the prompt test run in several chunks
  return eo;
}

std::vector<int32_t> tokens(int n, int32_t first) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = (first + 37 * i) % 500;
  return v;
}

TEST(BenchRun, GenerationAtDepthReadsTheDepthsKeys) {
  Engine engine(tiny_engine());
  const std::vector<int32_t> depth = tokens(40, 3), first = {7};
  const BenchTest t{TestKind::Generate, 8, 0, 40};
  const BenchRun run = run_bench_test(engine, t, depth, first);
  EXPECT_EQ(run.cached_tokens, 40);
  EXPECT_EQ(run.timed.n_prompt, 41);
  EXPECT_EQ(run.timed.n_prompt_computed, 1);
  ASSERT_EQ(run.timed.tokens.size(), 9u);
  EXPECT_EQ(run.tokens, 8);
  EXPECT_GT(run.seconds, 0);

  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<int32_t> history = depth;
  history.push_back(first[0]);
  engine.reset();
  const GenerateResult whole = engine.generate(history, greedy, 9, nullptr, false);
  EXPECT_EQ(whole.n_prompt_computed, 41);
  EXPECT_EQ(run.timed.tokens, whole.tokens) << "the depth's K/V in the cache is the history's";
  engine.reset();
  const GenerateResult shallow = engine.generate(first, greedy, 9, nullptr, false);
  EXPECT_NE(run.timed.tokens, shallow.tokens) << "the depth changes what the model sees";
  // Depth 0 is the old test: the 1-token prompt from an empty cache.
  const BenchRun d0 = run_bench_test(engine, {TestKind::Generate, 8, 0, 0}, {}, first);
  EXPECT_EQ(d0.cached_tokens, 0);
  EXPECT_EQ(d0.timed.tokens, shallow.tokens);
}

TEST(BenchRun, PromptAtDepthComputesOnlyThePrompt) {
  Engine engine(tiny_engine());
  const BenchTest t{TestKind::Prompt, 24, 16, 50};
  const BenchRun run = run_bench_test(engine, t, tokens(50, 1), tokens(24, 11));
  EXPECT_EQ(run.cached_tokens, 50);
  EXPECT_EQ(run.timed.n_prompt_computed, 24);
  EXPECT_EQ(run.tokens, 24);
  EXPECT_TRUE(run.timed.tokens.empty());
  // Sizes that disagree with the test, and a depth the context cannot hold, are errors.
  EXPECT_THROW(run_bench_test(engine, t, tokens(49, 1), tokens(24, 11)), Error);
  EXPECT_THROW(run_bench_test(engine, t, tokens(50, 1), tokens(23, 11)), Error);
  EXPECT_THROW(run_bench_test(engine, {TestKind::Prompt, 24, 16, 80}, tokens(80, 1), tokens(24, 11)), Error);
}

TEST(BenchRun, ContextNeededHoldsTheDeepestDepthAndTheLongestTest) {
  const std::vector<int> depths = {0, 8192, 32768};
  EXPECT_EQ(bench_context_needed(512, 128, depths), 32768 + 512);
  EXPECT_EQ(bench_context_needed(0, 128, depths), 32768 + 129);
  EXPECT_EQ(bench_context_needed(16, 8, std::vector<int>{0}), 16);
}

}  // namespace
}  // namespace ferry
