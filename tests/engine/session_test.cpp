// The engine's sequence handling over the paged KV cache: chunked prefill across many small blocks gives the
// same logits as transformers; a prompt sharing a prefix with the cached sequence computes only the rest and
// gives the same result as a fresh engine; the same seed gives the same text.
#include <gtest/gtest.h>


#include "ferry/engine.h"
#include "fixtures/golden_logits.h"
#include "fixtures/test_paths.h"

namespace ferry {
namespace {

const std::string kTinyLlama = "/tests/fixtures/models/tiny-llama";

TEST(Session, ChunkedPrefillOverSmallBlocksMatchesTransformers) {
  const test::GoldenLogits g = *test::load_golden_logits("tiny-llama");
  for (int step : {1, 3, 5}) {
    for (int block : {1, 4, 16}) {
      EngineOptions o;
      o.model_path = test::source_dir() + kTinyLlama;
      o.kernels = KernelSet::Reference;
      o.context = 64;
      o.max_step_tokens = step;
      o.block_size = block;
      Engine engine(o);
      const test::LogitAgreement a = test::compare_scores(g, [&](const auto& p) { return engine.score(p); });
      EXPECT_LE(a.max_rel_l2, 1e-4) << "step " << step << " block " << block;
    }
  }
}

TEST(Session, PrefixReuseComputesOnlyTheNewTokensAndChangesNothing) {
  EngineOptions o;
  o.model_path = test::source_dir() + kTinyLlama;
  o.context = 128;
  o.block_size = 4;
  SamplingParams greedy;
  greedy.temperature = 0;
  const std::vector<int32_t> first = {5, 80, 200, 17, 33, 9, 100};
  Engine cached(o);
  const GenerateResult a = cached.generate(first, greedy, 10, nullptr, false);
  EXPECT_EQ(a.n_prompt_computed, int(first.size()));
  // Second turn: the first prompt, its answer, and new tokens.
  std::vector<int32_t> second = first;
  second.insert(second.end(), a.tokens.begin(), a.tokens.end());
  second.insert(second.end(), {44, 45, 46});
  const GenerateResult b = cached.generate(second, greedy, 10, nullptr, false);
  // Cached: the first prompt and all generated tokens but the last (never run) are reused.
  EXPECT_EQ(b.n_prompt_computed, 1 + 3);
  Engine fresh(o);
  const GenerateResult c = fresh.generate(second, greedy, 10, nullptr, false);
  EXPECT_EQ(c.n_prompt_computed, int(second.size()));
  EXPECT_EQ(b.tokens, c.tokens);
}

TEST(Session, SameSeedSameTextDifferentSeedDifferentText) {
  EngineOptions o;
  o.model_path = test::source_dir() + kTinyLlama;
  o.context = 128;
  Engine engine(o);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  p.seed = 11;
  const auto a = engine.generate(prompt, p, 24, nullptr, false).tokens;
  const auto b = engine.generate(prompt, p, 24, nullptr, false).tokens;
  p.seed = 12;
  const auto c = engine.generate(prompt, p, 24, nullptr, false).tokens;
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Session, ContextFullEndsWithLength) {
  EngineOptions o;
  o.model_path = test::source_dir() + kTinyLlama;
  o.context = 16;
  Engine engine(o);
  SamplingParams greedy;
  greedy.temperature = 0;
  const GenerateResult r = engine.generate(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, greedy, 100, nullptr, false);
  EXPECT_EQ(r.finish, FinishReason::Length);
  EXPECT_EQ(r.tokens.size(), 16u - 6u + 1u);  // the last sampled token needs no cache slot
}

}  // namespace
}  // namespace ferry
