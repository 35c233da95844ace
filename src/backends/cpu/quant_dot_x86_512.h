// AVX-512 VNNI tiles for the signed 4/5-bit formats (Q4_0, Q5_0 weights x Q8_0G4 activations) on
// 512-bit vectors: two consecutive blocks per vector. Included by quant_dot_avx512.cpp after
// quant_dot_x86.h (whose helpers it uses), only where the CPU has VNNI.
//
// Why: the 256-bit tile issues vpsignb + vpdpbusd + cvt + mul + fma per (weight row, token, block) for
// signed weights; here the sign trick below drops the vpsignb (measured +5% on Q4_0 prompt tiles,
// docs/perf-log.md). For Q4_1/Q5_1 (unsigned already, plus an m term) this 512-bit form measured slower
// than the 256-bit tile (register pressure: 16 accumulators + the m lanes), so those keep the 256-bit one.
// Q8_0 too: +4% on prompt tiles but -7% for one token (decode), and Q8_0 is typically the tied output
// projection that every decode step streams. (Single-token Q4_0 is -8% in cache, but memory-bound there.)
//
// Signed weights without vpsignb (AVX-512 has no 512-bit sign): every format is read as unsigned bytes
// u = w + bias (bias 8 for Q4_0, 16 for Q5_0), and
//   sum_i w_i y_i = vpdpbusd(-bias * sum_i y_i, u, y)
// where -bias * (sum of each lane's 4 activations) is computed once per token and block pair and shared by
// every weight row. Integer arithmetic, exact: the same int32 lanes as the 256-bit kernels.
//
// Layout of one 512-bit step: bytes 0..31 = block b (values in element order), bytes 32..63 = block b + 1;
// int32 lane g (0..15) sums values 4g..4g+3 of that block, so it meets activation scale d[g % 8] of block
// b + g / 8. An odd last block runs the same code with the upper half zero (weights, activations, scales).
//
// Batch invariance: every (weight row, token) pair accumulates with the same operations in the same order
// whatever the tile size R x T and the pair's place in it, so a row's result does not depend on the batch.
#pragma once

#if defined(__x86_64__)

#include <immintrin.h>

#include "backends/cpu/quant_dot_x86.h"

#define FERRY_X512_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"
#define FERRY_X512_FN __attribute__((target(FERRY_X512_TARGET))) inline

namespace ferry::dot_kernels {
namespace {

// Unsigned view of a weight block: u(b) = the 32 values + kBias as bytes in element order.
struct U4_0 {
  using W = BlockQ4_0;
  using X = BlockQ8_0G4;
  static constexpr int kBias = 8;
  FERRY_X512_FN static __m256i u(const W& b) { return unpack_nibbles(b.qs); }
};
struct U5_0 {
  using W = BlockQ5_0;
  using X = BlockQ8_0G4;
  static constexpr int kBias = 16;
  FERRY_X512_FN static __m256i u(const W& b) {
    return _mm256_or_si256(unpack_nibbles(b.qs), _mm256_and_si256(expand_bits(b.qh), _mm256_set1_epi8(0x10)));
  }
};

FERRY_X512_FN __m512i join256(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
FERRY_X512_FN __m512 join256(__m256 lo, __m256 hi) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

// w: R pointers to nb weight blocks; x: T pointers to nb activation blocks; out[t * ld + r].
template <typename K, int R, int T>
FERRY_X512_FN void g4_tile512(int64_t nb, const typename K::W* const* w, const typename K::X* const* x, float* out,
                              size_t ld, size_t prefetch_bytes) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const __m512i bias = _mm512_set1_epi8(char(K::kBias));
  for (int64_t b = 0; b < nb; b += 2) {
    const bool pair = b + 1 < nb;  // else: the upper half is zero
    __m512i y[T], yb[T];
    __m512 dx[T];
    for (int t = 0; t < T; ++t) {
      const auto& x0 = x[t][b];
      if (pair) {
        const auto& x1 = x[t][b + 1];
        y[t] = join256(load256(x0.qs), load256(x1.qs));
        dx[t] = join256(_mm256_loadu_ps(x0.d), _mm256_loadu_ps(x1.d));
      } else {
        y[t] = _mm512_zextsi256_si512(load256(x0.qs));
        dx[t] = _mm512_zextps256_ps512(_mm256_loadu_ps(x0.d));
      }
      // -bias * (sum of each lane's 4 activations): the offset that makes u = w + bias exact
      yb[t] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, y[t]));
    }
    for (int r = 0; r < R; ++r) {
      const auto& w0 = w[r][b];
      _mm_prefetch(reinterpret_cast<const char*>(&w0) + prefetch_bytes, _MM_HINT_T0);
      __m512i u;
      __m512 dw;
      if (pair) {
        const auto& w1 = w[r][b + 1];
        u = join256(K::u(w0), K::u(w1));
        dw = join256(_mm256_set1_ps(fp16(w0.d)), _mm256_set1_ps(fp16(w1.d)));
      } else {
        u = _mm512_zextsi256_si512(K::u(w0));
        dw = _mm512_set1_ps(fp16(w0.d));
      }
      for (int t = 0; t < T; ++t) {
        const __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(yb[t], u, y[t]));
        acc[r][t] = _mm512_fmadd_ps(p, _mm512_mul_ps(dw, dx[t]), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      const __m512 a = acc[r][t];  // fixed reduction order: 512 -> 256 -> hsum
      const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
      out[size_t(t) * ld + size_t(r)] = hsum(h);
    }
  }
}

// The 512-bit tile kernel as a tile family for quant_dot_x86.h's g4_dispatch (same row setup and switch).
struct G4Tile512 {
  template <typename K, int R, int T>
  FERRY_X512_FN static void run(int64_t nb, const typename K::W* const* w, const typename K::X* const* x, float* out,
                                size_t ld, size_t pf) {
    g4_tile512<K, R, T>(nb, w, x, out, ld, pf);
  }
};

template <typename K>
__attribute__((target(FERRY_X512_TARGET))) void g4_dot512(const DotTile& p) {
  g4_dispatch<K, G4Tile512>(p);
}

// Overrides the Q4_0 and Q5_0 kernels with the 512-bit tiles.
inline void fill_x86_quant512(DotKernels& k) {
  auto set = [&](DType t, DotFn fn) { k.by_weight_type[static_cast<size_t>(t)] = fn; };
  set(DType::Q4_0, g4_dot512<U4_0>);
  set(DType::Q5_0, g4_dot512<U5_0>);
}

}  // namespace
}  // namespace ferry::dot_kernels

#endif  // __x86_64__
