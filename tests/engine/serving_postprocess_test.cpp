// The serving step's sampling half (sample_rows): rows sampled on a thread pool give exactly what the serial
// order gives (each row has its own Sampler and seed), including logprobs and failing rows; plus a
// microbenchmark of one decode step's sampling (64 rows, Llama-3's 128256-token vocabulary, the server's
// OpenAI defaults: temperature 1, top_p 1, no top-k).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "engine/postprocess.h"

namespace ferry {
namespace {

// n_rows sequences over a vocab_size vocabulary with OpenAI's default sampling, seeds 1000 + i, a short random
// history each; every third asks for 5 logprobs.
std::vector<std::unique_ptr<Sequence>> make_sequences(int n_rows, int32_t vocab_size, std::mt19937& rng) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::uniform_int_distribution<int32_t> token(0, vocab_size - 1);
  for (int i = 0; i < n_rows; ++i) {
    auto s = std::make_unique<Sequence>();
    s->request.sampling.temperature = 1.0f;
    s->request.sampling.top_p = 1.0f;
    s->request.sampling.top_k = 0;
    s->request.sampling.min_p = 0.0f;
    s->request.sampling.seed = uint64_t(1000 + i);
    s->request.logprobs = i % 3 == 0 ? 5 : -1;
    for (int t = 0; t < 20 + i; ++t) s->tokens.push_back(token(rng));
    s->sampler.emplace(s->request.sampling, vocab_size);
    seqs.push_back(std::move(s));
  }
  return seqs;
}

// (n_rows x vocab_size) f32 logits, normal(0, 2): a flat distribution, so draws land all over the vocabulary.
std::vector<float> make_logits(int n_rows, int32_t vocab_size, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(size_t(n_rows) * size_t(vocab_size));
  for (float& l : logits) l = normal(rng);
  return logits;
}

std::vector<SampleRow> make_rows(std::vector<std::unique_ptr<Sequence>>& seqs, const std::vector<float>& logits,
                                 int32_t vocab_size) {
  std::vector<SampleRow> rows(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    rows[i].seq = seqs[i].get();
    rows[i].logits = std::span(logits).subspan(i * size_t(vocab_size), size_t(vocab_size));
  }
  return rows;
}

TEST(ServingPostprocess, ParallelSamplingEqualsSerial) {
  constexpr int kRows = 37;
  constexpr int32_t kVocab = 5003;
  std::mt19937 rng(7);
  std::vector<float> logits = make_logits(kRows, kVocab, rng);
  // Row 5 cannot be sampled: its error must stay in that row.
  std::fill_n(logits.begin() + 5 * kVocab, kVocab, -std::numeric_limits<float>::infinity());
  std::mt19937 rng_a(11), rng_b(11);
  auto serial_seqs = make_sequences(kRows, kVocab, rng_a);
  auto pool_seqs = make_sequences(kRows, kVocab, rng_b);
  ThreadPool pool(4);
  for (int step = 0; step < 3; ++step) {  // the samplers' scratch is reused across steps
    std::vector<SampleRow> serial = make_rows(serial_seqs, logits, kVocab);
    std::vector<SampleRow> parallel = make_rows(pool_seqs, logits, kVocab);
    sample_rows(serial, nullptr);
    sample_rows(parallel, &pool);
    int distinct = 0;
    for (int i = 0; i < kRows; ++i) {
      const SampleRow& a = serial[size_t(i)];
      const SampleRow& b = parallel[size_t(i)];
      EXPECT_EQ(a.token, b.token) << "row " << i;
      EXPECT_EQ(a.error, b.error) << "row " << i;
      EXPECT_EQ(a.error.empty(), i != 5) << "row " << i << ": " << a.error;
      ASSERT_EQ(a.has_logprobs, b.has_logprobs);
      EXPECT_EQ(a.logprobs.chosen.logprob, b.logprobs.chosen.logprob) << "row " << i;
      ASSERT_EQ(a.logprobs.top.size(), b.logprobs.top.size());
      for (size_t k = 0; k < a.logprobs.top.size(); ++k) {
        EXPECT_EQ(a.logprobs.top[k].id, b.logprobs.top[k].id);
        EXPECT_EQ(a.logprobs.top[k].logprob, b.logprobs.top[k].logprob);
      }
      if (i > 0 && a.token != serial[size_t(i - 1)].token) ++distinct;
    }
    EXPECT_GT(distinct, kRows / 2) << "different seeds and logits must draw mostly different tokens";
    for (int i = 0; i < kRows; ++i) {  // the next step's history, as finish_token would extend it
      serial_seqs[size_t(i)]->tokens.push_back(std::max(0, serial[size_t(i)].token));
      pool_seqs[size_t(i)]->tokens.push_back(std::max(0, parallel[size_t(i)].token));
    }
  }
}

// Run with --gtest_also_run_disabled_tests. FERRY: one decode step's sampling, serial and on pools.
TEST(ServingPostprocessBench, DISABLED_Rows64Vocab128k) {
  constexpr int kRows = 64;
  constexpr int32_t kVocab = 128256;
  std::mt19937 rng(3);
  const std::vector<float> logits = make_logits(kRows, kVocab, rng);
  auto seqs = make_sequences(kRows, kVocab, rng);
  for (auto& s : seqs) s->request.logprobs = -1;  // the server's default: no logprobs
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  for (const int threads : {1, 2, 4, 8}) {
    if (threads > hw) break;
    std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
    constexpr int kSteps = 10;
    int64_t sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int step = 0; step < kSteps; ++step) {
      std::vector<SampleRow> rows = make_rows(seqs, logits, kVocab);
      sample_rows(rows, pool.get());
      for (const SampleRow& r : rows) sink += r.token;
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / kSteps;
    std::printf("  %d rows x %d vocab, %d thread(s): %.2f ms per step (%.1f us per row; checksum %lld)\n", kRows, kVocab,
                threads, ms, 1e3 * ms / kRows, static_cast<long long>(sink));
  }
}

}  // namespace
}  // namespace ferry
