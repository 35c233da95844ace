// A bench test at a depth: bench_run.h.
#include "measure/bench_run.h"

#include <algorithm>

#include "core/check.h"

namespace ferry {

BenchRun run_bench_test(Engine& engine, const BenchTest& t, std::span<const int32_t> depth_tokens,
                        std::span<const int32_t> test_tokens) {
  const bool prompt = t.kind == TestKind::Prompt;
  FERRY_CHECK(int64_t(depth_tokens.size()) == t.depth, "{}: {} depth tokens given for depth {}", t.label(),
              depth_tokens.size(), t.depth);
  FERRY_CHECK(int64_t(test_tokens.size()) == (prompt ? t.n_tokens : 1), "{}: {} test tokens given (want {})",
              t.label(), test_tokens.size(), prompt ? t.n_tokens : 1);
  SamplingParams greedy;
  greedy.temperature = 0;
  engine.reset();
  if (t.depth > 0) engine.generate(depth_tokens, greedy, 0, nullptr);  // the fill: not timed
  // The whole history as the prompt: the engine keeps the K/V of the common prefix (the depth) and runs the rest.
  std::vector<int32_t> history(depth_tokens.begin(), depth_tokens.end());
  history.insert(history.end(), test_tokens.begin(), test_tokens.end());
  // tg: n_tokens + 1 sampled tokens = n_tokens decode steps after the 1-token prompt.
  BenchRun r;
  r.timed = engine.generate(history, greedy, prompt ? 0 : t.n_tokens + 1, nullptr, false);
  const GenerateResult& g = r.timed;
  r.cached_tokens = g.n_prompt - g.n_prompt_computed;
  FERRY_CHECK(r.cached_tokens == t.depth, "{}: the timed part found {} tokens in the KV cache, not the depth {}",
              t.label(), r.cached_tokens, t.depth);
  if (prompt) {
    r.seconds = g.prompt_seconds;
    r.tokens = t.n_tokens;
  } else {
    r.seconds = g.gen_seconds;
    r.tokens = double(g.tokens.size()) - 1;
  }
  return r;
}

int bench_context_needed(int n_prompt, int n_gen, std::span<const int> depths) {
  const int depth = depths.empty() ? 0 : *std::max_element(depths.begin(), depths.end());
  return depth + std::max(n_prompt, n_gen + 1);
}

}  // namespace ferry
