// One q, k or v head of a token through the q/k/v epilogue, by one warp: the head's D values from the fused
// projection into the warp's shared row, the optional per-head RMSNorm (Qwen3's q_norm / k_norm) and the RoPE
// rotation of its pairs. qkv_epilogue.cu (its own launch) and decode_fused_qkv.cuh (inside the decode kernel) both
// call it, so the queries and cache rows they produce are the same bits by construction.
// Arithmetic (as rope.cu, norm.cu and the CPU reference): the sum of squares over lane-strided elements, reduced by
// xor shuffles; x * scale * w; a * c - b * s and a * s + b * c with c, s from double sincos (the caller's tables).
// Device code only (include from .cu / .cuh files).
#pragma once

#include <cstdint>

namespace ferry::cuda_ops {

// src: (D) f32 in global memory; buf: (D) f32 in shared memory, this warp's. norm_w: (D) f32 weights, or null for
// no norm. rotate: pairs (i0, i1) = (2k, 2k + 1) (interleaved) or (k, k + half) for k < half rotate by (cos_t[k],
// sin_t[k]) (shared). Every lane of the warp calls it; buf is complete and visible to the warp on return.
__device__ inline void prepare_qkv_head(const float* src, float* buf, int64_t D, const float* norm_w, float eps,
                                        bool rotate, const float* cos_t, const float* sin_t, int64_t half,
                                        bool interleaved) {
  const int lane = threadIdx.x % 32;
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
