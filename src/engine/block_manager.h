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
  BlockManager(int32_t n_blocks, int32_t block_size, bool prefix_caching);

  // Admission: gives a sequence with no blocks room for all its tokens, reusing cached full blocks of its
  // prefix (never the whole sequence: at least one token is computed to get logits). Returns false, changing
  // nothing, when too few blocks are free. Sets the table's n_tokens to the tokens whose K/V came from the cache.
  bool allocate(Sequence& seq);
  // Decode: room for one more token. False when a new block is needed and none is free.
  bool can_append(const Sequence& seq) const;
  void append(Sequence& seq);  // requires can_append
  // Speculation: room for n_total tokens in the table; false, changing nothing, when too few blocks are free.
  bool reserve(Sequence& seq, int32_t n_total);
  // Speculation: the table keeps the K/V of its first n_keep tokens (<= n_computed, >= the committed full blocks);
  // the blocks past them go back to the pool (rejected proposals are never copied or hashed).
  void truncate(Sequence& seq, int32_t n_keep);
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
};

}  // namespace ferry
