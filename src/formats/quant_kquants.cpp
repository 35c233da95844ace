// The K-quants (256-value super-blocks): dequantization exactly as ggml's dequantize_row_q*_K; quantization
// for Q8_K as ggml's quantize_row_q8_K_ref. The weight quantizers (Q2_K..Q6_K) are in quant_kquants_fit.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "formats/quant_rows.h"

namespace ferry::quant_rows {

void dequantize_q2_k(const BlockQ2_K* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ2_K& x = src[b];
    const float d = fp16_to_f32(x.d);
    const float dmin = fp16_to_f32(x.dmin);
    int g = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = x.qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part, ++g) {
          const float dl = d * float(x.scales[g] & 0xF);
          const float ml = dmin * float(x.scales[g] >> 4);
          for (int l = 0; l < 16; ++l) *dst++ = dl * float((q[16 * part + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequantize_q3_k(const BlockQ3_K* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ3_K& x = src[b];
    const float d = fp16_to_f32(x.d);
    int8_t scales[16];
    q3k_scales(x.scales, scales);
    int g = 0;
    uint8_t mask = 1;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = x.qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2, mask = uint8_t(mask << 1)) {
        for (int part = 0; part < 2; ++part, ++g) {
          const float dl = d * float(scales[g]);
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = int((q[l] >> shift) & 3) - ((x.hmask[l] & mask) ? 0 : 4);
            *dst++ = dl * float(v);
          }
        }
      }
    }
  }
}

void dequantize_q4_k(const BlockQ4_K* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ4_K& x = src[b];
    const float d = fp16_to_f32(x.d);
    const float dmin = fp16_to_f32(x.dmin);
    for (int c = 0; c < 4; ++c) {
      uint8_t sc, mn;
      k4_scale_min(2 * c, x.scales, &sc, &mn);
      const float d1 = d * float(sc), m1 = dmin * float(mn);
      k4_scale_min(2 * c + 1, x.scales, &sc, &mn);
      const float d2 = d * float(sc), m2 = dmin * float(mn);
      const uint8_t* q = x.qs + 32 * c;
      for (int l = 0; l < 32; ++l) *dst++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void dequantize_q5_k(const BlockQ5_K* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ5_K& x = src[b];
    const float d = fp16_to_f32(x.d);
    const float dmin = fp16_to_f32(x.dmin);
    for (int c = 0; c < 4; ++c) {
      uint8_t sc, mn;
      k4_scale_min(2 * c, x.scales, &sc, &mn);
      const float d1 = d * float(sc), m1 = dmin * float(mn);
      k4_scale_min(2 * c + 1, x.scales, &sc, &mn);
      const float d2 = d * float(sc), m2 = dmin * float(mn);
      const uint8_t* q = x.qs + 32 * c;
      const uint8_t u1 = uint8_t(1u << (2 * c)), u2 = uint8_t(2u << (2 * c));
      for (int l = 0; l < 32; ++l) *dst++ = d1 * float((q[l] & 0xF) + ((x.qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * float((q[l] >> 4) + ((x.qh[l] & u2) ? 16 : 0)) - m2;
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQKK) {
    const BlockQ6_K& x = src[b];
    const float d = fp16_to_f32(x.d);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = x.ql + 64 * half;
      const uint8_t* qh = x.qh + 32 * half;
      const int8_t* sc = x.scales + 8 * half;
      float* y = dst + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int g = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[g]) * float(q1);
        y[l + 32] = d * float(sc[g + 2]) * float(q2);
        y[l + 64] = d * float(sc[g + 4]) * float(q3);
        y[l + 96] = d * float(sc[g + 6]) * float(q4);
      }
    }
  }
}

void dequantize_q8_k(const BlockQ8_K* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQKK)
    for (int j = 0; j < kQKK; ++j) dst[j] = src[b].d * float(src[b].qs[j]);
}

void quantize_q8_k(const float* src, BlockQ8_K* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQKK) {
    BlockQ8_K& y = dst[b];
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQKK; ++j) {
      if (std::fabs(src[j]) > amax) {
        amax = std::fabs(src[j]);
        max = src[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQKK; ++j) y.qs[j] = int8_t(std::min(127, nearest_int(iscale * src[j])));
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y.qs[16 * g + l];
      y.bsums[g] = int16_t(sum);
    }
    y.d = 1.0f / iscale;
  }
}

}  // namespace ferry::quant_rows
