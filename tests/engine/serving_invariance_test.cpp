// Batch invariance on the CPU: with temperature 0 a request's tokens are identical when it runs alone and
// when it shares every step with other requests (mixed prefill chunks and decodes of different lengths), for
// the tiny fixture model and for the default model (SmolLM2-135M Q4_1; skipped when absent). The CPU kernels
// compute each row of a matmul and each sequence's attention the same way whatever else is in the batch.
#include <gtest/gtest.h>

#include "engine/serving_test_util.h"

namespace ferry {
namespace {

using test::collect;
using test::greedy_request;

// Runs `target` alone, then again submitted in the middle of `others` (long prompts chunked over several
// steps, short ones decoding), and expects the same tokens. Also checks every other request against its own
// solo run.
void expect_batch_invariant(const EngineOptions& eo, const ServingOptions& so, const std::vector<int32_t>& target,
                            const std::vector<std::vector<int32_t>>& others, int max_tokens) {
  std::vector<std::vector<int32_t>> alone;
  {
    ServingEngine solo(eo, so);
    alone.push_back(collect(*solo.submit(greedy_request(target, max_tokens))).ids());
    for (const auto& p : others) alone.push_back(collect(*solo.submit(greedy_request(p, max_tokens))).ids());
  }
  ServingEngine busy(eo, so);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  const size_t half = others.size() / 2;
  for (size_t i = 0; i < half; ++i) hs.push_back(busy.submit(greedy_request(others[i], max_tokens)));
  auto target_handle = busy.submit(greedy_request(target, max_tokens));
  for (size_t i = half; i < others.size(); ++i) hs.push_back(busy.submit(greedy_request(others[i], max_tokens)));
  EXPECT_EQ(collect(*target_handle).ids(), alone[0]) << "the target request's tokens changed inside a busy batch";
  for (size_t i = 0; i < hs.size(); ++i) EXPECT_EQ(collect(*hs[i]).ids(), alone[i + 1]) << "other request " << i;
  EXPECT_GT(busy.stats().steps, 0);
}

TEST(ServingInvariance, TinyModelAloneEqualsInABusyBatch) {
  std::vector<std::vector<int32_t>> others;
  for (int i = 0; i < 6; ++i) others.push_back(test::random_prompt(200 + i, 3 + 9 * i));
  expect_batch_invariant(test::tiny_options(256), {.max_running = 8, .max_step_tokens = 16, .prefix_caching = false},
                         test::random_prompt(7, 13), others, 24);
}

TEST(ServingInvariance, DefaultModelAloneEqualsInABusyBatch) {
  const std::optional<std::string> model = test::default_model();
  if (!model) GTEST_SKIP() << "default model not present";
  EngineOptions eo;
  eo.model_path = *model;
  eo.context = 256;
  eo.n_threads = 2;
  ServingEngine probe(eo, {.max_running = 1, .max_step_tokens = 1});
  const std::vector<int32_t> target = probe.tokenize(
      probe.apply_chat_template({{"user", "Name three colors."}}, true), true, true);
  std::vector<std::vector<int32_t>> others;
  for (const char* q : {"What is 2+2?", "Write a haiku about the sea, please, in English.", "Hi"})
    others.push_back(probe.tokenize(probe.apply_chat_template({{"user", q}}, true), true, true));
  probe.shutdown(false);
  expect_batch_invariant(eo, {.max_running = 4, .max_step_tokens = 16, .prefix_caching = false}, target, others, 12);
}

}  // namespace
}  // namespace ferry
