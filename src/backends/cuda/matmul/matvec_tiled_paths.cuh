// The tiled matvec's per-chunk math and work split, compiled for the device (matvec_tiled.cu) and for the host
// (tests/cuda/matvec_tiled_emulation_test.cpp runs the kernel's loop structure serially on the CPU with exactly
// this math, so the split, the activation layout and the dp4a arithmetic are checked without a GPU).
// A chunk path P has: Raw (one chunk's weight loads, weight_layout.cuh's decoder), X (one token's activations
// for the chunk), Ctx (where activations live), units(cols) (chunks per row), load_x, dot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/matmul/weight_layout.cuh"

namespace ferry::cuda_ops {

#ifndef __CUDACC__
struct float4 {
  float x, y, z, w;
};
#endif

FERRY_HD inline float fma_hd(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return fmaf(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// Per 32 activation values (matvec_tiled.cuh's scratch): dx / 256, the dx/256-scaled sums of values 0..15 and
// 16..31, the integer sum of all 32 v = 256 q1 + q2 as int bits.
FERRY_HD inline float4 make_meta(float dx2, int s_lo, int s_hi) {
  float4 m;
  m.x = dx2;
  m.y = dx2 * float(s_lo);
  m.z = dx2 * float(s_hi);
  const int total = s_lo + s_hi;
  std::memcpy(&m.w, &total, 4);
  return m;
}
FERRY_HD inline int meta_isum(const float4& m) {
  int v;
  std::memcpy(&v, &m.w, 4);
  return v;
}

// Two-level int8 quantization of one value given its block's max |x| (matvec_tiled.cuh): q1, q2.
FERRY_HD inline void quantize_value(float v, float amax, int* q1, int* q2) {
  *q1 = 0;
  *q2 = 0;
  if (!(amax > 0.0f)) return;
  const float dx = amax / 127.0f, dx2 = dx * (1.0f / 256.0f);
#ifdef __CUDA_ARCH__
  const int a = __float2int_rn(v / dx);
#else
  const int a = int(std::nearbyint(v / dx));
#endif
  *q1 = a < -127 ? -127 : (a > 127 ? 127 : a);
  const float r = fma_hd(-dx, float(*q1), v);
#ifdef __CUDA_ARCH__
  const int b = __float2int_rn(r / dx2);
#else
  const int b = int(std::nearbyint(r / dx2));
#endif
  *q2 = b < -127 ? -127 : (b > 127 ? 127 : b);
}

// The scratch as the dp4a paths read it.
struct ActView {
  const int8_t* hi;    // (n, K)
  const int8_t* lo;    // (n, K)
  const float4* meta;  // (n, K / 32)
  int64_t k;           // K
};
FERRY_HD inline ActView act_view(const void* scratch, int n_tokens, int64_t k) {
  const size_t nk = size_t(n_tokens) * size_t(k);
  const auto* base = static_cast<const int8_t*>(scratch);
  return {base, base + nk, reinterpret_cast<const float4*>(base + (2 * nk + 15) / 16 * 16), k};
}

FERRY_HD inline uint4 ldg16(const int8_t* p) { return load16(p); }
FERRY_HD inline float4 ldg_meta(const float4* p) {
#ifdef __CUDA_ARCH__
  return __ldg(p);
#else
  return *p;
#endif
}
FERRY_HD inline int dp4a(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
  return __dp4a(int(a), int(b), c);
#else
  for (int i = 0; i < 4; ++i) c += int(int8_t(a >> (8 * i))) * int(int8_t(b >> (8 * i)));
  return c;
#endif
}

// Float path (F32, F16, BF16, F8_E4M3_B128): f32 activations straight from x, run by run (v[r * kRunLen + j] is column
// run_start(c, r) + j).
template <class D>
struct FloatPath {
  using Raw = typename D::Raw;
  struct X { float v[D::kVals]; };
  using Ctx = const float*;
  FERRY_HD static int64_t units(int64_t cols) { return D::chunks(cols); }
  FERRY_HD static inline X load_x(Ctx x, int64_t k, int t, int64_t c) {
    X r;
FERRY_UNROLL
    for (int run = 0; run < D::kRuns; ++run) {
      const float* src = x + size_t(t) * size_t(k) + size_t(D::run_start(c, run));
FERRY_UNROLL
      for (int i = 0; i < D::kRunLen / 4; ++i) {
        const uint4 u = load16(src + 4 * i);
        float* v = r.v + run * D::kRunLen + 4 * i;
        v[0] = bits_to_float(u.x);
        v[1] = bits_to_float(u.y);
        v[2] = bits_to_float(u.z);
        v[3] = bits_to_float(u.w);
      }
    }
    return r;
  }
  FERRY_HD static inline float dot(const Raw& w, const X& x) {
    float v[D::kVals];
    D::decode(w, v);
    float s0 = 0.0f, s1 = 0.0f;
FERRY_UNROLL
    for (int i = 0; i < D::kVals; i += 2) {
      s0 = fma_hd(v[i], x.v[i], s0);
      s1 = fma_hd(v[i + 1], x.v[i + 1], s1);
    }
    return s0 + s1;
  }
};

// Q8_0 (split layout): a chunk = 16 int8 quants = half a block.
struct Q8Path {
  using Raw = DecodeQ8_0::Raw;
  struct X { uint4 h, l; float dx2; };
  using Ctx = ActView;
  FERRY_HD static int64_t units(int64_t cols) { return cols / 16; }
  FERRY_HD static inline X load_x(const Ctx& a, int64_t k, int t, int64_t c) {
    const size_t off = size_t(t) * size_t(k) + size_t(c) * 16;
    return {ldg16(a.hi + off), ldg16(a.lo + off),
            load_scalar(&a.meta[size_t(t) * size_t(k / 32) + size_t(c / 2)].x)};
  }
  FERRY_HD static inline float dot(const Raw& w, const X& x) {
    int s = dp4a(w.q.x, x.h.x, 0);
    s = dp4a(w.q.y, x.h.y, s);
    s = dp4a(w.q.z, x.h.z, s);
    s = dp4a(w.q.w, x.h.w, s);
    s = dp4a(w.q.x, x.l.x, s * 256);
    s = dp4a(w.q.y, x.l.y, s);
    s = dp4a(w.q.z, x.l.z, s);
    s = dp4a(w.q.w, x.l.w, s);
    return half_bits_to_float(w.d) * x.dx2 * float(s);
  }
};

// Σ over the 32 values of one Q4 chunk (16 bytes: low nibbles = values 0..15, high = 16..31) against
// activation words x0 (values 0..15), x1 (16..31): 8 dp4a.
FERRY_HD inline int dot_nibbles(const uint32_t (&q)[4], const uint4& x0, const uint4& x1, int acc) {
  const uint32_t a0[4] = {x0.x, x0.y, x0.z, x0.w}, a1[4] = {x1.x, x1.y, x1.z, x1.w};
FERRY_UNROLL
  for (int i = 0; i < 4; ++i) {
    acc = dp4a(q[i] & 0x0F0F0F0Fu, a0[i], acc);
    acc = dp4a((q[i] >> 4) & 0x0F0F0F0Fu, a1[i], acc);
  }
  return acc;
}

// Q4_0 / Q4_1 (split layout): a chunk = one block's 16 quant bytes.
template <bool kHasMin>
struct Q4Path {
  using Raw = typename DecodeQ4<kHasMin>::Raw;
  struct X { uint4 h0, h1, l0, l1; float4 m; };
  using Ctx = ActView;
  FERRY_HD static int64_t units(int64_t cols) { return cols / 32; }
  FERRY_HD static inline X load_x(const Ctx& a, int64_t k, int t, int64_t c) {
    const size_t off = size_t(t) * size_t(k) + size_t(c) * 32;
    return {ldg16(a.hi + off), ldg16(a.hi + off + 16), ldg16(a.lo + off), ldg16(a.lo + off + 16),
            ldg_meta(&a.meta[size_t(t) * size_t(k / 32) + size_t(c)])};
  }
  FERRY_HD static inline float dot(const Raw& w, const X& x) {
    const uint32_t q[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
    int s = dot_nibbles(q, x.h0, x.h1, 0);
    s = dot_nibbles(q, x.l0, x.l1, s * 256);
    const float d = half_bits_to_float(uint16_t(w.s & 0xFFFF));
    if constexpr (kHasMin) {
      const float m = half_bits_to_float(uint16_t(w.s >> 16));
      return fma_hd(d * x.m.x, float(s), m * (x.m.y + x.m.z));
    } else {
      return d * x.m.x * float(s - 8 * meta_isum(x.m));  // Σ (q - 8) v, exact in int32
    }
  }
};

// Q4_K (GGUF blocks): chunk c = (super-block c / 8, k = c % 8): 16 quant bytes whose low nibbles are values
// 64 (k/2) + 16 (k%2) + j of sub-block 2 (k/2) and high nibbles the same + 32 (sub-block 2 (k/2) + 1).
struct Q4KPath {
  using Raw = DecodeQ4K::Raw;
  struct X { uint4 ah, bh, al, bl; float4 ma, mb; };
  using Ctx = ActView;
  FERRY_HD static int64_t units(int64_t cols) { return cols / 32; }
  FERRY_HD static inline X load_x(const Ctx& a, int64_t k, int t, int64_t c) {
    const int kk = int(c % 8);
    const int64_t v0 = (c / 8) * kKBlock + 64 * (kk / 2);  // first value of sub-block 2 (k/2)
    const size_t off = size_t(t) * size_t(k) + size_t(v0) + 16 * size_t(kk % 2);
    const size_t m = size_t(t) * size_t(k / 32) + size_t(v0 / 32);
    return {ldg16(a.hi + off), ldg16(a.hi + off + 32), ldg16(a.lo + off), ldg16(a.lo + off + 32),
            ldg_meta(&a.meta[m]), ldg_meta(&a.meta[m + 1])};
  }
  FERRY_HD static inline float dot(const Raw& w, const X& x) {
    const uint32_t q[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
    int sa = 0, sb = 0;
    const uint32_t ah[4] = {x.ah.x, x.ah.y, x.ah.z, x.ah.w}, bh[4] = {x.bh.x, x.bh.y, x.bh.z, x.bh.w};
    const uint32_t al[4] = {x.al.x, x.al.y, x.al.z, x.al.w}, bl[4] = {x.bl.x, x.bl.y, x.bl.z, x.bl.w};
FERRY_UNROLL
    for (int i = 0; i < 4; ++i) {
      sa = dp4a(q[i] & 0x0F0F0F0Fu, ah[i], sa);
      sb = dp4a((q[i] >> 4) & 0x0F0F0F0Fu, bh[i], sb);
    }
    sa *= 256;
    sb *= 256;
FERRY_UNROLL
    for (int i = 0; i < 4; ++i) {
      sa = dp4a(q[i] & 0x0F0F0F0Fu, al[i], sa);
      sb = dp4a((q[i] >> 4) & 0x0F0F0F0Fu, bl[i], sb);
    }
    const float d = half_bits_to_float(uint16_t(w.head.x & 0xFFFF));
    const float dmin = half_bits_to_float(uint16_t(w.head.x >> 16));
    const int g = 2 * (w.k / 2);
    float sc0, mn0, sc1, mn1;
    k_scale_min(w.head, g, &sc0, &mn0);
    k_scale_min(w.head, g + 1, &sc1, &mn1);
    const bool second = (w.k % 2) != 0;
    const float s_a = second ? x.ma.z : x.ma.y, s_b = second ? x.mb.z : x.mb.y;
    float r = (d * sc0) * x.ma.x * float(sa);
    r = fma_hd((d * sc1) * x.mb.x, float(sb), r);
    r = fma_hd(-dmin * mn0, s_a, r);
    return fma_hd(-dmin * mn1, s_b, r);
  }
};

// Bit i of each of the four nibbles of `bits` (bits 0..3) moved to bit 4 of byte i: Q5's high bits as byte offsets.
FERRY_HD inline uint32_t spread_bit4(uint32_t bits) {
  return ((bits & 1u) << 4) | ((bits & 2u) << 11) | ((bits & 4u) << 18) | ((bits & 8u) << 25);
}

// Q5_0 / Q5_1 (split layout): a chunk = one block's 16 quant bytes, the 5th bits from qh (value j: bit j).
template <bool kHasMin>
struct Q5Path {
  using Raw = typename DecodeQ5<kHasMin>::Raw;
  using X = typename Q4Path<kHasMin>::X;
  using Ctx = ActView;
  FERRY_HD static int64_t units(int64_t cols) { return cols / 32; }
  FERRY_HD static inline X load_x(const Ctx& a, int64_t k, int t, int64_t c) { return Q4Path<kHasMin>::load_x(a, k, t, c); }
  FERRY_HD static inline float dot(const Raw& w, const X& x) {
    const uint32_t q[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
    const uint32_t a0[4] = {x.h0.x, x.h0.y, x.h0.z, x.h0.w}, a1[4] = {x.h1.x, x.h1.y, x.h1.z, x.h1.w};
    const uint32_t b0[4] = {x.l0.x, x.l0.y, x.l0.z, x.l0.w}, b1[4] = {x.l1.x, x.l1.y, x.l1.z, x.l1.w};
    int sh = 0, sl = 0;
FERRY_UNROLL
    for (int i = 0; i < 4; ++i) {
      const uint32_t lo = (q[i] & 0x0F0F0F0Fu) | spread_bit4((w.qh >> (4 * i)) & 0xFu);
      const uint32_t hi = ((q[i] >> 4) & 0x0F0F0F0Fu) | spread_bit4((w.qh >> (16 + 4 * i)) & 0xFu);
      sh = dp4a(hi, a1[i], dp4a(lo, a0[i], sh));
      sl = dp4a(hi, b1[i], dp4a(lo, b0[i], sl));
    }
    const int s = sh * 256 + sl;
    const float d = half_bits_to_float(uint16_t(w.s & 0xFFFF));
    if constexpr (kHasMin) {
      const float m = half_bits_to_float(uint16_t(w.s >> 16));
      return fma_hd(d * x.m.x, float(s), m * (x.m.y + x.m.z));
    } else {
      return d * x.m.x * float(s - 16 * meta_isum(x.m));  // Σ (q - 16) v, exact in int32
    }
  }
};

// Q5_K (GGUF blocks): Q4_K's chunks with the 5th bits from qh (bit 2 (k/2) for the low nibbles, + 1 for the high).
struct Q5KPath {
  using Raw = DecodeQ5K::Raw;
  using X = Q4KPath::X;
  using Ctx = ActView;
  FERRY_HD static int64_t units(int64_t cols) { return cols / 32; }
  FERRY_HD static inline X load_x(const Ctx& a, int64_t k, int t, int64_t c) { return Q4KPath::load_x(a, k, t, c); }
  FERRY_HD static inline float dot(const Raw& w, const X& x) {
    const int g = 2 * (w.k / 2);
    const uint32_t q[4] = {w.q.x, w.q.y, w.q.z, w.q.w}, h[4] = {w.qh.x, w.qh.y, w.qh.z, w.qh.w};
    const uint32_t ah[4] = {x.ah.x, x.ah.y, x.ah.z, x.ah.w}, bh[4] = {x.bh.x, x.bh.y, x.bh.z, x.bh.w};
    const uint32_t al[4] = {x.al.x, x.al.y, x.al.z, x.al.w}, bl[4] = {x.bl.x, x.bl.y, x.bl.z, x.bl.w};
    int sa = 0, sb = 0, ta = 0, tb = 0;
FERRY_UNROLL
    for (int i = 0; i < 4; ++i) {
      const uint32_t qa = (q[i] & 0x0F0F0F0Fu) | (((h[i] >> g) & 0x01010101u) << 4);
      const uint32_t qb = ((q[i] >> 4) & 0x0F0F0F0Fu) | (((h[i] >> (g + 1)) & 0x01010101u) << 4);
      sa = dp4a(qa, ah[i], sa);
      sb = dp4a(qb, bh[i], sb);
      ta = dp4a(qa, al[i], ta);
      tb = dp4a(qb, bl[i], tb);
    }
    sa = sa * 256 + ta;
    sb = sb * 256 + tb;
    const float d = half_bits_to_float(uint16_t(w.head.x & 0xFFFF));
    const float dmin = half_bits_to_float(uint16_t(w.head.x >> 16));
    float sc0, mn0, sc1, mn1;
    k_scale_min(w.head, g, &sc0, &mn0);
    k_scale_min(w.head, g + 1, &sc1, &mn1);
    const bool second = (w.k % 2) != 0;
    const float s_a = second ? x.ma.z : x.ma.y, s_b = second ? x.mb.z : x.mb.y;
    float r = (d * sc0) * x.ma.x * float(sa);
    r = fma_hd((d * sc1) * x.mb.x, float(sb), r);
    r = fma_hd(-dmin * mn0, s_a, r);
    return fma_hd(-dmin * mn1, s_b, r);
  }
};

// Q6_K (split layout): chunk c = (super-block c / 4, k = c % 4), DecodeQ6K's four runs of 16 values; run r lies in
// the 32-value activation block 8 (c / 4) + 4 (k / 2) + r, its half k % 2. Per run: d sc_r (dx2 S_r - 32 Σx).
struct Q6KPath {
  using Raw = DecodeQ6K::Raw;
  struct X { uint4 h[4], l[4]; float4 m[4]; };
  using Ctx = ActView;
  FERRY_HD static int64_t units(int64_t cols) { return cols / 64; }
  FERRY_HD static inline X load_x(const Ctx& a, int64_t k, int t, int64_t c) {
    const int kk = int(c % 4);
    const int64_t b0 = (c / 4) * 8 + 4 * (kk / 2);  // the activation block of run 0
    X x;
FERRY_UNROLL
    for (int r = 0; r < 4; ++r) {
      const size_t off = size_t(t) * size_t(k) + size_t(b0 + r) * 32 + 16 * size_t(kk % 2);
      x.h[r] = ldg16(a.hi + off);
      x.l[r] = ldg16(a.lo + off);
      x.m[r] = ldg_meta(&a.meta[size_t(t) * size_t(k / 32) + size_t(b0 + r)]);
    }
    return x;
  }
  FERRY_HD static inline float dot(const Raw& w, const X& x) {
    const uint32_t qa[4] = {w.a.x, w.a.y, w.a.z, w.a.w}, qb[4] = {w.b.x, w.b.y, w.b.z, w.b.w};
    const uint32_t qh[4] = {w.h.x, w.h.y, w.h.z, w.h.w};
    const float d = half_bits_to_float(w.d);
    float r = 0.0f;
FERRY_UNROLL
    for (int run = 0; run < 4; ++run) {
      const uint32_t h4[4] = {x.h[run].x, x.h[run].y, x.h[run].z, x.h[run].w};
      const uint32_t l4[4] = {x.l[run].x, x.l[run].y, x.l[run].z, x.l[run].w};
      int sh = 0, sl = 0;
FERRY_UNROLL
      for (int i = 0; i < 4; ++i) {
        const uint32_t src = run % 2 == 0 ? qa[i] : qb[i];
        const uint32_t nib = run < 2 ? (src & 0x0F0F0F0Fu) : ((src >> 4) & 0x0F0F0F0Fu);
        const uint32_t q = nib | (((qh[i] >> (2 * run)) & 0x03030303u) << 4);  // 0..63 per byte
        sh = dp4a(q, h4[i], sh);
        sl = dp4a(q, l4[i], sl);
      }
      const float sc = float(int8_t(uint8_t(w.sc >> (8 * run))));
      // The dx2-scaled sum of the run's 16 activations: the first or second half of its block (meta y or z).
      const float sum_x = w.k % 2 != 0 ? x.m[run].z : x.m[run].y;
      r = fma_hd(d * sc, fma_hd(x.m[run].x, float(sh * 256 + sl), -32.0f * sum_x), r);
    }
    return r;
  }
};

// Q2_K / Q3_K (split layout): DecodeQ2K's / DecodeQ3K's chunks have Q6_K's geometry (four runs of 16 values,
// run r in activation block 8 (c / 4) + 4 (k / 2) + r, its half k % 2), so they take Q6KPath's activations.
// Per run, with S = Σ q x in dx2 units and sum_x = Σ x: Q2_K d sc (dx2 S) - dmin mn sum_x (q = 0..3);
// Q3_K d sc (dx2 S - 4 sum_x) with q = q2 + 4 hbit = 0..7 (the value's q2 - (hbit ? 0 : 4) plus 4).
template <bool kQ3>
struct LowBitKPath {
  using Raw = std::conditional_t<kQ3, DecodeQ3K::Raw, DecodeQ2K::Raw>;
  using X = Q6KPath::X;
  using Ctx = ActView;
  FERRY_HD static int64_t units(int64_t cols) { return cols / 64; }
  FERRY_HD static inline X load_x(const Ctx& a, int64_t k, int t, int64_t c) { return Q6KPath::load_x(a, k, t, c); }
  FERRY_HD static inline float dot(const Raw& w, const X& x) {
    const uint32_t q[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
    float r = 0.0f;
    float d, dmin = 0.0f;
    if constexpr (kQ3) {
      d = half_bits_to_float(uint16_t(w.rec.w & 0xFFFF));
    } else {
      d = half_bits_to_float(uint16_t(w.dd & 0xFFFF));
      dmin = half_bits_to_float(uint16_t(w.dd >> 16));
    }
FERRY_UNROLL
    for (int run = 0; run < 4; ++run) {
      const uint32_t h4[4] = {x.h[run].x, x.h[run].y, x.h[run].z, x.h[run].w};
      const uint32_t l4[4] = {x.l[run].x, x.l[run].y, x.l[run].z, x.l[run].w};
      int sh = 0, sl = 0;
FERRY_UNROLL
      for (int i = 0; i < 4; ++i) {
        uint32_t qq = (q[i] >> (2 * run)) & 0x03030303u;
        if constexpr (kQ3) {
          const uint32_t hm = i == 0 ? w.hm.x : i == 1 ? w.hm.y : i == 2 ? w.hm.z : w.hm.w;
          qq |= ((hm >> (4 * (w.k / 2) + run)) & 0x01010101u) << 2;
        }
        sh = dp4a(qq, h4[i], sh);
        sl = dp4a(qq, l4[i], sl);
      }
      const float sum_x = w.k % 2 != 0 ? x.m[run].z : x.m[run].y;  // Σ x of the run's half block (dx2-scaled)
      const float s = float(sh * 256 + sl);
      if constexpr (kQ3) {
        r = fma_hd(d * float(DecodeQ3K::scale(w, run)), fma_hd(x.m[run].x, s, -4.0f * sum_x), r);
      } else {
        const uint32_t sc = DecodeQ2K::scale_byte(w, run);
        r = fma_hd(d * float(sc & 0xF), x.m[run].x * s, r);
        r = fma_hd(-dmin * float(sc >> 4), sum_x, r);
      }
    }
    return r;
  }
};

template <class D>
struct PathOf;
template <> struct PathOf<DecodeF32> { using type = FloatPath<DecodeF32>; };
template <> struct PathOf<DecodeHalf<false>> { using type = FloatPath<DecodeHalf<false>>; };
template <> struct PathOf<DecodeHalf<true>> { using type = FloatPath<DecodeHalf<true>>; };
template <> struct PathOf<DecodeQ8_0> { using type = Q8Path; };
template <> struct PathOf<DecodeQ4<false>> { using type = Q4Path<false>; };
template <> struct PathOf<DecodeQ4<true>> { using type = Q4Path<true>; };
template <> struct PathOf<DecodeQ4K> { using type = Q4KPath; };
template <> struct PathOf<DecodeQ5<false>> { using type = Q5Path<false>; };
template <> struct PathOf<DecodeQ5<true>> { using type = Q5Path<true>; };
template <> struct PathOf<DecodeQ5K> { using type = Q5KPath; };
template <> struct PathOf<DecodeQ6K> { using type = Q6KPath; };
template <> struct PathOf<DecodeQ2K> { using type = LowBitKPath<false>; };
template <> struct PathOf<DecodeQ3K> { using type = LowBitKPath<true>; };
template <> struct PathOf<DecodeF8> { using type = FloatPath<DecodeF8>; };

// Rows per group and units per lane in flight of the CUDA-core kernel, sized to stay within 128 registers
// without spills (ptxas -v, sm_90a): fewer for 32-value chunks, Q4_K's extra header registers and many tokens;
// the float-decoded K-quants (64-value chunks, or a header and high bits) two rows, one unit.
template <class D, int kTok>
struct CoreShape {
  static constexpr bool kQuant = !std::is_same_v<typename PathOf<D>::type, FloatPath<D>>;
  static constexpr bool k32 = D::kVals >= 32;
  static constexpr bool kQ4K = std::is_same_v<D, DecodeQ4K>;
  static constexpr bool kHeavy = std::is_same_v<D, DecodeQ5K> || std::is_same_v<D, DecodeQ6K> ||
                                 std::is_same_v<D, DecodeQ2K> || std::is_same_v<D, DecodeQ3K>;
  static constexpr int kR = (kTok == 16 && kQuant) || kHeavy ? 2 : 4;
  static constexpr bool kF8 = std::is_same_v<D, DecodeF8>;  // 16 floats per chunk and token: as the 32-value chunks
  static constexpr int kU = kTok >= 8 || kQ4K || kHeavy ? 1 : (kTok == 4 || k32 || kF8 || (kQuant && kTok == 2) ? 2 : 4);
};

// Host-chosen work split (matvec_tiled.cu's file comment).
struct Plan {
  int64_t n_groups;  // row groups of kR rows
  int64_t n_units;   // units per row (chunks, or 32-column steps)
  int64_t slice;     // units per K-slice
  int split;         // S: slices per group
  int gpb;           // most groups any block owns
};

// Picks the grid (<= sms blocks) and S: items per block (gpb S) as close to a multiple of `warps` as S in 1..16
// allows, every slice >= min_slice units, partials within max_partial bytes. Returns the grid size.
inline int make_plan(int64_t rows, int r_per_group, int64_t n_units, int64_t min_slice, size_t partial_bytes_per_item,
                     int sms, int warps, size_t max_partial, Plan* pl) {
  pl->n_groups = (rows + r_per_group - 1) / r_per_group;
  pl->n_units = n_units;
  const int64_t grid = sms < pl->n_groups ? sms : pl->n_groups;
  pl->gpb = int((pl->n_groups + grid - 1) / grid);
  pl->split = 1;
  pl->slice = n_units;
  double best = 0.0;
  for (int s = 1; s <= 16; s *= 2) {
    const int64_t slice = (n_units + s - 1) / s;
    if (s > 1 && (slice < min_slice || size_t(pl->gpb) * size_t(s) * partial_bytes_per_item > max_partial)) break;
    const int64_t items = int64_t(pl->gpb) * s;
    const double eff = double(items) / double((items + warps - 1) / warps * warps);
    if (eff > best + 1e-9) {
      best = eff;
      pl->split = s;
      pl->slice = slice;
    }
  }
  return int(grid);
}

}  // namespace ferry::cuda_ops
