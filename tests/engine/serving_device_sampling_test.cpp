// The host side of device sampling (ServingOptions.device_sampling), which runs on the CPU here: sample_rows
// leaves rows drawn on the device alone and samples the others exactly as before (serially and on a pool); the
// CPU backend samples in the backend like a GPU, so the engine copies logits only for the rows that need them.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "engine/postprocess.h"
#include "sampling/sampler.h"
#include "serving_test_util.h"

namespace ferry {
namespace {

TEST(ServingDeviceSampling, SampleRowsSkipsRowsDrawnOnTheDevice) {
  constexpr int kRows = 23;
  constexpr int32_t kVocab = 3001;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(size_t(kRows) * kVocab);
  for (float& l : logits) l = normal(rng);
  for (int threads : {1, 3}) {
    std::vector<std::unique_ptr<Sequence>> seqs;
    std::vector<SampleRow> rows(kRows);
    for (int i = 0; i < kRows; ++i) {
      auto s = std::make_unique<Sequence>();
      s->request.sampling.temperature = 1.0f;
      s->request.sampling.top_k = 0;
      s->request.sampling.seed = uint64_t(77 + i);
      s->request.logprobs = i % 4 == 0 ? 2 : -1;
      for (int t = 0; t < 10 + i; ++t) s->tokens.push_back(int32_t(rng() % kVocab));
      s->sampler.emplace(s->request.sampling, kVocab);
      rows[size_t(i)].seq = s.get();
      if (i % 3 == 1) {  // drawn on the device: a token the host sampler would not produce here
        rows[size_t(i)].on_device = true;
        rows[size_t(i)].token = kVocab - 1 - i;
      } else {
        rows[size_t(i)].logits = std::span(logits).subspan(size_t(i) * kVocab, kVocab);
      }
      seqs.push_back(std::move(s));
    }
    ThreadPool pool(threads);
    sample_rows(rows, threads > 1 ? &pool : nullptr);
    for (int i = 0; i < kRows; ++i) {
      const SampleRow& r = rows[size_t(i)];
      EXPECT_TRUE(r.error.empty()) << r.error;
      if (i % 3 == 1) {
        EXPECT_EQ(r.token, kVocab - 1 - i) << "row " << i << " was drawn on the device and must stay";
        EXPECT_FALSE(r.has_logprobs);
        continue;
      }
      Sampler ref(seqs[size_t(i)]->request.sampling, kVocab);
      EXPECT_EQ(r.token, ref.sample(std::span(logits).subspan(size_t(i) * kVocab, kVocab), seqs[size_t(i)]->tokens))
          << "row " << i << " threads " << threads;
      EXPECT_EQ(r.has_logprobs, i % 4 == 0);
    }
  }
}

// The CPU backend samples "on the device" too (CpuBackend::sample: the reference Sampler per row, on its thread
// pool), so the serving engine draws rows there and copies logits only for rows that need them (logprobs). The
// tokens are those of the host sampler, with asynchronous scheduling on or off.
TEST(ServingDeviceSampling, CpuEngineSamplesInTheBackendWithTheSameTokens) {
  struct Config {
    bool device_sampling, async_scheduling;
  };
  std::vector<std::vector<std::vector<int32_t>>> ids;  // per config, per request
  for (const Config cfg : {Config{false, false}, Config{true, false}, Config{true, true}}) {
    ServingOptions so{.max_running = 4, .max_step_tokens = 64};
    so.device_sampling = cfg.device_sampling;
    so.async_scheduling = cfg.async_scheduling;
    so.check_invariants = true;
    ServingEngine e(test::tiny_options(), so);
    GenerationRequest a = test::greedy_request(test::random_prompt(1, 9), 7);
    GenerationRequest b = test::greedy_request(test::random_prompt(2, 13), 5);
    b.sampling.temperature = 0.9f;
    b.sampling.seed = 3;
    GenerationRequest c = test::greedy_request(test::random_prompt(3, 6), 4);
    c.logprobs = 2;  // its rows copy their logits to the host
    auto ha = e.submit(a);
    auto hb = e.submit(b);
    auto hc = e.submit(c);
    const test::Collected ca = test::collect(*ha), cb = test::collect(*hb), cc = test::collect(*hc);
    ASSERT_EQ(ca.tokens.size(), 7u) << ca.error;
    ASSERT_EQ(cb.tokens.size(), 5u) << cb.error;
    ASSERT_EQ(cc.tokens.size(), 4u) << cc.error;
    e.shutdown(true);
    const ServingStats st = e.stats();
    EXPECT_EQ(st.graph_replays, 0);
    // Asynchronous scheduling really overlapped steps (a's and b's decode steps after c, whose logprobs rows make
    // every step holding them finish at once, has ended).
    if (cfg.async_scheduling) {
      EXPECT_GT(st.overlapped_steps, 0);
    } else {
      EXPECT_EQ(st.overlapped_steps, 0);
    }
    const int64_t row_bytes = int64_t(e.info().vocab_size) * 4;
    if (cfg.device_sampling) {
      EXPECT_EQ(st.device_sampled_tokens, 12);
      EXPECT_EQ(st.logits_host_bytes, 4 * row_bytes);  // c's rows only
    } else {
      EXPECT_EQ(st.device_sampled_tokens, 0);
      EXPECT_EQ(st.logits_host_bytes, 16 * row_bytes);  // one row per generated token (no padding on the CPU)
    }
    ids.push_back({ca.ids(), cb.ids(), cc.ids()});
  }
  EXPECT_EQ(ids[1], ids[0]) << "device sampling changed the tokens";
  EXPECT_EQ(ids[2], ids[0]) << "asynchronous scheduling changed the tokens";
}

}  // namespace
}  // namespace ferry
