#include "grammar/mask_cache.h"

namespace ferry::grammar {

MaskCache::MaskCache(const Grammar& grammar, const TokenVocab& vocab) : g_(grammar), vocab_(vocab), pool_(grammar) {}

size_t MaskCache::n_entries() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

const MaskEntry& MaskCache::get(std::span<const uint32_t> key, bool truncated) {
  std::string k(reinterpret_cast<const char*>(key.data()), key.size() * sizeof(uint32_t));
  k += truncated ? 'T' : 'E';
  std::lock_guard lock(mu_);
  auto it = entries_.find(k);
  if (it == entries_.end()) {
    it = entries_.emplace(std::move(k), std::make_unique<MaskEntry>(compute(key, truncated))).first;
  }
  return *it->second;
}

MaskEntry MaskCache::compute(std::span<const uint32_t> key, bool truncated) {
  MaskEntry entry;
  entry.accepted.assign(vocab_.mask_words(), 0);
  const auto& sorted = vocab_.sorted();
  const auto& lcp = vocab_.lcp();
  const size_t max_len = vocab_.max_length();
  // sets[d]: the stacks after the first d bytes of the current token; cut[d]: some parse ran off the key's
  // bottom (kCut) within those d bytes with bytes still to come.
  std::vector<std::vector<int32_t>> sets(max_len + 1);
  std::vector<uint8_t> cut(max_len + 1, 0);
  const int32_t root = pool_.build(key, truncated ? StackPool::kCut : StackPool::kAccept);
  sets[0] = {root};
  size_t valid = 0;  // sets[0..valid] hold the previous token's prefix
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (lcp[i] == 0) {  // a new first byte: skip every token that starts with a byte the key cannot take
      const auto b = static_cast<unsigned char>(vocab_.bytes(sorted[i])[0]);
      if (pool_.advance(root, b).empty()) {  // the root is a Bytes top, never kCut: all rejected
        i = vocab_.first_byte_start(b + 1) - 1;
        valid = 0;
        continue;
      }
    }
    const int32_t id = sorted[i];
    const std::string& t = vocab_.bytes(id);
    size_t d = std::min<size_t>(lcp[i], valid);
    while (d < t.size() && !sets[d].empty()) {
      const auto& cur = sets[d];
      cut[d + 1] = cut[d] || (cur[0] == StackPool::kCut || (cur.size() > 1 && cur[1] == StackPool::kCut));
      pool_.advance_set(cur, static_cast<uint8_t>(t[d]), sets[d + 1]);
      ++d;
    }
    valid = d;
    if (d == t.size() && !sets[d].empty()) {
      entry.accepted[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    } else if (cut[d]) {  // the parse died at byte d inside the key, but one ran off its bottom before
      entry.dependent.push_back(id);
    }
  }
  return entry;
}

}  // namespace ferry::grammar
