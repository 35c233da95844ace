// Verify steps laid out for step graphs (model/batch.h verify_entries, engine/model_runner.h): a verify chunk runs
// as one-row entries, so a step of plain decodes and verify chunks is decode-shaped and padded like a decode step
// (a power-of-two number of entries, rows_share_kv set: its own graph key), and a step that also carries a prompt
// chunk is prompt-padded. On the CPU (which pads but does not capture) every real logit row is bit for bit the
// unpadded step's. Also: the oracle proposer's rule, and that no --spec text or request field names it.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/check.h"
#include "engine/block_manager.h"
#include "engine/loaded_model.h"
#include "engine/model_runner.h"
#include "engine/oracle_proposer.h"
#include "engine/serving_test_util.h"
#include "ferry/engine.h"

namespace ferry {
namespace {

constexpr int32_t kBlock = 4;

bool is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

TEST(VerifyEntries, TheWorkedExampleOfTheHeader) {
  Batch b;
  b.max_blocks_per_seq = 4;
  const std::vector<int32_t> tokens = {11, 12, 13, 14}, table = {3, 7, 1, 5};
  const std::vector<int64_t> slots = {3 * 4 + 1, 3 * 4 + 2, 3 * 4 + 3, 5 * 4};
  verify_entries(b, tokens, 9, slots, table);
  ASSERT_EQ(b.n_seqs(), 4);
  ASSERT_EQ(b.n_tokens(), 4);
  EXPECT_TRUE(b.rows_share_kv);
  for (int32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(b.q_start[size_t(i)], i);
    EXPECT_EQ(b.q_len[size_t(i)], 1);
    EXPECT_EQ(b.kv_len[size_t(i)], 10 + i);
    EXPECT_EQ(b.positions[size_t(i)], 9 + i);
    EXPECT_EQ(b.logit_rows[size_t(i)], i);
    EXPECT_EQ(std::vector<int32_t>(b.block_tables.begin() + 4 * i, b.block_tables.begin() + 4 * i + 4), table);
  }
}

class VerifyPadding : public ::testing::Test {
 protected:
  void SetUp() override {
    m_ = load_model(test::tiny_options(128, kBlock), [&](const ModelConfig&, int32_t) {
      return KvSizing{.kv_tokens = 1024, .max_step_tokens = 64};
    });
    const int32_t n_blocks = m_->model->kv_shape().n_blocks;
    n_scratch_ = prompt_pad_scratch_blocks(64, kBlock, 16);
    scratch_first_ = n_blocks - n_scratch_;
    blocks_ = std::make_unique<BlockManager>(scratch_first_, kBlock, false);
    plain_ = std::make_unique<ModelRunner>(*m_->model, -1);
    padded_ = std::make_unique<ModelRunner>(
        *m_->model, StepPadding{.scratch_first = scratch_first_, .n_scratch = n_scratch_, .pad_decodes = true,
                                .pad_prompts = true, .granule = 16});
  }

  // A sequence whose `len` prompt tokens are computed, plus one pending sampled token.
  Sequence* prefilled(int len) {
    Sequence* s = fresh(len);
    StepPlan p;
    p.chunks = {{.seq = s, .n_tokens = len, .sample = true}};
    plain_->run(p);
    commit(p);
    s->tokens.push_back(int32_t(3 + seqs_.size()));
    return s;
  }
  Sequence* fresh(int len) {
    auto s = std::make_unique<Sequence>();
    s->id = uint64_t(seqs_.size() + 1);
    s->tokens = test::random_prompt(uint64_t(500 + seqs_.size()), len);
    EXPECT_TRUE(blocks_->allocate(*s));
    seqs_.push_back(std::move(s));
    return seqs_.back().get();
  }
  void commit(const StepPlan& plan) {
    for (const ScheduledChunk& c : plan.chunks) c.seq->table.n_tokens += c.n_tokens;
  }
  ScheduledChunk decode(Sequence* s) {
    EXPECT_TRUE(blocks_->can_append(*s));
    blocks_->append(*s);
    return {.seq = s, .n_tokens = 1, .sample = true};
  }
  ScheduledChunk verify(Sequence* s, std::vector<int32_t> draft) {
    s->draft = std::move(draft);
    const auto n = int32_t(s->draft.size());
    EXPECT_TRUE(blocks_->reserve(*s, s->n_computed() + 1 + n));
    return {.seq = s, .n_tokens = 1 + n, .sample = true, .n_draft = n};
  }

  // Every real logit row of the padded step equals the unpadded step's (the plan is run twice: the same K/V rows
  // are written twice with the same values).
  void check_rows(const StepPlan& plan) {
    plain_->run(plan);
    std::vector<std::vector<float>> want;
    size_t i = 0;
    for (const ScheduledChunk& c : plan.chunks) {
      if (!c.sample) continue;
      for (int32_t r = 0; r < c.n_logit_rows(); ++r)
        want.emplace_back(plain_->logits(i, size_t(r)).begin(), plain_->logits(i, size_t(r)).end());
      ++i;
    }
    padded_->run(plan);
    size_t w = 0;
    i = 0;
    for (const ScheduledChunk& c : plan.chunks) {
      if (!c.sample) continue;
      for (int32_t r = 0; r < c.n_logit_rows(); ++r, ++w) {
        const std::vector<float> got(padded_->logits(i, size_t(r)).begin(), padded_->logits(i, size_t(r)).end());
        EXPECT_EQ(got, want[w]) << "chunk " << i << " row " << r << " differs after padding";
      }
      ++i;
    }
  }

  void TearDown() override {
    for (auto& s : seqs_) blocks_->free(*s);
    if (blocks_) {
      blocks_->pool().check_invariants();
      EXPECT_EQ(blocks_->pool().n_used(), 0);
    }
  }

  int32_t scratch_first_ = 0, n_scratch_ = 0;
  std::unique_ptr<LoadedModel> m_;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<ModelRunner> plain_, padded_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
};

TEST_F(VerifyPadding, DecodesAndAVerifyChunkAreADecodeShapedStep) {
  Sequence* a = prefilled(10);
  Sequence* b = prefilled(7);
  Sequence* c = prefilled(13);
  StepPlan p;
  p.chunks = {decode(a), verify(c, {5, 6, 7}), decode(b)};  // 1 + 4 + 1 = 6 entries -> 8
  check_rows(p);
  const Batch& bt = padded_->batch();
  EXPECT_EQ(bt.n_seqs(), 8);
  EXPECT_EQ(bt.n_tokens(), 8);
  EXPECT_TRUE(bt.rows_share_kv);
  for (int32_t q : bt.q_len) EXPECT_EQ(q, 1);
  EXPECT_EQ(bt.logit_rows.size(), 8u);
  // c's four entries: positions 13..16 over c's table, kv_len 14..17.
  for (int32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(bt.positions[size_t(1 + r)], 13 + r);
    EXPECT_EQ(bt.kv_len[size_t(1 + r)], 14 + r);
    EXPECT_EQ(bt.block_tables[size_t(1 + r) * size_t(bt.max_blocks_per_seq)], c->table.blocks[0]);
  }
  // The dummies write the scratch block only.
  for (int32_t r = 6; r < 8; ++r) EXPECT_EQ(bt.slots[size_t(r)] / kBlock, scratch_first_);
}

TEST_F(VerifyPadding, AVerifyChunkAloneAtEachK) {
  Sequence* a = prefilled(9);
  for (int32_t k = 1; k <= 8; ++k) {
    std::vector<int32_t> draft;
    for (int32_t i = 0; i < k; ++i) draft.push_back(20 + i);
    StepPlan p;
    p.chunks = {verify(a, draft)};
    check_rows(p);
    const Batch& bt = padded_->batch();
    EXPECT_TRUE(is_pow2(bt.n_seqs())) << bt.n_seqs();
    EXPECT_GE(bt.n_seqs(), k + 1);
    EXPECT_LT(bt.n_seqs(), 2 * (k + 1));
    EXPECT_EQ(bt.n_tokens(), bt.n_seqs());
    blocks_->truncate(*a, a->n_computed());  // nothing kept: the next k starts from the same history
  }
}

TEST_F(VerifyPadding, AVerifyChunkBesideAPromptChunkIsPromptPadded) {
  Sequence* a = prefilled(11);
  Sequence* b = fresh(21);
  StepPlan p;
  p.chunks = {verify(a, {4, 5}), {.seq = b, .n_tokens = 21, .sample = true}};
  check_rows(p);
  const Batch& bt = padded_->batch();
  EXPECT_EQ(bt.n_tokens(), 32);  // 3 + 21 = 24 -> a multiple of 16
  EXPECT_TRUE(is_pow2(bt.n_seqs()));
  EXPECT_GE(bt.n_seqs(), 3 + 1 + 1);  // a's 3 entries, b, the pad sequence
  EXPECT_EQ(int32_t(bt.logit_rows.size()), bt.n_seqs());
  EXPECT_TRUE(bt.rows_share_kv);
}

TEST(OracleProposer, ReplaysTheRecordingWhileTheHistoryFollowsIt) {
  OracleProposer o({1, 2, 3, 4, 5});
  std::vector<int32_t> out;
  const std::vector<int32_t> h = {1, 2};
  o.propose(h, 2, out);
  EXPECT_EQ(out, (std::vector<int32_t>{3, 4}));
  o.propose(h, 9, out);
  EXPECT_EQ(out, (std::vector<int32_t>{3, 4, 5}));
  const std::vector<int32_t> off = {1, 9};
  o.propose(off, 2, out);
  EXPECT_TRUE(out.empty());
  const std::vector<int32_t> all = {1, 2, 3, 4, 5};
  o.propose(all, 2, out);
  EXPECT_TRUE(out.empty());
}

TEST(OracleProposer, NoSpecTextNamesIt) {
  EXPECT_THROW(parse_spec("oracle", 4), Error);  // ferry run / chat / serve --spec go through parse_spec
}

TEST(OracleProposer, EngineKeepsEveryProposalAndTheTokens) {
  EngineOptions o = test::tiny_options(256, 4);
  Engine e(o);
  SamplingParams g;
  g.temperature = 0;
  const std::vector<int32_t> prompt = test::random_prompt(3, 12);
  const GenerateResult plain = e.generate(prompt, g, 40, nullptr, false);
  std::vector<int32_t> recorded = prompt;
  recorded.insert(recorded.end(), plain.tokens.begin(), plain.tokens.end());
  for (int k : {1, 4, 8}) {
    e.replay_proposals(recorded, k);
    e.reset();
    const GenerateResult r = e.generate(prompt, g, 40, nullptr, false);
    EXPECT_EQ(r.tokens, plain.tokens) << "k " << k;
    EXPECT_GT(r.spec_proposed, 0);
    EXPECT_EQ(r.spec_accepted, r.spec_proposed) << "k " << k;
    EXPECT_LT(r.target_steps, plain.target_steps);
  }
  e.replay_proposals({}, 0);
  e.reset();
  const GenerateResult again = e.generate(prompt, g, 40, nullptr, false);
  EXPECT_EQ(again.spec_proposed, 0);
  EXPECT_EQ(again.tokens, plain.tokens);
  EXPECT_THROW(e.replay_proposals(recorded, 0), Error);
}

}  // namespace
}  // namespace ferry
