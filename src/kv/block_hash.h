// Prefix-cache keys: a full KV block is named by the hash of its token ids chained with its parent block's
// hash, so two sequences get the same chain exactly when their prefixes are equal token for token.
//   h_0 = block_hash(kNoParentHash, tokens[0 .. bs)),  h_j = block_hash(h_{j-1}, tokens[j*bs .. (j+1)*bs))
// The hash is XXH3-64 (xxHash 0.8, header-only) over the parent hash (8 bytes, little-endian) followed by the
// token ids (4 bytes each, little-endian). 64 bits: a collision among the ~1e6 blocks of a big cache has
// probability ~1e-8; vLLM and SGLang accept the same risk (vLLM offers sha256 for the paranoid).
#pragma once

#include <cstdint>
#include <span>

namespace ferry {

inline constexpr uint64_t kNoParentHash = 0x9e3779b97f4a7c15ull;  // the first block's "parent"

// XXH3-64 of `bytes` bytes at `data` with seed 0 (exposed so tests can check published vectors).
uint64_t xxh3_64(const void* data, size_t bytes);

// tokens: one block's token ids (block_size of them).
uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens);

}  // namespace ferry
