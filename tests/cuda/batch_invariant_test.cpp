// Batch invariance on the GPU (CudaBackendOptions::batch_invariant, `--batch-invariant`): with temperature 0
// a request's tokens are identical when it runs alone and when it shares every step with other requests (long
// prompts prefilled in chunks next to it, short ones decoding). The model is a 4-layer cut of the SmolLM2-135M
// shape with random BF16 weights (head_dim 64: the tensor-core attention kernels; dims multiples of 8: the
// Hopper GEMM). Without the mode the default kernels (matvec for <= 16 tokens, GEMM above, batch-sized
// attention splits) may differ by rounding; that is printed, not asserted.
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "engine/serving_test_util.h"
#include "ferry/serving.h"
#include "fixtures/test_paths.h"

namespace ferry {
namespace {

// Prompts of byte tokens of the synthetic vocabulary (ids 3..252).
std::vector<int32_t> random_prompt(uint64_t seed, int n) { return test::random_prompt(seed, n, 253); }

// Every token of h, once its request has finished.
std::vector<int32_t> ids_of(RequestHandle& h) {
  const test::Collected c = test::collect(h, std::chrono::seconds(300));
  EXPECT_TRUE(c.error.empty()) << c.error;
  return c.ids();
}

class CudaBatchInvariance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (CudaBackend::device_count() == 0) return;
    path_ = test::write_small_bf16_model("batch_invariant_smollm2_4l_bf16.gguf", 21);
  }
  void SetUp() override {
    if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }

  // Tokens of the target alone, then inside a busy batch.
  static std::pair<std::vector<int32_t>, std::vector<int32_t>> alone_and_busy(bool invariant) {
    EngineOptions eo;
    eo.model_path = path_;
    eo.device = "cuda";
    eo.context = 1024;
    eo.batch_invariant = invariant;
    const ServingOptions so{.max_running = 16, .max_step_tokens = 96, .prefix_caching = false};
    const std::vector<int32_t> target = random_prompt(7, 150);
    std::vector<int32_t> alone, busy;
    {
      ServingEngine solo(eo, so);
      alone = ids_of(*solo.submit(test::greedy_request(target, 40)));
    }
    ServingEngine e(eo, so);
    std::vector<std::shared_ptr<RequestHandle>> others;
    for (int i = 0; i < 5; ++i) others.push_back(e.submit(test::greedy_request(random_prompt(100 + i, 20 + 97 * i), 40)));
    auto t = e.submit(test::greedy_request(target, 40));
    for (int i = 5; i < 11; ++i) others.push_back(e.submit(test::greedy_request(random_prompt(100 + i, 3 + 11 * i), 40)));
    busy = ids_of(*t);
    for (auto& h : others) ids_of(*h);
    return {alone, busy};
  }

  static inline std::string path_;
};

TEST_F(CudaBatchInvariance, BatchInvariantModeGivesTheSameTokensAloneAndInABusyBatch) {
  const auto [alone, busy] = alone_and_busy(true);
  ASSERT_EQ(alone.size(), 40u);
  EXPECT_EQ(alone, busy) << "batch-invariant mode: the target's greedy tokens changed inside a busy batch";
}

TEST_F(CudaBatchInvariance, DefaultKernelsReportWhetherTheyDiffer) {
  const auto [alone, busy] = alone_and_busy(false);
  ASSERT_EQ(alone.size(), 40u);
  size_t first = 0;
  while (first < alone.size() && first < busy.size() && alone[first] == busy[first]) ++first;
  std::printf("default kernels: alone and busy tokens %s (first difference at %zu of %zu)\n",
              alone == busy ? "agree" : "differ", first, alone.size());
}

}  // namespace
}  // namespace ferry

#endif  // FERRY_HAS_CUDA
