// The paged KV cache's block ids: a free list and a reference count per block. The memory itself belongs to
// the backend (per layer, K and V of shape (n_blocks, block_size, n_kv_heads, head_dim)); this class only
// decides which block id holds which tokens. Not thread-safe: the engine loop owns it.
//
// Free-list order is LRU: release() appends a block at the tail, allocate() takes the head (the block freed
// longest ago). Allocation order does not matter today; it is what prefix caching needs (below).
//
// PREFIX CACHING (next issue) goes in here, without changing what exists:
//  - per block, a `uint64_t hash` (+ a has_hash flag) and a map hash -> block. A *full* block's hash is
//    xxh3(parent block's hash, its block_size token ids), so equal prefixes get equal chains. The block table
//    registers a block (pool.set_hash(block, hash)) once all its K/V has been written.
//  - release() to ref 0 keeps the hash and the map entry: the block is free *and* still cached. Blocks at
//    the head of the free list are the least recently used, so allocate() evicts exactly those: when the
//    popped block has a hash, it erases the map entry and clears the hash before handing it out.
//  - a prefix hit on a block with ref > 0 is retain(); on a free block it is a new revive(block):
//    unlink_free(block) (O(1): that is why the free list is doubly linked) and ref = 1.
//  - check_invariants() adds: every map entry points at a block carrying that hash, and back.
//  - n_free() stays "blocks allocate() can hand out" (cached-but-free ones included), so BlockTable::reserve's
//    capacity check stays right.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace ferry {

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);  // n_blocks > 0; all free, ids 0 .. n_blocks-1 in order

  std::optional<int32_t> allocate();  // the head of the free list with ref count 1; nullopt when none free
  void retain(int32_t block);         // ++ref of a used block (sharing); retaining a free block is an error
  void release(int32_t block);        // --ref; at 0 it goes to the tail of the free list. ferry::Error when
                                      // the block is already free (a double release is a bug upstream)

  int32_t n_free() const { return n_free_; }
  int32_t n_blocks() const { return static_cast<int32_t>(ref_.size()); }
  int32_t n_used() const { return n_blocks() - n_free_; }
  int32_t ref_count(int32_t block) const;

  // ferry::Error on any inconsistency: the free list has no duplicates and no block with ref > 0, its links
  // agree both ways, and it holds exactly the blocks with ref 0 (n_free of them). O(n_blocks): tests and
  // debug builds only.
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
};

}  // namespace ferry
