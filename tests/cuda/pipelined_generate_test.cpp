// Engine::generate with pipelined decode steps (EngineOptions::pipelined_decode, Session::launch_decode: step t + 1 is
// launched on step t's device draw before the host reads it) against the one-step-at-a-time loop, on the GPU and
// a reference model: the same tokens and text (greedy, and a seeded draw with top-k/top-p/min-p: the draw at a
// position depends only on the seed and the position), when generation runs to max_tokens, when the callback stops
// it (the step already launched on the stopping token is dropped) and when the context fills; and the next
// generate() on the same engine, which reuses the history's KV, continues identically.
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "ferry/engine.h"
#include "fixtures/golden_logits.h"

namespace ferry {
namespace {

struct GenRun {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish;
};

// Generates from `prompt` (then from prompt + what it made, once more) with EngineOptions::pipelined_decode.
std::vector<GenRun> generate_twice(const std::string& model, bool pipelined, const SamplingParams& params,
                                   int max_tokens, int stop_after, int32_t context) {
  EngineOptions o;
  o.model_path = model;
  o.device = "cuda";
  o.context = context;
  o.pipelined_decode = pipelined;
  Engine engine(o);
  std::vector<int32_t> prompt = {1, 17, 42, 7, 99, 3};
  std::vector<GenRun> runs;
  for (int call = 0; call < 2; ++call) {
    int seen = 0;
    const GenerateResult r = engine.generate(
        prompt, params, max_tokens, [&](std::string_view, int32_t tok) { return tok < 0 || ++seen < stop_after; },
        false);
    runs.push_back({r.tokens, r.text, r.finish});
    prompt.insert(prompt.end(), r.tokens.begin(), r.tokens.end());
    if (int32_t(prompt.size()) >= context) break;
  }
  return runs;
}

TEST(CudaPipelinedGenerate, SameTokensAsOneStepAtATime) {
  if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const auto g = test::load_golden_logits("tiny-llama");
  if (!g) GTEST_SKIP() << "reference model missing";
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SamplingParams drawn;  // the CLI's default filters, seeded
  drawn.temperature = 0.9f;
  drawn.seed = 1234;
  struct Case {
    const char* what;
    SamplingParams params;
    int max_tokens, stop_after;
    int32_t context;
  };
  const Case cases[] = {
      {"greedy to max_tokens", greedy, 40, 1 << 30, 256},
      {"seeded draw to max_tokens", drawn, 40, 1 << 30, 256},
      {"greedy, the callback stops at token 7", greedy, 40, 7, 256},
      {"seeded draw, the callback stops at token 1", drawn, 40, 1, 256},
      {"greedy until the context is full", greedy, 100, 1 << 30, 48},
      {"one token", greedy, 1, 1 << 30, 256},
      {"two tokens", drawn, 2, 1 << 30, 256},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::vector<GenRun> plain =
        generate_twice(g->model_path, false, c.params, c.max_tokens, c.stop_after, c.context);
    const std::vector<GenRun> piped =
        generate_twice(g->model_path, true, c.params, c.max_tokens, c.stop_after, c.context);
    ASSERT_EQ(plain.size(), piped.size());
    for (size_t k = 0; k < plain.size(); ++k) {
      EXPECT_EQ(piped[k].tokens, plain[k].tokens) << "call " << k;
      EXPECT_EQ(piped[k].text, plain[k].text) << "call " << k;
      EXPECT_EQ(piped[k].finish, plain[k].finish) << "call " << k;
    }
  }
}

}  // namespace
}  // namespace ferry

#endif  // FERRY_HAS_CUDA
