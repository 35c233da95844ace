// ModelRunner's decode padding (used on backends with step graphs; forced here on the CPU): a decode step of
// 3 sequences padded to 4 with a dummy sequence in the scratch block gives the same logits for the real
// sequences as the unpadded step, and leaves their KV untouched.
#include <gtest/gtest.h>

#include "engine/block_manager.h"
#include "engine/loaded_model.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/serving_test_util.h"
#include "fixtures/numeric.h"

namespace ferry {
namespace {

TEST(ServingRunner, PaddedDecodeStepGivesTheSameLogits) {
  const EngineOptions eo = test::tiny_options(64, 4);
  std::unique_ptr<LoadedModel> m = load_model(eo, [](const ModelConfig&, int32_t) {
    return KvSizing{.kv_tokens = 256, .max_step_tokens = 64};
  });
  const int32_t n_blocks = m->model->kv_shape().n_blocks;
  BlockManager blocks(n_blocks - 1, 4, true);
  Scheduler scheduler({.max_running = 8, .max_step_tokens = 64}, blocks);
  ModelRunner plain(*m->model, -1), padded(*m->model, n_blocks - 1);
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (int i = 0; i < 3; ++i) {
    auto s = std::make_unique<Sequence>();
    s->id = uint64_t(i + 1);
    s->tokens = test::random_prompt(uint64_t(50 + i), 5 + 6 * i);
    scheduler.add(s.get());
    seqs.push_back(std::move(s));
  }
  // Prefill all three in one step, then append one token each.
  const StepPlan prefill = scheduler.schedule();
  ASSERT_EQ(prefill.chunks.size(), 3u);
  plain.run(prefill);
  for (const ScheduledChunk& c : prefill.chunks) {
    c.seq->table.n_tokens += c.n_tokens;
    c.seq->tokens.push_back(7);
  }
  const StepPlan decode = scheduler.schedule();
  ASSERT_EQ(decode.chunks.size(), 3u);
  plain.run(decode);
  std::vector<std::vector<float>> want;
  for (size_t i = 0; i < 3; ++i) want.emplace_back(plain.logits(i).begin(), plain.logits(i).end());
  padded.run(decode);  // the same step again: it rewrites the same K/V and adds one dummy sequence
  for (size_t i = 0; i < 3; ++i) {
    const std::vector<float> got(padded.logits(i).begin(), padded.logits(i).end());
    EXPECT_EQ(got, want[i]) << "sequence " << i;  // the CPU kernels are batch-invariant: bit-exact
  }
  for (auto& s : seqs) scheduler.remove(s.get());
  blocks.pool().check_invariants();
  EXPECT_EQ(blocks.pool().n_used(), 0);
}

}  // namespace
}  // namespace ferry
