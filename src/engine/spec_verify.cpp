#include "engine/spec_verify.h"

#include <algorithm>

#include "core/check.h"

namespace ferry {

int32_t verify_point_proposals(std::span<const int32_t> proposals, const std::function<int32_t(size_t row)>& draw,
                               std::vector<int32_t>& emitted) {
  emitted.clear();
  for (size_t i = 0; i <= proposals.size(); ++i) {
    const int32_t y = draw(i);
    emitted.push_back(y);
    if (i == proposals.size() || y != proposals[i]) return int32_t(i);
  }
  return int32_t(proposals.size());  // not reached: the last row always returns
}

SpecLength::SpecLength(int32_t k_max) : k_max_(k_max), k_(k_max) {
  FERRY_CHECK(k_max >= 1, "speculation: k must be >= 1, got {}", k_max);
}

void SpecLength::update(int32_t proposed, int32_t accepted) {
  if (proposed <= 0) return;  // nothing was proposed (no n-gram match): no evidence either way
  k_ = accepted == proposed ? std::min(k_max_, k_ + 1) : std::clamp(accepted + 1, 1, k_max_);
}

}  // namespace ferry
