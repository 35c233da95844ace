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

// Float path (F32, F16, BF16): f32 activations straight from x.
template <class D>
struct FloatPath {
  using Raw = typename D::Raw;
  struct X { float v[D::kVals]; };
  using Ctx = const float*;
  FERRY_HD static int64_t units(int64_t cols) { return D::chunks(cols); }
  FERRY_HD static inline X load_x(Ctx x, int64_t k, int t, int64_t c) {
    X r;
    const float* src = x + size_t(t) * size_t(k) + size_t(c) * D::kVals;
FERRY_UNROLL
    for (int i = 0; i < D::kVals / 4; ++i) {
      const uint4 u = load16(src + 4 * i);
      r.v[4 * i] = bits_to_float(u.x);
      r.v[4 * i + 1] = bits_to_float(u.y);
      r.v[4 * i + 2] = bits_to_float(u.z);
      r.v[4 * i + 3] = bits_to_float(u.w);
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
    DecodeQ4K::scale_min(w.head, g, &sc0, &mn0);
    DecodeQ4K::scale_min(w.head, g + 1, &sc1, &mn1);
    const bool second = (w.k % 2) != 0;
    const float s_a = second ? x.ma.z : x.ma.y, s_b = second ? x.mb.z : x.mb.y;
    float r = (d * sc0) * x.ma.x * float(sa);
    r = fma_hd((d * sc1) * x.mb.x, float(sb), r);
    r = fma_hd(-dmin * mn0, s_a, r);
    return fma_hd(-dmin * mn1, s_b, r);
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

// Rows per group and units per lane in flight of the CUDA-core kernel, sized to stay within 128 registers
// without spills (ptxas -v, sm_90a): fewer for 32-value chunks, Q4_K's extra header registers and many tokens.
template <class D, int kTok>
struct CoreShape {
  static constexpr bool kQuant = !std::is_same_v<typename PathOf<D>::type, FloatPath<D>>;
  static constexpr bool k32 = D::kVals >= 32;
  static constexpr bool kQ4K = std::is_same_v<D, DecodeQ4K>;
  static constexpr int kR = kTok == 16 && kQuant ? 2 : 4;
  static constexpr int kU = kTok >= 8 || kQ4K ? 1 : (kTok == 4 || k32 || (kQuant && kTok == 2) ? 2 : 4);
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
