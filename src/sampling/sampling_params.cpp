#include "ferry/sampling.h"

#include <cmath>

#include "core/check.h"

namespace ferry {

void SamplingParams::validate() const {
  FERRY_CHECK(std::isfinite(temperature) && temperature >= 0.0f,
              "sampling: temperature must be a finite number >= 0, got {}", temperature);
  FERRY_CHECK(std::isfinite(top_p) && top_p > 0.0f && top_p <= 1.0f,
              "sampling: top_p must be in (0, 1], got {}", top_p);
  FERRY_CHECK(std::isfinite(min_p) && min_p >= 0.0f && min_p <= 1.0f,
              "sampling: min_p must be in [0, 1], got {}", min_p);
  FERRY_CHECK(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f,
              "sampling: repetition_penalty must be a finite number > 0, got {}", repetition_penalty);
  // The OpenAI API documents [-2, 2] for both; vLLM enforces the same range.
  FERRY_CHECK(std::isfinite(presence_penalty) && presence_penalty >= -2.0f && presence_penalty <= 2.0f,
              "sampling: presence_penalty must be in [-2, 2], got {}", presence_penalty);
  FERRY_CHECK(std::isfinite(frequency_penalty) && frequency_penalty >= -2.0f && frequency_penalty <= 2.0f,
              "sampling: frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  FERRY_CHECK(penalty_last_n >= -1, "sampling: penalty_last_n must be -1 (whole history), 0 (off) or > 0, got {}",
              penalty_last_n);
}

}  // namespace ferry
