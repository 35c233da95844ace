// Decode steps replayed from CUDA graphs give the same logits as the same steps run op by op: tiny-llama,
// 40 greedy decode steps after a 5-token prompt, KV blocks of 4 tokens, so the block table grows from 2 to
// 12 blocks and the graph is re-captured for the buckets 2, 4, 8 and 16. Both models share one backend
// (the same kernels), so the logits must agree to fp32 noise: relative L2 <= 1e-6 per step.
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "backends/cuda/cuda_backend.h"
#include "engine/session.h"
#include "fixtures/numeric.h"
#include "fixtures/test_paths.h"
#include "kv/block_pool.h"
#include "model/llama_model.h"
#include "model/model_file.h"
#include "model/weights.h"
#include "graph_runner.h"

namespace ferry {
namespace {

TEST(CudaStepGraph, ReplayMatchesOpByOpOver40DecodeSteps) {
  if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const ModelFile f = open_model(test::source_dir() + "/tests/fixtures/models/tiny-llama");
  CudaBackend backend;
  GraphRunner eager = make_graph_runner(f, backend, false);
  GraphRunner graph = make_graph_runner(f, backend, true);

  const std::vector<int32_t> prompt = {1, 17, 42, 7, 99};
  const std::span<const float> a0 = eager.session->set_history(prompt);
  std::vector<float> a(a0.begin(), a0.end());
  std::span<const float> b = graph.session->set_history(prompt);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_LE(test::rel_l2(b, a), 1e-6);
  for (int step = 0; step < 40; ++step) {
    const int32_t next = int32_t(std::max_element(a.begin(), a.end()) - a.begin());
    const std::span<const float> ea = eager.session->append(std::vector<int32_t>{next});
    a.assign(ea.begin(), ea.end());
    b = graph.session->append(std::vector<int32_t>{next});
    ASSERT_EQ(a.size(), b.size());
    const double err = test::rel_l2(b, a);
    EXPECT_LE(err, 1e-6) << "decode step " << step;
  }
  const auto& s = graph.model->graph_stats();
  std::printf("graph model: %lld captures, %lld replays, %lld op-by-op steps\n", (long long)s.captures,
              (long long)s.replays, (long long)s.eager);
  // Buckets of the block table over positions 5..44 with 4-token blocks: 2, 4, 8, 16 blocks.
  EXPECT_EQ(s.captures, 4);
  EXPECT_EQ(s.replays, 40 - 4);
  EXPECT_EQ(eager.model->graph_stats().replays, 0);
}

}  // namespace
}  // namespace ferry

#endif  // FERRY_HAS_CUDA
