// x86 dot kernels over 256-bit vectors, written once and compiled twice: quant_dot_avx2.cpp (AVX2 + FMA +
// F16C, maddubs + madd) and quant_dot_avx512.cpp (the same plus AVX512-VNNI: vpdpbusd replaces the
// maddubs + madd pair). The including file defines, before including this header:
//   FERRY_X86_TARGET  the target attribute string, e.g. "avx2,fma,f16c"
//   FERRY_X86_VNNI    1 to use _mm256_dpbusd_epi32, 0 for maddubs + madd
// Everything here has internal linkage (anonymous namespace), so the two copies never collide.
//
// The 32-value formats run as tiles (g4_tile: R weight rows x T tokens; each weight block unpacked once
// per tile, each activation block loaded once per tile). The K-quants keep one weight row per pass:
// Kernel::rows<NX>(nb, w, x, out): w: nb weight blocks (one row); x: NX pointers, each to nb activation
// blocks; out: [NX] floats.
#pragma once

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>

#include "backends/cpu/quant_dot_kernels.h"
#include "formats/quant.h"

#define FERRY_X86_FN __attribute__((target(FERRY_X86_TARGET))) inline

namespace ferry::dot_kernels {
namespace {

FERRY_X86_FN float fp16(uint16_t h) { return _cvtsh_ss(h); }

FERRY_X86_FN float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sums of 4 adjacent products u8 * i8 into 8 int32 lanes. u: unsigned bytes (< 128 on the maddubs path so
// pairs cannot saturate int16 against |i| <= 127), i: signed bytes.
FERRY_X86_FN __m256i dot_u8_i8(__m256i u, __m256i i) {
#if FERRY_X86_VNNI
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, i);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, i), _mm256_set1_epi16(1));
#endif
}

// 16 packed bytes -> 32 bytes: low nibbles in lanes 0..15, high nibbles in lanes 16..31 (values 0..15).
FERRY_X86_FN __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// 32 bits (little-endian bytes at p) -> 32 bytes, 0xFF where bit i is set.
FERRY_X86_FN __m256i expand_bits(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202,
                                          0x0303030303030303);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(bits)), shuf);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

// Unsigned bytes u (0..63) times signed bytes y, pairs summed to int16 then weighted by the int16 scales
// (per 128-bit lane: lane 0 = values 0..15, lane 1 = values 16..31) into 8 int32 lanes.
FERRY_X86_FN __m256i scaled_dot(__m256i u, __m256i y, __m256i scales16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), scales16);
}

FERRY_X86_FN __m256i two_scales(int lo, int hi) {
  return _mm256_set_m128i(_mm_set1_epi16(int16_t(hi)), _mm_set1_epi16(int16_t(lo)));
}

FERRY_X86_FN __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// ---- the 32-value formats (x: Q8_0G4 / Q8_1G4) ----------------------------------------------------------
//
// A format K gives: W (weight block), X (activation block), kHasMin (Q4_1/Q5_1: + m * s), and
//   WV K::load_w(const W&)          the block unpacked once per tile, in element order (byte k = value k),
//   __m256i K::dot(const WV&, y)    8 int32 lanes, lane g = sum of products of values 4g..4g+3,
// so lane g meets activation scale d[g]. g4_tile runs an R x T tile of weight rows x tokens over it.

struct WUnsigned {  // weights as unsigned bytes (Q4_1, Q5_1): dot is u8 x s8 directly
  __m256i q;
  float d, m;
};
struct WSigned {  // signed weights (Q4_0, Q5_0, Q8_0): |q| (as u8: right for -128 too) and q
  __m256i aq, q;
  float d;
};

FERRY_X86_FN WSigned make_signed(__m256i q, float d) { return {_mm256_sign_epi8(q, q), q, d}; }
// Signed * signed as |w| * (y with w's sign): u8 x s8, which both maddubs and vpdpbusd take.
FERRY_X86_FN __m256i dot_signed(const WSigned& w, __m256i y) {
  return dot_u8_i8(w.aq, _mm256_sign_epi8(y, w.q));
}

struct KQ4_0 {
  using W = BlockQ4_0;
  using X = BlockQ8_0G4;
  static constexpr bool kHasMin = false;
  FERRY_X86_FN static WSigned load_w(const W& b) {
    return make_signed(_mm256_sub_epi8(unpack_nibbles(b.qs), _mm256_set1_epi8(8)), fp16(b.d));
  }
  FERRY_X86_FN static __m256i dot(const WSigned& w, __m256i y) { return dot_signed(w, y); }
};

// Q4_1. With VNNI the high nibbles stay in place (16 x value, 0..240: vpdpbusd has no int16 intermediate
// to saturate, and |lane| <= 4 * 240 * 127 < 2^24 converts exactly): the unpack is one broadcast load and
// one AND instead of load + shift + insert + AND. Lanes 4..7 then carry 16 x the true sum, which the
// activation scales of values 16..31 (kHighX16 below) divide by 16: exact powers of two, so every product
// is bit-identical to the shifted form. maddubs (AVX2) would saturate its int16 pairs: it keeps the shift.
struct KQ4_1 {
  using W = BlockQ4_1;
  using X = BlockQ8_1G4;
  static constexpr bool kHasMin = true;
  static constexpr bool kHighX16 = FERRY_X86_VNNI != 0;
  FERRY_X86_FN static WUnsigned load_w(const W& b) {
#if FERRY_X86_VNNI
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs)));
    const __m256i mask = _mm256_setr_epi64x(0x0F0F0F0F0F0F0F0F, 0x0F0F0F0F0F0F0F0F, int64_t(0xF0F0F0F0F0F0F0F0ull),
                                            int64_t(0xF0F0F0F0F0F0F0F0ull));
    return {_mm256_and_si256(both, mask), fp16(b.d), fp16(b.m)};
#else
    return {unpack_nibbles(b.qs), fp16(b.d), fp16(b.m)};
#endif
  }
  FERRY_X86_FN static __m256i dot(const WUnsigned& w, __m256i y) { return dot_u8_i8(w.q, y); }
};

// Whether K's dot leaves lanes 4..7 (values 16..31) at 16 x their sum (see KQ4_1).
template <typename K>
constexpr bool high_x16() {
  if constexpr (requires { K::kHighX16; }) return K::kHighX16;
  return false;
}

struct KQ5_0 {
  using W = BlockQ5_0;
  using X = BlockQ8_0G4;
  static constexpr bool kHasMin = false;
  FERRY_X86_FN static WSigned load_w(const W& b) {
    // q - 16 = nibble - 16 * (1 - high bit)
    const __m256i missing = _mm256_andnot_si256(expand_bits(b.qh), _mm256_set1_epi8(0x10));
    return make_signed(_mm256_sub_epi8(unpack_nibbles(b.qs), missing), fp16(b.d));
  }
  FERRY_X86_FN static __m256i dot(const WSigned& w, __m256i y) { return dot_signed(w, y); }
};

struct KQ5_1 {
  using W = BlockQ5_1;
  using X = BlockQ8_1G4;
  static constexpr bool kHasMin = true;
  FERRY_X86_FN static WUnsigned load_w(const W& b) {
    const __m256i high = _mm256_and_si256(expand_bits(b.qh), _mm256_set1_epi8(0x10));
    return {_mm256_or_si256(unpack_nibbles(b.qs), high), fp16(b.d), fp16(b.m)};
  }
  FERRY_X86_FN static __m256i dot(const WUnsigned& w, __m256i y) { return dot_u8_i8(w.q, y); }
};

struct KQ8_0 {
  using W = BlockQ8_0;
  using X = BlockQ8_0G4;
  static constexpr bool kHasMin = false;
  FERRY_X86_FN static WSigned load_w(const W& b) { return make_signed(load256(b.qs), fp16(b.d)); }
  FERRY_X86_FN static __m256i dot(const WSigned& w, __m256i y) { return dot_signed(w, y); }
};

// w: R pointers to nb weight blocks (one row each); x: T pointers to nb activation blocks;
// out[t * ld + r] = dot(row r, token t). Every (r, t) accumulates with the same operations whatever R and T
// are, so a tile's results are bit-identical to single-row calls.
template <typename K, int R, int T>
FERRY_X86_FN void g4_tile(int64_t nb, const typename K::W* const* w, const typename K::X* const* x, float* out,
                          size_t ld, size_t prefetch_bytes) {
  __m256 acc[R][T];
  __m128 acc_m[R];  // lane t: sum over blocks of m * s (Q4_1/Q5_1)
  for (int r = 0; r < R; ++r) {
    acc_m[r] = _mm_setzero_ps();
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i y[T];
    __m256 dx[T];
    for (int t = 0; t < T; ++t) {
      y[t] = load256(x[t][b].qs);
      dx[t] = _mm256_loadu_ps(x[t][b].d);
      if constexpr (high_x16<K>())
        dx[t] = _mm256_mul_ps(dx[t], _mm256_setr_ps(1, 1, 1, 1, 0.0625f, 0.0625f, 0.0625f, 0.0625f));
    }
    __m128 s = _mm_setzero_ps();
    if constexpr (K::kHasMin) {  // lanes built in registers (a 16-byte load of 4 scalar stores would stall)
      s = _mm_set_ss(x[0][b].s);
      if constexpr (T > 1) s = _mm_insert_ps(s, _mm_set_ss(x[1][b].s), 0x10);
      if constexpr (T > 2) s = _mm_insert_ps(s, _mm_set_ss(x[2][b].s), 0x20);
      if constexpr (T > 3) s = _mm_insert_ps(s, _mm_set_ss(x[3][b].s), 0x30);
    }
    for (int r = 0; r < R; ++r) {
      // decode streams weights from memory: fetch the same block of the next tile's rows ahead of use
      _mm_prefetch(reinterpret_cast<const char*>(&w[r][b]) + prefetch_bytes, _MM_HINT_T0);
      const auto wv = K::load_w(w[r][b]);
      const __m256 dw = _mm256_set1_ps(wv.d);
      for (int t = 0; t < T; ++t) {
        const __m256 p = _mm256_cvtepi32_ps(K::dot(wv, y[t]));
        acc[r][t] = _mm256_fmadd_ps(p, _mm256_mul_ps(dw, dx[t]), acc[r][t]);
      }
      if constexpr (K::kHasMin) acc_m[r] = _mm_fmadd_ps(_mm_set1_ps(wv.m), s, acc_m[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(16) float m[4];
    _mm_store_ps(m, acc_m[r]);
    for (int t = 0; t < T; ++t) out[size_t(t) * ld + size_t(r)] = hsum(acc[r][t]) + m[t];
  }
}

// The 256-bit tile kernel as a tile family: Tile::run<K, R, T> (g4_dispatch's parameter).
struct G4Tile256 {
  template <typename K, int R, int T>
  FERRY_X86_FN static void run(int64_t nb, const typename K::W* const* w, const typename K::X* const* x, float* out,
                               size_t ld, size_t pf) {
    g4_tile<K, R, T>(nb, w, x, out, ld, pf);
  }
};

template <typename K, typename Tile, int R>
FERRY_X86_FN void g4_tile_x(int64_t nb, const typename K::W* const* w, const typename K::X* const* x, int n_x,
                            float* out, size_t ld, size_t pf) {
  switch (n_x) {
    case 1: Tile::template run<K, R, 1>(nb, w, x, out, ld, pf); break;
    case 2: Tile::template run<K, R, 2>(nb, w, x, out, ld, pf); break;
    case 3: Tile::template run<K, R, 3>(nb, w, x, out, ld, pf); break;
    default: Tile::template run<K, R, 4>(nb, w, x, out, ld, pf); break;
  }
}

// A DotTile's weight and activation rows, and the switch over its (weight rows, tokens) to Tile::run: shared by
// the 256-bit tiles (g4_dot) and the 512-bit ones (quant_dot_x86_512.h: g4_dot512).
template <typename K, typename Tile>
FERRY_X86_FN void g4_dispatch(const DotTile& p) {
  static_assert(kMaxDotRows == 4 && kMaxDotWeightRows == 4, "g4_dispatch dispatches tiles up to 4 x 4");
  using W = typename K::W;
  using X = typename K::X;
  const W* ws[kMaxDotWeightRows] = {};
  const X* xs[kMaxDotRows] = {};
  for (int i = 0; i < p.n_w; ++i)
    ws[i] = reinterpret_cast<const W*>(static_cast<const char*>(p.w) + size_t(i) * p.w_row_bytes);
  for (int j = 0; j < p.n_x; ++j) xs[j] = x_row<X>(p.x, p.x_row_bytes, j);
  const int64_t nb = p.n / kQK;
  // the next tile's rows (the matmul walks weight rows in order); a single row: the next row
  const size_t pf = size_t(p.n_w) * (p.n_w > 1 ? p.w_row_bytes : size_t(nb) * sizeof(W));
  switch (p.n_w) {
    case 1: g4_tile_x<K, Tile, 1>(nb, ws, xs, p.n_x, p.out, p.out_stride, pf); break;
    case 2: g4_tile_x<K, Tile, 2>(nb, ws, xs, p.n_x, p.out, p.out_stride, pf); break;
    case 3: g4_tile_x<K, Tile, 3>(nb, ws, xs, p.n_x, p.out, p.out_stride, pf); break;
    default: g4_tile_x<K, Tile, 4>(nb, ws, xs, p.n_x, p.out, p.out_stride, pf); break;
  }
}

template <typename K>
__attribute__((target(FERRY_X86_TARGET))) void g4_dot(const DotTile& p) {
  g4_dispatch<K, G4Tile256>(p);
}

// ---- activation quantizers: floats -> Q8_0G4 / Q8_1G4, byte-identical to quantize_row -------------------
// Per group of 4: d = amax / 127, id = d ? 1 / d : 0, q = cvtps2dq(x * id) (round half to even, as the
// scalar quantizer's nearest_int); s = sum over groups in order of d * (sum of the group's q).

// One block: 32 floats -> d[8], qs[32]. The 8 group maxima are gathered into one vector so the two
// divisions (d = amax / 127, id = 1 / d) run once per block, not once per pair of groups (vdivps is the
// slowest step: 8 -> 2 per block); the values and scales are the same bits as before.
// With s != nullptr also *s = sum over groups in order of d[g] * (sum of group g's values), for Q8_1G4;
// the group sums come from the int32 values in registers (hadd), not from the stored bytes.
template <bool kSum>
FERRY_X86_FN void quantize_g4_block(const float* x, float* d, int8_t* qs, float* s) {
  __m256 v[4], m[4];
  for (int k = 0; k < 4; ++k) {  // v[k]: values 8k..8k+7 = groups 2k (lanes 0..3) and 2k + 1 (lanes 4..7)
    v[k] = _mm256_loadu_ps(x + 8 * k);
    const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v[k]);
    m[k] = _mm256_max_ps(a, _mm256_permute_ps(a, 0xB1));  // swap neighbours
    m[k] = _mm256_max_ps(m[k], _mm256_permute_ps(m[k], 0x4E));  // swap pairs: the group max in all 4 lanes
  }
  // gm lanes = the maxima of groups [0, 2, 4, 6 | 1, 3, 5, 7] (lane k of m[k] in each 128-bit half)
  const __m256 gm = _mm256_blend_ps(_mm256_blend_ps(m[0], m[1], 0x22), _mm256_blend_ps(m[2], m[3], 0x88), 0xCC);
  const __m256 gd = _mm256_div_ps(gm, _mm256_set1_ps(127.0f));
  const __m256 nonzero = _mm256_cmp_ps(gd, _mm256_setzero_ps(), _CMP_NEQ_OQ);
  const __m256 gid = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), gd), nonzero);
  _mm256_storeu_ps(d, _mm256_permutevar8x32_ps(gd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  // lane k of each half, repeated over the half: the scales of groups 2k and 2k + 1 over v[k]'s lanes
  const __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[0], _mm256_permute_ps(gid, 0x00)));
  const __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[1], _mm256_permute_ps(gid, 0x55)));
  const __m256i q2 = _mm256_cvtps_epi32(_mm256_mul_ps(v[2], _mm256_permute_ps(gid, 0xAA)));
  const __m256i q3 = _mm256_cvtps_epi32(_mm256_mul_ps(v[3], _mm256_permute_ps(gid, 0xFF)));
  const __m256i p01 = _mm256_packs_epi32(q0, q1), p23 = _mm256_packs_epi32(q2, q3);
  const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23),
                                                    _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), bytes);
  if constexpr (kSum) {
    // hadd pairs per 128-bit half; two rounds give the group sums in gd's order [0, 2, 4, 6 | 1, 3, 5, 7]
    const __m256i gs = _mm256_hadd_epi32(_mm256_hadd_epi32(q0, q1), _mm256_hadd_epi32(q2, q3));
    // products rounded on their own (an explicit multiply: no FMA contraction into the sum below), then
    // summed in group order: the scalar quantizer's exact operations.
    const __m256 prod = _mm256_mul_ps(gd, _mm256_cvtepi32_ps(gs));
    const __m128 even = _mm256_castps256_ps128(prod), odd = _mm256_extractf128_ps(prod, 1);
    __m128 sum = _mm_add_ss(even, odd);                                   // g0 + g1
    sum = _mm_add_ss(sum, _mm_movehdup_ps(even));                         // + g2
    sum = _mm_add_ss(sum, _mm_movehdup_ps(odd));                          // + g3
    sum = _mm_add_ss(sum, _mm_movehl_ps(even, even));                     // + g4
    sum = _mm_add_ss(sum, _mm_movehl_ps(odd, odd));                       // + g5
    sum = _mm_add_ss(sum, _mm_shuffle_ps(even, even, 3));                 // + g6
    sum = _mm_add_ss(sum, _mm_shuffle_ps(odd, odd, 3));                   // + g7
    *s = _mm_cvtss_f32(sum);
  }
}

__attribute__((target(FERRY_X86_TARGET))) void quantize_act_q8_0g4(const float* x, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_0G4*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) quantize_g4_block<false>(x + b * kQK, out[b].d, out[b].qs, nullptr);
}

__attribute__((target(FERRY_X86_TARGET))) void quantize_act_q8_1g4(const float* x, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_1G4*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) quantize_g4_block<true>(x + b * kQK, out[b].d, out[b].qs, &out[b].s);
}

// ---- the K-quants (x: Q8_K) ---------------------------------------------------------------------------

struct KQ2_K {
  using W = BlockQ2_K;
  using X = BlockQ8_K;
  template <int NX>
  FERRY_X86_FN static void rows(int64_t nb, const W* w, const X* const* x, float* out) {
    __m256 acc[NX];
    float acc_m[NX];
    for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps(), acc_m[r] = 0.0f;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int64_t b = 0; b < nb; ++b) {
      const W& wb = w[b];
      __m256i sumi[NX];
      for (int r = 0; r < NX; ++r) sumi[r] = _mm256_setzero_si256();
      for (int half = 0; half < 2; ++half) {
        const __m256i q = load256(wb.qs + 32 * half);
        for (int s = 0; s < 4; ++s) {
          const int g = 8 * half + 2 * s;
          const __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3);
          const __m256i sc = two_scales(wb.scales[g] & 0xF, wb.scales[g + 1] & 0xF);
          for (int r = 0; r < NX; ++r)
            sumi[r] = _mm256_add_epi32(sumi[r], scaled_dot(v, load256(x[r][b].qs + 128 * half + 32 * s), sc));
        }
      }
      const float dw = fp16(wb.d), dmin = fp16(wb.dmin);
      for (int r = 0; r < NX; ++r) {
        int sum_m = 0;
        for (int g = 0; g < 16; ++g) sum_m += (wb.scales[g] >> 4) * x[r][b].bsums[g];
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x[r][b].d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        acc_m[r] += dmin * x[r][b].d * float(sum_m);
      }
    }
    for (int r = 0; r < NX; ++r) out[r] = hsum(acc[r]) - acc_m[r];
  }
};

struct KQ3_K {
  using W = BlockQ3_K;
  using X = BlockQ8_K;
  template <int NX>
  FERRY_X86_FN static void rows(int64_t nb, const W* w, const X* const* x, float* out) {
    __m256 acc[NX];
    for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps();
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    for (int64_t b = 0; b < nb; ++b) {
      const W& wb = w[b];
      int8_t scales[16];
      q3k_scales(wb.scales, scales);
      const __m256i hm = load256(wb.hmask);
      __m256i sumi[NX];
      for (int r = 0; r < NX; ++r) sumi[r] = _mm256_setzero_si256();
      for (int half = 0; half < 2; ++half) {
        const __m256i q = load256(wb.qs + 32 * half);
        for (int s = 0; s < 4; ++s) {
          const int g = 8 * half + 2 * s;
          const __m256i bit = _mm256_set1_epi8(char(1 << (4 * half + s)));
          const __m256i high = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit), four);
          // v = q2 + 4 * high bit, in 0..7; the value is v - 4 (the -4 is folded in through bsums below)
          const __m256i v = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3), high);
          const __m256i sc = two_scales(scales[g], scales[g + 1]);
          for (int r = 0; r < NX; ++r)
            sumi[r] = _mm256_add_epi32(sumi[r], scaled_dot(v, load256(x[r][b].qs + 128 * half + 32 * s), sc));
        }
      }
      const float dw = fp16(wb.d);
      for (int r = 0; r < NX; ++r) {
        int offset = 0;
        for (int g = 0; g < 16; ++g) offset += scales[g] * x[r][b].bsums[g];
        const __m256i total = _mm256_sub_epi32(sumi[r], _mm256_setr_epi32(4 * offset, 0, 0, 0, 0, 0, 0, 0));
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x[r][b].d), _mm256_cvtepi32_ps(total), acc[r]);
      }
    }
    for (int r = 0; r < NX; ++r) out[r] = hsum(acc[r]);
  }
};

// Q4_K and Q5_K share everything but the 5th bit.
template <typename Block, bool kFifthBit>
struct KQ45_K {
  using W = Block;
  using X = BlockQ8_K;
  template <int NX>
  FERRY_X86_FN static void rows(int64_t nb, const W* w, const X* const* x, float* out) {
    __m256 acc[NX];
    float acc_m[NX];
    for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps(), acc_m[r] = 0.0f;
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    for (int64_t b = 0; b < nb; ++b) {
      const W& wb = w[b];
      uint8_t sc[8], mn[8];
      for (int g = 0; g < 8; ++g) k4_scale_min(g, wb.scales, &sc[g], &mn[g]);
      __m256i qh = _mm256_setzero_si256();
      if constexpr (kFifthBit) qh = load256(wb.qh);
      __m256i sumi[NX];
      for (int r = 0; r < NX; ++r) sumi[r] = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i q = load256(wb.qs + 32 * c);
        __m256i lo = _mm256_and_si256(q, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if constexpr (kFifthBit) {
          const __m256i bit_lo = _mm256_set1_epi8(char(1 << (2 * c)));
          const __m256i bit_hi = _mm256_set1_epi8(char(2 << (2 * c)));
          lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_lo), bit_lo), b4));
          hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_hi), bit_hi), b4));
        }
        const __m256i s_lo = _mm256_set1_epi16(sc[2 * c]), s_hi = _mm256_set1_epi16(sc[2 * c + 1]);
        for (int r = 0; r < NX; ++r) {
          const __m256i p_lo = scaled_dot(lo, load256(x[r][b].qs + 64 * c), s_lo);
          const __m256i p_hi = scaled_dot(hi, load256(x[r][b].qs + 64 * c + 32), s_hi);
          sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(p_lo, p_hi));
        }
      }
      const float dw = fp16(wb.d), dmin = fp16(wb.dmin);
      for (int r = 0; r < NX; ++r) {
        const int16_t* bs = x[r][b].bsums;
        int sum_m = 0;
        for (int g = 0; g < 8; ++g) sum_m += mn[g] * (bs[2 * g] + bs[2 * g + 1]);
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x[r][b].d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        acc_m[r] += dmin * x[r][b].d * float(sum_m);
      }
    }
    for (int r = 0; r < NX; ++r) out[r] = hsum(acc[r]) - acc_m[r];
  }
};

struct KQ6_K {
  using W = BlockQ6_K;
  using X = BlockQ8_K;
  template <int NX>
  FERRY_X86_FN static void rows(int64_t nb, const W* w, const X* const* x, float* out) {
    __m256 acc[NX];
    for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    for (int64_t b = 0; b < nb; ++b) {
      const W& wb = w[b];
      __m256i sumi[NX];
      for (int r = 0; r < NX; ++r) sumi[r] = _mm256_setzero_si256();
      for (int half = 0; half < 2; ++half) {
        const __m256i ql0 = load256(wb.ql + 64 * half), ql1 = load256(wb.ql + 64 * half + 32);
        const __m256i qh = load256(wb.qh + 32 * half);
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
            _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
        };
        const int8_t* sc = wb.scales + 8 * half;
        for (int k = 0; k < 4; ++k) {
          const __m256i s = two_scales(sc[2 * k], sc[2 * k + 1]);
          for (int r = 0; r < NX; ++r)
            sumi[r] = _mm256_add_epi32(sumi[r], scaled_dot(q[k], load256(x[r][b].qs + 128 * half + 32 * k), s));
        }
      }
      const float dw = fp16(wb.d);
      for (int r = 0; r < NX; ++r) {
        int offset = 0;  // the -32 of every value, through the group sums of x
        for (int g = 0; g < 16; ++g) offset += wb.scales[g] * x[r][b].bsums[g];
        const __m256i total = _mm256_sub_epi32(sumi[r], _mm256_setr_epi32(32 * offset, 0, 0, 0, 0, 0, 0, 0));
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x[r][b].d), _mm256_cvtepi32_ps(total), acc[r]);
      }
    }
    for (int r = 0; r < NX; ++r) out[r] = hsum(acc[r]);
  }
};

// ---- the dispatcher: n_x -> rows<NX> ---------------------------------------------------------------------

template <typename K, int kBlock>
__attribute__((target(FERRY_X86_TARGET))) void row_dot(int64_t n, const void* w, const void* x, size_t xb,
                                                       int n_x, float* out) {
  using X = typename K::X;
  const X* xs[kMaxDotRows] = {};
  for (int j = 0; j < n_x; ++j) xs[j] = x_row<X>(x, xb, j);
  const auto* wp = static_cast<const typename K::W*>(w);
  const int64_t nb = n / kBlock;
  switch (n_x) {
    case 1: K::template rows<1>(nb, wp, xs, out); break;
    case 2: K::template rows<2>(nb, wp, xs, out); break;
    case 3: K::template rows<3>(nb, wp, xs, out); break;
    default: K::template rows<4>(nb, wp, xs, out); break;
  }
}

// Sets the 32-value and K-quant kernels of this compilation.
inline void fill_x86_quant(DotKernels& k) {
  auto set = [&](DType t, DotFn fn) { k.by_weight_type[static_cast<size_t>(t)] = fn; };
  set(DType::Q4_0, g4_dot<KQ4_0>);
  set(DType::Q4_1, g4_dot<KQ4_1>);
  set(DType::Q5_0, g4_dot<KQ5_0>);
  set(DType::Q5_1, g4_dot<KQ5_1>);
  set(DType::Q8_0, g4_dot<KQ8_0>);
  set(DType::Q2_K, tile_by_rows<row_dot<KQ2_K, kQKK>>);
  set(DType::Q3_K, tile_by_rows<row_dot<KQ3_K, kQKK>>);
  set(DType::Q4_K, tile_by_rows<row_dot<KQ45_K<BlockQ4_K, false>, kQKK>>);
  set(DType::Q5_K, tile_by_rows<row_dot<KQ45_K<BlockQ5_K, true>, kQKK>>);
  set(DType::Q6_K, tile_by_rows<row_dot<KQ6_K, kQKK>>);
  k.quantize_q8_0g4 = quantize_act_q8_0g4;
  k.quantize_q8_1g4 = quantize_act_q8_1g4;
}

}  // namespace
}  // namespace ferry::dot_kernels

#endif  // __x86_64__
