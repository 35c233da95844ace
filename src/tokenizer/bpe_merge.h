// The BPE merge loop shared by byte-level BPE (lowest merge rank first) and SentencePiece BPE (highest
// score first): adjacent symbols are merged in priority order, ties going to the leftmost pair, with a
// priority queue and lazy invalidation, O(n log n) in the number of symbols.
#pragma once

#include <cstdint>
#include <cstddef>
#include <queue>
#include <vector>

namespace ferry {

// One symbol of a word being merged: bytes [start, start+len) of the word's text, the token it is
// (-1: none), and its neighbours in the live list (-1 at the ends). len == 0 marks a merged-away symbol.
struct BpeSymbol {
  uint32_t start = 0;
  uint32_t len = 0;
  int32_t id = -1;
  int32_t prev = -1;
  int32_t next = -1;
};

// What merging two adjacent symbols would give: `priority` (lower merges first) and the new token id.
struct BpeMerge {
  double priority = 0;
  int32_t id = -1;  // -1: these two symbols do not merge
};

// rank(left, right) -> BpeMerge. On return the live symbols are those reachable from index 0 via next.
template <typename Rank>
void bpe_merge(std::vector<BpeSymbol>& symbols, const Rank& rank) {
  struct Candidate {
    double priority;
    int32_t left;
    int32_t right;
    uint32_t len;  // left.len + right.len when queued: detects stale entries
    int32_t id;
  };
  const auto worse = [](const Candidate& a, const Candidate& b) {
    return a.priority != b.priority ? a.priority > b.priority : a.left > b.left;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
  const auto push = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const BpeMerge m = rank(symbols[left], symbols[right]);
    if (m.id >= 0) queue.push({m.priority, left, right, symbols[left].len + symbols[right].len, m.id});
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) push(static_cast<int32_t>(i), static_cast<int32_t>(i + 1));

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    BpeSymbol& left = symbols[c.left];
    BpeSymbol& right = symbols[c.right];
    if (left.len == 0 || right.len == 0 || left.next != c.right || left.len + right.len != c.len) continue;
    left.len += right.len;
    left.id = c.id;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.len = 0;
    push(left.prev, c.left);
    push(c.left, left.next);
  }
}

}  // namespace ferry
