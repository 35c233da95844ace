// Parse stacks of the byte-level pushdown matcher, persistent and hash-consed: a stack is the id of its top
// node, a node is (pos, parent), and equal stacks have equal ids, so a set of stacks is a sorted id list,
// stacks share their tails, and the successors of (stack, byte) are computed once and remembered.
//
// pos indexes Grammar::elements. The top node's pos is always a Bytes element (the byte it wants next);
// the nodes below hold continuations (the element after a rule reference, never an End: a reference in
// tail position pushes nothing, so right recursion runs in constant depth).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar/grammar.h"

namespace ferry::grammar {

// Stacks deeper than this are dropped (a path that nests deeper is not viable): bounded memory on
// recursive grammars.
inline constexpr uint32_t kMaxStackDepth = 1024;
// Expansion steps for one byte at most: a grammar ambiguous enough to need more (nested repetitions of
// empty-matching groups, e.g. (()){400}){630}) is a clear error instead of a stall.
inline constexpr size_t kMaxExpandWork = 1 << 16;

class StackPool {
 public:
  static constexpr int32_t kAccept = 0;  // the empty stack: the grammar is complete
  static constexpr int32_t kCut = 1;     // bottom of a truncated stack (mask_cache.h): context continues below

  explicit StackPool(const Grammar& grammar);

  // The stacks that start the root rule (sorted ids).
  std::vector<int32_t> initial();
  // The stack of positions top_to_bottom over bottom (kAccept or kCut).
  int32_t build(std::span<const uint32_t> top_to_bottom, int32_t bottom);
  // Successor stacks of s after byte b (sorted ids; empty when s does not take b).
  std::span<const int32_t> advance(int32_t s, uint8_t b);
  // The successors of a sorted set (sorted, unique) into out.
  void advance_set(std::span<const int32_t> set, uint8_t b, std::vector<int32_t>& out);

  uint32_t pos(int32_t s) const { return nodes_[s].pos; }
  int32_t parent(int32_t s) const { return nodes_[s].parent; }
  uint32_t depth(int32_t s) const { return nodes_[s].depth; }
  size_t size() const { return nodes_.size(); }

 private:
  struct Node {
    uint32_t pos = 0;
    int32_t parent = -1;
    uint32_t depth = 0;
  };
  int32_t intern(uint32_t pos, int32_t parent);
  // Closure: every stack with a Bytes top reachable from "continue at pos over parent", appended to out.
  void expand(uint32_t pos, int32_t parent, std::vector<int32_t>& out);

  const Grammar& g_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> ids_;
  // memo_[s][b]: 0 = not computed, else 1 + offset into results_ of [count, ids...]
  std::vector<std::unique_ptr<std::array<uint32_t, 256>>> memo_;
  std::vector<int32_t> results_;
  std::vector<std::pair<uint32_t, int32_t>> work_;
  std::unordered_set<uint64_t> seen_;
  std::vector<int32_t> scratch_;
};

}  // namespace ferry::grammar
