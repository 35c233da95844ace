// The warp-level dot product the MoE kernels share (router logits, the decode expert matvec): one warp reads one
// row of a prepared weight through the shared decoders (matmul/weight_layout.cuh) and dots it with up to kTok f32
// activation rows at once, so the weight row is read once for every token that needs it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/matmul/weight_layout.cuh"

namespace ferry::cuda_ops {

// acc[t] = sum over columns of w[row] * xrow[t] for t < nb (nb <= kTok; rows t >= nb are not read), reduced over
// the warp: every lane ends with the full sums. xrow[t]: (cols) f32, 16-byte aligned. Lane l reads chunks l, l + 32,
// ...; within a lane the order is fixed, and the butterfly reduction is too, so a result never depends on nb or on
// the other tokens (each token has its own accumulator).
template <class D, int kTok>
__device__ __forceinline__ void warp_dot_rows(const WeightView& w, int64_t row, const float* const (&xrow)[kTok],
                                              int nb, float (&acc)[kTok]) {
  const int lane = int(threadIdx.x & 31);
FERRY_UNROLL
  for (int t = 0; t < kTok; ++t) acc[t] = 0.0f;
  const int64_t chunks = D::chunks(w.cols);
#pragma unroll 2
  for (int64_t c = lane; c < chunks; c += 32) {
    const typename D::Raw raw = D::load(w, row, c);
    float v[D::kVals];
    D::decode(raw, v);
FERRY_UNROLL
    for (int t = 0; t < kTok; ++t) {
      if (t < nb) {
        float s = 0.0f;
FERRY_UNROLL
        for (int r = 0; r < D::kRuns; ++r) {
          const float4* xs = reinterpret_cast<const float4*>(xrow[t] + D::run_start(c, r));
FERRY_UNROLL
          for (int q = 0; q < D::kRunLen / 4; ++q) {
            const float4 xv = __ldg(xs + q);
            const float* vv = v + r * D::kRunLen + 4 * q;
            s = fmaf(vv[0], xv.x, s);
            s = fmaf(vv[1], xv.y, s);
            s = fmaf(vv[2], xv.z, s);
            s = fmaf(vv[3], xv.w, s);
          }
        }
        acc[t] += s;
      }
    }
  }
FERRY_UNROLL
  for (int t = 0; t < kTok; ++t)
FERRY_UNROLL
    for (int o = 16; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(0xFFFFFFFFu, acc[t], o);
}

}  // namespace ferry::cuda_ops
