// The prefix cache in BlockPool and its hash: XXH3-64 against published / independently computed vectors
// (python-xxhash 3.x), chained block hashes, registration, revival of free-but-cached blocks, LRU eviction,
// and a randomized sequence of operations checked against a simple model and check_invariants().
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "core/check.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace ferry {
namespace {

TEST(BlockHash, Xxh3MatchesReferenceVectors) {
  EXPECT_EQ(xxh3_64("", 0), 0x2d06800538d394c2ull);  // the published XXH3_64bits("") value
  EXPECT_EQ(xxh3_64("abc", 3), 0x78af5f94892f3950ull);
  std::vector<uint8_t> bytes;
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 256; ++i) bytes.push_back(uint8_t(i));
  EXPECT_EQ(xxh3_64(bytes.data(), bytes.size()), 0x1059105ad19bfa09ull);  // the > 240-byte (long) path
  // block_hash = XXH3-64(parent as 8 LE bytes ++ token ids as 4 LE bytes each).
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  EXPECT_EQ(block_hash(kNoParentHash, tokens), 0x7cff296f338bc24cull);
}

TEST(BlockHash, ChainsDependOnTheWholePrefix) {
  const std::vector<int32_t> a = {5, 6, 7, 8}, b = {5, 6, 7, 9};
  const uint64_t ha = block_hash(kNoParentHash, a), hb = block_hash(kNoParentHash, b);
  EXPECT_NE(ha, hb);
  EXPECT_EQ(ha, block_hash(kNoParentHash, a));
  // Same block tokens under different parents: different keys.
  EXPECT_NE(block_hash(ha, a), block_hash(hb, a));
}

TEST(PrefixCache, RegisterLookupReviveEvict) {
  BlockPool pool(3);
  const int32_t b0 = *pool.allocate(), b1 = *pool.allocate();
  EXPECT_TRUE(pool.set_hash(b0, 100));
  EXPECT_FALSE(pool.set_hash(b1, 100)) << "a hash held by another block must not be registered twice";
  EXPECT_FALSE(pool.set_hash(b0, 101)) << "a block keeps its first hash";
  EXPECT_TRUE(pool.set_hash(b1, 200));
  EXPECT_EQ(pool.lookup(100), b0);
  EXPECT_EQ(pool.lookup(300), std::nullopt);
  EXPECT_EQ(pool.n_cached(), 2);
  pool.check_invariants();

  // Shared while used: acquire_cached is a retain.
  pool.acquire_cached(b0);
  EXPECT_EQ(pool.ref_count(b0), 2);
  pool.release(b0);
  pool.release(b0);  // free, still cached
  EXPECT_EQ(pool.ref_count(b0), 0);
  EXPECT_EQ(pool.lookup(100), b0);
  EXPECT_EQ(pool.n_free(), 2);  // b0 and the never-used third block
  pool.check_invariants();

  // Revive: off the free list with ref 1, hash kept.
  pool.acquire_cached(b0);
  EXPECT_EQ(pool.ref_count(b0), 1);
  EXPECT_EQ(pool.n_free(), 1);
  EXPECT_EQ(pool.hash_of(b0), 100u);
  pool.check_invariants();

  // LRU eviction: free b1 then b0; allocations take the never-used block, then b1 (freed first), evicting 200.
  pool.release(b1);
  pool.release(b0);
  const int32_t b2 = *pool.allocate();
  EXPECT_NE(b2, b0);
  EXPECT_NE(b2, b1);
  EXPECT_EQ(*pool.allocate(), b1);
  EXPECT_EQ(pool.lookup(200), std::nullopt);
  EXPECT_EQ(pool.hash_of(b1), std::nullopt);
  EXPECT_EQ(pool.lookup(100), b0);
  EXPECT_EQ(pool.evictions(), 1);
  pool.check_invariants();
  EXPECT_THROW(pool.set_hash(b0, 5), Error);  // b0 is free: registering it is a bug upstream
  EXPECT_THROW(pool.acquire_cached(b2), Error);  // b2 has no hash
}

// Random operations against a model of what the pool should hold: ref counts never negative, every cached
// block found under its hash until evicted, no block both free and referenced.
TEST(PrefixCache, RandomOperationsKeepInvariants) {
  constexpr int32_t kBlocks = 12;
  BlockPool pool(kBlocks);
  std::mt19937 rng(7);
  std::map<int32_t, int32_t> refs;        // block -> references we hold
  std::map<uint64_t, int32_t> cached;     // hash -> block, as far as we know (eviction erases)
  uint64_t next_hash = 1;
  for (int step = 0; step < 20000; ++step) {
    const int op = int(rng() % 5);
    if (op == 0) {  // allocate
      const std::optional<int32_t> b = pool.allocate();
      if (!b) {
        EXPECT_EQ(pool.n_free(), 0);
        continue;
      }
      EXPECT_EQ(refs[*b], 0) << "allocate handed out a referenced block";
      for (auto it = cached.begin(); it != cached.end();)  // it was evicted if it was cached
        it = it->second == *b ? cached.erase(it) : std::next(it);
      refs[*b] = 1;
    } else if (op == 1 && !refs.empty()) {  // release one reference
      auto it = std::next(refs.begin(), ptrdiff_t(rng() % refs.size()));
      pool.release(it->first);
      if (--it->second == 0) refs.erase(it);
    } else if (op == 2 && !refs.empty()) {  // register a hash
      auto it = std::next(refs.begin(), ptrdiff_t(rng() % refs.size()));
      if (pool.set_hash(it->first, next_hash)) cached[next_hash] = it->first;
      ++next_hash;
    } else if (op == 3 && !cached.empty()) {  // prefix hit
      auto it = std::next(cached.begin(), ptrdiff_t(rng() % cached.size()));
      ASSERT_EQ(pool.lookup(it->first), it->second);
      pool.acquire_cached(it->second);
      ++refs[it->second];
    } else if (op == 4) {
      pool.check_invariants();
    }
    for (const auto& [b, r] : refs) ASSERT_EQ(pool.ref_count(b), r);
    ASSERT_EQ(pool.n_used(), int32_t(refs.size()));
  }
  for (const auto& [b, r] : refs)
    for (int i = 0; i < r; ++i) pool.release(b);
  pool.check_invariants();
  EXPECT_EQ(pool.n_free(), kBlocks);
  for (const auto& [h, b] : cached) EXPECT_EQ(pool.lookup(h), b);  // still cached while free
}

}  // namespace
}  // namespace ferry
