// The speculative pieces on their own: n-gram lookup (longest match, most recent on ties, none below the minimum),
// the adaptive proposal length (the documented rule's worked example), and the verify rule (keep while the
// target's draw equals the proposal, then emit the draw; every row's draw sees its own history).
#include <gtest/gtest.h>

#include "core/check.h"
#include "engine/block_manager.h"
#include "engine/ngram_proposer.h"
#include "engine/spec_verify.h"

namespace ferry {
namespace {

std::vector<int32_t> ngram(const std::vector<int32_t>& history, int32_t k) {
  NgramProposer p;
  std::vector<int32_t> out = {99};  // cleared by propose
  p.propose(history, k, out);
  return out;
}

TEST(NgramProposer, ProposesWhatFollowedTheLongestEarlierMatch) {
  // a b c d x a b -> the suffix "a b" occurred at 0, followed by c d x
  EXPECT_EQ(ngram({1, 2, 3, 4, 9, 1, 2}, 3), (std::vector<int32_t>{3, 4, 9}));
  EXPECT_EQ(ngram({1, 2, 3, 4, 9, 1, 2}, 2), (std::vector<int32_t>{3, 4}));
  // The proposal stops at the end of the history.
  EXPECT_EQ(ngram({5, 6, 7, 5, 6}, 8), (std::vector<int32_t>{7, 5, 6}));
  // Longest wins over most recent: "7 1 2" matches at 2..4 (3 tokens), "1 2" alone also at 6..7.
  EXPECT_EQ(ngram({0, 0, 7, 1, 2, 40, 1, 2, 50, 7, 1, 2}, 1), (std::vector<int32_t>{40}));
  // Equal lengths: the most recent occurrence.
  EXPECT_EQ(ngram({1, 2, 30, 1, 2, 40, 1, 2}, 1), (std::vector<int32_t>{40}));
}

TEST(NgramProposer, NothingBelowTheMinimumMatchOrWithoutRoom) {
  EXPECT_TRUE(ngram({1, 2, 3, 4, 5, 6}, 4).empty());        // no repeated suffix
  EXPECT_TRUE(ngram({1, 2, 3, 4, 5, 1, 7, 2}, 4).empty());  // only single tokens repeat (kNgramMinMatch = 2)
  EXPECT_TRUE(ngram({1, 2, 3, 1, 2}, 0).empty());
  EXPECT_TRUE(ngram({}, 4).empty());
  EXPECT_EQ(ngram({4, 4, 4, 4}, 3), (std::vector<int32_t>{4}));  // a run proposes its continuation
}

TEST(SpecLength, FollowsTheDocumentedRule) {
  SpecLength l(4);
  EXPECT_EQ(l.next(), 4);
  l.update(4, 4);
  EXPECT_EQ(l.next(), 4);  // capped at k_max
  l.update(4, 1);
  EXPECT_EQ(l.next(), 2);
  l.update(2, 2);
  EXPECT_EQ(l.next(), 3);
  l.update(3, 0);
  EXPECT_EQ(l.next(), 1);
  l.update(0, 0);  // nothing proposed: unchanged
  EXPECT_EQ(l.next(), 1);
  EXPECT_THROW(SpecLength(0), Error);
}

TEST(VerifyPointProposals, KeepsProposalsWhileTheTargetDrawsThemThenEmitsItsOwn) {
  const std::vector<int32_t> proposals = {10, 11, 12, 13};
  std::vector<int32_t> emitted;
  std::vector<size_t> rows_drawn;
  // The target draws 10, 11, then 7 at row 2: two kept, 7 emitted, rows 3 and 4 never drawn.
  const std::vector<int32_t> target = {10, 11, 7, 13, 14};
  auto draw = [&](size_t r) {
    rows_drawn.push_back(r);
    return target[r];
  };
  EXPECT_EQ(verify_point_proposals(proposals, draw, emitted), 2);
  EXPECT_EQ(emitted, (std::vector<int32_t>{10, 11, 7}));
  EXPECT_EQ(rows_drawn, (std::vector<size_t>{0, 1, 2}));
  // All kept: the last row's draw is the extra token.
  rows_drawn.clear();
  const std::vector<int32_t> all = {10, 11, 12, 13, 99};
  EXPECT_EQ(verify_point_proposals(proposals, [&](size_t r) { return all[r]; }, emitted), 4);
  EXPECT_EQ(emitted, (std::vector<int32_t>{10, 11, 12, 13, 99}));
  // The first rejected: one token, the target's.
  EXPECT_EQ(verify_point_proposals(proposals, [](size_t) { return 5; }, emitted), 0);
  EXPECT_EQ(emitted, (std::vector<int32_t>{5}));
  // No proposals: a plain decode row.
  EXPECT_EQ(verify_point_proposals({}, [](size_t) { return 8; }, emitted), 0);
  EXPECT_EQ(emitted, (std::vector<int32_t>{8}));
}

// The KV rollback of a verify step: the table's count steps back to the kept tokens and the blocks holding only
// rejected ones go back to the pool; nothing else moves (the kept blocks and their ids stay).
TEST(BlockManagerTruncate, ReleasesOnlyBlocksOfRejectedTokens) {
  BlockManager blocks(8, 4, false);
  Sequence seq;
  seq.tokens.assign(6, 7);  // 5 computed + 1 pending
  ASSERT_TRUE(blocks.allocate(seq));
  seq.table.n_tokens = 5;
  ASSERT_TRUE(blocks.reserve(seq, 5 + 1 + 6));  // the pending token and 6 proposals: 12 tokens, 3 blocks
  ASSERT_EQ(seq.table.blocks.size(), 3u);
  const std::vector<int32_t> first_two(seq.table.blocks.begin(), seq.table.blocks.begin() + 2);
  seq.table.n_tokens = 12;  // the verify step ran
  blocks.truncate(seq, 8);  // 2 of 6 proposals kept: positions 0..7, two blocks
  EXPECT_EQ(seq.table.n_tokens, 8);
  EXPECT_EQ(seq.table.blocks, first_two);
  EXPECT_EQ(blocks.pool().n_free(), 6);
  blocks.truncate(seq, 7);  // within the last kept block: no block moves
  EXPECT_EQ(seq.table.blocks.size(), 2u);
  EXPECT_EQ(seq.table.n_tokens, 7);
  blocks.pool().check_invariants();
  blocks.free(seq);
  EXPECT_EQ(blocks.pool().n_free(), 8);
}

}  // namespace
}  // namespace ferry
