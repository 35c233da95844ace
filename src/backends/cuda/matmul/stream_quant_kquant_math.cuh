// The streamed quantized matvec's per-lane math for the K-quants (Q4_K, Q5_K, Q6_K; design: stream_quant.cuh), beside
// stream_quant_math.cuh's Q8_0/Q4_0 lanes and compiled for the device and the host the same way
// (tests/cuda/stream_quant_kquant_emulation_test.cpp runs the lane mapping serially on the CPU with these functions).
//
// All three take a 512-column segment as 2 super-blocks of 256, lane l the super-block l / 16 and 16 of its values in
// two runs of 8 (A and B), each run inside one 32-value activation group held by 4 neighbouring lanes (l ^ 1, l ^ 2):
// the activations are quantized per group (two levels, or one with kOne: stream_quant_math.cuh's quantize_lane), and
// each lane's share of a row is exact int32 sums times fp32 scales: every weight keeps the format's value.
//   Q4_K / Q5_K: k = l % 16, c = k / 4, p = k % 4; run A = values 64 c + 8 p + [0, 8) (group 2 c, low nibbles of quant
//                bytes 32 c + 8 p .. +7), run B = 64 c + 32 + 8 p + [0, 8) (group 2 c + 1, their high nibbles);
//                Q5_K's 5th bits: bits 2 c (A) and 2 c + 1 (B) of qh bytes 8 p .. 8 p + 7.
//   Q6_K:        k = l % 16, h = k / 8, i = k % 8; run A = values 128 h + 8 i + [0, 8) (low nibbles of ql bytes 64 h +
//                8 i .. +7, qh bits s, s + 1 above them with s = 2 (i / 4)), run B = 128 h + 64 + 8 i + [0, 8) (their
//                high nibbles, qh bits s + 4, s + 5), qh bytes 32 h + 8 (i % 4) .. +7; A's scale is scales[8 h + i / 2],
//                B's scales[8 h + 4 + i / 2] (ggml's dequantize_row_q6_K: ql[l] low -> y[l], ql[l + 32] low ->
//                y[l + 32], ql[l] high -> y[l + 64], ql[l + 32] high -> y[l + 96], per half of 128).
#pragma once

#include <cstdint>

#include "backends/cuda/matmul/stream_quant_math.cuh"

namespace ferry::cuda_ops::quant_stream {

// Bytes of one segment (2 super-blocks) of a row: Q4_K / Q5_K as stored; Q6_K's quants only (its scale records are
// in the split layout's scales region, 2 x 18 bytes a segment).
inline constexpr int kQ4KSegBytes = 2 * kQ4KBytes;
inline constexpr int kQ5KSegBytes = 2 * kQ5KBytes;
inline constexpr int kQ6KQuantBytes = 192;  // ql[128] qh[64] of a super-block (weight_layout.cuh's Q6_K split)
inline constexpr int kQ6KRecBytes = 18;     // int8 scales[16] then fp16 d
inline constexpr int kQ6KSegBytes = 2 * kQ6KQuantBytes;

FERRY_HD inline constexpr bool is_stream_kquant(DType w) {
  return w == DType::Q4_K || w == DType::Q5_K || w == DType::Q6_K;
}

// Column of LaneAct value i (0..15; 0..7 run A, 8..15 run B) of `lane` within its 512-column segment.
FERRY_HD inline int q4k_lane_col(int lane, int i) {
  const int k = lane % 16;
  return (lane / 16) * kKBlock + 64 * (k / 4) + 8 * (k % 4) + (i < 8 ? i : 32 + (i - 8));
}
FERRY_HD inline int q6k_lane_col(int lane, int i) {
  const int k = lane % 16;
  return (lane / 16) * kKBlock + 128 * (k / 8) + 8 * (k % 8) + (i < 8 ? i : 64 + (i - 8));
}
// The distance from run A to run B.
FERRY_HD inline constexpr int kquant_run_gap(DType w) { return w == DType::Q6_K ? 64 : 32; }

// Per-lane constants of the Q4_K / Q5_K scale decode (c = (lane % 16) / 4): which header bytes, shift and masks.
struct Q4KLaneSel {
  uint32_t sel;     // PRMT selector: c even 0x5410 (bytes 0, 1, 4, 5), c odd 0x7632 (2, 3, 6, 7)
  uint32_t shift;   // 0 for c < 2, 2 for c >= 2 (the scale's top 2 bits move to bits 4, 5)
  uint32_t mask_x;  // c < 2: 0x3F3F3F3F (6-bit scale/min in place); c >= 2: 0x30303030 (the top 2 bits)
  uint32_t mask_y;  // c < 2: 0; c >= 2: 0x0F0F0F0F (the low 4 bits from header bytes 12..15)
};
FERRY_HD inline Q4KLaneSel q4k_lane_sel(int lane) {
  const int c = (lane % 16) / 4;
  return {c % 2 ? 0x7632u : 0x5410u, c >= 2 ? 2u : 0u, c >= 2 ? 0x30303030u : 0x3F3F3F3Fu,
          c >= 2 ? 0x0F0F0F0Fu : 0u};
}
// The lane's (sc_A, sc_B, mn_A, mn_B) as the 4 bytes of a word, from header words y = scale bytes 0..3, z = 4..7,
// w = 8..11 (ggml's get_scale_min_k4 for groups 2 c and 2 c + 1): j < 4: sc = s[j] & 63, mn = s[j + 4] & 63;
// j >= 4: sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4, mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4.
FERRY_HD inline uint32_t q4k_scale_min(uint32_t y, uint32_t z, uint32_t w, const Q4KLaneSel& s) {
  const uint32_t x = byte_perm(y, z, s.sel);        // c < 2: (s[2c], s[2c+1], s[2c+4], s[2c+5]); else j-4.., j..
  const uint32_t lo4 = byte_perm(w, w >> 4, s.sel);  // c >= 2: (s[j+4], s[j+5], s[j+4] >> 4, s[j+5] >> 4)
  return ((x >> s.shift) & s.mask_x) | (lo4 & s.mask_y);
}

// K-quant activations: quantize_lane's levels per 32-value group, the group being the weight's (run A: values 0..7
// with amax_a, run B: values 8..15 with amax_b; each the max over the 4 lanes of that group), plus the group sums
// Σ v: offset = V_A, vsum_b = V_B; scale = the v = 1 value of group A (dx2, or dx with kOne), scale_b of group B.
template <bool kOne = false>
FERRY_HD inline LaneAct quantize_lane_kquant(const float (&x)[kLaneVals], float amax_a, float amax_b) {
  LaneAct a{};
  float dx[2], inv[2], inv2[2], dv[2];
  const float amax[2] = {amax_a, amax_b};
FERRY_UNROLL
  for (int g = 0; g < 2; ++g) {
    const bool live = amax[g] > kTinyBlock;
    dx[g] = amax[g] / 127.0f;
    inv[g] = live ? 127.0f / amax[g] : 0.0f;
    inv2[g] = inv[g] * 256.0f;
    dv[g] = live ? (kOne ? dx[g] : dx[g] * (1.0f / 256.0f)) : 0.0f;
  }
  uint32_t b1[kLaneVals], b2[kLaneVals];
FERRY_UNROLL
  for (int i = 0; i < kLaneVals; ++i) quantize_value<kOne>(x[i], inv[i / 8], dx[i / 8], inv2[i / 8], b1[i], b2[i]);
FERRY_UNROLL
  for (int w = 0; w < 4; ++w) {
    a.hi[w] = pack_low_bytes(b1[4 * w], b1[4 * w + 1], b1[4 * w + 2], b1[4 * w + 3]);
    if constexpr (!kOne) a.lo[w] = pack_low_bytes(b2[4 * w], b2[4 * w + 1], b2[4 * w + 2], b2[4 * w + 3]);
  }
  a.scale = dv[0];
  a.scale_b = dv[1];
  constexpr uint32_t kOnes = 0x01010101u;
  const int h_a = dp4a_ss(a.hi[1], kOnes, dp4a_ss(a.hi[0], kOnes, 0));
  const int h_b = dp4a_ss(a.hi[3], kOnes, dp4a_ss(a.hi[2], kOnes, 0));
  if constexpr (kOne) {
    a.offset = h_a;
    a.vsum_b = h_b;
  } else {
    const int l_a = dp4a_ss(a.lo[1], kOnes, dp4a_ss(a.lo[0], kOnes, 0));
    const int l_b = dp4a_ss(a.lo[3], kOnes, dp4a_ss(a.lo[2], kOnes, 0));
    a.offset = 256 * h_a + l_a;
    a.vsum_b = 256 * h_b + l_b;
  }
  return a;
}

// Σ q v of one run (q: 2 words of 4 unsigned values each below 128, against LaneAct words w0, w0 + 1), exact.
template <bool kOne>
FERRY_HD inline int run_dot(uint32_t q0, uint32_t q1, const LaneAct& a, int w0) {
  const int h = dp4a_ss(q1, a.hi[w0 + 1], dp4a_ss(q0, a.hi[w0], 0));
  if constexpr (kOne) return h;
  const int l = dp4a_ss(q1, a.lo[w0 + 1], dp4a_ss(q0, a.lo[w0], 0));
  return 256 * h + l;
}

struct Q4KSums {
  int d_a, d_b;  // sc S per group (S = Σ q v)
  int m_a, m_b;  // mn V per group (V = Σ v)
};
// Q4_K: the lane's int32 sums (q: its 8 quant bytes as 2 words, scmn from q4k_scale_min), exact: |S| <= 8 x 15 x
// 32639 < 3.92e6, x 63 < 2.5e8; |V| x 63 < 1.7e7. Low nibbles masked in place; high nibbles as unsigned bytes
// 16 q (no shift), the group-B sum divided by 16 once (exact: every term is a multiple of 16).
template <bool kOne = false>
FERRY_HD inline Q4KSums dot_q4k_lane(const uint32_t (&q)[2], const LaneAct& a, uint32_t scmn) {
  const uint32_t n0 = q[0] & 0x0F0F0F0Fu, n1 = q[1] & 0x0F0F0F0Fu;
  const uint32_t m0 = q[0] & 0xF0F0F0F0u, m1 = q[1] & 0xF0F0F0F0u;
  const int s_a = run_dot<kOne>(n0, n1, a, 0);
  int hh = dp4a_us(m1, a.hi[3], dp4a_us(m0, a.hi[2], 0));
  if constexpr (!kOne) hh = 256 * hh + dp4a_us(m1, a.lo[3], dp4a_us(m0, a.lo[2], 0));
  const int s_b = hh >> 4;
  const int sc_a = int(scmn & 0xFFu), sc_b = int((scmn >> 8) & 0xFFu);
  const int mn_a = int((scmn >> 16) & 0xFFu), mn_b = int(scmn >> 24);
  return {sc_a * s_a, sc_b * s_b, mn_a * a.offset, mn_b * a.vsum_b};
}

// Q5_K: as Q4_K with each value's 5th bit from qh (its 8 qh bytes as 2 words; c = (lane % 16) / 4), values 0..31:
// |S| <= 8 x 31 x 32639 < 8.1e6, x 63 < 5.1e8, exact.
template <bool kOne = false>
FERRY_HD inline Q4KSums dot_q5k_lane(const uint32_t (&q)[2], const uint32_t (&qh)[2], const LaneAct& a, uint32_t scmn,
                                     int c) {
  const uint32_t sa = uint32_t(2 * c), sb = sa + 1;
  const uint32_t a0 = (q[0] & 0x0F0F0F0Fu) | (((qh[0] >> sa) & 0x01010101u) << 4);
  const uint32_t a1 = (q[1] & 0x0F0F0F0Fu) | (((qh[1] >> sa) & 0x01010101u) << 4);
  const uint32_t b0 = ((q[0] >> 4) & 0x0F0F0F0Fu) | (((qh[0] >> sb) & 0x01010101u) << 4);
  const uint32_t b1 = ((q[1] >> 4) & 0x0F0F0F0Fu) | (((qh[1] >> sb) & 0x01010101u) << 4);
  const int s_a = run_dot<kOne>(a0, a1, a, 0), s_b = run_dot<kOne>(b0, b1, a, 2);
  const int sc_a = int(scmn & 0xFFu), sc_b = int((scmn >> 8) & 0xFFu);
  const int mn_a = int((scmn >> 16) & 0xFFu), mn_b = int(scmn >> 24);
  return {sc_a * s_a, sc_b * s_b, mn_a * a.offset, mn_b * a.vsum_b};
}

// Q6_K: the lane's Σ (q - 32) v per run (ql, qh: its 8 ql and 8 qh bytes as 2 words each; k = lane % 16), exact:
// Σ q v <= 8 x 63 x 32639 < 1.65e7 and 32 |V| < 8.4e6. The int8 scales multiply in fp32 (sc S could reach 3.2e9).
struct Q6KSums {
  int s_a, s_b;
};
template <bool kOne = false>
FERRY_HD inline Q6KSums dot_q6k_lane(const uint32_t (&ql)[2], const uint32_t (&qh)[2], const LaneAct& a, int k) {
  const uint32_t s = uint32_t(2 * ((k % 8) / 4));
  const uint32_t h0 = qh[0] >> s, h1 = qh[1] >> s;
  const uint32_t a0 = (ql[0] & 0x0F0F0F0Fu) | ((h0 & 0x03030303u) << 4);
  const uint32_t a1 = (ql[1] & 0x0F0F0F0Fu) | ((h1 & 0x03030303u) << 4);
  const uint32_t b0 = ((ql[0] >> 4) & 0x0F0F0F0Fu) | (h0 & 0x30303030u);
  const uint32_t b1 = ((ql[1] >> 4) & 0x0F0F0F0Fu) | (h1 & 0x30303030u);
  return {run_dot<kOne>(a0, a1, a, 0) - 32 * a.offset, run_dot<kOne>(b0, b1, a, 2) - 32 * a.vsum_b};
}

}  // namespace ferry::cuda_ops::quant_stream
