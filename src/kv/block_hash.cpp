#include "kv/block_hash.h"

#include <bit>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ferry {

uint64_t xxh3_64(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens) {
  static_assert(std::endian::native == std::endian::little, "ferry assumes a little-endian host");
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, &parent, sizeof(parent));
  XXH3_64bits_update(&state, tokens.data(), tokens.size_bytes());
  return XXH3_64bits_digest(&state);
}

}  // namespace ferry
