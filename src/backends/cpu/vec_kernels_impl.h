// The vec kernels (vec_kernels.h), written once over a vector type V (vec_types_x86.h /
// vec_types_scalar.h) and compiled per SIMD level. The including file defines FERRY_VEC_FN (the target
// attribute, with inline) and includes its vector types first. Internal linkage throughout.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/vec_kernels.h"

namespace ferry::vec_kernels {
namespace {

// exp(x), Cephes-style: n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts, so r is exact to ~1 ulp),
// exp(r) by a degree-7 polynomial on |r| <= ln 2 / 2, times 2^n. Max relative error ~1e-7 for x in
// [-87.3, 88.7]; 0 below (also for -inf), inf above.
template <class V>
FERRY_VEC_FN typename V::T exp_v(typename V::T x) {
  using T = typename V::T;
  const T lo = V::set1(-87.33654f), hi = V::set1(88.72284f);
  const T xc = V::min(V::max(x, lo), hi);
  const T n = V::round(V::mul(xc, V::set1(1.44269504088896341f)));
  T r = V::fma(n, V::set1(-0.693359375f), xc);
  r = V::fma(n, V::set1(2.12194440e-4f), r);
  T p = V::set1(1.9875691500e-4f);
  p = V::fma(p, r, V::set1(1.3981999507e-3f));
  p = V::fma(p, r, V::set1(8.3334519073e-3f));
  p = V::fma(p, r, V::set1(4.1665795894e-2f));
  p = V::fma(p, r, V::set1(1.6666665459e-1f));
  p = V::fma(p, r, V::set1(5.0000001201e-1f));
  const T y = V::fma(V::mul(p, r), r, V::add(r, V::set1(1.0f)));  // 1 + r + r^2 p(r)
  return V::select(V::lt(x, lo), V::zero(), V::ldexp(y, n));
}

// Applies f (V::T -> V::T, one vector of x) over n floats: whole vectors, then the tail through a padded
// copy, so the tail uses the same code.
template <class V, typename F>
FERRY_VEC_FN void map_n(int64_t n, F f) {
  int64_t i = 0;
  for (; i + V::kW <= n; i += V::kW) f(i, V::kW);
  if (i < n) f(i, int(n - i));
}

template <class V>
FERRY_VEC_FN typename V::T load_n(const float* p, int cnt) {
  if (cnt == V::kW) return V::load(p);
  alignas(64) float buf[V::kW] = {};
  std::memcpy(buf, p, size_t(cnt) * 4);
  return V::load(buf);
}

template <class V>
FERRY_VEC_FN void store_n(float* p, typename V::T v, int cnt) {
  if (cnt == V::kW) return V::store(p, v);
  alignas(64) float buf[V::kW];
  V::store(buf, v);
  std::memcpy(p, buf, size_t(cnt) * 4);
}

template <class V>
FERRY_VEC_FN void exp_n(const float* x, float* y, int64_t n) {
  map_n<V>(n, [&](int64_t i, int c) { store_n<V>(y + i, exp_v<V>(load_n<V>(x + i, c)), c); });
}

template <class V>
FERRY_VEC_FN void swiglu_n(float* out, const float* gate, const float* up, int64_t n) {
  const typename V::T one = V::set1(1.0f);
  map_n<V>(n, [&](int64_t i, int c) {
    const typename V::T g = load_n<V>(gate + i, c), u = load_n<V>(up + i, c);
    const typename V::T e = exp_v<V>(V::sub(V::zero(), g));  // exp(-g): inf for g < -88.7, silu -> -0
    store_n<V>(out + i, V::mul(V::div(g, V::add(one, e)), u), c);
  });
}

// Sum of squares of x (n floats), 4 accumulators.
template <class V>
FERRY_VEC_FN float sum_squares(const float* x, int64_t n) {
  using T = typename V::T;
  T a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
  int64_t i = 0;
  for (; i + 4 * V::kW <= n; i += 4 * V::kW) {
    const T x0 = V::load(x + i), x1 = V::load(x + i + V::kW);
    const T x2 = V::load(x + i + 2 * V::kW), x3 = V::load(x + i + 3 * V::kW);
    a0 = V::fma(x0, x0, a0), a1 = V::fma(x1, x1, a1), a2 = V::fma(x2, x2, a2), a3 = V::fma(x3, x3, a3);
  }
  for (; i < n; i += V::kW) {
    const int c = int(std::min<int64_t>(V::kW, n - i));
    const T v = load_n<V>(x + i, c);
    a0 = V::fma(v, v, a0);
  }
  return V::hsum(V::add(V::add(a0, a1), V::add(a2, a3)));
}

template <class V>
FERRY_VEC_FN void scale_by_weight(float* out, const float* x, const float* w, int64_t n, float scale) {
  const typename V::T s = V::set1(scale);
  map_n<V>(n, [&](int64_t i, int c) {
    store_n<V>(out + i, V::mul(V::mul(load_n<V>(x + i, c), s), load_n<V>(w + i, c)), c);
  });
}

template <class V>
FERRY_VEC_FN void rms_norm_n(float* out, const float* x, const float* w, int64_t n, float eps) {
  const float ms = sum_squares<V>(x, n) / float(n);
  scale_by_weight<V>(out, x, w, n, 1.0f / std::sqrt(ms + eps));
}

template <class V>
FERRY_VEC_FN void add_rms_norm_n(float* out, float* residual, const float* delta, const float* w, int64_t n,
                                 float eps) {
  map_n<V>(n, [&](int64_t i, int c) {
    store_n<V>(residual + i, V::add(load_n<V>(residual + i, c), load_n<V>(delta + i, c)), c);
  });
  rms_norm_n<V>(out, residual, w, n, eps);
}

// ---- attention ------------------------------------------------------------------------------------------
//
// One tile: R = n_q * n_heads rows (row lanes padded to a multiple of VR::kW), keys in blocks of kKeyBlock.
// Per block: scores S (keys x rows) = K q^T: lanes run over rows, so each key's value K[j][d] is broadcast
// once and serves every row, and the causal mask, running max, exp and row sums are all lane-wise; then
// O[r] = O[r] * corr[r] + sum_j P[j][r] V[j] with lanes over head_dim (each V row load serves 2 rows).

constexpr int kKeyBlock = 32;
constexpr int kKeyUnroll = 4;  // keys per pass of the score loop (share the q^T loads)

template <class VR, int NVR>
FERRY_VEC_FN void block_scores(const float* qt, int64_t rp, int64_t d_len, const float* const* kp, int nk,
                               int64_t key0, const float* last, const float* first, float softcap, float* s) {
  using T = typename VR::T;
  for (int j0 = 0; j0 < nk; j0 += kKeyUnroll) {
    T acc[kKeyUnroll][NVR];
    for (int u = 0; u < kKeyUnroll; ++u)
      for (int v = 0; v < NVR; ++v) acc[u][v] = VR::zero();
    const float* k0 = kp[j0];
    const float* k1 = kp[j0 + 1];
    const float* k2 = kp[j0 + 2];
    const float* k3 = kp[j0 + 3];
    for (int64_t d = 0; d < d_len; ++d) {
      T qv[NVR];
      for (int v = 0; v < NVR; ++v) qv[v] = VR::load(qt + d * rp + v * VR::kW);
      const T b0 = VR::set1(k0[d]), b1 = VR::set1(k1[d]), b2 = VR::set1(k2[d]), b3 = VR::set1(k3[d]);
      for (int v = 0; v < NVR; ++v) {
        acc[0][v] = VR::fma(b0, qv[v], acc[0][v]);
        acc[1][v] = VR::fma(b1, qv[v], acc[1][v]);
        acc[2][v] = VR::fma(b2, qv[v], acc[2][v]);
        acc[3][v] = VR::fma(b3, qv[v], acc[3][v]);
      }
    }
    if (softcap > 0) {  // Gemma 2: c * tanh(s / c), lane by lane (tanh has no vector kernel here)
      alignas(64) float lanes[VR::kW];
      for (int u = 0; u < kKeyUnroll; ++u)
        for (int v = 0; v < NVR; ++v) {
          VR::store(lanes, acc[u][v]);
          for (int i = 0; i < VR::kW; ++i) lanes[i] = softcap * std::tanh(lanes[i] / softcap);
          acc[u][v] = VR::load(lanes);
        }
    }
    const T neg_inf = VR::set1(-std::numeric_limits<float>::infinity());
    for (int u = 0; u < kKeyUnroll; ++u) {
      const T pos = VR::set1(float(key0 + j0 + u));
      for (int v = 0; v < NVR; ++v) {
        // masked: after the row's last position (causal) or before its first (sliding window)
        const auto outside = VR::lt(VR::load(last + v * VR::kW), pos);
        T masked = VR::select(outside, neg_inf, acc[u][v]);
        if (first != nullptr) masked = VR::select(VR::lt(pos, VR::load(first + v * VR::kW)), neg_inf, masked);
        VR::store(s + (j0 + u) * rp + v * VR::kW, masked);
      }
    }
  }
}

// o[r] = o[r] * corr[r] + sum_j p[j][r] v[j] for rows r0, r1 (may be equal), C vectors of VD at a time.
template <class VD, int C>
FERRY_VEC_FN void block_pv(float* o, int64_t d_len, int r0, int r1, const float* corr, const float* p,
                           int64_t rp, const float* const* vp, int nk) {
  using T = typename VD::T;
  const T c0 = VD::set1(corr[r0]), c1 = VD::set1(corr[r1]);
  float* o0 = o + r0 * d_len;
  float* o1 = o + r1 * d_len;
  for (int64_t d = 0; d < d_len; d += C * VD::kW) {
    T a0[C], a1[C];
    for (int c = 0; c < C; ++c) {
      a0[c] = VD::mul(VD::load(o0 + d + c * VD::kW), c0);
      a1[c] = VD::mul(VD::load(o1 + d + c * VD::kW), c1);
    }
    for (int j = 0; j < nk; ++j) {
      const T p0 = VD::set1(p[j * rp + r0]), p1 = VD::set1(p[j * rp + r1]);
      const float* vj = vp[j] + d;
      for (int c = 0; c < C; ++c) {
        const T vv = VD::load(vj + c * VD::kW);
        a0[c] = VD::fma(p0, vv, a0[c]);
        a1[c] = VD::fma(p1, vv, a1[c]);
      }
    }
    for (int c = 0; c < C; ++c) {
      VD::store(o1 + d + c * VD::kW, a1[c]);
      VD::store(o0 + d + c * VD::kW, a0[c]);  // r0 == r1: both hold the same values
    }
  }
}

template <class VR, class VD, int NVR>
FERRY_VEC_FN void attention_tile(const AttentionTile& t) {
  using TR = typename VR::T;
  const int rows = t.n_q * t.n_heads;
  const int64_t rp = NVR * VR::kW;  // padded rows
  const int64_t dl = t.head_dim;
  alignas(64) float qt[kAttentionMaxHeadDim * kAttentionMaxRows];  // (head_dim, rp): q^T * scale
  alignas(64) float o[kAttentionMaxRows * kAttentionMaxHeadDim];   // (rows, head_dim): running sum P V
  alignas(64) float s[kKeyBlock * kAttentionMaxRows];              // (kKeyBlock, rp): scores, then P
  alignas(64) float last[kAttentionMaxRows], m[kAttentionMaxRows], l[kAttentionMaxRows], corr[kAttentionMaxRows];
  alignas(64) float first[kAttentionMaxRows];  // sliding window: each row's first visible position
  for (int r = 0; r < rp; ++r) {
    // Padding rows: q = 0 and no causal limit, so their scores are finite zeros, never written out.
    last[r] = r < rows ? float(t.first_last + r / t.n_heads) : std::numeric_limits<float>::max();
    first[r] = r < rows && t.window > 0 ? float(t.first_last + r / t.n_heads - t.window + 1) : -1.0f;
    m[r] = -std::numeric_limits<float>::infinity();
    l[r] = 0;
  }
  for (int r = 0; r < rp; ++r) {
    const float* qr = r < rows ? t.q + (r / t.n_heads) * t.q_stride + (r % t.n_heads) * dl : nullptr;
    for (int64_t d = 0; d < dl; ++d) qt[d * rp + r] = qr != nullptr ? qr[d] * t.scale : 0.0f;
  }
  std::memset(o, 0, sizeof(float) * size_t(rows * dl));

  const int64_t n_keys = t.first_last + t.n_q;
  // Sliding window: keys before the first row's window are skipped (blocks start there); rows whose window starts
  // later mask the rest, and a row may see no key in a block: its running max stays -inf until one comes.
  const int64_t key_begin = t.window > 0 ? std::max<int64_t>(0, t.first_last - t.window + 1) : 0;
  const float* row_first = t.window > 0 ? first : nullptr;
  const float* kp[kKeyBlock + kKeyUnroll];
  const float* vp[kKeyBlock];
  for (int64_t key0 = key_begin; key0 < n_keys; key0 += kKeyBlock) {
    const int nk = int(std::min<int64_t>(kKeyBlock, n_keys - key0));
    for (int j = 0; j < nk; ++j) {
      const int64_t pos = key0 + j;
      const int64_t slot = int64_t(t.block_table[pos / t.block_size]) * t.block_size + pos % t.block_size;
      kp[j] = t.k + slot * t.kv_row;
      vp[j] = t.v + slot * t.kv_row;
    }
    for (int j = nk; j < kKeyBlock + kKeyUnroll; ++j) kp[j] = kp[0];  // unroll padding: scores unused
    block_scores<VR, NVR>(qt, rp, dl, kp, nk, key0, last, row_first, t.softcap, s);
    // Online softmax, lane-wise over rows. Without a window every row sees key 0 in the first block, so m is finite
    // after it; with one, a row that has seen no key yet keeps m = -inf and subtracts 0 instead (p = exp(-inf) = 0).
    const TR neg_inf = VR::set1(-std::numeric_limits<float>::infinity());
    for (int v = 0; v < NVR; ++v) {
      const int64_t off = v * VR::kW;
      const TR m_old = VR::load(m + off);
      TR mx = m_old;
      for (int j = 0; j < nk; ++j) mx = VR::max(mx, VR::load(s + j * rp + off));
      const TR mx_sub = row_first != nullptr ? VR::select(VR::lt(neg_inf, mx), mx, VR::zero()) : mx;
      TR sum = VR::zero();
      for (int j = 0; j < nk; ++j) {
        const TR p = exp_v<VR>(VR::sub(VR::load(s + j * rp + off), mx_sub));  // masked: exp(-inf) = 0
        VR::store(s + j * rp + off, p);
        sum = VR::add(sum, p);
      }
      const TR c = exp_v<VR>(VR::sub(m_old, mx_sub));  // first block: exp(-inf) = 0
      VR::store(corr + off, c);
      VR::store(l + off, VR::fma(VR::load(l + off), c, sum));
      VR::store(m + off, mx);
    }
    const int64_t nvd = dl / VD::kW;
    for (int r = 0; r < rows; r += 2) {
      const int r1 = std::min(r + 1, rows - 1);
      if (nvd % 4 == 0) {
        block_pv<VD, 4>(o, dl, r, r1, corr, s, rp, vp, nk);
      } else if (nvd % 2 == 0) {
        block_pv<VD, 2>(o, dl, r, r1, corr, s, rp, vp, nk);
      } else {
        block_pv<VD, 1>(o, dl, r, r1, corr, s, rp, vp, nk);
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    const typename VD::T inv = VD::set1(1.0f / l[r]);
    float* dst = t.out + (r / t.n_heads) * t.out_stride + (r % t.n_heads) * dl;
    for (int64_t d = 0; d < dl; d += VD::kW) VD::store(dst + d, VD::mul(VD::load(o + r * dl + d), inv));
  }
}

// The tile entry point: row lanes as narrow as the tile allows (decode: one query x the group's heads).
template <class V4, class V8, class VWide, class VD>
FERRY_VEC_FN void attention_dispatch(const AttentionTile& t) {
  const int rows = t.n_q * t.n_heads;
  if (rows <= 4) return attention_tile<V4, VD, 1>(t);
  if (rows <= 8) return attention_tile<V8, VD, 1>(t);
  if (rows <= VWide::kW) return attention_tile<VWide, VD, 1>(t);
  return attention_tile<VWide, VD, 2>(t);
}

}  // namespace
}  // namespace ferry::vec_kernels
