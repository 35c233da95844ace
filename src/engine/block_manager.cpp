#include "engine/block_manager.h"

#include <algorithm>
#include <span>

#include "core/check.h"
#include "kv/block_hash.h"

namespace ferry {

namespace {

// The parent hash of a sequence's first block: salts partition the prefix cache (0: the shared partition).
uint64_t root_hash(uint64_t salt) { return salt == 0 ? kNoParentHash : block_hash(salt, {}); }

}  // namespace

BlockManager::BlockManager(int32_t n_blocks, int32_t block_size, bool prefix_caching, int32_t window)
    : pool_(n_blocks), block_size_(block_size), prefix_caching_(prefix_caching), window_(window) {
  FERRY_CHECK(window >= 0, "kv: sliding window {} is negative", window);
}

bool BlockManager::allocate(Sequence& seq) {
  FERRY_ASSERT(seq.table.blocks.empty() && seq.table.n_tokens == 0);
  const int32_t bs = block_size_;
  const auto n_tokens = int32_t(seq.tokens.size());
  // Cached full blocks of the prefix, stopping at the first miss. At most (n_tokens - 1) / bs of them, so at
  // least the last token is computed.
  std::vector<int32_t> hits;
  std::vector<uint64_t> hashes;
  int32_t free_hits = 0;
  if (prefix_caching_) {
    uint64_t parent = root_hash(seq.request.cache_salt);
    for (int32_t j = 0; j < (n_tokens - 1) / bs; ++j) {
      const uint64_t h = block_hash(parent, std::span(seq.tokens).subspan(size_t(j) * size_t(bs), size_t(bs)));
      const std::optional<int32_t> block = pool_.lookup(h);
      if (!block) break;
      hits.push_back(*block);
      hashes.push_back(h);
      if (pool_.ref_count(*block) == 0) ++free_hits;
      parent = h;
    }
  }
  const int32_t needed = blocks_for_tokens(n_tokens, bs) - int32_t(hits.size());
  if (pool_.n_free() - free_hits < needed) return false;
  for (const int32_t b : hits) pool_.acquire_cached(b);
  seq.table.blocks = hits;
  seq.table.n_tokens = int32_t(hits.size()) * bs;
  seq.block_hashes = std::move(hashes);
  const bool ok = seq.table.reserve(pool_, n_tokens, bs);
  FERRY_ASSERT(ok);
  return true;
}

bool BlockManager::can_append(const Sequence& seq) const {
  if (seq.table.capacity(block_size_) >= seq.n_computed() + 1 || pool_.n_free() > 0) return true;
  // append() gives back the blocks behind the window first: one of them is the room
  const int32_t behind = blocks_behind_window(seq);
  for (int32_t j = 0; j < behind; ++j)
    if (seq.table.blocks[size_t(j)] >= 0) return true;
  return false;
}

int32_t BlockManager::blocks_behind_window(const Sequence& seq) const {
  if (window_ == 0) return 0;
  const int64_t horizon = int64_t(seq.n_computed()) - seq.n_inflight - window_ + 1;  // first position still needed
  return int32_t(std::clamp<int64_t>(horizon / block_size_, 0, int64_t(seq.table.blocks.size())));
}

int32_t BlockManager::release_behind_window(Sequence& seq) {
  const int32_t behind = blocks_behind_window(seq);
  int32_t released = 0;
  for (int32_t j = 0; j < behind; ++j) {
    int32_t& b = seq.table.blocks[size_t(j)];
    if (b < 0) continue;
    pool_.release(b);  // a full block: its hash (prefix caching) stays with it in the pool for later prompts
    b = -1;
    ++released;
  }
  return released;
}

void BlockManager::append(Sequence& seq) {
  release_behind_window(seq);
  const bool ok = seq.table.reserve(pool_, seq.n_computed() + 1, block_size_);
  FERRY_ASSERT(ok);
}

bool BlockManager::reserve(Sequence& seq, int32_t n_total) { return seq.table.reserve(pool_, n_total, block_size_); }

void BlockManager::truncate(Sequence& seq, int32_t n_keep) {
  FERRY_ASSERT(n_keep >= 0 && n_keep <= seq.n_computed() && seq.n_inflight == 0 &&
               int32_t(seq.block_hashes.size()) * block_size_ <= n_keep);
  const int32_t keep_blocks = blocks_for_tokens(n_keep, block_size_);
  while (int32_t(seq.table.blocks.size()) > keep_blocks) {
    pool_.release(seq.table.blocks.back());
    seq.table.blocks.pop_back();
  }
  seq.table.n_tokens = n_keep;
}

void BlockManager::commit(Sequence& seq) {
  const int32_t bs = block_size_;
  FERRY_ASSERT(seq.n_inflight >= 0 && seq.n_inflight <= seq.n_computed());
  const int32_t n_full = (seq.n_computed() - seq.n_inflight) / bs;
  while (int32_t(seq.block_hashes.size()) < n_full) {
    const auto j = int32_t(seq.block_hashes.size());
    const uint64_t parent = j == 0 ? root_hash(seq.request.cache_salt) : seq.block_hashes.back();
    const uint64_t h = block_hash(parent, std::span(seq.tokens).subspan(size_t(j) * size_t(bs), size_t(bs)));
    seq.block_hashes.push_back(h);
    // A block shared from the cache already carries h; a second copy of a prefix computed at the same time
    // stays uncached (set_hash refuses a hash held by another block).
    if (prefix_caching_ && seq.table.blocks[size_t(j)] >= 0) pool_.set_hash(seq.table.blocks[size_t(j)], h);
  }
}

void BlockManager::free(Sequence& seq) {
  seq.table.release_all(pool_);
  seq.block_hashes.clear();
  seq.n_inflight = 0;  // a launched step still writes into the released blocks: the stream orders it before any
  ++seq.epoch;         // later owner's step; its completion must not touch the (new) table
}

}  // namespace ferry
