// The warp-level dot products the MoE kernels share (router logits, the decode expert matvec): one warp reads kW
// weight rows (of one or two prepared weights) through the shared decoders (matmul/weight_layout.cuh) and dots each
// with up to kTok f32 activation rows at once, so every weight row is read once for every token that needs it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/matmul/weight_layout.cuh"

namespace ferry::cuda_ops {

// Chunks a lane loads before it decodes any of them: about 128 bytes of weight in flight per lane and weight row
// (4 KB a warp; 8 chunks of BF16, 6 of Q4_0, 3 of Q4_K, 2 of Q6_K). Issuing one chunk at a time left the expert
// matvec latency-bound at ~25% of the copy bandwidth (docs/perf-log.md, fifth session).
// The 64-value chunks at most 2 (128 decoded floats): Q2_K's 32-byte chunks would take 4 and spill (ptxas -v).
template <class D>
inline constexpr int kDotBatchBytes = sizeof(typename D::Raw) >= 64 ? 1
                                      : 128 / sizeof(typename D::Raw) > 8 ? 8
                                                                          : int(128 / sizeof(typename D::Raw));
template <class D>
inline constexpr int kDotBatch = D::kVals >= 64 && kDotBatchBytes<D> > 128 / D::kVals ? 128 / D::kVals
                                                                                      : kDotBatchBytes<D>;

// acc[i][t] = sum over columns of w[i][row[i]] * xrow[t] for i < kW, t < nb (nb <= kTok; rows t >= nb are not
// read), reduced over the warp: every lane ends with the full sums. The kW weights have the same cols and decoder.
// xrow[t]: (cols) f32, 16-byte aligned. Lane l reads chunks l, l + 32, ... (kDotBatch<D> of them, for every weight,
// before the first decode); within a lane the chunks are added in ascending order and the butterfly reduction is
// fixed, so a result never depends on nb, kW or the other tokens (each (row, token) has its own accumulator).
template <class D, int kW, int kTok>
__device__ __forceinline__ void warp_dot_rows(const WeightView (&w)[kW], const int64_t (&row)[kW],
                                              const float* const (&xrow)[kTok], int nb, float (&acc)[kW][kTok]) {
  const int lane = int(threadIdx.x & 31);
  constexpr int kB = kDotBatch<D>;
FERRY_UNROLL
  for (int i = 0; i < kW; ++i)
FERRY_UNROLL
    for (int t = 0; t < kTok; ++t) acc[i][t] = 0.0f;
  const int64_t chunks = D::chunks(w[0].cols);
  for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kB) {
    typename D::Raw raw[kW][kB];
FERRY_UNROLL
    for (int b = 0; b < kB; ++b)
      if (c0 + 32 * b < chunks)
FERRY_UNROLL
        for (int i = 0; i < kW; ++i) raw[i][b] = D::load(w[i], row[i], c0 + 32 * b);
FERRY_UNROLL
    for (int b = 0; b < kB; ++b) {
      const int64_t c = c0 + 32 * b;
      if (c >= chunks) break;
FERRY_UNROLL
      for (int i = 0; i < kW; ++i) {
        float v[D::kVals];
        D::decode(raw[i][b], v);
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
            acc[i][t] += s;
          }
        }
      }
    }
  }
FERRY_UNROLL
  for (int i = 0; i < kW; ++i)
FERRY_UNROLL
    for (int t = 0; t < kTok; ++t)
FERRY_UNROLL
      for (int o = 16; o > 0; o >>= 1) acc[i][t] += __shfl_xor_sync(0xFFFFFFFFu, acc[i][t], o);
}

}  // namespace ferry::cuda_ops
