// The 32-value formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1): dequantization exactly as ggml's
// dequantize_row_*, quantization exactly as ggml's quantize_row_*_ref (same rounding, same clamps).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "formats/quant_rows.h"

namespace ferry::quant_rows {
namespace {

constexpr int kHalf = kQK / 2;

uint32_t load_qh(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;  // little-endian hosts only (x86-64, aarch64)
}

// The value with the largest magnitude (first one on ties), sign kept: ggml's "max" of Q4_0/Q5_0.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

}  // namespace

void dequantize_q4_0(const BlockQ4_0* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    const float d = fp16_to_f32(src[b].d);
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = float((src[b].qs[j] & 0xF) - 8) * d;
      dst[j + kHalf] = float((src[b].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const BlockQ4_1* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    const float d = fp16_to_f32(src[b].d);
    const float m = fp16_to_f32(src[b].m);
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = float(src[b].qs[j] & 0xF) * d + m;
      dst[j + kHalf] = float(src[b].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0(const BlockQ5_0* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    const float d = fp16_to_f32(src[b].d);
    const uint32_t qh = load_qh(src[b].qh);
    for (int j = 0; j < kHalf; ++j) {
      const int h0 = int((qh >> j) & 1) << 4;
      const int h1 = int((qh >> (j + kHalf)) & 1) << 4;
      dst[j] = float(((src[b].qs[j] & 0xF) | h0) - 16) * d;
      dst[j + kHalf] = float(((src[b].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

void dequantize_q5_1(const BlockQ5_1* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    const float d = fp16_to_f32(src[b].d);
    const float m = fp16_to_f32(src[b].m);
    const uint32_t qh = load_qh(src[b].qh);
    for (int j = 0; j < kHalf; ++j) {
      const int h0 = int((qh >> j) & 1) << 4;
      const int h1 = int((qh >> (j + kHalf)) & 1) << 4;
      dst[j] = float((src[b].qs[j] & 0xF) | h0) * d + m;
      dst[j + kHalf] = float((src[b].qs[j] >> 4) | h1) * d + m;
    }
  }
}

void dequantize_q8_0(const BlockQ8_0* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    const float d = fp16_to_f32(src[b].d);
    for (int j = 0; j < kQK; ++j) dst[j] = float(src[b].qs[j]) * d;
  }
}

void dequantize_q8_1(const BlockQ8_1* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    const float d = fp16_to_f32(src[b].d);
    for (int j = 0; j < kQK; ++j) dst[j] = float(src[b].qs[j]) * d;
  }
}

void quantize_q4_0(const float* src, BlockQ4_0* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK) {
    const float d = signed_absmax(src, kQK) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = f32_to_fp16(d);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = std::min(15, int(int8_t(src[j] * id + 8.5f)));
      const int q1 = std::min(15, int(int8_t(src[j + kHalf] * id + 8.5f)));
      dst[b].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void quantize_q4_1(const float* src, BlockQ4_1* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kQK; ++j) {
      if (src[j] < min) min = src[j];
      if (src[j] > max) max = src[j];
    }
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = f32_to_fp16(d);
    dst[b].m = f32_to_fp16(min);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = std::min(15, int(int8_t((src[j] - min) * id + 0.5f)));
      const int q1 = std::min(15, int(int8_t((src[j + kHalf] - min) * id + 0.5f)));
      dst[b].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void quantize_q5_0(const float* src, BlockQ5_0* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK) {
    const float d = signed_absmax(src, kQK) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = f32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = std::min(31, int(int8_t(src[j] * id + 16.5f)));
      const int q1 = std::min(31, int(int8_t(src[j + kHalf] * id + 16.5f)));
      dst[b].qs[j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= uint32_t((q0 >> 4) & 1) << j;
      qh |= uint32_t((q1 >> 4) & 1) << (j + kHalf);
    }
    std::memcpy(dst[b].qh, &qh, 4);
  }
}

void quantize_q5_1(const float* src, BlockQ5_1* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kQK; ++j) {
      if (src[j] < min) min = src[j];
      if (src[j] > max) max = src[j];
    }
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = f32_to_fp16(d);
    dst[b].m = f32_to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = int(uint8_t((src[j] - min) * id + 0.5f));
      const int q1 = int(uint8_t((src[j + kHalf] - min) * id + 0.5f));
      dst[b].qs[j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= uint32_t((q0 >> 4) & 1) << j;
      qh |= uint32_t((q1 >> 4) & 1) << (j + kHalf);
    }
    std::memcpy(dst[b].qh, &qh, 4);
  }
}

void quantize_q8_0(const float* src, BlockQ8_0* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = f32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) dst[b].qs[j] = int8_t(std::round(src[j] * id));
  }
}

void quantize_q8_1(const float* src, BlockQ8_1* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = f32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      dst[b].qs[j] = int8_t(std::round(src[j] * id));
      sum += dst[b].qs[j];
    }
    dst[b].s = f32_to_fp16(float(sum) * d);
  }
}

}  // namespace ferry::quant_rows
