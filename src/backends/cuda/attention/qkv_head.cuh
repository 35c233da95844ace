// One q, k or v head of a token through the q/k/v epilogue, by one warp: the head's D values from the fused
// projection into the warp's shared row, the optional per-head RMSNorm (Qwen3's q_norm / k_norm) and the RoPE
// rotation of its pairs. qkv_epilogue.cu (its own launch) and decode_fused_qkv.cuh (inside the decode kernel) both
// call it, so the queries and cache rows they produce are the same bits by construction.
// Arithmetic (as rope.cu, norm.cu and the CPU reference): the sum of squares (lane-strided elements; at head_dim 64
// and 128 with full rotation, each lane's contiguous elements: qkv_head_lane), reduced by xor shuffles; x * scale *
// w; a * c - b * s and a * s + b * c with c, s from double sincos (the caller's tables). buf must be 16-byte aligned.
// Device code only (include from .cu / .cuh files).
#pragma once

#include <cstdint>

namespace ferry::cuda_ops {

// The register form for head_dim D = 32 * kV (kV = 4: 128, kV = 2: 64) with every pair rotated (half = D / 2): lane
// l holds elements [kV l, kV l + kV) of the head in x, loaded as one float4 / float2 (src 16 / 8-byte aligned). The
// sum of squares is each lane's kV squares in order, then xor shuffles; x * scale * w; a pair whose elements sit in
// two lanes (NeoX (k, k + half): lanes l and l + 16) is exchanged with one shuffle. Same formulas as the general
// form below; only the sum of squares adds in another order. Every lane of the warp calls it.
// Split in two so that a warp with several heads can request all of their loads before the math of the first
// (decode_fused_qkv.cuh): qkv_head_lane_load, then qkv_head_lane_math; qkv_head_lane is the two in a row.
template <int kV>
__device__ inline void qkv_head_lane_load(const float* src, float (&x)[kV]) {
  static_assert(kV == 2 || kV == 4, "head_dim 64 or 128");
  const int lane = threadIdx.x % 32;
  if constexpr (kV == 4) {
    const float4 v = reinterpret_cast<const float4*>(src)[lane];
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  } else {
    const float2 v = reinterpret_cast<const float2*>(src)[lane];
    x[0] = v.x, x[1] = v.y;
  }
}

template <int kV>
__device__ inline void qkv_head_lane_math(float (&x)[kV], const float* norm_w, float eps, bool rotate,
                                          const float* cos_t, const float* sin_t, bool interleaved) {
  static_assert(kV == 2 || kV == 4, "head_dim 64 or 128");
  constexpr int D = 32 * kV, kHalf = D / 2;
  const int lane = threadIdx.x % 32;
  if (norm_w != nullptr) {
    float ss = 0;
#pragma unroll
    for (int e = 0; e < kV; ++e) ss = fmaf(x[e], x[e], ss);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) ss += __shfl_xor_sync(0xFFFFFFFFu, ss, off);
    const float scale = 1.0f / sqrtf(ss / float(D) + eps);
#pragma unroll
    for (int e = 0; e < kV; ++e) x[e] = x[e] * scale * norm_w[kV * lane + e];
  }
  if (!rotate) return;
  if (interleaved) {  // pairs (2k, 2k + 1): both in this lane
#pragma unroll
    for (int e = 0; e < kV; e += 2) {
      const int k = (kV * lane + e) / 2;
      const float a = x[e], b = x[e + 1], cs = cos_t[k], sn = sin_t[k];
      x[e] = a * cs - b * sn;
      x[e + 1] = a * sn + b * cs;
    }
  } else {  // pairs (k, k + half): lanes l < 16 hold the k side, lanes l + 16 the k + half side
    const bool low = lane < 16;
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      const float other = __shfl_xor_sync(0xFFFFFFFFu, x[e], 16);
      const int k = kV * lane + e - (low ? 0 : kHalf);
      const float cs = cos_t[k], sn = sin_t[k];
      const float a = low ? x[e] : other, b = low ? other : x[e];
      x[e] = low ? a * cs - b * sn : a * sn + b * cs;
    }
  }
}

template <int kV>
__device__ inline void qkv_head_lane(const float* src, float (&x)[kV], const float* norm_w, float eps, bool rotate,
                                     const float* cos_t, const float* sin_t, bool interleaved) {
  qkv_head_lane_load<kV>(src, x);
  qkv_head_lane_math<kV>(x, norm_w, eps, rotate, cos_t, sin_t, interleaved);
}

// src: (D) f32 in global memory; buf: (D) f32 in shared memory, this warp's. norm_w: (D) f32 weights, or null for
// no norm. rotate: pairs (i0, i1) = (2k, 2k + 1) (interleaved) or (k, k + half) for k < half rotate by (cos_t[k],
// sin_t[k]) (shared). Every lane of the warp calls it; buf is complete and visible to the warp on return.
__device__ inline void prepare_qkv_head(const float* src, float* buf, int64_t D, const float* norm_w, float eps,
                                        bool rotate, const float* cos_t, const float* sin_t, int64_t half,
                                        bool interleaved) {
  const int lane = threadIdx.x % 32;
  if ((D == 128 || D == 64) && half == D / 2) {  // the register form (qkv_epilogue's prompt path runs the same)
    if (D == 128) {
      float x[4];
      qkv_head_lane<4>(src, x, norm_w, eps, rotate, cos_t, sin_t, interleaved);
      reinterpret_cast<float4*>(buf)[lane] = make_float4(x[0], x[1], x[2], x[3]);
    } else {
      float x[2];
      qkv_head_lane<2>(src, x, norm_w, eps, rotate, cos_t, sin_t, interleaved);
      reinterpret_cast<float2*>(buf)[lane] = make_float2(x[0], x[1]);
    }
    __syncwarp();
    return;
  }
  float ss = 0;
  for (int64_t j = lane; j < D; j += 32) {
    const float x = src[j];
    buf[j] = x;
    ss = fmaf(x, x, ss);
  }
  if (norm_w != nullptr) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) ss += __shfl_xor_sync(0xFFFFFFFFu, ss, off);
    const float scale = 1.0f / sqrtf(ss / float(D) + eps);
    for (int64_t j = lane; j < D; j += 32) buf[j] = buf[j] * scale * norm_w[j];  // each lane its own elements
  }
  __syncwarp();
  if (rotate) {
    // Each pair (i0, i1) belongs to one lane: read both, then write both.
    for (int64_t k = lane; k < half; k += 32) {
      const int64_t i0 = interleaved ? 2 * k : k;
      const int64_t i1 = interleaved ? 2 * k + 1 : k + half;
      const float a = buf[i0], b = buf[i1], cs = cos_t[k], sn = sin_t[k];
      buf[i0] = a * cs - b * sn;
      buf[i1] = a * sn + b * cs;
    }
    __syncwarp();
  }
}

}  // namespace ferry::cuda_ops
