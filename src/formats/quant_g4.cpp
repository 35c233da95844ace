// ferry's G4 activation formats (Q8_0G4, Q8_1G4): int8 values with one float scale per group of 4.
// Per group: d = amax / 127, q = round-half-even(x * (1 / d)) (exactly what the SIMD activation
// quantizers in backends/cpu compute with cvtps2dq under the default rounding mode); zeros get d = 0.
#include <cmath>

#include "formats/quant_rows.h"

namespace ferry::quant_rows {
namespace {

constexpr int kGroups = kQK / kG4;

// The value, rounded to float here: keeps the compiler from fusing d * sum into the following add (an FMA
// under -march=native), so s is the same as the SIMD quantizers' (multiply, then add) on every build.
inline float rounded(float v) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  asm("" : "+x"(v));
#endif
  return v;
}

// One block of 32 floats -> scales d[8] and values qs[32]; returns the sum of the dequantized values.
float quantize_g4_block(const float* x, float* d, int8_t* qs) {
  float sum = 0.0f;
  for (int g = 0; g < kGroups; ++g) {
    float amax = 0.0f;
    for (int i = 0; i < kG4; ++i) amax = std::fmax(amax, std::fabs(x[kG4 * g + i]));
    const float dg = amax / 127.0f;
    const float id = dg != 0.0f ? 1.0f / dg : 0.0f;
    int group_sum = 0;
    for (int i = 0; i < kG4; ++i) {
      const int q = nearest_int(x[kG4 * g + i] * id);
      qs[kG4 * g + i] = int8_t(q);
      group_sum += q;
    }
    d[g] = dg;
    sum += rounded(dg * float(group_sum));
  }
  return sum;
}

void dequantize_g4_block(const float* d, const int8_t* qs, float* dst) {
  for (int i = 0; i < kQK; ++i) dst[i] = d[i / kG4] * float(qs[i]);
}

}  // namespace

void dequantize_q8_0g4(const BlockQ8_0G4* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) dequantize_g4_block(src[b].d, src[b].qs, dst);
}

void dequantize_q8_1g4(const BlockQ8_1G4* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) dequantize_g4_block(src[b].d, src[b].qs, dst);
}

void quantize_q8_0g4(const float* src, BlockQ8_0G4* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK) quantize_g4_block(src, dst[b].d, dst[b].qs);
}

void quantize_q8_1g4(const float* src, BlockQ8_1G4* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK) dst[b].s = quantize_g4_block(src, dst[b].d, dst[b].qs);
}

}  // namespace ferry::quant_rows
