// F8_E4M3_B128 rows (formats/quant.h): 128 e4m3 codes and one f32 scale per block.
#include <array>
#include <cmath>
#include <cstring>

#include "formats/fp8.h"
#include "formats/quant_rows.h"

namespace ferry::quant_rows {
namespace {

constexpr float kE4m3Max = 448.0f;  // the largest finite e4m3 value (code 0x7E)

// The 256 e4m3 values, decoded once.
const std::array<float, 256>& e4m3_values() {
  static const std::array<float, 256> table = fp8_e4m3_table();
  return table;
}

}  // namespace

void dequantize_f8_e4m3_b128(const BlockF8E4M3B128* src, float* dst, int64_t n_blocks) {
  const std::array<float, 256>& lut = e4m3_values();
  for (int64_t b = 0; b < n_blocks; ++b, dst += kF8Block) {
    float d;
    std::memcpy(&d, &src[b].d, 4);  // rows of a view may start anywhere
    for (int i = 0; i < kF8Block; ++i) dst[i] = lut[src[b].qs[i]] * d;
  }
}

void quantize_f8_e4m3_b128(const float* src, BlockF8E4M3B128* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kF8Block) {
    float amax = 0.0f;
    for (int i = 0; i < kF8Block; ++i) amax = std::fmax(amax, std::fabs(src[i]));
    const float d = amax / kE4m3Max;
    for (int i = 0; i < kF8Block; ++i) dst[b].qs[i] = d > 0.0f ? f32_to_fp8_e4m3(src[i] / d) : uint8_t(0);
    std::memcpy(&dst[b].d, &d, 4);
  }
}

}  // namespace ferry::quant_rows
