#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "core/check.h"
#include "kv/block_table.h"

namespace ferry {
namespace {

TEST(BlockPool, AllocateUntilEmptyReleaseReuse) {
  BlockPool pool(5);
  pool.check_invariants();
  std::set<int32_t> got;
  for (int i = 0; i < 5; ++i) {
    const auto b = pool.allocate();
    ASSERT_TRUE(b.has_value());
    EXPECT_GE(*b, 0);
    EXPECT_LT(*b, 5);
    EXPECT_TRUE(got.insert(*b).second) << "block " << *b << " handed out twice";
    EXPECT_EQ(pool.ref_count(*b), 1);
    EXPECT_EQ(pool.n_free(), 4 - i);
    pool.check_invariants();
  }
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_EQ(pool.n_used(), 5);

  pool.release(3);
  pool.release(1);
  EXPECT_EQ(pool.n_free(), 2);
  pool.check_invariants();
  // Free-list order is LRU: the block released first comes back first.
  EXPECT_EQ(pool.allocate(), 3);
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_FALSE(pool.allocate().has_value());
  pool.check_invariants();
}

TEST(BlockPool, RefCountsShareABlock) {
  BlockPool pool(3);
  const int32_t b = *pool.allocate();
  pool.retain(b);
  pool.retain(b);
  EXPECT_EQ(pool.ref_count(b), 3);
  pool.release(b);
  pool.release(b);
  EXPECT_EQ(pool.ref_count(b), 1);
  EXPECT_EQ(pool.n_free(), 2);  // still held by one owner
  pool.check_invariants();
  pool.release(b);
  EXPECT_EQ(pool.ref_count(b), 0);
  EXPECT_EQ(pool.n_free(), 3);
  pool.check_invariants();
}

TEST(BlockPool, MisuseIsAnError) {
  EXPECT_THROW(BlockPool(0), Error);
  EXPECT_THROW(BlockPool(-3), Error);
  BlockPool pool(2);
  const int32_t b = *pool.allocate();
  pool.release(b);
  EXPECT_THROW(pool.release(b), Error);  // double release
  EXPECT_THROW(pool.retain(b), Error);   // retain of a free block
  EXPECT_THROW(pool.release(2), Error);  // out of range
  EXPECT_THROW(pool.release(-1), Error);
  EXPECT_THROW((void)pool.ref_count(7), Error);
  pool.check_invariants();  // the failed calls changed nothing
  EXPECT_EQ(pool.n_free(), 2);
}

TEST(BlockTable, ReserveSlotsAndRelease) {
  constexpr int32_t kBlockSize = 4;
  BlockPool pool(4);
  BlockTable t;
  EXPECT_TRUE(t.reserve(pool, 0, kBlockSize));
  EXPECT_TRUE(t.blocks.empty());
  EXPECT_TRUE(t.reserve(pool, 5, kBlockSize));  // ceil(5/4) = 2 blocks
  ASSERT_EQ(t.blocks.size(), 2u);
  EXPECT_EQ(t.capacity(kBlockSize), 8);
  EXPECT_TRUE(t.reserve(pool, 8, kBlockSize));  // fits already
  EXPECT_EQ(t.blocks.size(), 2u);
  EXPECT_TRUE(t.reserve(pool, 3, kBlockSize));  // never shrinks
  EXPECT_EQ(t.blocks.size(), 2u);

  for (int32_t pos = 0; pos < 8; ++pos) {
    const int64_t expected = int64_t{t.blocks[pos / kBlockSize]} * kBlockSize + pos % kBlockSize;
    EXPECT_EQ(t.slot(pos, kBlockSize), expected) << "pos " << pos;
  }
  EXPECT_THROW((void)t.slot(8, kBlockSize), Error);
  EXPECT_THROW((void)t.slot(-1, kBlockSize), Error);

  // 17 tokens need 5 blocks; only 2 more are free: refused, nothing changed.
  const std::vector<int32_t> before = t.blocks;
  EXPECT_FALSE(t.reserve(pool, 17, kBlockSize));
  EXPECT_EQ(t.blocks, before);
  EXPECT_EQ(pool.n_free(), 2);
  EXPECT_TRUE(t.reserve(pool, 16, kBlockSize));
  EXPECT_EQ(pool.n_free(), 0);
  t.n_tokens = 16;
  pool.check_invariants();

  t.release_all(pool);
  EXPECT_TRUE(t.blocks.empty());
  EXPECT_EQ(t.n_tokens, 0);
  EXPECT_EQ(pool.n_free(), 4);
  pool.check_invariants();

  EXPECT_THROW(t.reserve(pool, 4, 0), Error);
  EXPECT_THROW(t.reserve(pool, -1, kBlockSize), Error);
}

TEST(BlockTable, BlocksForTokens) {
  EXPECT_EQ(blocks_for_tokens(0, 16), 0);
  EXPECT_EQ(blocks_for_tokens(1, 16), 1);
  EXPECT_EQ(blocks_for_tokens(16, 16), 1);
  EXPECT_EQ(blocks_for_tokens(17, 16), 2);
  EXPECT_EQ(blocks_for_tokens(2147483647, 16), 134217728);  // no overflow at the top of int32
}

// Many sequences grow, share (fork) and finish at random; invariants after every operation, and the
// pool's own counts must agree with an independent model of who holds what.
TEST(BlockPool, RandomizedSequencesNeverLeak) {
  constexpr int32_t kBlocks = 64;
  constexpr int32_t kBlockSize = 16;
  BlockPool pool(kBlocks);
  std::mt19937 rng(1234);
  std::vector<BlockTable> seqs;
  int refused = 0, forks = 0;

  auto expected_refs = [&] {
    std::vector<int32_t> refs(kBlocks, 0);
    for (const BlockTable& s : seqs) {
      for (const int32_t b : s.blocks) ++refs[b];
    }
    return refs;
  };

  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(rng() % 10);
    if (op < 2 || seqs.empty()) {  // a new sequence with a prompt
      BlockTable t;
      const auto prompt = static_cast<int32_t>(1 + rng() % 100);
      if (t.reserve(pool, prompt, kBlockSize)) {
        t.n_tokens = prompt;
        seqs.push_back(std::move(t));
      } else {
        EXPECT_TRUE(t.blocks.empty());
        ++refused;
      }
    } else if (op < 8) {  // decode: one to a few more tokens
      BlockTable& t = seqs[rng() % seqs.size()];
      const int32_t want = t.n_tokens + static_cast<int32_t>(1 + rng() % 8);
      const size_t had = t.blocks.size();
      if (t.reserve(pool, want, kBlockSize)) {
        EXPECT_EQ(static_cast<int32_t>(t.blocks.size()), blocks_for_tokens(want, kBlockSize));
        t.n_tokens = want;
      } else {
        EXPECT_EQ(t.blocks.size(), had);
        ++refused;
      }
    } else if (op == 8) {  // fork: a second sequence shares the full blocks of the first (prefix sharing)
      const BlockTable& src = seqs[rng() % seqs.size()];
      BlockTable t;
      const int32_t full = src.n_tokens / kBlockSize;
      for (int32_t i = 0; i < full; ++i) {
        pool.retain(src.blocks[i]);
        t.blocks.push_back(src.blocks[i]);
      }
      t.n_tokens = full * kBlockSize;
      seqs.push_back(std::move(t));
      ++forks;
    } else {  // finish
      const size_t i = rng() % seqs.size();
      seqs[i].release_all(pool);
      seqs.erase(seqs.begin() + static_cast<std::ptrdiff_t>(i));
    }
    pool.check_invariants();
    const std::vector<int32_t> refs = expected_refs();
    int32_t n_free = 0;
    for (int32_t b = 0; b < kBlocks; ++b) {
      ASSERT_EQ(pool.ref_count(b), refs[b]) << "block " << b << " at step " << step;
      n_free += refs[b] == 0;
    }
    ASSERT_EQ(pool.n_free(), n_free) << "step " << step;
  }
  EXPECT_GT(refused, 0) << "the pool never ran out: the test did not exercise the refusal path";
  EXPECT_GT(forks, 0);
  for (BlockTable& t : seqs) t.release_all(pool);
  pool.check_invariants();
  EXPECT_EQ(pool.n_free(), kBlocks);
}

}  // namespace
}  // namespace ferry
