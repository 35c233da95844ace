// One run of a `ferry bench` test on an engine at a depth: the KV cache is first filled with the depth's tokens
// (a prefill through Engine::generate, not timed), then the test runs and is timed as at depth 0, through the
// same engine path (chunked prefill, device sampling, CUDA step graphs), so `tg128 @ d8192` measures decode with
// 8192 tokens of K/V to read each step (llama-bench's -d).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ferry/engine.h"
#include "measure/roofline.h"

namespace ferry {

struct BenchRun {
  double seconds = 0;              // the timed part: the prompt (pp), or the decode steps after the 1-token prompt (tg)
  double tokens = 0;               // the tokens the rate counts: the prompt's (pp), the decode steps' (tg)
  int cached_tokens = 0;           // tokens already in the KV cache when the timed part began (= the depth)
  GenerateResult timed;            // the timed generate call (tg: its tokens, greedy; speculation's counts)
  double tokens_per_s() const { return tokens / seconds; }
};

// Runs test t from an empty cache: depth_tokens (t.depth of them) prefilled untimed, then test_tokens (pp: the
// t.n_tokens prompt tokens; tg: the 1-token prompt, then t.n_tokens decode steps, greedy, past end-of-generation
// tokens). ferry::Error when the sizes disagree with t, or when the timed part did not find exactly the depth's
// tokens in the KV cache.
BenchRun run_bench_test(Engine& engine, const BenchTest& t, std::span<const int32_t> depth_tokens,
                        std::span<const int32_t> test_tokens);

// The tokens one sequence holds at the end of pp n_prompt or tg n_gen (its 1-token prompt and n_gen decode steps)
// at the deepest of `depths`: the least context these tests run in.
int bench_context_needed(int n_prompt, int n_gen, std::span<const int> depths);

}  // namespace ferry
