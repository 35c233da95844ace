// One sequence's KV blocks: token position p lives in blocks[p / block_size] at slot p % block_size.
// The same table layout is read by the CPU attention, the batching engine and (later) the CUDA kernels.
//
// Prefix caching (engine/block_manager): on admission the table is filled with the cached full blocks that
// match the prompt's prefix (acquired in the pool) and n_tokens set to the tokens they cover; reserve() then
// allocates only the rest. After a step writes a block's last slot, its chained hash is registered in the pool.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/block_pool.h"

namespace ferry {

// Blocks needed to hold n_tokens tokens: ceil(n_tokens / block_size). n_tokens >= 0, block_size > 0.
int32_t blocks_for_tokens(int32_t n_tokens, int32_t block_size);

struct BlockTable {
  std::vector<int32_t> blocks;  // block ids in position order; -1: given back behind a sliding window
  int32_t n_tokens = 0;         // tokens whose K/V are stored (the runner advances it)

  // Ensures capacity for n_tokens_total tokens by allocating blocks from the pool. Returns false, changing
  // nothing, when the pool has too few free blocks. Never shrinks.
  bool reserve(BlockPool& pool, int32_t n_tokens_total, int32_t block_size);

  // Releases every block, the last one first, and empties the table (n_tokens = 0). The pool evicts from
  // the head of its free list, so once prefix caching lands a sequence's tail blocks go before its prefix.
  void release_all(BlockPool& pool);

  // Global slot index of position pos: block_id * block_size + pos % block_size; pos must be < capacity.
  int64_t slot(int32_t pos, int32_t block_size) const;

  int32_t capacity(int32_t block_size) const { return static_cast<int32_t>(blocks.size()) * block_size; }
};

}  // namespace ferry
