// Small numeric kernels of the sampler, written so the compiler vectorizes them and so a GPU port can
// reproduce them operation for operation (no libm: its expf differs between platforms).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace ferry {

// e^x for x <= 0 (Cephes expf's range reduction and polynomial; within 2 ulp of exp, tested). Returns 0
// below -87 (where e^x would be subnormal) and for NaN. Branch-free, so loops over it vectorize.
inline float exp_nonpositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;     // ln 2 = kLn2Hi + kLn2Lo; kLn2Hi has few bits, so n * kLn2Hi
  constexpr float kLn2Lo = -2.12194440e-4f;  // is exact for |n| < 2^12
  constexpr float kRound = 12582912.0f;      // 1.5 * 2^23: adding it rounds to the nearest integer
  // Out of range (and NaN, -inf) the arithmetic below yields garbage that the final mask turns into 0. GCC
  // keeps floating-point traps exact by default, so any select or clamp on x would stop vectorization.
  const uint32_t keep = 0u - static_cast<uint32_t>(x > -87.0f);  // all ones when in range (false for NaN)
  const float t = x * kLog2e + kRound;
  const float n = t - kRound;  // round(x / ln 2), in [-126, 0]
  const uint32_t ni = std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kRound);  // n mod 2^32
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;  // |r| <= ln(2) / 2
  const float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r2 + r + 1.0f;
  const float scale = std::bit_cast<float>((ni + 127u) << 23);  // 2^n, a normal float for n >= -126
  return std::bit_cast<float>(std::bit_cast<uint32_t>(p * scale) & keep);
}

// Sum of w (n) f32 in double, in eight interleaved lanes (a fixed order, so the same on every platform).
inline double sum_lanes(const float* w, size_t n) {
  double lane[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t j = 0; j < 8; ++j) lane[j] += w[i + j];
  }
  double total = 0.0;
  for (; i < n; ++i) total += w[i];
  for (const double l : lane) total += l;
  return total;
}

}  // namespace ferry
