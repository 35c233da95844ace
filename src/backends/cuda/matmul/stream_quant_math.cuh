// The streamed quantized matvec's per-lane math (design: stream_quant.cuh), compiled for the device (stream_quant_kernel.cuh)
// and for the host (tests/cuda/stream_quant_emulation_test.cpp runs the kernel's lane mapping serially on the CPU
// with exactly these functions, so the mapping, the activation quantization and the dp4a arithmetic are checked
// without a GPU).
//
// Lane mapping (both types): a "segment" = 512 columns = 16 blocks of 32; lane l of a warp takes half of block
// l / 2 of the segment (h = l % 2):
//   Q8_0: quant bytes [16 l, 16 l + 16) of the segment's 512 (one 16-byte load) = values 16 l + [0, 16);
//   Q4_0: quant bytes [8 l, 8 l + 8) of its 256 (one 8-byte load) = bytes 8h..8h+7 of the block: low nibbles
//         are values 8h + [0, 8), high nibbles 16 + 8h + [0, 8).
// Activations: the tiled matvec's two int8 levels per 32-value block (matvec_tiled.cuh), made by each lane for its own 16
// values (the block's max |x| from the partner lane by one shuffle): x ~= dx2 v, v = 256 q1 + q2, dx2 = max|x| /
// 127 / 256 (relative error ~2e-5, inside the matvec tests' 1e-4). Every integer sum below is exact in int32.
// kOne (Q8_0/Q4_0, MatvecParams::one_level_acts): one level, x ~= dx q1 with dx = max|x| / 127 (llama.cpp's q8_1
// activations, the CPU fast path's Q8_0 ones: ~0.5% relative per value): half the dp4a and no second level.
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/cuda/matmul/weight_layout.cuh"

namespace ferry::cuda_ops::quant_stream {

inline constexpr int kSegVals = 512;   // columns per segment (one warp-wide load of a row)
inline constexpr int kLaneVals = 16;   // of which one lane takes
// Blocks whose max |x| is at most this count as zero (their 127 / max|x| would overflow fp32): an absolute
// error below 32e-30 |w| per block.
inline constexpr float kTinyBlock = 1e-30f;

// One lane's activations of one segment: two int8 levels, 4 values a word.
//   Q8_0: hi[i], lo[i] = values 4i..4i+3 of the lane's 16.
//   Q4_0: words 0, 1 = values 8h + [0, 8) of the block (against the low nibbles), words 2, 3 = 16 + 8h + [0, 8)
//         (against the high nibbles).
struct LaneAct {
  uint32_t hi[4];  // q1 bytes
  uint32_t lo[4];  // q2 bytes
  float scale;     // Q8_0: dx2; Q4_0: dx2 / 16 (the Q4_0 dot returns 16 x the sum); Q4_K: dx2 of values 0..7
  float scale_b;   // Q4_K: dx2 of values 8..15; else 0
  int offset;      // Q4_0: -128 Σ v over the lane's 16 values (the nibble offset 8, times 16); Q4_K: Σ v over
                   // values 0..7 (group A); Q8_0: 0
  int vsum_b;      // Q4_K: Σ v over values 8..15 (group B); else 0
};

FERRY_HD inline float fma_f(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return fmaf(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
FERRY_HD inline uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
// Bytes (b0 of a, b0 of b, b0 of c, b0 of d) as one word (PRMT on the device).
FERRY_HD inline uint32_t pack_low_bytes(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
#ifdef __CUDA_ARCH__
  return __byte_perm(__byte_perm(a, b, 0x0040u), __byte_perm(c, d, 0x0040u), 0x5410u);
#else
  return (a & 0xFFu) | (b & 0xFFu) << 8 | (c & 0xFFu) << 16 | (d & 0xFFu) << 24;
#endif
}
// Byte permute (PRMT without sign replication): result byte i = byte (s >> 4 i) & 7 of {b : a} (a: bytes 0-3).
FERRY_HD inline uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t s) {
#ifdef __CUDA_ARCH__
  return __byte_perm(a, b, s);
#else
  const uint64_t ab = uint64_t(a) | uint64_t(b) << 32;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= uint32_t((ab >> (8 * ((s >> (4 * i)) & 7u))) & 0xFFu) << (8 * i);
  return r;
#endif
}
// Σ a_i b_i over the 4 byte lanes: signed x signed, and unsigned a x signed b (dp4a).
FERRY_HD inline int dp4a_ss(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
  return __dp4a(int(a), int(b), c);
#else
  for (int i = 0; i < 4; ++i) c += int(int8_t(a >> (8 * i))) * int(int8_t(b >> (8 * i)));
  return c;
#endif
}
FERRY_HD inline int dp4a_us(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  for (int i = 0; i < 4; ++i) c += int(uint8_t(a >> (8 * i))) * int(int8_t(b >> (8 * i)));
  return c;
#endif
}

// One value's int8 levels as the low bytes of two float bit patterns (quantize_lane's rounding, below): b1 for
// round(x / dx), b2 for round((x - dx q1) 256 / dx) clamped to +-127 (kOne: b1 alone). inv = 1 / dx (0 for a zero
// block), inv2 = 256 inv.
template <bool kOne>
FERRY_HD inline void quantize_value(float x, float inv, float dx, float inv2, uint32_t& b1, uint32_t& b2) {
  constexpr float kMagic = 12582912.0f;  // 1.5 x 2^23
  const float t1 = fma_f(x, inv, kMagic);
  b1 = float_bits(t1);
  if constexpr (!kOne) {
    const float q1 = t1 - kMagic;
    const float r = fma_f(-dx, q1, x);
    float t2 = fma_f(r, inv2, kMagic);
    t2 = t2 < kMagic - 127.0f ? kMagic - 127.0f : (t2 > kMagic + 127.0f ? kMagic + 127.0f : t2);
    b2 = float_bits(t2);
  }
}

// Two-level quantization of the lane's 16 values x (in LaneAct order) given the block's max |x|. Rounding by
// the fp32 magic number 1.5 x 2^23 (round to nearest even, as rint): fma(x, 127 / amax, M) holds round(x dx^-1)
// in its low mantissa bits, so the int8 byte is the low byte of its bit pattern (M's low 8 bits are zero) and
// no float -> int conversion runs. q1 needs no clamp (|x| <= amax); q2 = round(r 256 / dx) is clamped to +-127
// as kTiled does. kQ4: also the lane's -128 Σ v and the scale / 16. kOne: q1 alone (lo stays 0), v = q1, scale dx.
template <bool kQ4, bool kOne = false>
FERRY_HD inline LaneAct quantize_lane(const float (&x)[kLaneVals], float amax) {
  LaneAct a{};
  const bool live = amax > kTinyBlock;
  const float dx = amax / 127.0f;
  const float inv = live ? 127.0f / amax : 0.0f, inv2 = inv * 256.0f;
  uint32_t b1[kLaneVals], b2[kLaneVals];
FERRY_UNROLL
  for (int i = 0; i < kLaneVals; ++i) quantize_value<kOne>(x[i], inv, dx, inv2, b1[i], b2[i]);
FERRY_UNROLL
  for (int w = 0; w < 4; ++w) {
    a.hi[w] = pack_low_bytes(b1[4 * w], b1[4 * w + 1], b1[4 * w + 2], b1[4 * w + 3]);
    if constexpr (!kOne) a.lo[w] = pack_low_bytes(b2[4 * w], b2[4 * w + 1], b2[4 * w + 2], b2[4 * w + 3]);
  }
  const float dv = live ? (kOne ? dx : dx * (1.0f / 256.0f)) : 0.0f;  // the value of v = 1
  a.scale = kQ4 ? dv * (1.0f / 16.0f) : dv;
  if constexpr (kQ4) {  // Σ v = 256 Σ q1 + Σ q2 (kOne: Σ q1), by dp4a against ones
    constexpr uint32_t kOnes = 0x01010101u;
    int s1 = 0, s2 = 0;
FERRY_UNROLL
    for (int w = 0; w < 4; ++w) {
      s1 = dp4a_ss(a.hi[w], kOnes, s1);
      if constexpr (!kOne) s2 = dp4a_ss(a.lo[w], kOnes, s2);
    }
    a.offset = -128 * (kOne ? s1 : 256 * s1 + s2);
  }
  return a;
}

// Q8_0: Σ q v over the lane's 16 values (q: its 16 quant bytes as 4 words), exact.
template <bool kOne = false>
FERRY_HD inline int dot_q8_lane(const uint32_t (&q)[4], const LaneAct& a) {
  if constexpr (kOne) {
    int h0 = dp4a_ss(q[0], a.hi[0], 0), h1 = dp4a_ss(q[1], a.hi[1], 0);
    h0 = dp4a_ss(q[2], a.hi[2], h0);
    h1 = dp4a_ss(q[3], a.hi[3], h1);
    return h0 + h1;
  }
  int h0 = dp4a_ss(q[0], a.hi[0], 0), h1 = dp4a_ss(q[1], a.hi[1], 0);
  int l0 = dp4a_ss(q[0], a.lo[0], 0), l1 = dp4a_ss(q[1], a.lo[1], 0);
  h0 = dp4a_ss(q[2], a.hi[2], h0);
  h1 = dp4a_ss(q[3], a.hi[3], h1);
  l0 = dp4a_ss(q[2], a.lo[2], l0);
  l1 = dp4a_ss(q[3], a.lo[3], l1);
  return 256 * (h0 + h1) + (l0 + l1);
}

// Q4_0: 16 Σ (q - 8) v over the lane's 16 values (q: its 8 quant bytes as 2 words), exact. The low nibbles are
// masked in place (0..15); the high ones are masked in place too, as unsigned bytes 16 q (dp4a unsigned x
// signed), so no shift runs: 16 Σ_lo q v + Σ_hi (16 q) v - 128 Σ v.
template <bool kOne = false>
FERRY_HD inline int dot_q4_lane(const uint32_t (&q)[2], const LaneAct& a) {
  const uint32_t n0 = q[0] & 0x0F0F0F0Fu, n1 = q[1] & 0x0F0F0F0Fu;
  const uint32_t m0 = q[0] & 0xF0F0F0F0u, m1 = q[1] & 0xF0F0F0F0u;
  if constexpr (kOne) {  // v = q1: two chains of two
    const int lh = dp4a_ss(n1, a.hi[1], dp4a_ss(n0, a.hi[0], 0));
    const int hh = dp4a_us(m1, a.hi[3], dp4a_us(m0, a.hi[2], a.offset));
    return 16 * lh + hh;
  }
  int lh = dp4a_ss(n0, a.hi[0], 0), hh = dp4a_us(m0, a.hi[2], 0);
  int ll = dp4a_ss(n0, a.lo[0], 0), hl = dp4a_us(m0, a.lo[2], a.offset);
  lh = dp4a_ss(n1, a.hi[1], lh);
  hh = dp4a_us(m1, a.hi[3], hh);
  ll = dp4a_ss(n1, a.lo[1], ll);
  hl = dp4a_us(m1, a.lo[3], hl);
  return 4096 * lh + 16 * ll + 256 * hh + hl;
}

}  // namespace ferry::cuda_ops::quant_stream
