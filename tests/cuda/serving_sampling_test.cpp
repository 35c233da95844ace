// Sampling on the GPU inside the serving engine (ServingOptions.device_sampling): every request's tokens equal
// those of the same engine with every row sampled on the host (sampling/sampler.cpp, the reference), for a mix of
// greedy, seeded temperature / top-k / top-p / min-p rows (drawn on the device) and rows that stay on the host
// (logprobs, repetition penalty). Also: rows drawn on the device copy no logits to the host, and decode steps
// still replay step graphs. The model is a 4-layer cut of the SmolLM2-135M shape (vocabulary 49152) with random
// BF16 weights; batch-invariant kernels make the logits independent of how the two engines happened to batch
// the requests (arrival timing), so any token difference is the sampler's.
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "engine/serving_test_util.h"
#include "ferry/engine.h"
#include "ferry/serving.h"
#include "fixtures/test_paths.h"

namespace ferry {
namespace {

constexpr int kMaxTokens = 24;
constexpr int64_t kVocab = 49152;  // smollm2-135m

GenerationRequest request(uint64_t seed, float temperature, int32_t top_k, float top_p, float min_p) {
  GenerationRequest r;
  r.prompt = test::random_prompt(seed, 5 + int(seed * 7 % 40), 253);  // byte tokens of the synthetic vocabulary
  r.sampling.temperature = temperature;
  r.sampling.top_k = top_k;
  r.sampling.top_p = top_p;
  r.sampling.min_p = min_p;
  r.sampling.seed = 1000 + seed;
  r.max_tokens = kMaxTokens;
  r.ignore_eos = true;
  return r;
}

// The mix: rows 0..5 sample on the device, 6 (logprobs) and 7 (repetition penalty) on the host.
std::vector<GenerationRequest> mixed_requests() {
  std::vector<GenerationRequest> v;
  v.push_back(request(1, 0.0f, 40, 0.95f, 0.05f));  // greedy
  v.push_back(request(2, 0.8f, 40, 0.95f, 0.05f));  // the defaults: top-k + top-p + min-p
  v.push_back(request(3, 1.0f, 0, 1.0f, 0.0f));     // temperature only (the whole vocabulary)
  v.push_back(request(4, 0.7f, 0, 0.9f, 0.0f));     // top-p without top-k
  v.push_back(request(5, 1.2f, 5, 1.0f, 0.0f));     // small top-k
  v.push_back(request(6, 0.9f, 0, 1.0f, 0.1f));     // min-p only
  GenerationRequest lp = request(7, 0.8f, 40, 0.95f, 0.05f);
  lp.logprobs = 3;
  v.push_back(lp);
  GenerationRequest pen = request(8, 0.8f, 40, 0.95f, 0.05f);
  pen.sampling.repetition_penalty = 1.3f;
  v.push_back(pen);
  return v;
}

struct Outcome {
  std::vector<std::vector<GeneratedToken>> tokens;  // per request
  ServingStats stats;
};

class CudaServingSampling : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (CudaBackend::device_count() == 0) return;
    path_ = test::write_small_bf16_model("serving_sampling_smollm2_4l_bf16.gguf", 33);
  }
  void SetUp() override {
    if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    cudaDeviceProp prop{};
    ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    if (prop.major != 9) GTEST_SKIP() << "batch-invariant kernels need compute capability 9.x";
  }

  static Outcome run(const std::vector<GenerationRequest>& requests, bool device_sampling) {
    EngineOptions eo;
    eo.model_path = path_;
    eo.device = "cuda";
    eo.context = 512;
    ServingOptions so{.max_running = 16, .max_step_tokens = 128, .prefix_caching = false};
    so.batch_invariant = true;
    so.device_sampling = device_sampling;
    so.check_invariants = true;
    Outcome out;
    ServingEngine e(eo, so);
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (const GenerationRequest& r : requests) handles.push_back(e.submit(r));
    for (auto& h : handles) {
      test::Collected c = test::collect(*h, std::chrono::seconds(300));
      EXPECT_TRUE(c.error.empty()) << c.error;
      out.tokens.push_back(std::move(c.tokens));
    }
    e.shutdown(true);
    out.stats = e.stats();
    return out;
  }

  static inline std::string path_;
};

TEST_F(CudaServingSampling, DeviceRowsDrawTheHostSamplersTokens) {
  const std::vector<GenerationRequest> reqs = mixed_requests();
  const Outcome dev = run(reqs, true);
  const Outcome host = run(reqs, false);
  ASSERT_EQ(dev.tokens.size(), reqs.size());
  ASSERT_EQ(host.tokens.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(dev.tokens[i].size(), size_t(kMaxTokens)) << "request " << i;
    ASSERT_EQ(host.tokens[i].size(), size_t(kMaxTokens)) << "request " << i;
    for (size_t t = 0; t < size_t(kMaxTokens); ++t)
      EXPECT_EQ(dev.tokens[i][t].id, host.tokens[i][t].id) << "request " << i << " token " << t;
  }
  // The logprobs row (host path in both engines): the same logprobs from the same logits.
  for (size_t t = 0; t < size_t(kMaxTokens); ++t) {
    const GeneratedToken& a = dev.tokens[6][t];
    const GeneratedToken& b = host.tokens[6][t];
    ASSERT_EQ(a.top.size(), 3u);
    EXPECT_EQ(a.chosen.logprob, b.chosen.logprob) << "token " << t;
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(a.top[k].id, b.top[k].id) << "token " << t << " alternative " << k;
  }
  // Distinct draws: the sampled (non-greedy) rows did not collapse onto one token each.
  for (size_t i = 1; i < 6; ++i) {
    int changes = 0;
    for (size_t t = 1; t < size_t(kMaxTokens); ++t) changes += dev.tokens[i][t].id != dev.tokens[i][t - 1].id;
    EXPECT_GT(changes, 0) << "request " << i;
  }
  // Traffic: six requests on the device, the logprobs and penalty rows' logits (one row each per token) copied.
  EXPECT_EQ(dev.stats.device_sampled_tokens, 6 * kMaxTokens);
  EXPECT_EQ(dev.stats.logits_host_bytes, 2 * kMaxTokens * kVocab * 4);
  EXPECT_EQ(host.stats.device_sampled_tokens, 0);
  EXPECT_GE(host.stats.logits_host_bytes, int64_t(reqs.size()) * kMaxTokens * kVocab * 4);
  EXPECT_GT(dev.stats.graph_replays, 0);
  std::printf("device run: %lld device tokens, %lld logit bytes to the host, %lld graph replays; host run: %lld "
              "bytes, %lld replays\n", (long long)dev.stats.device_sampled_tokens,
              (long long)dev.stats.logits_host_bytes, (long long)dev.stats.graph_replays,
              (long long)host.stats.logits_host_bytes, (long long)host.stats.graph_replays);
}

TEST_F(CudaServingSampling, DeviceOnlyStepsCopyNoLogitsAndReplayGraphs) {
  std::vector<GenerationRequest> reqs = mixed_requests();
  reqs.resize(6);  // device rows only
  const Outcome dev = run(reqs, true);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(dev.tokens[i].size(), size_t(kMaxTokens)) << "request " << i;
  EXPECT_EQ(dev.stats.logits_host_bytes, 0);
  EXPECT_EQ(dev.stats.device_sampled_tokens, 6 * kMaxTokens);
  EXPECT_GT(dev.stats.graph_replays, 0);
}

// `ferry run` / Engine::generate: the same tokens with the draw on the device as with
// EngineOptions::device_sampling off (the host sampler), for greedy and seeded sampling settings; a penalty setting takes the host path in both.
TEST_F(CudaServingSampling, EngineGenerateDrawsTheHostSamplersTokens) {
  EngineOptions eo;
  eo.model_path = path_;
  eo.device = "cuda";
  eo.context = 512;
  eo.batch_invariant = true;
  const std::vector<GenerationRequest> reqs = mixed_requests();
  const auto tokens = [&](bool device) {
    std::vector<std::vector<int32_t>> out;
    EngineOptions o = eo;
    o.device_sampling = device;
    Engine e(o);
    for (const GenerationRequest& r : reqs) {
      e.reset();
      out.push_back(e.generate(r.prompt, r.sampling, kMaxTokens, nullptr, false).tokens);
    }
    return out;
  };
  const auto dev = tokens(true), host = tokens(false);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(dev[i].size(), size_t(kMaxTokens)) << "request " << i;
    EXPECT_EQ(dev[i], host[i]) << "request " << i;
  }
}

}  // namespace
}  // namespace ferry

#endif  // FERRY_HAS_CUDA
