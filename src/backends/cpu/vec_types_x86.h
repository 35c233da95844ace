// Float vector types over x86 registers for vec_kernels_impl.h: X4 (__m128), X8 (__m256) and, with
// FERRY_VEC_AVX512, X16 (__m512). The including file defines FERRY_VEC_FN (the target attribute) and
// FERRY_VEC_AVX512 (0 or 1) first. Internal linkage: each level's file gets its own copy.
//
// Every type V offers: T (the register), M (a lane mask), kW (lanes), load/store (unaligned), set1, zero,
// add, sub, mul, div, min, max, fma(a, b, c) = a * b + c, round (to nearest), lt (a < b lane mask),
// select(m, a, b) (a where m, else b), ldexp(y, n) = y * 2^n for integral n in [-127, 128], hsum.
#pragma once

#if defined(__x86_64__)

#include <immintrin.h>

namespace ferry::vec_kernels {
namespace {

struct X4 {
  using T = __m128;
  using M = __m128;
  static constexpr int kW = 4;
  FERRY_VEC_FN static T load(const float* p) { return _mm_loadu_ps(p); }
  FERRY_VEC_FN static void store(float* p, T v) { _mm_storeu_ps(p, v); }
  FERRY_VEC_FN static T set1(float v) { return _mm_set1_ps(v); }
  FERRY_VEC_FN static T zero() { return _mm_setzero_ps(); }
  FERRY_VEC_FN static T add(T a, T b) { return _mm_add_ps(a, b); }
  FERRY_VEC_FN static T sub(T a, T b) { return _mm_sub_ps(a, b); }
  FERRY_VEC_FN static T mul(T a, T b) { return _mm_mul_ps(a, b); }
  FERRY_VEC_FN static T div(T a, T b) { return _mm_div_ps(a, b); }
  FERRY_VEC_FN static T min(T a, T b) { return _mm_min_ps(a, b); }
  FERRY_VEC_FN static T max(T a, T b) { return _mm_max_ps(a, b); }
  FERRY_VEC_FN static T fma(T a, T b, T c) { return _mm_fmadd_ps(a, b, c); }
  FERRY_VEC_FN static T round(T a) { return _mm_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  FERRY_VEC_FN static M lt(T a, T b) { return _mm_cmp_ps(a, b, _CMP_LT_OQ); }
  FERRY_VEC_FN static T select(M m, T a, T b) { return _mm_blendv_ps(b, a, m); }
  FERRY_VEC_FN static T ldexp(T y, T n) {
#if FERRY_VEC_AVX512
    return _mm_scalef_ps(y, n);
#else
    // 2^n as two factors 2^a * 2^b (a = n >> 1), each a normal float for n in [-127, 128].
    const __m128i ni = _mm_cvtps_epi32(n), a = _mm_srai_epi32(ni, 1), b = _mm_sub_epi32(ni, a);
    const __m128i bias = _mm_set1_epi32(127);
    const T pa = _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(a, bias), 23));
    const T pb = _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(b, bias), 23));
    return _mm_mul_ps(_mm_mul_ps(y, pa), pb);
#endif
  }
  FERRY_VEC_FN static float hsum(T v) {
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
  }
};

struct X8 {
  using T = __m256;
  using M = __m256;
  static constexpr int kW = 8;
  FERRY_VEC_FN static T load(const float* p) { return _mm256_loadu_ps(p); }
  FERRY_VEC_FN static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  FERRY_VEC_FN static T set1(float v) { return _mm256_set1_ps(v); }
  FERRY_VEC_FN static T zero() { return _mm256_setzero_ps(); }
  FERRY_VEC_FN static T add(T a, T b) { return _mm256_add_ps(a, b); }
  FERRY_VEC_FN static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  FERRY_VEC_FN static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  FERRY_VEC_FN static T div(T a, T b) { return _mm256_div_ps(a, b); }
  FERRY_VEC_FN static T min(T a, T b) { return _mm256_min_ps(a, b); }
  FERRY_VEC_FN static T max(T a, T b) { return _mm256_max_ps(a, b); }
  FERRY_VEC_FN static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  FERRY_VEC_FN static T round(T a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  FERRY_VEC_FN static M lt(T a, T b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  FERRY_VEC_FN static T select(M m, T a, T b) { return _mm256_blendv_ps(b, a, m); }
  FERRY_VEC_FN static T ldexp(T y, T n) {
#if FERRY_VEC_AVX512
    return _mm256_scalef_ps(y, n);
#else
    const __m256i ni = _mm256_cvtps_epi32(n), a = _mm256_srai_epi32(ni, 1), b = _mm256_sub_epi32(ni, a);
    const __m256i bias = _mm256_set1_epi32(127);
    const T pa = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(a, bias), 23));
    const T pb = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(b, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(y, pa), pb);
#endif
  }
  FERRY_VEC_FN static float hsum(T v) {
    return X4::hsum(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
  }
};

#if FERRY_VEC_AVX512
struct X16 {
  using T = __m512;
  using M = __mmask16;
  static constexpr int kW = 16;
  FERRY_VEC_FN static T load(const float* p) { return _mm512_loadu_ps(p); }
  FERRY_VEC_FN static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  FERRY_VEC_FN static T set1(float v) { return _mm512_set1_ps(v); }
  FERRY_VEC_FN static T zero() { return _mm512_setzero_ps(); }
  FERRY_VEC_FN static T add(T a, T b) { return _mm512_add_ps(a, b); }
  FERRY_VEC_FN static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  FERRY_VEC_FN static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  FERRY_VEC_FN static T div(T a, T b) { return _mm512_div_ps(a, b); }
  FERRY_VEC_FN static T min(T a, T b) { return _mm512_min_ps(a, b); }
  FERRY_VEC_FN static T max(T a, T b) { return _mm512_max_ps(a, b); }
  FERRY_VEC_FN static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  FERRY_VEC_FN static T round(T a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  FERRY_VEC_FN static M lt(T a, T b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  FERRY_VEC_FN static T select(M m, T a, T b) { return _mm512_mask_blend_ps(m, b, a); }
  FERRY_VEC_FN static T ldexp(T y, T n) { return _mm512_scalef_ps(y, n); }
  FERRY_VEC_FN static float hsum(T v) { return _mm512_reduce_add_ps(v); }
};
#endif

}  // namespace
}  // namespace ferry::vec_kernels

#endif
