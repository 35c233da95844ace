// GBNF for decimal numbers within integer bounds (JSON schema minimum/maximum/exclusive*): integers as the
// classic digit-range construction (same-length ranges split on the first differing digit), numbers as
// integers plus fractions whose whole value stays in range. Magnitudes are bounded by kMaxMagnitude.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ferry::grammar {

inline constexpr int64_t kMaxMagnitude = 999999999999999;  // 15 digits

// Integers in [lo, hi] (nullopt: unbounded), as a GBNF expression; "[]" when empty.
std::string integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi);
// Decimal numbers (optional fraction, no exponent) x with lo <= x <= hi, and x > lo / x < hi where
// exclusive; lo/hi are integers.
std::string number_range_gbnf(std::optional<int64_t> lo, bool lo_exclusive, std::optional<int64_t> hi,
                              bool hi_exclusive);

}  // namespace ferry::grammar
