// ModelRunner's prompt padding (StepPadding::pad_prompts, the shapes prompt graphs replay from step graphs;
// run here on the CPU, which pads but does not capture): a prompt-carrying step padded to a multiple of the granule
// (or the step budget), a power-of-two number of sequences and as many logit rows gives the real rows the same
// logits bit for bit as the unpadded step (the CPU kernels are batch-invariant), writes only scratch KV blocks
// outside the pool (the real sequences' caches are unchanged: the plain step run again after it agrees too), and
// has the shape the graph keys expect. Mixes: one long prompt chunk; prompt chunks with decode rows and the
// largest pad (granule - 1, every scratch block); a pad of 1; no token pad (only empty dummy sequences); a pad
// capped at a budget that is not a multiple of the granule, and a full budget.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/check.h"
#include "engine/block_manager.h"
#include "engine/loaded_model.h"
#include "engine/model_runner.h"
#include "engine/serving_test_util.h"

namespace ferry {
namespace {

constexpr int32_t kBlock = 4;

bool is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

class PromptPadding : public ::testing::Test {
 protected:
  // A tiny-llama model with steps of up to `budget` tokens, padding granule `granule`.
  void open(int32_t budget, int32_t granule) {
    budget_ = budget;
    granule_ = granule;
    m_ = load_model(test::tiny_options(128, kBlock), [&](const ModelConfig&, int32_t) {
      return KvSizing{.kv_tokens = 1024, .max_step_tokens = budget};
    });
    const int32_t n_blocks = m_->model->kv_shape().n_blocks;
    n_scratch_ = prompt_pad_scratch_blocks(budget, kBlock, granule);
    scratch_first_ = n_blocks - n_scratch_;
    blocks_ = std::make_unique<BlockManager>(scratch_first_, kBlock, false);
    plain_ = std::make_unique<ModelRunner>(*m_->model, -1);
    padded_ = std::make_unique<ModelRunner>(
        *m_->model, StepPadding{.scratch_first = scratch_first_, .n_scratch = n_scratch_, .pad_decodes = true,
                                .pad_prompts = true, .granule = granule});
  }

  // A new sequence with `len` prompt tokens and blocks for all of them (nothing computed yet).
  Sequence* add(int len) {
    auto s = std::make_unique<Sequence>();
    s->id = uint64_t(seqs_.size() + 1);
    s->tokens = test::random_prompt(uint64_t(1000 + seqs_.size()), len);
    EXPECT_TRUE(blocks_->allocate(*s));
    for (int32_t b : s->table.blocks) EXPECT_LT(b, scratch_first_) << "a scratch block went to a sequence";
    seqs_.push_back(std::move(s));
    return seqs_.back().get();
  }

  // Commits the plan's chunks (as the engine does after a step).
  void commit(const StepPlan& plan) {
    for (const ScheduledChunk& c : plan.chunks) {
      c.seq->table.n_tokens += c.n_tokens;
      blocks_->commit(*c.seq);
    }
  }

  // A decode row for a fully computed sequence: one more token and room for it.
  ScheduledChunk decode_row(Sequence* s, int32_t token) {
    s->tokens.push_back(token);
    EXPECT_TRUE(blocks_->can_append(*s));
    blocks_->append(*s);
    return {.seq = s, .n_tokens = 1, .sample = true};
  }

  // Runs `plan` unpadded, padded, and unpadded again; every real logit row must agree bit for bit, and the padded
  // batch must have the graph-key shape. Returns the token pad; commits the plan.
  int32_t check_step(const StepPlan& plan) {
    int32_t n = 0, n_rows = 0;
    for (const ScheduledChunk& c : plan.chunks) {
      n += c.n_tokens;
      n_rows += c.sample ? 1 : 0;
    }
    plain_->run(plan);
    std::vector<std::vector<float>> want;
    for (int32_t i = 0; i < n_rows; ++i) want.emplace_back(plain_->logits(size_t(i)).begin(), plain_->logits(size_t(i)).end());
    padded_->run(plan);
    for (int32_t i = 0; i < n_rows; ++i) {
      const std::vector<float> got(padded_->logits(size_t(i)).begin(), padded_->logits(size_t(i)).end());
      EXPECT_EQ(got, want[size_t(i)]) << "logit row " << i << " differs after padding";
    }
    const Batch& b = padded_->batch();
    const int32_t N = b.n_tokens(), S = b.n_seqs();
    EXPECT_TRUE(N % granule_ == 0 || N == budget_) << N << " tokens";
    EXPECT_LE(N, budget_);
    EXPECT_GE(N, n);
    EXPECT_LT(N - n, granule_);
    EXPECT_TRUE(is_pow2(S)) << S << " sequences";
    EXPECT_GE(S, int32_t(plan.chunks.size()));
    EXPECT_EQ(int32_t(b.logit_rows.size()), S);
    int32_t rows = 0;
    for (int32_t s = 0; s < S; ++s) {
      rows += b.q_len[size_t(s)];
      EXPECT_LE(b.q_start[size_t(s)] + b.q_len[size_t(s)], N);
    }
    EXPECT_EQ(rows, N);
    for (int32_t r : b.logit_rows) EXPECT_TRUE(r >= 0 && r < N);
    // Dummy rows write scratch slots only; the real rows keep their own slots.
    for (int32_t r = n; r < N; ++r) {
      const int64_t blk = b.slots[size_t(r)] / kBlock;
      EXPECT_TRUE(blk >= scratch_first_ && blk < scratch_first_ + n_scratch_) << "pad row " << r << " writes block " << blk;
    }
    // The real sequences' K/V are untouched by the dummies: the unpadded step again gives the same rows.
    plain_->run(plan);
    for (int32_t i = 0; i < n_rows; ++i) {
      const std::vector<float> again(plain_->logits(size_t(i)).begin(), plain_->logits(size_t(i)).end());
      EXPECT_EQ(again, want[size_t(i)]) << "logit row " << i << " changed after the padded step";
    }
    commit(plan);
    return N - n;
  }

  void TearDown() override {
    for (auto& s : seqs_) blocks_->free(*s);
    if (blocks_) {
      blocks_->pool().check_invariants();
      EXPECT_EQ(blocks_->pool().n_used(), 0);
    }
  }

  int32_t budget_ = 0, granule_ = 0, scratch_first_ = 0, n_scratch_ = 0;
  std::unique_ptr<LoadedModel> m_;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<ModelRunner> plain_, padded_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
};

TEST_F(PromptPadding, OneLongPromptChunk) {
  open(64, 16);
  Sequence* a = add(37);
  StepPlan p;
  p.chunks = {{.seq = a, .n_tokens = 37, .sample = true}};
  EXPECT_EQ(check_step(p), 11);  // 37 -> 48 tokens, 2 sequences
  EXPECT_EQ(padded_->batch().n_seqs(), 2);
}

TEST_F(PromptPadding, PromptChunksWithDecodeRowsAndTheLargestPad) {
  open(64, 16);
  std::vector<Sequence*> old;
  StepPlan first;
  for (int i = 0; i < 3; ++i) {
    old.push_back(add(5 + 3 * i));
    first.chunks.push_back({.seq = old.back(), .n_tokens = 5 + 3 * i, .sample = true});
  }
  EXPECT_EQ(check_step(first), 8);  // 5 + 8 + 11 = 24 tokens -> 32, 3 + 1 -> 4 sequences
  // Three decode rows, a first chunk of a 30-token prompt (no logits) and a whole 10-token prompt: 33 tokens.
  Sequence* partial = add(30);
  Sequence* whole = add(10);
  StepPlan mixed;
  for (int i = 0; i < 3; ++i) mixed.chunks.push_back(decode_row(old[size_t(i)], 7 + i));
  mixed.chunks.push_back({.seq = partial, .n_tokens = 20, .sample = false});
  mixed.chunks.push_back({.seq = whole, .n_tokens = 10, .sample = true});
  EXPECT_EQ(check_step(mixed), 15);  // 33 -> 48: the pad fills all 4 scratch blocks of 4
  EXPECT_EQ(padded_->batch().n_seqs(), 8);
  // The rest of the partial prompt with the decode rows again: 3 + 10 = 13 tokens -> 16.
  StepPlan rest;
  for (int i = 0; i < 3; ++i) rest.chunks.push_back(decode_row(old[size_t(i)], 11 + i));
  rest.chunks.push_back({.seq = partial, .n_tokens = 10, .sample = true});
  EXPECT_EQ(check_step(rest), 3);
}

TEST_F(PromptPadding, PadOfOneAndNoTokenPad) {
  open(64, 16);
  Sequence* a = add(47);
  StepPlan p1;
  p1.chunks = {{.seq = a, .n_tokens = 47, .sample = true}};
  EXPECT_EQ(check_step(p1), 1);
  // 48 tokens over 3 prompts: no token pad, one empty dummy sequence (3 -> 4).
  Sequence* b = add(20);
  Sequence* c = add(30);
  Sequence* d = add(16);
  StepPlan p2;
  p2.chunks = {{.seq = b, .n_tokens = 20, .sample = true},
               {.seq = c, .n_tokens = 12, .sample = false},
               {.seq = d, .n_tokens = 16, .sample = true}};
  EXPECT_EQ(check_step(p2), 0);
  const Batch& batch = padded_->batch();
  ASSERT_EQ(batch.n_seqs(), 4);
  EXPECT_EQ(batch.q_len[3], 0);
  EXPECT_EQ(batch.kv_len[3], 0);
}

TEST_F(PromptPadding, PadCappedAtTheBudgetAndAFullBudget) {
  open(60, 16);  // not a multiple of the granule
  Sequence* a = add(50);
  StepPlan p1;
  p1.chunks = {{.seq = a, .n_tokens = 50, .sample = true}};
  EXPECT_EQ(check_step(p1), 10);  // round-up 64 > 60: the step runs at the budget
  EXPECT_EQ(padded_->batch().n_tokens(), 60);
  Sequence* b = add(40);
  Sequence* c = add(20);
  StepPlan p2;
  p2.chunks = {decode_row(a, 9), {.seq = b, .n_tokens = 40, .sample = true}, {.seq = c, .n_tokens = 19, .sample = false}};
  EXPECT_EQ(check_step(p2), 0);  // a full budget: only the sequence count is padded (3 -> 4)
  EXPECT_EQ(padded_->batch().n_seqs(), 4);
}

// The serving start's step-graph warm-up (ModelRunner::warm_up_graphs) runs one dummy step per graph key: decode
// steps of 1, 2 sequences and full-budget prompt steps of 1, 2, 4 sequences (max_seqs 2, padded + 1), at table
// widths 1 and 2 blocks; a prompt key whose P x mb blocks cannot hold the budget is skipped. Budget 16, blocks of 4:
// mb 1 -> decode P 1, 2 and prompt P 4 (4 x 4 tokens); mb 2 -> decode P 1, 2 and prompt P 2, 4: 7 steps. The
// dummies write scratch slots only: a real sequence's next-step logits are the same before and after the warm-up.
TEST_F(PromptPadding, GraphWarmupRunsEachKeyOnScratchOnly) {
  open(16, 8);
  Sequence* a = add(12);
  StepPlan prompt;
  prompt.chunks = {{.seq = a, .n_tokens = 12, .sample = true}};
  plain_->run(prompt);
  commit(prompt);
  StepPlan decode;
  decode.chunks = {decode_row(a, 7)};
  plain_->run(decode);
  const std::vector<float> want(plain_->logits(0).begin(), plain_->logits(0).end());
  EXPECT_EQ(padded_->warm_up_graphs(GraphWarmup{.max_seqs = 2, .max_blocks = 2, .max_graphs = 100}), 7);
  const Batch& last = padded_->batch();  // the last key: a full-budget prompt step of 4 sequences, 2-block tables
  EXPECT_EQ(last.n_tokens(), 16);
  EXPECT_EQ(last.n_seqs(), 4);
  EXPECT_EQ(last.max_blocks_per_seq, 2);
  EXPECT_EQ(int32_t(last.logit_rows.size()), 4);
  for (int64_t slot : last.slots) {
    EXPECT_GE(slot / kBlock, scratch_first_);
    EXPECT_LT(slot / kBlock, scratch_first_ + n_scratch_);
  }
  for (int32_t blk : last.block_tables)
    EXPECT_TRUE(blk == -1 || (blk >= scratch_first_ && blk < scratch_first_ + n_scratch_)) << blk;
  plain_->run(decode);
  const std::vector<float> again(plain_->logits(0).begin(), plain_->logits(0).end());
  EXPECT_EQ(again, want) << "the warm-up changed a real sequence's cache";
  EXPECT_EQ(padded_->warm_up_graphs(GraphWarmup{.max_seqs = 2, .max_blocks = 2, .max_graphs = 3}), 3);  // the cap
  commit(decode);
}

TEST(PromptPaddingScratch, ReservationCoversTheLargestPad) {
  // The serving default: 512-token budget, 16-token blocks, granule 64: a pad of up to 63 tokens in 4 blocks.
  EXPECT_EQ(prompt_pad_scratch_blocks(512, 16), 4);
  // A budget below the granule: the pad is below the budget.
  EXPECT_EQ(prompt_pad_scratch_blocks(16, 4), 4);
  EXPECT_EQ(prompt_pad_scratch_blocks(1, 16), 1);
  EXPECT_THROW(prompt_pad_scratch_blocks(0, 16), Error);
}

}  // namespace
}  // namespace ferry
