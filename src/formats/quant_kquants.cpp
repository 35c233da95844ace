// The K-quants (256-value super-blocks): dequantization exactly as ggml's dequantize_row_q*_K;
// quantization for Q8_K as ggml's quantize_row_q8_K_ref, and simple round-to-nearest quantizers for
// Q4_K and Q6_K (not ggml's iterative search: the files they write are valid, just a little less accurate).
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

// Q4_K: per group of 32, an affine map over [min(0, lo), hi]; the 8 scales and 8 mins are quantized to
// 6 bits against the super-block's largest (scales rounded up so the top value is not clipped).
void quantize_q4_k(const float* src, BlockQ4_K* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQKK) {
    BlockQ4_K& y = dst[b];
    float scale[8], neg_min[8], max_scale = 0.0f, max_min = 0.0f;
    for (int g = 0; g < 8; ++g) {
      float lo = 0.0f, hi = src[32 * g];
      for (int l = 0; l < 32; ++l) {
        lo = std::min(lo, src[32 * g + l]);
        hi = std::max(hi, src[32 * g + l]);
      }
      scale[g] = std::max(0.0f, hi - lo) / 15;
      neg_min[g] = -lo;
      max_scale = std::max(max_scale, scale[g]);
      max_min = std::max(max_min, neg_min[g]);
    }
    const float d = max_scale / 63, dmin = max_min / 63;
    y.d = f32_to_fp16(d);
    y.dmin = f32_to_fp16(dmin);
    const float dq = fp16_to_f32(y.d), dminq = fp16_to_f32(y.dmin);
    uint8_t ls[8], lm[8];
    for (int g = 0; g < 8; ++g) {
      ls[g] = uint8_t(dq > 0 ? std::clamp(int(std::ceil(scale[g] / dq)), 0, 63) : 0);
      lm[g] = uint8_t(dminq > 0 ? std::clamp(nearest_int(neg_min[g] / dminq), 0, 63) : 0);
    }
    std::memset(y.scales, 0, sizeof(y.scales));
    for (int g = 0; g < 8; ++g) {
      if (g < 4) {
        y.scales[g] = ls[g];
        y.scales[g + 4] = lm[g];
      } else {
        y.scales[g + 4] = uint8_t((ls[g] & 0xF) | ((lm[g] & 0xF) << 4));
        y.scales[g - 4] |= uint8_t((ls[g] >> 4) << 6);
        y.scales[g] |= uint8_t((lm[g] >> 4) << 6);
      }
    }
    uint8_t q[kQKK];
    for (int g = 0; g < 8; ++g) {
      const float dl = dq * float(ls[g]), ml = dminq * float(lm[g]);
      for (int l = 0; l < 32; ++l) {
        const float v = src[32 * g + l];
        q[32 * g + l] = uint8_t(dl > 0 ? std::clamp(nearest_int((v + ml) / dl), 0, 15) : 0);
      }
    }
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) y.qs[32 * c + l] = uint8_t(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
  }
}

// Q6_K: per group of 16, a symmetric scale mapping the largest-magnitude value to -32; the 16 scales are
// quantized to int8 against the super-block's largest (as ggml does).
void quantize_q6_k(const float* src, BlockQ6_K* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQKK) {
    BlockQ6_K& y = dst[b];
    float scale[16], max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int g = 0; g < 16; ++g) {
      float amax = 0.0f, max = 0.0f;
      for (int l = 0; l < 16; ++l) {
        const float v = src[16 * g + l];
        if (std::fabs(v) > amax) {
          amax = std::fabs(v);
          max = v;
        }
      }
      scale[g] = max / -32;
      if (std::fabs(scale[g]) > max_abs_scale) {
        max_abs_scale = std::fabs(scale[g]);
        max_scale = scale[g];
      }
    }
    std::memset(&y, 0, sizeof(y));
    if (max_abs_scale == 0.0f) continue;
    const float iscale = -128.0f / max_scale;
    y.d = f32_to_fp16(1.0f / iscale);
    const float dq = fp16_to_f32(y.d);
    uint8_t q[kQKK];
    for (int g = 0; g < 16; ++g) {
      y.scales[g] = int8_t(std::clamp(nearest_int(iscale * scale[g]), -128, 127));
      const float dl = dq * float(y.scales[g]);
      for (int l = 0; l < 16; ++l) {
        const float v = src[16 * g + l];
        q[16 * g + l] = uint8_t(dl != 0.0f ? std::clamp(nearest_int(v / dl), -32, 31) + 32 : 32);
      }
    }
    for (int half = 0; half < 2; ++half) {
      uint8_t* ql = y.ql + 64 * half;
      uint8_t* qh = y.qh + 32 * half;
      const uint8_t* qq = q + 128 * half;
      for (int l = 0; l < 32; ++l) {
        ql[l] = uint8_t((qq[l] & 0xF) | ((qq[l + 64] & 0xF) << 4));
        ql[l + 32] = uint8_t((qq[l + 32] & 0xF) | ((qq[l + 96] & 0xF) << 4));
        qh[l] = uint8_t((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) | ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace ferry::quant_rows
