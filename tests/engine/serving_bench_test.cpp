// Not a test: a quick measure of continuous batching on the CPU (run with --gtest_also_run_disabled_tests).
// N concurrent greedy requests on the default model; prints aggregate generated tokens/s. Nothing asserted.
#include <gtest/gtest.h>

#include <cstdio>

#include "engine/serving_test_util.h"

namespace ferry {
namespace {

TEST(ServingBench, DISABLED_ConcurrentStreamsDefaultModel) {
  const std::optional<std::string> model = test::default_model();
  if (!model) GTEST_SKIP() << "default model not present";
  EngineOptions eo;
  eo.model_path = *model;
  eo.context = 512;
  ServingEngine s(eo, {.max_running = 16, .max_step_tokens = 256});
  for (const int n : {1, 4, 8, 16}) {
    std::vector<std::shared_ptr<RequestHandle>> hs;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) hs.push_back(s.submit(test::greedy_request(test::random_prompt(uint64_t(i), 32, 40000), 64)));
    int64_t tokens = 0;
    for (auto& h : hs) tokens += int64_t(test::collect(*h).tokens.size());
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%2d streams: %lld tokens in %.2f s = %.1f tok/s aggregate\n", n, (long long)tokens, sec,
                double(tokens) / sec);
  }
}

}  // namespace
}  // namespace ferry
