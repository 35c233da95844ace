// End to end on the GPU: the reference models' teacher-forced logits with EngineOptions.device = "cuda"
// against transformers' (tests/golden/logits, as tests/e2e/logits_vs_transformers_test.cpp reads them).
// Per position: cosine >= 0.999 and the same argmax; mean KL(transformers || ferry) <= 1e-3. Run with the
// whole prompt in one step (prefill kernels: matvec for <= 16 tokens, cuBLASLt above) and one token per
// step (decode kernels, attention over a growing cache).
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include "backends/cuda/cuda_backend.h"
#include "ferry/engine.h"
#include "fixtures/golden_logits.h"

namespace ferry {
namespace {

class CudaLogits : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CudaLogits, MatchTransformers) {
  if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const auto& [name, step] = GetParam();
  const auto g = test::load_golden_logits(name);
  if (!g) GTEST_SKIP() << "default model not downloaded";
  EngineOptions o;
  o.model_path = g->model_path;
  o.device = "cuda";
  o.context = 256;
  o.max_step_tokens = step;
  Engine engine(o);
  EXPECT_EQ(engine.info().backend, "cuda");
  const test::LogitAgreement a = test::compare_scores(*g, [&](const auto& p) { return engine.score(p); });
  std::printf("%s cuda step %d: %s\n", name.c_str(), step, a.summary().c_str());
  EXPECT_GE(a.min_cosine, 0.999);
  EXPECT_LE(a.mean_kl, 1e-3);
  EXPECT_EQ(a.argmax_same, a.positions);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaLogits,
                         ::testing::Combine(::testing::Values("tiny-llama", "tiny-qwen3", "tiny-qwen2", "smollm2"),
                                            ::testing::Values(256, 1)));

}  // namespace
}  // namespace ferry

#endif  // FERRY_HAS_CUDA
