#include "kv/block_pool.h"

#include "core/check.h"

namespace ferry {

BlockPool::BlockPool(int32_t n_blocks) {
  FERRY_CHECK(n_blocks > 0, "kv: the block pool needs at least one block, got {}", n_blocks);
  ref_.assign(static_cast<size_t>(n_blocks), 0);
  prev_.assign(static_cast<size_t>(n_blocks), kNone);
  next_.assign(static_cast<size_t>(n_blocks), kNone);
  hash_.assign(static_cast<size_t>(n_blocks), 0);
  has_hash_.assign(static_cast<size_t>(n_blocks), 0);
  for (int32_t b = 0; b < n_blocks; ++b) push_free_back(b);
}

void BlockPool::check_id(int32_t block, const char* op) const {
  FERRY_CHECK(block >= 0 && block < n_blocks(), "kv: {} of block {}, which is outside [0, {})", op, block,
              n_blocks());
}

int32_t BlockPool::ref_count(int32_t block) const {
  check_id(block, "ref_count");
  return ref_[block];
}

std::optional<int32_t> BlockPool::allocate() {
  if (head_ == kNone) return std::nullopt;
  const int32_t block = head_;
  unlink_free(block);
  if (has_hash_[block]) {  // the least recently used cached block: evict it from the prefix cache
    by_hash_.erase(hash_[block]);
    has_hash_[block] = 0;
    ++evictions_;
  }
  ref_[block] = 1;
  return block;
}

void BlockPool::retain(int32_t block) {
  check_id(block, "retain");
  FERRY_CHECK(ref_[block] > 0, "kv: retain of block {}, which is free", block);
  ++ref_[block];
}

void BlockPool::release(int32_t block) {
  check_id(block, "release");
  FERRY_CHECK(ref_[block] > 0, "kv: release of block {}, which is already free (double release)", block);
  if (--ref_[block] == 0) push_free_back(block);
}

bool BlockPool::set_hash(int32_t block, uint64_t hash) {
  check_id(block, "set_hash");
  FERRY_CHECK(ref_[block] > 0, "kv: set_hash of block {}, which is free", block);
  if (has_hash_[block] || by_hash_.count(hash) != 0) return false;
  by_hash_.emplace(hash, block);
  hash_[block] = hash;
  has_hash_[block] = 1;
  return true;
}

std::optional<int32_t> BlockPool::lookup(uint64_t hash) const {
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::acquire_cached(int32_t block) {
  check_id(block, "acquire_cached");
  FERRY_CHECK(has_hash_[block], "kv: acquire_cached of block {}, which is not cached", block);
  if (ref_[block] == 0) {
    unlink_free(block);
    ref_[block] = 1;
  } else {
    ++ref_[block];
  }
}

std::optional<uint64_t> BlockPool::hash_of(int32_t block) const {
  check_id(block, "hash_of");
  if (!has_hash_[block]) return std::nullopt;
  return hash_[block];
}

void BlockPool::push_free_back(int32_t block) {
  prev_[block] = tail_;
  next_[block] = kNone;
  if (tail_ == kNone) {
    head_ = block;
  } else {
    next_[tail_] = block;
  }
  tail_ = block;
  ++n_free_;
}

void BlockPool::unlink_free(int32_t block) {
  const int32_t p = prev_[block], n = next_[block];
  if (p == kNone) {
    head_ = n;
  } else {
    next_[p] = n;
  }
  if (n == kNone) {
    tail_ = p;
  } else {
    prev_[n] = p;
  }
  prev_[block] = next_[block] = kNone;
  --n_free_;
}

void BlockPool::check_invariants() const {
  const int32_t n = n_blocks();
  std::vector<bool> seen(static_cast<size_t>(n), false);
  int32_t walked = 0;
  int32_t before = kNone;
  for (int32_t b = head_; b != kNone; b = next_[b]) {
    FERRY_CHECK(b >= 0 && b < n, "kv invariant: free list holds block id {} outside [0, {})", b, n);
    FERRY_CHECK(!seen[b], "kv invariant: block {} is on the free list twice", b);
    FERRY_CHECK(ref_[b] == 0, "kv invariant: block {} is on the free list with ref count {}", b, ref_[b]);
    FERRY_CHECK(prev_[b] == before, "kv invariant: free-list back link of block {} is {}, expected {}", b,
                prev_[b], before);
    seen[b] = true;
    before = b;
    ++walked;
  }
  FERRY_CHECK(tail_ == before, "kv invariant: free-list tail is {}, the walk ended at {}", tail_, before);
  FERRY_CHECK(walked == n_free_, "kv invariant: free list holds {} blocks, n_free says {}", walked, n_free_);
  for (int32_t b = 0; b < n; ++b) {
    FERRY_CHECK(ref_[b] >= 0, "kv invariant: block {} has negative ref count {}", b, ref_[b]);
    FERRY_CHECK(seen[b] == (ref_[b] == 0), "kv invariant: block {} has ref count {} but is {}on the free list",
                b, ref_[b], seen[b] ? "" : "not ");
    if (has_hash_[b]) {
      const auto it = by_hash_.find(hash_[b]);
      FERRY_CHECK(it != by_hash_.end() && it->second == b,
                  "kv invariant: block {} carries hash {:#x} but the prefix map does not point at it", b, hash_[b]);
    }
  }
  for (const auto& [hash, b] : by_hash_) {
    FERRY_CHECK(b >= 0 && b < n, "kv invariant: prefix map entry {:#x} -> block {} outside [0, {})", hash, b, n);
    FERRY_CHECK(has_hash_[b] && hash_[b] == hash, "kv invariant: prefix map entry {:#x} -> block {}, which carries {}",
                hash, b, has_hash_[b] ? fmt::format("{:#x}", hash_[b]) : std::string("no hash"));
  }
}

}  // namespace ferry
