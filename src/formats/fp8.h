// FP8 E4M3 (the OCP "E4M3FN" of torch.float8_e4m3fn, safetensors dtype F8_E4M3): 1 sign bit, 4 exponent bits
// (bias 7), 3 mantissa bits, no infinities. exponent 0: subnormal, mantissa/8 * 2^-6 (smallest 2^-9);
// exponent 1..15: (1 + mantissa/8) * 2^(exponent-7), largest 0x7E = 448; S.1111.111 (0x7F, 0xFF) is NaN.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ferry {

inline float fp8_e4m3_to_f32(uint8_t v) {
  const uint32_t sign = uint32_t(v >> 7) << 31;
  const uint32_t exp = (v >> 3) & 0xF, mant = v & 7;
  uint32_t bits;
  if (exp == 0xF && mant == 7) {
    bits = sign | 0x7FC00000u;  // NaN
  } else if (exp == 0) {
    if (mant == 0) {
      bits = sign;  // +-0
    } else {        // subnormal: mant * 2^-9, normalized for f32
      int shift = 0;
      uint32_t m = mant;
      while ((m & 4) == 0) m <<= 1, ++shift;  // leading one to bit 2
      bits = sign | (uint32_t(127 - 7 - shift) << 23) | ((m & 3) << 21);
    }
  } else {
    bits = sign | ((exp + 127 - 7) << 23) | (mant << 20);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// All 256 values, for row conversions.
inline std::array<float, 256> fp8_e4m3_table() {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[size_t(i)] = fp8_e4m3_to_f32(uint8_t(i));
  return t;
}

// The nearest e4m3 code of x, ties to the even code (round to nearest even, as torch's cast), saturating at +-448
// (torch would give NaN beyond 464; quantizers scale into range first); NaN -> 0x7F.
inline uint8_t f32_to_fp8_e4m3(float x) {
  if (x != x) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  // positive codes 0..126 increase with their value: the largest code whose value is <= a
  int lo = 0, hi = 126;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (fp8_e4m3_to_f32(uint8_t(mid)) <= a) lo = mid; else hi = mid - 1;
  }
  int code = lo;
  if (code < 126) {
    const float below = fp8_e4m3_to_f32(uint8_t(code)), above = fp8_e4m3_to_f32(uint8_t(code + 1));
    if (a - below > above - a || (a - below == above - a && (code & 1))) ++code;
  }
  return uint8_t(sign | code);
}

}  // namespace ferry
