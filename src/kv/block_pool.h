// The paged KV cache's block ids: a free list and a reference count per block. The memory itself belongs to
// the backend (per layer, K and V of shape (n_blocks, block_size, n_kv_heads, head_dim)); this class only
// decides which block id holds which tokens. Not thread-safe: the engine loop owns it.
//
// Free-list order is LRU: release() appends a block at the tail, allocate() takes the head (the block freed
// longest ago). Allocation order does not matter today; it is what prefix caching needs (below).
//
// PREFIX CACHING: a *full* block whose K/V are all written can be registered under its chained hash
// (kv/block_hash.h) with set_hash(); lookup() finds it again. release() to ref 0 keeps the hash and the map
// entry: the block is free *and* still cached, and a later prefix hit takes it back with acquire_cached()
// (revive: unlinked from the free list in O(1), ref 1; or retain when it is still used). Blocks at the head
// of the free list are the least recently used, so allocate() evicts exactly those: when the popped block has
// a hash, its map entry is erased before it is handed out. n_free() counts cached-but-free blocks (allocate()
// can hand them out), so BlockTable::reserve's capacity check stays right.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace ferry {

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);  // n_blocks > 0; all free, ids 0 .. n_blocks-1 in order

  std::optional<int32_t> allocate();  // the head of the free list with ref count 1; nullopt when none free
  void retain(int32_t block);         // ++ref of a used block (sharing); retaining a free block is an error
  void release(int32_t block);        // --ref; at 0 it goes to the tail of the free list. ferry::Error when
                                      // the block is already free (a double release is a bug upstream)

  // Prefix cache. set_hash registers a used block under `hash` and returns true; it returns false, changing
  // nothing, when another block already holds that hash (two sequences computed the same prefix at once:
  // the second copy simply stays uncached) or the block already has a hash.
  bool set_hash(int32_t block, uint64_t hash);
  std::optional<int32_t> lookup(uint64_t hash) const;  // the block cached under hash, free or not
  // Takes a block found by lookup(): retain() when it is used, revive (ref 0 -> 1, off the free list) when
  // it is free-but-cached. Its hash stays.
  void acquire_cached(int32_t block);
  std::optional<uint64_t> hash_of(int32_t block) const;
  int32_t n_cached() const { return static_cast<int32_t>(by_hash_.size()); }  // blocks with a hash
  int64_t evictions() const { return evictions_; }  // cached blocks handed out again by allocate()

  int32_t n_free() const { return n_free_; }
  int32_t n_blocks() const { return static_cast<int32_t>(ref_.size()); }
  int32_t n_used() const { return n_blocks() - n_free_; }
  int32_t ref_count(int32_t block) const;

  // ferry::Error on any inconsistency: the free list has no duplicates and no block with ref > 0, its links
  // agree both ways, and it holds exactly the blocks with ref 0 (n_free of them); ref counts are never
  // negative; every hash-map entry points at a block carrying that hash, and every block with a hash is in
  // the map under it. O(n_blocks): tests and debug builds only.
  void check_invariants() const;

 private:
  static constexpr int32_t kNone = -1;
  void check_id(int32_t block, const char* op) const;
  void push_free_back(int32_t block);
  void unlink_free(int32_t block);

  std::vector<int32_t> ref_;   // (n_blocks) reference counts; 0 = free
  std::vector<int32_t> prev_;  // (n_blocks) free-list links (kNone at the ends and for used blocks)
  std::vector<int32_t> next_;  // (n_blocks)
  int32_t head_ = kNone;       // least recently freed
  int32_t tail_ = kNone;       // most recently freed
  int32_t n_free_ = 0;
  std::vector<uint64_t> hash_;      // (n_blocks) the block's prefix hash, meaningful when has_hash_
  std::vector<uint8_t> has_hash_;   // (n_blocks) 1: registered in by_hash_
  std::unordered_map<uint64_t, int32_t> by_hash_;  // hash -> block id
  int64_t evictions_ = 0;
};

}  // namespace ferry
