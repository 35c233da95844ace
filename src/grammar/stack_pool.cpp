#include "grammar/stack_pool.h"

#include <algorithm>

#include "core/check.h"

namespace ferry::grammar {

StackPool::StackPool(const Grammar& grammar) : g_(grammar) {
  nodes_.push_back({0, -1, 0});  // kAccept
  nodes_.push_back({0, -1, 0});  // kCut
  memo_.resize(2);
}

int32_t StackPool::intern(uint32_t pos, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(pos) << 32) | static_cast<uint32_t>(parent);
  const auto [it, inserted] = ids_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) {
    nodes_.push_back({pos, parent, nodes_[parent].depth + 1});
    memo_.emplace_back();
  }
  return it->second;
}

void StackPool::expand(uint32_t pos, int32_t parent, std::vector<int32_t>& out) {
  work_.clear();
  seen_.clear();
  work_.push_back({pos, parent});
  size_t n_work = 0;
  while (!work_.empty()) {
    FERRY_CHECK(++n_work <= kMaxExpandWork, "grammar: too ambiguous (more than {} expansions for one byte)",
                kMaxExpandWork);
    auto [p, par] = work_.back();
    work_.pop_back();
    if (!seen_.insert((static_cast<uint64_t>(p) << 32) | static_cast<uint32_t>(par)).second) continue;
    const Element& e = g_.elements[p];
    switch (e.kind) {
      case ElementKind::End:
        if (par == kAccept || par == kCut) {
          out.push_back(par);
        } else {
          work_.push_back({nodes_[par].pos, nodes_[par].parent});
        }
        break;
      case ElementKind::Bytes:
        out.push_back(intern(p, par));
        break;
      case ElementKind::Rule: {
        int32_t np = par;
        if (g_.elements[p + 1].kind != ElementKind::End) {
          if (nodes_[par].depth + 1 >= kMaxStackDepth) break;  // too deep: this path is dropped
          np = intern(p + 1, par);
        }
        for (uint32_t alt : g_.rules[e.index].alternatives) work_.push_back({alt, np});
        break;
      }
    }
  }
}

std::vector<int32_t> StackPool::initial() {
  std::vector<int32_t> out;
  for (uint32_t alt : g_.rules[g_.root].alternatives) {
    std::vector<int32_t> part;
    expand(alt, kAccept, part);
    out.insert(out.end(), part.begin(), part.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int32_t StackPool::build(std::span<const uint32_t> top_to_bottom, int32_t bottom) {
  int32_t s = bottom;
  for (size_t i = top_to_bottom.size(); i-- > 0;) s = intern(top_to_bottom[i], s);
  return s;
}

std::span<const int32_t> StackPool::advance(int32_t s, uint8_t b) {
  if (s == kAccept || s == kCut) return {};
  const Node node = nodes_[s];
  const Element& e = g_.elements[node.pos];
  if (!g_.byte_sets[e.index].test(b)) return {};
  auto& table = memo_[s];
  if (!table) {
    table = std::make_unique<std::array<uint32_t, 256>>();
    table->fill(0);
  }
  uint32_t at = (*table)[b];
  if (at == 0) {
    scratch_.clear();
    expand(node.pos + 1, node.parent, scratch_);
    std::sort(scratch_.begin(), scratch_.end());
    scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
    FERRY_CHECK(results_.size() < 0xF0000000u, "grammar: matcher state grew past its bound");
    at = static_cast<uint32_t>(results_.size()) + 1;
    results_.push_back(static_cast<int32_t>(scratch_.size()));
    results_.insert(results_.end(), scratch_.begin(), scratch_.end());
    (*memo_[s])[b] = at;  // memo_ may have grown (intern): index again
  }
  return {results_.data() + at, static_cast<size_t>(results_[at - 1])};
}

void StackPool::advance_set(std::span<const int32_t> set, uint8_t b, std::vector<int32_t>& out) {
  out.clear();
  size_t n_parts = 0;
  for (int32_t s : set) {
    const auto next = advance(s, b);
    if (next.empty()) continue;
    out.insert(out.end(), next.begin(), next.end());
    ++n_parts;
  }
  if (n_parts > 1) {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
}

}  // namespace ferry::grammar
