#include "kv/block_table.h"

#include "core/check.h"

namespace ferry {

int32_t blocks_for_tokens(int32_t n_tokens, int32_t block_size) {
  FERRY_CHECK(block_size > 0, "kv: block_size must be > 0, got {}", block_size);
  FERRY_CHECK(n_tokens >= 0, "kv: token count must be >= 0, got {}", n_tokens);
  return n_tokens / block_size + (n_tokens % block_size != 0 ? 1 : 0);
}

bool BlockTable::reserve(BlockPool& pool, int32_t n_tokens_total, int32_t block_size) {
  const int32_t needed = blocks_for_tokens(n_tokens_total, block_size);
  const auto have = static_cast<int32_t>(blocks.size());
  if (needed <= have) return true;
  if (pool.n_free() < needed - have) return false;
  blocks.reserve(static_cast<size_t>(needed));
  while (static_cast<int32_t>(blocks.size()) < needed) {
    const std::optional<int32_t> block = pool.allocate();
    if (!block) {  // cannot happen after the n_free check; undo rather than leave a half-grown table
      while (static_cast<int32_t>(blocks.size()) > have) {
        pool.release(blocks.back());
        blocks.pop_back();
      }
      return false;
    }
    blocks.push_back(*block);
  }
  return true;
}

void BlockTable::release_all(BlockPool& pool) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it)
    if (*it >= 0) pool.release(*it);  // -1: given back already (behind a sliding window)
  blocks.clear();
  n_tokens = 0;
}

int64_t BlockTable::slot(int32_t pos, int32_t block_size) const {
  FERRY_CHECK(block_size > 0, "kv: block_size must be > 0, got {}", block_size);
  FERRY_CHECK(pos >= 0 && pos / block_size < static_cast<int32_t>(blocks.size()),
              "kv: position {} is outside the block table's capacity of {} tokens", pos, capacity(block_size));
  const int32_t block = blocks[static_cast<size_t>(pos / block_size)];
  FERRY_CHECK(block >= 0, "kv: position {} lies in a block given back behind the sliding window", pos);
  return static_cast<int64_t>(block) * block_size + pos % block_size;
}

}  // namespace ferry
