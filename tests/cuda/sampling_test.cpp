// GPU sampling (backends/cuda/sampling.cuh) against the CPU Sampler (engine/sampler.cpp): for equal logits and
// parameters the same token, on random logits (with ties, NaN and -inf sprinkled in) over many seeds, positions
// and settings (greedy, temperature only, top-k, top-p, min-p, all together, k >= vocab). Sums run in another
// order on the GPU, so a different token is possible only when a cumulative sum lies within ~1e-16 of a
// boundary: the test allows no mismatch at all and reports the count.
// The CudaSamplingPorts tests check the bit-exact ports (exp_nonpositive, Philox) and the key order on the host
// (they run without a GPU, in any build with the CUDA backend).
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/sampling.cuh"
#include "engine/philox.h"
#include "engine/sampler.h"
#include "engine/sampler_math.h"

namespace ferry::test {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(CudaSamplingPorts, ExpMatchesTheCpuBitForBit) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-100.0f, 0.0f);
  std::vector<float> xs = {0.0f, -0.0f, -1e-30f, -87.0f, -86.99f, -87.01f, -1000.0f,
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (int i = 0; i < 200000; ++i) xs.push_back(d(rng));
  for (int i = 0; i < 2000; ++i) xs.push_back(-float(i) * 0.0437f);
  for (const float x : xs) ASSERT_EQ(bits(cuda_ops::sampler_exp(x)), bits(exp_nonpositive(x))) << x;
}

TEST(CudaSamplingPorts, PhiloxMatchesTheCpu) {
  for (uint64_t seed : {0ull, 1ull, 42ull, 0xDEADBEEFCAFEull, ~0ull}) {
    for (uint64_t c = 0; c < 2000; c += 7) {
      ASSERT_EQ(cuda_ops::sampler_uniform(seed, c), philox_uniform(seed, c));
      ASSERT_EQ(cuda_ops::sampler_uniform(seed, c << 33), philox_uniform(seed, c << 33));
    }
  }
}

TEST(CudaSamplingPorts, KeysOrderLikeLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {-3.4e38f, -1.0f, -1e-38f, 0.0f, 1e-45f, 1.0f, 2.5f, 3.4e38f};
  for (size_t i = 0; i + 1 < v.size(); ++i) EXPECT_LT(cuda_ops::logit_key(v[i]), cuda_ops::logit_key(v[i + 1]));
  for (const float f : v) EXPECT_EQ(cuda_ops::key_logit(cuda_ops::logit_key(f)), f);
  EXPECT_EQ(cuda_ops::logit_key(-0.0f), cuda_ops::logit_key(0.0f));
  EXPECT_EQ(cuda_ops::logit_key(inf), cuda_ops::logit_key(std::numeric_limits<float>::max()));
  EXPECT_EQ(cuda_ops::logit_key(-inf), 0u);
  EXPECT_EQ(cuda_ops::logit_key(std::numeric_limits<float>::quiet_NaN()), 0u);
  EXPECT_GT(cuda_ops::logit_key(-3.4e38f), 0u);
}

TEST(CudaSampling, SameTokenAsTheCpuSampler) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) GTEST_SKIP() << "no CUDA device";
  struct Setting {
    float t;
    int32_t k;
    float p, min_p;
  };
  const Setting settings[] = {{0.0f, 40, 0.95f, 0.05f}, {1.0f, 0, 1.0f, 0.0f},   {0.8f, 40, 0.95f, 0.05f},
                              {0.7f, 0, 0.9f, 0.0f},    {1.3f, 0, 1.0f, 0.1f},   {0.5f, 5, 1.0f, 0.0f},
                              {1.0f, 100000, 0.5f, 0.0f}, {2.0f, 1000, 0.99f, 0.01f}, {1e-3f, 0, 0.3f, 0.0f}};
  int mismatches = 0, total = 0;
  for (const int64_t vocab : {1000, 50000}) {
    const int64_t m = 24;
    std::vector<float> logits(static_cast<size_t>(m * vocab));
    std::mt19937 rng(static_cast<uint32_t>(vocab));
    std::normal_distribution<float> d(0.0f, 3.0f);
    for (size_t i = 0; i < logits.size(); ++i) {
      logits[i] = std::round(d(rng) * 4.0f) / 4.0f;  // quarter steps: many equal logits (ties)
      if (rng() % 997 == 0) logits[i] = std::numeric_limits<float>::quiet_NaN();
      if (rng() % 991 == 0) logits[i] = -std::numeric_limits<float>::infinity();
    }
    float* dl = nullptr;
    cuda_ops::SampleRowParams* dp = nullptr;
    int32_t* dout = nullptr;
    ASSERT_EQ(cudaMalloc(&dl, logits.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dp, size_t(m) * sizeof(cuda_ops::SampleRowParams)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dout, size_t(m) * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dl, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    for (const Setting st : settings) {
      std::vector<cuda_ops::SampleRowParams> rows(static_cast<size_t>(m));
      for (int64_t r = 0; r < m; ++r)
        rows[size_t(r)] = {st.t, st.k, st.p, st.min_p, uint64_t(r * 7919 + 3), uint64_t(r * 13)};
      ASSERT_EQ(cudaMemcpy(dp, rows.data(), rows.size() * sizeof(rows[0]), cudaMemcpyHostToDevice), cudaSuccess);
      cuda_ops::sample_rows({.logits = dl, .m = m, .vocab = vocab, .rows = dp, .out = dout}, nullptr);
      std::vector<int32_t> got(static_cast<size_t>(m));
      ASSERT_EQ(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int64_t r = 0; r < m; ++r) {
        SamplingParams sp;
        sp.temperature = st.t;
        sp.top_k = st.k;
        sp.top_p = st.p;
        sp.min_p = st.min_p;
        sp.seed = rows[size_t(r)].seed;
        Sampler cpu(sp, int32_t(vocab));
        const std::vector<int32_t> history(size_t(rows[size_t(r)].position), 0);
        const int32_t want = cpu.sample({logits.data() + r * vocab, size_t(vocab)}, history);
        ++total;
        if (got[size_t(r)] != want) {
          ++mismatches;
          ADD_FAILURE() << "vocab " << vocab << " row " << r << " T " << st.t << " k " << st.k << " p " << st.p
                        << " min_p " << st.min_p << ": GPU " << got[size_t(r)] << ", CPU " << want;
        }
      }
    }
    cudaFree(dl);
    cudaFree(dp);
    cudaFree(dout);
  }
  std::printf("GPU sampling: %d of %d draws differ from the CPU sampler\n", mismatches, total);
}
// The same through CudaBackend::sample (host params, device logits and ids).
TEST(CudaSampling, BackendMethod) {
  if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  CudaBackend gpu;
  const int64_t m = 5, vocab = 32000;
  std::vector<float> logits(static_cast<size_t>(m * vocab));
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (float& v : logits) v = d(rng);
  DeviceBuffer lb = gpu.alloc(logits.size() * 4), ob = gpu.alloc(size_t(m) * 4);
  const Tensor gl = Tensor::make(DType::F32, {m, vocab}, lb.data(), Device::Cuda);
  const Tensor go = Tensor::make(DType::I32, {m}, ob.data(), Device::Cuda);
  gpu.copy_to_device(gl, logits.data(), logits.size() * 4);
  std::vector<SamplingParams> params(static_cast<size_t>(m));
  std::vector<uint64_t> positions(static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) {
    params[size_t(r)].seed = uint64_t(r) + 11;
    params[size_t(r)].temperature = r == 0 ? 0.0f : 0.9f;
    positions[size_t(r)] = uint64_t(r) * 3;
  }
  gpu.sample(go, gl, params, positions);
  std::vector<int32_t> got(static_cast<size_t>(m));
  gpu.copy_to_host(got.data(), go, got.size() * 4);
  for (int64_t r = 0; r < m; ++r) {
    Sampler cpu(params[size_t(r)], int32_t(vocab));
    const std::vector<int32_t> history(size_t(positions[size_t(r)]), 0);
    EXPECT_EQ(got[size_t(r)], cpu.sample({logits.data() + r * vocab, size_t(vocab)}, history)) << "row " << r;
  }
}
}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA
