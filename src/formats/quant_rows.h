// Per-format row conversions behind dequantize_row / quantize_row (quant.h). Internal to src/formats.
// Every function takes n_blocks whole blocks: src/dst hold n_blocks blocks of the named format and
// n_blocks * block_elems floats.
#pragma once

#include <cstdint>

#include "formats/quant.h"

namespace ferry::quant_rows {

void dequantize_q4_0(const BlockQ4_0* src, float* dst, int64_t n_blocks);
void dequantize_q4_1(const BlockQ4_1* src, float* dst, int64_t n_blocks);
void dequantize_q5_0(const BlockQ5_0* src, float* dst, int64_t n_blocks);
void dequantize_q5_1(const BlockQ5_1* src, float* dst, int64_t n_blocks);
void dequantize_q8_0(const BlockQ8_0* src, float* dst, int64_t n_blocks);
void dequantize_q8_1(const BlockQ8_1* src, float* dst, int64_t n_blocks);
void dequantize_q2_k(const BlockQ2_K* src, float* dst, int64_t n_blocks);
void dequantize_q3_k(const BlockQ3_K* src, float* dst, int64_t n_blocks);
void dequantize_q4_k(const BlockQ4_K* src, float* dst, int64_t n_blocks);
void dequantize_q5_k(const BlockQ5_K* src, float* dst, int64_t n_blocks);
void dequantize_q6_k(const BlockQ6_K* src, float* dst, int64_t n_blocks);
void dequantize_q8_k(const BlockQ8_K* src, float* dst, int64_t n_blocks);
void dequantize_q8_0g4(const BlockQ8_0G4* src, float* dst, int64_t n_blocks);
void dequantize_q8_1g4(const BlockQ8_1G4* src, float* dst, int64_t n_blocks);
void dequantize_f8_e4m3_b128(const BlockF8E4M3B128* src, float* dst, int64_t n_blocks);

void quantize_q4_0(const float* src, BlockQ4_0* dst, int64_t n_blocks);
void quantize_q4_1(const float* src, BlockQ4_1* dst, int64_t n_blocks);
void quantize_q5_0(const float* src, BlockQ5_0* dst, int64_t n_blocks);
void quantize_q5_1(const float* src, BlockQ5_1* dst, int64_t n_blocks);
void quantize_q8_0(const float* src, BlockQ8_0* dst, int64_t n_blocks);
void quantize_q8_1(const float* src, BlockQ8_1* dst, int64_t n_blocks);
void quantize_q2_k(const float* src, BlockQ2_K* dst, int64_t n_blocks);
void quantize_q3_k(const float* src, BlockQ3_K* dst, int64_t n_blocks);
void quantize_q4_k(const float* src, BlockQ4_K* dst, int64_t n_blocks);
void quantize_q5_k(const float* src, BlockQ5_K* dst, int64_t n_blocks);
void quantize_q6_k(const float* src, BlockQ6_K* dst, int64_t n_blocks);
void quantize_q8_k(const float* src, BlockQ8_K* dst, int64_t n_blocks);
void quantize_q8_0g4(const float* src, BlockQ8_0G4* dst, int64_t n_blocks);
void quantize_q8_1g4(const float* src, BlockQ8_1G4* dst, int64_t n_blocks);
void quantize_f8_e4m3_b128(const float* src, BlockF8E4M3B128* dst, int64_t n_blocks);

// ggml's nearest_int: round half to even through the float magic number; valid for |x| <= 2^22.
inline int nearest_int(float x) {
  const float shifted = x + 12582912.0f;  // 1.5 * 2^23
  uint32_t bits;
  __builtin_memcpy(&bits, &shifted, 4);
  return int(bits & 0x007fffff) - 0x00400000;
}

}  // namespace ferry::quant_rows
