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
#include "fixtures/test_paths.h"
#include "kv/block_pool.h"
#include "model/llama_model.h"
#include "model/model_file.h"
#include "model/weights.h"

namespace ferry {
namespace {

struct Runner {
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<Session> session;
};

Runner make_runner(const ModelFile& f, Backend& backend, bool graphs) {
  constexpr int32_t kContext = 64, kBlock = 4;
  Runner r;
  r.model = std::make_unique<LlamaModel>(f.config, load_weights(f.config, *f.weights, f.gguf_names, backend), backend,
                                         KvCacheShape{kContext / kBlock, kBlock}, 16);
  r.model->set_step_graphs(graphs);
  r.pool = std::make_unique<BlockPool>(kContext / kBlock);
  r.session = std::make_unique<Session>(*r.model, *r.pool, kContext);
  return r;
}

double rel_l2(std::span<const float> got, std::span<const float> ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += double(got[i] - ref[i]) * double(got[i] - ref[i]);
    den += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(num / den);  // NaN in got: NaN, and the comparison fails
}

TEST(CudaStepGraph, ReplayMatchesOpByOpOver40DecodeSteps) {
  if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const ModelFile f = open_model(test::source_dir() + "/tests/fixtures/models/tiny-llama");
  CudaBackend backend;
  Runner eager = make_runner(f, backend, false);
  Runner graph = make_runner(f, backend, true);

  const std::vector<int32_t> prompt = {1, 17, 42, 7, 99};
  const std::span<const float> a0 = eager.session->set_history(prompt);
  std::vector<float> a(a0.begin(), a0.end());
  std::span<const float> b = graph.session->set_history(prompt);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_LE(rel_l2(b, a), 1e-6);
  for (int step = 0; step < 40; ++step) {
    const int32_t next = int32_t(std::max_element(a.begin(), a.end()) - a.begin());
    const std::span<const float> ea = eager.session->append(std::vector<int32_t>{next});
    a.assign(ea.begin(), ea.end());
    b = graph.session->append(std::vector<int32_t>{next});
    ASSERT_EQ(a.size(), b.size());
    const double err = rel_l2(b, a);
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
