// The engine's sequence handling over the paged KV cache: chunked prefill across many small blocks gives the
// same logits as transformers; a prompt sharing a prefix with the cached sequence computes only the rest and
// gives the same result as a fresh engine; the same seed gives the same text.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "ferry/engine.h"
#include "fixtures/test_paths.h"

namespace ferry {
namespace {

const std::string kTinyLlama = "/tests/fixtures/models/tiny-llama";

struct Golden {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<float> logits;
  int vocab;
};

Golden tiny_llama_golden() {
  const std::string dir = test::golden_dir() + "/logits/";
  const auto j = nlohmann::json::parse(test::read_file(dir + "tiny-llama.json"));
  Golden g;
  g.prompts = j.at("prompts").get<std::vector<std::vector<int32_t>>>();
  g.vocab = j.at("vocab_size").get<int>();
  const std::string bin = test::read_file(dir + "tiny-llama.bin");
  g.logits.resize(bin.size() / 4);
  std::memcpy(g.logits.data(), bin.data(), bin.size());
  return g;
}

double rel_l2(const float* a, const float* b, int n) {
  double num = 0, den = 0;
  for (int i = 0; i < n; ++i) {
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

TEST(Session, ChunkedPrefillOverSmallBlocksMatchesTransformers) {
  const Golden g = tiny_llama_golden();
  for (int step : {1, 3, 5}) {
    for (int block : {1, 4, 16}) {
      EngineOptions o;
      o.model_path = test::source_dir() + kTinyLlama;
      o.kernels = KernelSet::Reference;
      o.context = 64;
      o.max_step_tokens = step;
      o.block_size = block;
      Engine engine(o);
      size_t offset = 0;
      for (const auto& prompt : g.prompts) {
        const std::vector<float> got = engine.score(prompt);
        for (size_t p = 0; p < prompt.size(); ++p)
          EXPECT_LE(rel_l2(got.data() + p * g.vocab, g.logits.data() + offset + p * g.vocab, g.vocab), 1e-4)
              << "step " << step << " block " << block << " position " << p;
        offset += prompt.size() * size_t(g.vocab);
      }
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
