// Helpers for the serving engine tests: the tiny fixture model, a request with greedy sampling, and collecting
// a request's updates until it finishes.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ferry/serving.h"
#include "fixtures/sanitizer.h"
#include "fixtures/test_paths.h"
#include "model/random_model.h"

namespace ferry::test {

inline std::string tiny_llama() { return source_dir() + "/tests/fixtures/models/tiny-llama"; }

// A 4-layer SmolLM2-shaped BF16 model with random weights, written to the test temp folder as `file` (the CUDA
// serving tests: a real vocabulary size at a small cost). Returns its path.
inline std::string write_small_bf16_model(const std::string& file, uint64_t seed) {
  ModelConfig c = random_model_config("smollm2-135m");
  c.n_layers = 4;
  const std::string path = temp_path(file);
  write_random_model(path, c, DType::BF16, seed);
  return path;
}

inline EngineOptions tiny_options(int context = 128, int block_size = 4) {
  EngineOptions o;
  o.model_path = tiny_llama();
  o.context = context;
  o.block_size = block_size;
  o.n_threads = 2;
  return o;
}

inline GenerationRequest greedy_request(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

struct Collected {
  std::string text;
  std::vector<GeneratedToken> tokens;
  FinishReason finish = FinishReason::Error;
  std::string error;
  RequestUsage usage;
  int updates = 0;
  bool finished = false;

  std::vector<int32_t> ids() const {
    std::vector<int32_t> out;
    for (const GeneratedToken& t : tokens) out.push_back(t.id);
    return out;
  }
};

// A request's deadline: a hang fails in a minute. Under AddressSanitizer the default model's requests run many
// times slower (a busy batch of them took over 60 s on a 2-core machine without AVX-512, two tests at once), so
// there the deadline is ten minutes (ctest's per-test timeout is 15).
inline constexpr std::chrono::seconds kCollectLimit{kAddressSanitizer ? 600 : 60};

// Waits for every update of h (fails the test after `limit` without the final one).
inline Collected collect(RequestHandle& h, std::chrono::seconds limit = kCollectLimit) {
  Collected c;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  RequestUpdate u;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!h.wait(u, std::chrono::milliseconds(100))) continue;
    ++c.updates;
    c.text += u.text;
    for (GeneratedToken& t : u.tokens) c.tokens.push_back(std::move(t));
    c.usage = u.usage;
    if (u.finished) {
      c.finished = true;
      c.finish = u.finish;
      c.error = u.error;
      break;
    }
  }
  EXPECT_TRUE(c.finished) << "request " << h.id() << " did not finish in time";
  return c;
}

// Deterministic pseudo-random prompt of n token ids in [3, vocab) (skipping the tiny model's specials 0..2).
inline std::vector<int32_t> random_prompt(uint64_t seed, int n, int vocab = 512) {
  std::vector<int32_t> p;
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p.push_back(int32_t(3 + x % uint64_t(vocab - 3)));
  }
  return p;
}

}  // namespace ferry::test
