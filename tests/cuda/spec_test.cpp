// Speculative decoding on CUDA with step graphs on (the verify chunks as one-row entries: decode-shaped steps,
// model/batch.h). The model is the 4-layer cut of the SmolLM2-135M shape with random BF16 weights that
// batch_invariant_test uses.
//  - Engine (ferry run / chat): with the batch-invariant kernels, greedy tokens with n-gram speculation and with the
//    oracle proposer (every proposal the plain run's own token) at k = 1..8 equal the plain decode's, the oracle's
//    proposals all kept, its verify steps replayed from graphs; with the default kernels the fraction of positions
//    whose argmax changed is printed, not asserted.
//  - ServingEngine: speculating (n-gram) and plain requests share steps with graphs and the warm-up on; with the
//    batch-invariant kernels every request's greedy tokens equal its plain solo run's, no block leaks.
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "engine/serving_test_util.h"
#include "ferry/engine.h"
#include "ferry/serving.h"

namespace ferry {
namespace {

// A prompt whose second half repeats its first (n-gram lookups find matches).
std::vector<int32_t> grounded_prompt(uint64_t seed, int n) {
  std::vector<int32_t> p = test::random_prompt(seed, n, 253);
  const std::vector<int32_t> copy(p.begin() + 2, p.end());
  p.insert(p.end(), copy.begin(), copy.end() - 3);
  return p;
}

class CudaSpec : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (CudaBackend::device_count() == 0) return;
    path_ = test::write_small_bf16_model("spec_smollm2_4l_bf16.gguf", 21);
  }
  void SetUp() override {
    if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
  static EngineOptions options(bool invariant) {
    EngineOptions eo;
    eo.model_path = path_;
    eo.device = "cuda";
    eo.context = 1024;
    eo.batch_invariant = invariant;
    return eo;
  }
  static SamplingParams greedy() {
    SamplingParams g;
    g.temperature = 0;
    return g;
  }
  // Plain, then the oracle at k = 1..8 on the same prompt: the positions compared and changed (oracle_bench.h).
  static void plain_and_oracle(bool invariant, int64_t& compared, int64_t& changed) {
    Engine e(options(invariant));
    const std::vector<int32_t> prompt = grounded_prompt(5, 40);
    const GenerateResult plain = e.generate(prompt, greedy(), 64, nullptr, false);
    ASSERT_EQ(plain.tokens.size(), 64u);
    std::vector<int32_t> recorded = prompt;
    recorded.insert(recorded.end(), plain.tokens.begin(), plain.tokens.end());
    compared = changed = 0;
    for (int k = 1; k <= 8; ++k) {
      e.replay_proposals(recorded, k);
      e.reset();
      const GenerateResult r = e.generate(prompt, greedy(), 64, nullptr, false);
      size_t same = 0;
      while (same < r.tokens.size() && same < plain.tokens.size() && r.tokens[same] == plain.tokens[same]) ++same;
      const bool differ = r.tokens != plain.tokens;
      compared += int64_t(same) + (differ ? 1 : 0);
      changed += differ ? 1 : 0;
      if (invariant) {
        EXPECT_EQ(r.tokens, plain.tokens) << "oracle k " << k << ": first difference at " << same;
        EXPECT_EQ(r.spec_accepted, r.spec_proposed) << "oracle k " << k;
        EXPECT_LE(r.target_steps, (64 + k) / (k + 1) + 1) << "oracle k " << k;
      }
    }
  }

  static inline std::string path_;
};

TEST_F(CudaSpec, BatchInvariantOracleAndNgramGiveThePlainGreedyTokens) {
  int64_t compared = 0, changed = 0;
  plain_and_oracle(true, compared, changed);
  EXPECT_EQ(changed, 0);
  // n-gram proposals (kept and rejected) through the same verify steps.
  EngineOptions spec = options(true);
  spec.spec = {.mode = SpecMode::Ngram, .k = 4, .draft_model = {}};
  Engine plain(options(true)), ngram(spec);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const std::vector<int32_t> prompt = grounded_prompt(seed, 30);
    const GenerateResult a = plain.generate(prompt, greedy(), 48, nullptr, false);
    const GenerateResult b = ngram.generate(prompt, greedy(), 48, nullptr, false);
    EXPECT_EQ(a.tokens, b.tokens) << "seed " << seed;
    EXPECT_GT(b.spec_proposed, 0) << "seed " << seed;
  }
}

TEST_F(CudaSpec, DefaultKernelsReportTheArgmaxChanges) {
  int64_t compared = 0, changed = 0;
  plain_and_oracle(false, compared, changed);
  std::printf("default kernels: argmax vs the plain decode changed at %lld of %lld compared positions (%.3f%%)\n",
              static_cast<long long>(changed), static_cast<long long>(compared),
              compared > 0 ? 100.0 * double(changed) / double(compared) : 0.0);
}

TEST_F(CudaSpec, ServingMixesSpeculatingAndPlainRequestsWithGraphs) {
  const ServingOptions so{.max_running = 8, .max_step_tokens = 96, .prefix_caching = true, .check_invariants = true};
  const auto request = [](uint64_t i, std::optional<SpecMode> spec) {
    GenerationRequest r = test::greedy_request(grounded_prompt(100 + i, 12 + int(i) * 9), 40);
    r.spec = spec;
    r.spec_k = i == 2 ? 2 : 0;
    return r;
  };
  std::vector<std::vector<int32_t>> alone;
  {
    ServingEngine solo(options(true), so);
    for (uint64_t i = 0; i < 6; ++i) alone.push_back(test::collect(*solo.submit(request(i, std::nullopt))).ids());
  }
  EngineOptions eo = options(true);
  eo.spec = {.mode = SpecMode::Ngram, .k = 6, .draft_model = {}};  // the server's default; requests 0 and 3 opt out
  ServingEngine busy(eo, so);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (uint64_t i = 0; i < 6; ++i)
    hs.push_back(busy.submit(request(i, i % 3 == 0 ? std::optional(SpecMode::Off) : std::nullopt)));
  for (size_t i = 0; i < hs.size(); ++i) {
    const test::Collected c = test::collect(*hs[i], std::chrono::seconds(300));
    EXPECT_TRUE(c.error.empty()) << c.error;
    EXPECT_EQ(c.ids(), alone[i]) << "request " << i;
  }
  const ServingStats st = busy.stats();
  EXPECT_GT(st.spec_steps, 0);
  EXPECT_GT(st.spec_proposed, 0);
  EXPECT_GT(st.graph_replays, 0);
  EXPECT_EQ(st.requests_failed, 0);
  EXPECT_EQ(st.kv_blocks_used, 0) << "blocks leaked";
  std::printf("serving on CUDA: %lld verify steps, %lld of %lld proposals kept, %lld graph replays, %lld warm-up steps\n",
              static_cast<long long>(st.spec_steps), static_cast<long long>(st.spec_accepted),
              static_cast<long long>(st.spec_proposed), static_cast<long long>(st.graph_replays),
              static_cast<long long>(st.graph_warmup_steps));
}

}  // namespace
}  // namespace ferry

#endif  // FERRY_HAS_CUDA
