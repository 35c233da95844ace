// Prompt-carrying steps replayed from CUDA graphs (EngineOptions::prompt_graphs): the model
// is a 4-layer cut of the SmolLM2-135M shape with random BF16 weights (head_dim 64: the tensor-core attention
// kernels, the one-launch mixed kernel in captured steps).
//  1. Runner level: each padded prompt step runs twice on the prompt-graph model; the first run of a shape is the
//     op-by-op run that precedes the capture, the second a replay of that graph: their logits must agree bit for
//     bit (the same kernels on the same inputs, as the decode graphs). Against an unpadded op-by-op model (graphs
//     off, its own KV cache) the real rows agree to rounding (other token counts take other GEMM shapes):
//     relative L2 <= 2e-2 per row.
//  2. Serving level, batch-invariant kernels: greedy tokens with the option on equal those with it off (padding
//     changes no row's arithmetic in that mode), and the option adds graph replays.
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "engine/block_manager.h"
#include "engine/loaded_model.h"
#include "engine/model_runner.h"
#include "engine/serving_test_util.h"
#include "ferry/serving.h"
#include "fixtures/test_paths.h"
#include "fixtures/numeric.h"

namespace ferry {
namespace {

constexpr int32_t kBlock = 16, kBudget = 256;

class CudaPromptGraph : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (CudaBackend::device_count() == 0) return;
    path_ = test::write_small_bf16_model("prompt_graph_smollm2_4l_bf16.gguf", 41);
  }
  void SetUp() override {
    if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
  static EngineOptions options() {
    EngineOptions eo;
    eo.model_path = path_;
    eo.device = "cuda";
    eo.context = 1024;
    eo.block_size = kBlock;
    return eo;
  }
  static inline std::string path_;
};

TEST_F(CudaPromptGraph, ReplayedPromptStepsEqualTheirEagerRun) {
  const auto sizing = [](const ModelConfig&, int32_t) { return KvSizing{.kv_tokens = 8192, .max_step_tokens = kBudget}; };
  std::unique_ptr<LoadedModel> eager = load_model(options(), sizing);
  std::unique_ptr<LoadedModel> graph = load_model(options(), sizing);
  eager->model->set_step_graphs(false);
  graph->model->set_prompt_graphs(true);
  const int32_t n_blocks = graph->model->kv_shape().n_blocks;
  const int32_t n_scratch = prompt_pad_scratch_blocks(kBudget, kBlock);
  BlockManager blocks(n_blocks - n_scratch, kBlock, false);  // one set of tables for both models' caches
  ModelRunner plain(*eager->model, -1);
  ModelRunner padded(*graph->model, StepPadding{.scratch_first = n_blocks - n_scratch, .n_scratch = n_scratch,
                                                .pad_decodes = true, .pad_prompts = true});
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (int i = 0; i < 3; ++i) {
    auto s = std::make_unique<Sequence>();
    s->id = uint64_t(i + 1);
    s->tokens = test::random_prompt(uint64_t(70 + i), std::vector<int>{100, 37, 300}[size_t(i)], 253);
    ASSERT_TRUE(blocks.allocate(*s));
    seqs.push_back(std::move(s));
  }
  Sequence* a = seqs[0].get();
  Sequence* b = seqs[1].get();
  Sequence* c = seqs[2].get();
  const auto decode = [&](Sequence* s, int32_t token) {
    s->tokens.push_back(token);
    EXPECT_TRUE(blocks.can_append(*s));
    blocks.append(*s);
    return ScheduledChunk{.seq = s, .n_tokens = 1, .sample = true};
  };
  // Round 0 (tokens -> padded): a + b whole (137 -> 192, 2 -> 4 sequences); decodes of a, b + c's first 200 (202 ->
  // 256); decodes + c's last 100 (102 -> 128). Round 1: three steps of one shape, decodes of a, b, c + a new
  // 150-token prompt (153 -> 192, 4 -> 8 sequences): captured once, replayed five times.
  for (int round = 0; round < 2; ++round) {
    for (int step = 0; step < 3; ++step) {
      StepPlan p;
      if (round == 0 && step == 0) {
        p.chunks = {{.seq = a, .n_tokens = 100, .sample = true}, {.seq = b, .n_tokens = 37, .sample = true}};
      } else if (round == 0 && step == 1) {
        p.chunks = {decode(a, 11), decode(b, 12), {.seq = c, .n_tokens = 200, .sample = false}};
      } else if (round == 0 && step == 2) {
        p.chunks = {decode(a, 13), decode(b, 14), {.seq = c, .n_tokens = 100, .sample = true}};
      } else {
        // Round 1: prompt-shaped steps with a fresh 150-token prompt each time (new sequences).
        auto s = std::make_unique<Sequence>();
        s->id = uint64_t(10 + step);
        s->tokens = test::random_prompt(uint64_t(90 + step), 150, 253);
        EXPECT_TRUE(blocks.allocate(*s));
        p.chunks = {decode(a, 20 + step), decode(b, 30 + step), decode(c, 40 + step),
                    {.seq = s.get(), .n_tokens = 150, .sample = true}};
        seqs.push_back(std::move(s));
      }
      int32_t rows = 0;
      for (const ScheduledChunk& ch : p.chunks) rows += ch.sample ? 1 : 0;
      plain.run(p);
      padded.run(p);  // first of its shape: op by op, then captured (or a replay from an earlier step)
      std::vector<std::vector<float>> first;
      for (int32_t i = 0; i < rows; ++i) first.emplace_back(padded.logits(size_t(i)).begin(), padded.logits(size_t(i)).end());
      padded.run(p);  // the same inputs again: a replay
      for (int32_t i = 0; i < rows; ++i) {
        const std::span<const float> again = padded.logits(size_t(i));
        EXPECT_TRUE(std::equal(again.begin(), again.end(), first[size_t(i)].begin()))
            << "round " << round << " step " << step << " row " << i << ": replay differs from the first run";
        const double err = test::rel_l2(again, plain.logits(size_t(i)));
        EXPECT_LE(err, 2e-2) << "round " << round << " step " << step << " row " << i;
        std::printf("round %d step %d row %d: padded+graph vs unpadded eager rel L2 %.3g\n", round, step, i, err);
      }
      for (const ScheduledChunk& ch : p.chunks) {
        ch.seq->table.n_tokens += ch.n_tokens;
        blocks.commit(*ch.seq);
      }
    }
  }
  const auto& gs = graph->model->graph_stats();
  std::printf("prompt-graph model: %lld captures, %lld replays, %lld op-by-op steps\n", (long long)gs.captures,
              (long long)gs.replays, (long long)gs.eager);
  EXPECT_GE(gs.captures, 4);  // four keys (more if a later step's scratch growth made a graph stale)
  EXPECT_GE(gs.replays, 8);   // the second run of each round-0 step, five of round 1's six
  EXPECT_EQ(eager->model->graph_stats().replays, 0);
  for (auto& s : seqs) blocks.free(*s);
  blocks.pool().check_invariants();
}

TEST_F(CudaPromptGraph, ServingTokensEqualWithTheOptionOnAndOff) {
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (prop.major != 9) GTEST_SKIP() << "batch-invariant kernels need compute capability 9.x";
  const auto run = [](bool prompt_graphs, bool warmup, ServingStats& stats, bool async_scheduling = true) {
    EngineOptions eo = options();
    eo.prompt_graphs = prompt_graphs;
    ServingOptions so{.max_running = 16, .max_step_tokens = 128, .prefix_caching = false};
    so.graph_warmup = warmup;
    so.async_scheduling = async_scheduling;
    so.batch_invariant = true;
    so.check_invariants = true;
    ServingEngine e(eo, so);
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (int i = 0; i < 12; ++i)
      hs.push_back(e.submit(test::greedy_request(test::random_prompt(uint64_t(200 + i), 20 + 37 * i, 253), 16)));
    std::vector<std::vector<int32_t>> out;
    for (auto& h : hs) {
      const test::Collected c = test::collect(*h, std::chrono::seconds(300));
      EXPECT_TRUE(c.error.empty()) << c.error;
      out.push_back(c.ids());
    }
    e.shutdown(true);
    stats = e.stats();
    return out;
  };
  ServingStats on_stats, off_stats, warm_stats;
  const std::vector<std::vector<int32_t>> on = run(true, false, on_stats);
  const std::vector<std::vector<int32_t>> off = run(false, false, off_stats);
  // The start-up warm-up (ModelRunner::warm_up_graphs): same tokens; the steps whose keys it recorded replay.
  const std::vector<std::vector<int32_t>> warm = run(true, true, warm_stats);
  // Asynchronous scheduling (on in the runs above: placeholders resolved inside the replayed graphs) against a
  // step-by-step engine.
  ServingStats sync_stats;
  const std::vector<std::vector<int32_t>> sync = run(true, true, sync_stats, false);
  ASSERT_EQ(on.size(), off.size());
  ASSERT_EQ(on.size(), warm.size());
  ASSERT_EQ(on.size(), sync.size());
  for (size_t i = 0; i < on.size(); ++i) {
    EXPECT_EQ(on[i].size(), 16u) << "request " << i;
    EXPECT_EQ(on[i], off[i]) << "request " << i;
    EXPECT_EQ(warm[i], off[i]) << "request " << i << " after the warm-up";
    EXPECT_EQ(sync[i], off[i]) << "request " << i << " without asynchronous scheduling";
  }
  std::printf("graph replays: option on %lld, off %lld, on after a warm-up of %d graphs %lld (steps %lld / %lld / "
              "%lld)\n", (long long)on_stats.graph_replays, (long long)off_stats.graph_replays,
              warm_stats.graph_warmup_steps, (long long)warm_stats.graph_replays, (long long)on_stats.steps,
              (long long)off_stats.steps, (long long)warm_stats.steps);
  EXPECT_GT(on_stats.graph_replays, off_stats.graph_replays);
  EXPECT_EQ(on_stats.graph_warmup_steps, 0);
  EXPECT_GT(warm_stats.graph_warmup_steps, 0);
  EXPECT_GT(warm_stats.graph_replays, on_stats.graph_replays);
  // Asynchronous scheduling overlapped steps in the runs that had it, and none in the one without.
  EXPECT_GT(on_stats.overlapped_steps, 0);
  EXPECT_GT(warm_stats.overlapped_steps, 0);
  EXPECT_EQ(sync_stats.overlapped_steps, 0);
}

}  // namespace
}  // namespace ferry

#endif  // FERRY_HAS_CUDA
