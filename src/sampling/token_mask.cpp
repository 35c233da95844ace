#include "sampling/token_mask.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace ferry {

bool apply_token_mask(std::span<float> logits, std::span<const uint64_t> mask) {
  FERRY_CHECK(mask.size() * 64 >= logits.size(), "token mask: {} words for {} logits", mask.size(), logits.size());
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  bool any = false;
  for (size_t w = 0; w * 64 < logits.size(); ++w) {
    const uint64_t bits = mask[w];
    const size_t end = std::min(logits.size(), w * 64 + 64);
    any = any || (bits & (end - w * 64 == 64 ? ~uint64_t(0) : (uint64_t(1) << (end - w * 64)) - 1)) != 0;
    if (bits == ~uint64_t(0)) continue;
    for (size_t t = w * 64; t < end; ++t)
      if (!((bits >> (t - w * 64)) & 1)) logits[t] = kNegInf;
  }
  return any;
}

}  // namespace ferry
