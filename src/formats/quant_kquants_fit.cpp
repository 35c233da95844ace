// K-quant quantizers (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): per group, a scale (and for the affine types a min) fitted
// by an error-minimizing search, then the group scales quantized against the super-block's largest and the values
// rounded again with the scales they will be read with. The blocks are packed exactly as quant.h (ggml-common.h)
// lays them out, so dequantize_row (ggml's dequantize_row_q*_K) reads them.
//
// The search, per group of n values and levels 0..nmax (affine) or -nmax..nmax-1 (symmetric): try kSteps*2+1
// inverse scales around nmax / range, round every value with each, solve the least-squares scale (and offset) for
// those codes, keep the fit with the smallest squared error. The first candidate is the plain max-scale fit, so the
// search never does worse than it. Weights are uniform (no importance matrix).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "core/fp16.h"
#include "formats/quant_rows.h"

namespace ferry::quant_rows {
namespace {

constexpr int kSteps = 10;        // candidates on each side of the max-scale fit
constexpr float kStepFrac = 0.1f;  // candidate k: nmax + k * kStepFrac levels over the range

int round_clamped(float v, int lo, int hi) {
  if (!(v > float(lo))) return lo;  // also NaN
  if (v >= float(hi)) return hi;
  return nearest_int(v);
}

// x[i] ~ scale * q[i] - min, q[i] in [0, nmax], min >= 0 (the K-quant min is subtracted). Returns the fit; q holds
// its codes.
struct Affine {
  float scale = 0.0f, min = 0.0f;
};
Affine fit_affine(const float* x, int n, int nmax, uint8_t* q) {
  float lo = 0.0f, hi = x[0];
  for (int i = 0; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  if (!(hi > lo)) {  // all values equal lo (<= 0): min carries them
    std::fill(q, q + n, uint8_t(0));
    return {0.0f, -lo};
  }
  Affine best{(hi - lo) / float(nmax), -lo};
  double best_err = -1.0;
  uint8_t codes[32];
  for (int k = 0; k <= 2 * kSteps; ++k) {
    // k = 0 first: the plain max-scale candidate
    const int step = k == 0 ? 0 : (k <= kSteps ? -k : k - kSteps);
    const float iscale = (float(nmax) + kStepFrac * float(step)) / (hi - lo);
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      codes[i] = uint8_t(round_clamped((x[i] - lo) * iscale, 0, nmax));
      sq += codes[i], sqq += double(codes[i]) * codes[i], sx += x[i], sqx += double(codes[i]) * x[i];
    }
    const double det = double(n) * sqq - sq * sq;
    if (det <= 0) continue;
    double scale = (double(n) * sqx - sq * sx) / det;
    double offset = (sx - scale * sq) / double(n);
    if (offset > 0) offset = 0, scale = sqx / sqq;  // a positive offset cannot be stored
    if (!(scale > 0)) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = scale * codes[i] + offset - x[i];
      err += e * e;
    }
    if (best_err < 0 || err < best_err) {
      best_err = err;
      best = {float(scale), float(-offset)};
      std::memcpy(q, codes, size_t(n));
    }
  }
  if (best_err < 0) std::fill(q, q + n, uint8_t(0));
  return best;
}

// x[i] ~ scale * q[i], q[i] in [-nmax, nmax - 1]. Returns the scale (0 for a group of zeros); q holds the codes.
float fit_symmetric(const float* x, int n, int nmax, int8_t* q) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  }
  if (amax == 0.0f) {
    std::fill(q, q + n, int8_t(0));
    return 0.0f;
  }
  // The value of largest magnitude maps to -nmax (the side with one more level).
  double best_num = -1.0, best_den = 1.0;
  int8_t codes[32];
  for (int k = 0; k <= 2 * kSteps; ++k) {
    const int step = k == 0 ? 0 : (k <= kSteps ? -k : k - kSteps);
    const float iscale = -(float(nmax) + kStepFrac * float(step)) / max;
    double sqq = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      codes[i] = int8_t(round_clamped(iscale * x[i], -nmax, nmax - 1));
      sqq += double(codes[i]) * codes[i], sqx += double(codes[i]) * x[i];
    }
    // Least squares: scale = sqx / sqq, error = sum x^2 - sqx^2 / sqq: the largest sqx^2 / sqq wins.
    if (sqq <= 0) continue;
    if (best_num < 0 || sqx * sqx * best_den > best_num * sqq) {
      best_num = sqx * sqx, best_den = sqq;
      std::memcpy(q, codes, size_t(n));
    }
  }
  if (best_num < 0) {
    std::fill(q, q + n, int8_t(0));
    return 0.0f;
  }
  double sqx = 0, sqq = 0;
  for (int i = 0; i < n; ++i) sqx += double(q[i]) * x[i], sqq += double(q[i]) * q[i];
  return float(sqx / sqq);
}

// The group scales (all >= 0) as 0..qmax codes of one fp16 super-scale d: d = max / qmax, codes rounded.
// Returns d as stored (fp16 bits in *d_bits).
float quantize_unsigned_scales(const float* s, int n, int qmax, uint8_t* codes, uint16_t* d_bits) {
  float max = 0.0f;
  for (int g = 0; g < n; ++g) max = std::max(max, s[g]);
  *d_bits = f32_to_fp16(max / float(qmax));
  const float d = fp16_to_f32(*d_bits);
  for (int g = 0; g < n; ++g) codes[g] = uint8_t(d > 0 ? round_clamped(s[g] / d, 0, qmax) : 0);
  return d;
}

// The codes of x for an affine group read as dl * q - ml.
void requantize_affine(const float* x, int n, float dl, float ml, int nmax, uint8_t* q) {
  for (int i = 0; i < n; ++i) q[i] = uint8_t(dl > 0 ? round_clamped((x[i] + ml) / dl, 0, nmax) : 0);
}

// Q4_K/Q5_K: 8 groups of 32, 6-bit scales and mins packed as k4_scale_min reads them. Returns the 256 codes.
void fit_k4(const float* x, int nmax, BlockQ4_K* head /* d, dmin, scales of Q4_K or Q5_K: same prefix */,
            uint8_t* q /* [256] */) {
  float scale[8], min[8];
  for (int g = 0; g < 8; ++g) {
    const Affine a = fit_affine(x + 32 * g, 32, nmax, q + 32 * g);
    scale[g] = a.scale, min[g] = a.min;
  }
  uint8_t ls[8], lm[8];
  const float d = quantize_unsigned_scales(scale, 8, 63, ls, &head->d);
  const float dmin = quantize_unsigned_scales(min, 8, 63, lm, &head->dmin);
  std::memset(head->scales, 0, sizeof(head->scales));
  for (int g = 0; g < 8; ++g) {
    if (g < 4) {
      head->scales[g] = ls[g];
      head->scales[g + 4] = lm[g];
    } else {
      head->scales[g + 4] = uint8_t((ls[g] & 0xF) | ((lm[g] & 0xF) << 4));
      head->scales[g - 4] |= uint8_t((ls[g] >> 4) << 6);
      head->scales[g] |= uint8_t((lm[g] >> 4) << 6);
    }
  }
  for (int g = 0; g < 8; ++g) requantize_affine(x + 32 * g, 32, d * float(ls[g]), dmin * float(lm[g]), nmax, q + 32 * g);
}

// Symmetric group scales as signed codes of one fp16 super-scale: the largest-magnitude scale maps to -qneg.
float quantize_signed_scales(const float* s, int n, int qneg, int qpos, int* codes, uint16_t* d_bits) {
  float amax = 0.0f, max = 0.0f;
  for (int g = 0; g < n; ++g) {
    if (std::fabs(s[g]) > amax) amax = std::fabs(s[g]), max = s[g];
  }
  if (amax == 0.0f) {
    *d_bits = 0;
    std::fill(codes, codes + n, 0);
    return 0.0f;
  }
  const float iscale = -float(qneg) / max;
  for (int g = 0; g < n; ++g) codes[g] = round_clamped(iscale * s[g], -qneg, qpos);
  *d_bits = f32_to_fp16(1.0f / iscale);
  return fp16_to_f32(*d_bits);
}

// The codes of x for a symmetric group read as dl * q, q in [-nmax, nmax - 1].
void requantize_symmetric(const float* x, int n, float dl, int nmax, int8_t* q) {
  for (int i = 0; i < n; ++i) q[i] = int8_t(dl != 0.0f ? round_clamped(x[i] / dl, -nmax, nmax - 1) : 0);
}

}  // namespace

void quantize_q2_k(const float* src, BlockQ2_K* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQKK) {
    BlockQ2_K& y = dst[b];
    uint8_t q[kQKK];
    float scale[16], min[16];
    for (int g = 0; g < 16; ++g) {
      const Affine a = fit_affine(src + 16 * g, 16, 3, q + 16 * g);
      scale[g] = a.scale, min[g] = a.min;
    }
    uint8_t ls[16], lm[16];
    const float d = quantize_unsigned_scales(scale, 16, 15, ls, &y.d);
    const float dmin = quantize_unsigned_scales(min, 16, 15, lm, &y.dmin);
    for (int g = 0; g < 16; ++g) {
      y.scales[g] = uint8_t(ls[g] | (lm[g] << 4));
      requantize_affine(src + 16 * g, 16, d * float(ls[g]), dmin * float(lm[g]), 3, q + 16 * g);
    }
    // value 128h + 32s + l: bits 2s of qs[32h + l]
    std::memset(y.qs, 0, sizeof(y.qs));
    for (int i = 0; i < kQKK; ++i) {
      const int h = i / 128, s = (i % 128) / 32, l = i % 32;
      y.qs[32 * h + l] |= uint8_t(q[i] << (2 * s));
    }
  }
}

void quantize_q3_k(const float* src, BlockQ3_K* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQKK) {
    BlockQ3_K& y = dst[b];
    int8_t q[kQKK];
    float scale[16];
    for (int g = 0; g < 16; ++g) scale[g] = fit_symmetric(src + 16 * g, 16, 4, q + 16 * g);
    int ls[16];
    const float d = quantize_signed_scales(scale, 16, 32, 31, ls, &y.d);
    std::memset(y.scales, 0, sizeof(y.scales));
    for (int g = 0; g < 16; ++g) {
      requantize_symmetric(src + 16 * g, 16, d * float(ls[g]), 4, q + 16 * g);
      const int s6 = ls[g] + 32;  // 0..63: low 4 bits, then the high 2 (q3k_scales reads them back)
      if (g < 8) {
        y.scales[g] |= uint8_t(s6 & 0xF);
      } else {
        y.scales[g - 8] |= uint8_t((s6 & 0xF) << 4);
      }
      y.scales[8 + g % 4] |= uint8_t((s6 >> 4) << (2 * (g / 4)));
    }
    // code c = q + 4 in 0..7: low 2 bits as Q2_K's qs, bit 2 in hmask[l] bit (4h + s)
    std::memset(y.qs, 0, sizeof(y.qs));
    std::memset(y.hmask, 0, sizeof(y.hmask));
    for (int i = 0; i < kQKK; ++i) {
      const int c = q[i] + 4;
      const int h = i / 128, s = (i % 128) / 32, l = i % 32;
      y.qs[32 * h + l] |= uint8_t((c & 3) << (2 * s));
      if (c & 4) y.hmask[l] |= uint8_t(1u << (4 * h + s));
    }
  }
}

void quantize_q4_k(const float* src, BlockQ4_K* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQKK) {
    BlockQ4_K& y = dst[b];
    uint8_t q[kQKK];
    fit_k4(src, 15, &y, q);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) y.qs[32 * c + l] = uint8_t(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
  }
}

void quantize_q5_k(const float* src, BlockQ5_K* dst, int64_t n_blocks) {
  static_assert(offsetof(BlockQ5_K, scales) == offsetof(BlockQ4_K, scales), "Q4_K and Q5_K share their head");
  for (int64_t b = 0; b < n_blocks; ++b, src += kQKK) {
    BlockQ5_K& y = dst[b];
    uint8_t q[kQKK];
    BlockQ4_K head;
    fit_k4(src, 31, &head, q);
    y.d = head.d, y.dmin = head.dmin;
    std::memcpy(y.scales, head.scales, sizeof(y.scales));
    std::memset(y.qh, 0, sizeof(y.qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = q[64 * c + l], hi = q[64 * c + 32 + l];
        y.qs[32 * c + l] = uint8_t((lo & 0xF) | ((hi & 0xF) << 4));
        y.qh[l] |= uint8_t(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

void quantize_q6_k(const float* src, BlockQ6_K* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQKK) {
    BlockQ6_K& y = dst[b];
    int8_t q[kQKK];
    float scale[16];
    for (int g = 0; g < 16; ++g) scale[g] = fit_symmetric(src + 16 * g, 16, 32, q + 16 * g);
    int ls[16];
    const float d = quantize_signed_scales(scale, 16, 128, 127, ls, &y.d);
    uint8_t c[kQKK];  // codes 0..63 = q + 32
    for (int g = 0; g < 16; ++g) {
      y.scales[g] = int8_t(ls[g]);
      requantize_symmetric(src + 16 * g, 16, d * float(ls[g]), 32, q + 16 * g);
      for (int l = 0; l < 16; ++l) c[16 * g + l] = uint8_t(q[16 * g + l] + 32);
    }
    for (int half = 0; half < 2; ++half) {
      uint8_t* ql = y.ql + 64 * half;
      uint8_t* qh = y.qh + 32 * half;
      const uint8_t* cc = c + 128 * half;
      for (int l = 0; l < 32; ++l) {
        ql[l] = uint8_t((cc[l] & 0xF) | ((cc[l + 64] & 0xF) << 4));
        ql[l + 32] = uint8_t((cc[l + 32] & 0xF) | ((cc[l + 96] & 0xF) << 4));
        qh[l] = uint8_t((cc[l] >> 4) | ((cc[l + 32] >> 4) << 2) | ((cc[l + 64] >> 4) << 4) | ((cc[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace ferry::quant_rows
