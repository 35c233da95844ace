#include "backends/cpu/q4_1x8.h"

#include <cmath>
#include <cstring>

#include "backends/cpu/simd.h"
#include "core/check.h"
#include "core/fp16.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry {

size_t q4_1x8_bytes(int64_t n_out, int64_t n_in) {
  FERRY_CHECK(n_out >= 0 && n_in >= 0 && n_in % kQK == 0, "Q4_1 matrix ({}, {}) is not whole blocks", n_out, n_in);
  return size_t((n_out + kQ41x8Rows - 1) / kQ41x8Rows) * size_t(n_in / kQK) * sizeof(BlockQ4_1x8);
}

bool repack_q4_1x8(DType t, const void* w, int64_t n_out, int64_t n_in, BlockQ4_1x8* dst) {
  FERRY_CHECK(q4_x8_type(t), "repack of {} weights (Q4_1 / Q4_0 only)", dtype_name(t));
  const int64_t nb = n_in / kQK, groups = (n_out + kQ41x8Rows - 1) / kQ41x8Rows;
  const size_t bb = size_t(dtype_info(t).block_bytes);
  const auto* src = static_cast<const uint8_t*>(w);  // (n_out, nb) blocks of bb bytes
  for (int64_t p = 0; p < groups; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      BlockQ4_1x8& o = dst[p * nb + b];
      std::memset(&o, 0, sizeof(o));
      for (int r = 0; r < kQ41x8Rows && p * kQ41x8Rows + r < n_out; ++r) {
        const uint8_t* blk = src + size_t((p * kQ41x8Rows + r) * nb + b) * bb;
        const uint8_t* qs;
        if (t == DType::Q4_1) {
          const auto& s = *reinterpret_cast<const BlockQ4_1*>(blk);
          o.d[r] = s.d, o.m[r] = s.m, qs = s.qs;
        } else {
          const auto& s = *reinterpret_cast<const BlockQ4_0*>(blk);
          const float d = fp16_to_f32(s.d);
          if (!(std::fabs(d) < 8192.0f)) return false;  // -8 d would not fit fp16 (or d is inf / NaN)
          o.d[r] = s.d, o.m[r] = f32_to_fp16(-8.0f * d), qs = s.qs;
        }
        for (int j = 0; j < 4; ++j)
          for (int i = 0; i < 4; ++i) {  // value 4j + i is a low nibble, 16 + 4j + i a high one
            const uint8_t lo = qs[4 * j + i] & 0x0F, hi = qs[4 * j + i] >> 4;
            o.q[j][4 * r + i] = uint8_t(lo | hi << 4);
          }
      }
    }
  }
  return true;
}

void dequantize_q4_1x8_row(DType t, const BlockQ4_1x8* w, int64_t n_in, int64_t row, float* dst) {
  const int64_t nb = n_in / kQK;
  const BlockQ4_1x8* g = w + (row / kQ41x8Rows) * nb;
  const int r = int(row % kQ41x8Rows);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t qs[kQK / 2];  // the original nibbles: qs[k] = value k | value 16 + k << 4
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) qs[4 * j + i] = g[b].q[j][4 * r + i];
    if (t == DType::Q4_1) {
      BlockQ4_1 blk;
      blk.d = g[b].d[r], blk.m = g[b].m[r];
      std::memcpy(blk.qs, qs, sizeof(qs));
      dequantize_row(t, &blk, dst + b * kQK, kQK);
    } else {
      BlockQ4_0 blk;
      blk.d = g[b].d[r];
      std::memcpy(blk.qs, qs, sizeof(qs));
      dequantize_row(t, &blk, dst + b * kQK, kQK);
    }
  }
}

bool q4_1x8_supported() {
  const SimdFeatures f = detect_simd_features();
  return f.avx512 && f.avx512_vnni;
}

#if defined(__x86_64__)

#define FERRY_Q41X8_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace {

// acc lanes = the 8 rows; per block: for each group pair (j, j + 4), vpdpbusd of the rows' 4 values with
// the token's 4 values broadcast, converted, FMA'd with the token's group scale (a broadcast scalar) into
// two partial sums (lo: groups 0..3, hi: 4..7, two chains for latency); then acc += (lo + hi) * dw and
// acc_m += m * s (the Q4_1 min term: s = sum of the token block's dequantized values).
template <int T>
FERRY_Q41X8_FN void q4_1x8_tile(int64_t nb, const BlockQ4_1x8* w, const BlockQ8_1G4* const* x, int n_rows,
                                float* out, size_t ld) {
  __m256 acc[T], acc_m[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps(), acc_m[t] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ4_1x8& wb = w[b];
    // decode streams the weights: fetch 4 blocks (640 bytes) ahead
    _mm_prefetch(reinterpret_cast<const char*>(&wb) + 4 * sizeof(BlockQ4_1x8), _MM_HINT_T0);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.d)));
    const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.m)));
    __m256 lo_sum[T], hi_sum[T];
    for (int t = 0; t < T; ++t) lo_sum[t] = _mm256_setzero_ps(), hi_sum[t] = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.q[j]));
      const __m256i lo = _mm256_and_si256(qv, low4), hi = _mm256_and_si256(_mm256_srli_epi16(qv, 4), low4);
      for (int t = 0; t < T; ++t) {
        const BlockQ8_1G4& xb = x[t][b];
        int32_t y_lo, y_hi;  // the token's 4 values of group j and of group j + 4
        std::memcpy(&y_lo, xb.qs + 4 * j, 4);
        std::memcpy(&y_hi, xb.qs + 16 + 4 * j, 4);
        const __m256 p_lo = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, _mm256_set1_epi32(y_lo)));
        const __m256 p_hi = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), hi, _mm256_set1_epi32(y_hi)));
        lo_sum[t] = _mm256_fmadd_ps(p_lo, _mm256_set1_ps(xb.d[j]), lo_sum[t]);
        hi_sum[t] = _mm256_fmadd_ps(p_hi, _mm256_set1_ps(xb.d[4 + j]), hi_sum[t]);
      }
    }
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_add_ps(lo_sum[t], hi_sum[t]), dw, acc[t]);
      acc_m[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(x[t][b].s), acc_m[t]);
    }
  }
  const __mmask8 keep = __mmask8((1u << n_rows) - 1u);
  for (int t = 0; t < T; ++t) _mm256_mask_storeu_ps(out + size_t(t) * ld, keep, _mm256_add_ps(acc[t], acc_m[t]));
}

}  // namespace

FERRY_Q41X8_FN void q4_1x8_dot(int64_t n_in, const BlockQ4_1x8* w, const void* x, size_t x_row_bytes, int n_x,
                               int n_rows, float* out, size_t ld) {
  const BlockQ8_1G4* xs[4] = {};
  for (int t = 0; t < n_x && t < 4; ++t)
    xs[t] = reinterpret_cast<const BlockQ8_1G4*>(static_cast<const char*>(x) + size_t(t) * x_row_bytes);
  const int64_t nb = n_in / kQK;
  switch (n_x) {
    case 1: q4_1x8_tile<1>(nb, w, xs, n_rows, out, ld); break;
    case 2: q4_1x8_tile<2>(nb, w, xs, n_rows, out, ld); break;
    case 3: q4_1x8_tile<3>(nb, w, xs, n_rows, out, ld); break;
    default: q4_1x8_tile<4>(nb, w, xs, n_rows, out, ld); break;
  }
}

#else

void q4_1x8_dot(int64_t, const BlockQ4_1x8*, const void*, size_t, int, int, float*, size_t) {
  fail("the repacked Q4_1 kernel needs an x86-64 CPU with AVX-512 VNNI");
}

#endif

}  // namespace ferry
