// The token-mask cache (xgrammar's idea): a stack's mask depends mostly on its top few frames. For the top
// kKeyDepth positions (the key) the whole vocabulary is walked once over that truncated stack; a token is
// then context-independent accepted (some parse consumes all its bytes inside the key), context-independent
// rejected, or context-dependent (the only parses that survive run off the bottom of the key with bytes
// left). At run time a stack's mask is its key's accepted bits plus a full check of the dependent tokens
// against the real stack. Entries are computed on first use and shared by every matcher of the grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/stack_pool.h"
#include "grammar/token_vocab.h"

namespace ferry::grammar {

inline constexpr uint32_t kKeyDepth = 3;

struct MaskEntry {
  std::vector<uint64_t> accepted;   // (mask_words,) bit t: token t accepted whatever lies below the key
  std::vector<int32_t> dependent;   // ids to check against the full stack
};

class MaskCache {
 public:
  MaskCache(const Grammar& grammar, const TokenVocab& vocab);

  // key: positions top first; truncated: the real stack continues below them (else it ends there).
  // Thread-safe; the entry lives as long as the cache.
  const MaskEntry& get(std::span<const uint32_t> key, bool truncated);
  size_t n_entries() const;

 private:
  MaskEntry compute(std::span<const uint32_t> key, bool truncated);

  const Grammar& g_;
  const TokenVocab& vocab_;
  mutable std::mutex mu_;
  StackPool pool_;  // the truncated stacks' own pool (guarded by mu_)
  std::unordered_map<std::string, std::unique_ptr<MaskEntry>> entries_;
};

}  // namespace ferry::grammar
