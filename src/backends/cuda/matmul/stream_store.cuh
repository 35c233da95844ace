// What the streamed matvecs (stream_half.cu, stream_quant_kernel.cuh) share around their rows: storing an output
// row (and pushing it to the peers of a one-shot all-reduce), and the RMSNorm of a residual row computed by every
// block from L2 (the quantized stream's norm prologue, MatvecInNorm). The norm uses norm.cu's vector kernel's
// arithmetic and order (256 threads; thread t holds float4s t, t + 256, ...; fmaf sum of squares over them in order;
// warp shuffles; the 8 warp sums added in warp order; scale = 1 / sqrtf(total / dim + eps)), so a fused norm gives
// the bits of rms_norm followed by the matvec.
#pragma once

#include "backends/cuda/common/block_reduce.cuh"
#include "backends/cuda/matmul/matvec.cuh"
#include "backends/cuda/matmul/stream_plan.cuh"

namespace ferry::cuda_ops::streaming {

// Output row `row` of the matvec, y (the warps' partials added, + bias), written to out; with
// MatvecParams::peer_push also stored (volatile, system scope) into every peer's all-reduce slot.
__device__ __forceinline__ void store_row(const MatvecParams& p, int64_t row, float y) {
  p.out[row] = y;
  if (p.peer_push.counter != nullptr) {
    const int64_t set = int64_t((__ldcg(p.peer_push.counter) + 1u) & 1u);
    const float c = y + 0.0f;  // -0.0 is the slots' "not landed" sentinel
#pragma unroll
    for (int q = 0; q < MatvecPeerPush::kMaxRanks; ++q) {
      float* slot = p.peer_push.slot[q];
      if (slot != nullptr)
        asm volatile("st.volatile.global.f32 [%0], %1;" ::"l"(slot + set * p.peer_push.set_stride + row), "f"(c)
                     : "memory");
    }
  }
}

inline constexpr int kNormThreads = kConsumerWarps * 32;                     // 256, norm.cu's block size
inline constexpr int kNormMaxVecs = int(kInNormMaxCols / 4 / kNormThreads);  // float4 per thread at the widest: 8

// Every consumer thread loads its float4s of a residual of dim values (a multiple of 4 up to kInNormMaxCols) for
// consumer_norm_scale: t, t + 256, ... (zeros past dim / 4), through L2 (ld.cg: the previous kernel wrote them).
// delta (or null): residual + delta, add_rms_norm's one rounding, float4 lane by lane.
__device__ __forceinline__ void load_norm_vecs(const float* residual, int64_t dim, float4 (&v)[kNormMaxVecs],
                                               const float* delta = nullptr) {
  const int t = int(threadIdx.x);
  const float4* r4 = reinterpret_cast<const float4*>(residual);
  const float4* d4 = reinterpret_cast<const float4*>(delta);
#pragma unroll
  for (int i = 0; i < kNormMaxVecs; ++i) {
    const int64_t j = t + int64_t(i) * kNormThreads;
    v[i] = j < dim / 4 ? __ldcg(r4 + j) : make_float4(0.f, 0.f, 0.f, 0.f);
    if (delta != nullptr && j < dim / 4) {
      const float4 d = __ldcg(d4 + j);
      v[i] = make_float4(v[i].x + d.x, v[i].y + d.y, v[i].z + d.z, v[i].w + d.w);
    }
  }
}

// Every consumer thread calls it (256 of them) with its load_norm_vecs: returns 1 / sqrt(mean(residual^2) + eps),
// with norm.cu's vector kernel's arithmetic and order. Two calls in one kernel need a consumers_sync between them
// (one static word per warp).
__device__ __forceinline__ float consumer_norm_scale(const float4 (&v)[kNormMaxVecs], int64_t dim, float eps) {
  __shared__ float warp_ss[kConsumerWarps];
  const int t = int(threadIdx.x);
  float ss = 0;  // the zero float4s past dim / 4 leave it unchanged (fmaf(0, 0, s) == s for s >= 0)
#pragma unroll
  for (int i = 0; i < kNormMaxVecs; ++i) ss = add_squares(v[i], ss);
  ss = warp_sum(ss);
  if (t % 32 == 0) warp_ss[t / 32] = ss;
  consumers_sync();
  float total = 0;
#pragma unroll
  for (int w = 0; w < kConsumerWarps; ++w) total += warp_ss[w];
  return 1.0f / sqrtf(total / float(dim) + eps);
}

}  // namespace ferry::cuda_ops::streaming
