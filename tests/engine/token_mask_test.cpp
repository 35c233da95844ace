// apply_token_mask (sampling/token_mask.h): the host sampler's and the CPU backend's mask, against a bit-by-bit
// reading of the words on random masks and logits; and CpuBackend::sample with a mask draws what the Sampler
// draws from the masked row.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "sampling/sampler.h"
#include "sampling/token_mask.h"

namespace ferry {
namespace {

TEST(TokenMask, ClearsExactlyTheClearBits) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (const size_t vocab : {1u, 63u, 64u, 65u, 1000u, 32001u}) {
    std::vector<float> logits(vocab);
    for (float& v : logits) v = d(rng);
    std::vector<uint64_t> mask((vocab + 63) / 64);
    for (uint64_t& w : mask) w = rng() & rng();  // about a quarter of the bits
    std::vector<float> out = logits;
    bool want_any = false;
    for (size_t t = 0; t < vocab; ++t) want_any = want_any || ((mask[t / 64] >> (t % 64)) & 1);
    EXPECT_EQ(apply_token_mask(out, mask), want_any) << vocab;
    for (size_t t = 0; t < vocab; ++t) {
      if ((mask[t / 64] >> (t % 64)) & 1) {
        EXPECT_EQ(out[t], logits[t]) << t;
      } else {
        EXPECT_TRUE(std::isinf(out[t]) && out[t] < 0) << t;
      }
    }
  }
  // Bits past the vocabulary do not count as allowed tokens.
  std::vector<float> three(3, 1.0f);
  const std::vector<uint64_t> high = {~uint64_t(0) << 3};
  EXPECT_FALSE(apply_token_mask(three, high));
  std::vector<uint64_t> short_mask;
  EXPECT_THROW(apply_token_mask(three, short_mask), Error);
}

TEST(TokenMask, CpuBackendSamplesFromTheMaskedRow) {
  CpuBackend cpu(CpuBackendOptions{.n_threads = 2});
  const int64_t m = 4, vocab = 5000, words = (vocab + 63) / 64;
  std::mt19937_64 rng(8);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(m * vocab));
  for (float& v : logits) v = d(rng);
  std::vector<uint64_t> mask(static_cast<size_t>(m * words));
  for (uint64_t& w : mask) w = rng() & rng() & rng();
  std::vector<float> work = logits;
  std::vector<int32_t> ids(static_cast<size_t>(m));
  std::vector<SamplingParams> params(static_cast<size_t>(m));
  std::vector<uint64_t> positions(static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) {
    params[size_t(r)].temperature = r == 0 ? 0.0f : 1.0f;
    params[size_t(r)].top_k = r == 2 ? 20 : 0;
    params[size_t(r)].seed = uint64_t(r) + 1;
    positions[size_t(r)] = uint64_t(r) + 3;
  }
  cpu.sample(Tensor::make(DType::I32, {m}, ids.data(), Device::Cpu),
             Tensor::make(DType::F32, {m, vocab}, work.data(), Device::Cpu), params, positions, mask);
  for (int64_t r = 0; r < m; ++r) {
    std::vector<float> row(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
    apply_token_mask(row, std::span(mask).subspan(size_t(r * words), size_t(words)));
    const int32_t t = ids[size_t(r)];
    EXPECT_TRUE((mask[size_t(r * words + t / 64)] >> (t % 64)) & 1) << "row " << r;
    Sampler s(params[size_t(r)], int32_t(vocab));
    EXPECT_EQ(t, s.sample(row, std::vector<int32_t>(size_t(positions[size_t(r)]), 0))) << "row " << r;
  }
}

}  // namespace
}  // namespace ferry
