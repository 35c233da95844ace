// KV block allocation for sequences, with prefix caching (nano-vllm's BlockManager shape): on admission the
// full blocks of a sequence's tokens are looked up by their chained hash and shared (kv/BlockPool ref counts;
// free-but-cached blocks are revived), the rest are allocated; blocks become cache entries as soon as their
// K/V are written; a finished or preempted sequence gives every block back at once (the pool keeps the hashes
// of full blocks until it needs the memory, LRU).
#pragma once

#include <cstdint>

#include "engine/sequence.h"
#include "kv/block_pool.h"

namespace ferry {

class BlockManager {
 public:
  // window > 0: every layer of the model attends through a sliding window of that many positions (at most), so a
  // sequence's full blocks behind it are never read again: append() returns them to the pool (table entry -1).
  BlockManager(int32_t n_blocks, int32_t block_size, bool prefix_caching, int32_t window = 0);

  // Admission: gives a sequence with no blocks room for all its tokens, reusing cached full blocks of its
  // prefix (never the whole sequence: at least one token is computed to get logits). Returns false, changing
  // nothing, when too few blocks are free. Sets the table's n_tokens to the tokens whose K/V came from the cache.
  bool allocate(Sequence& seq);
  // Decode: room for one more token. False when a new block is needed and none is free.
  bool can_append(const Sequence& seq) const;
  // Speculation: room for n_total tokens in the table; false, changing nothing, when too few blocks are free.
  bool reserve(Sequence& seq, int32_t n_total);
  // Speculation: the table keeps the K/V of its first n_keep tokens (<= n_computed, >= the committed full blocks);
  // the blocks past them go back to the pool (rejected proposals are never copied or hashed).
  void truncate(Sequence& seq, int32_t n_keep);
  // requires can_append; with a window, first gives back the full blocks behind it (release_behind_window)
  void append(Sequence& seq);
  // The blocks whose positions all lie before the window of every query still to come (the next one's, or an
  // in-flight step's: positions < n_computed - n_inflight - window + 1) go back to the pool; their table entries
  // become -1 (never read: the attention reads positions inside the window only). Returns how many.
  int32_t release_behind_window(Sequence& seq);
  // The leading blocks of seq's table wholly behind the window (given back or not); 0 without a window.
  int32_t blocks_behind_window(const Sequence& seq) const;
  // Registers the full blocks whose K/V are complete (the table's tokens but the n_inflight still being written)
  // under their chained hashes.
  void commit(Sequence& seq);
  void free(Sequence& seq);  // every block back to the pool, the last one first

  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  int32_t block_size() const { return block_size_; }

 private:
  BlockPool pool_;
  int32_t block_size_;
  bool prefix_caching_;
  int32_t window_;  // 0: global attention somewhere, nothing released
};

}  // namespace ferry
