// The residual add + RMSNorm epilogue of the streamed matvecs (MatvecParams::add_norm, matvec.cuh): versions 9
// (matvec_stream.cu) and 10 (matvec_v10_kernel.cuh) call store_row for each of their output rows and then
// add_norm_tail with every consumer thread.
//
// Why: in a decode step the wo and down projections were each followed by an add_rms_norm launch (residual +=
// delta; xb = norm(residual)). At one token that kernel moves 48 KB, yet it sat between two weight streams as a
// full launch: H200, Llama-3-8B shape, FERRY_CUDA_PROFILE (graphs off) 6.4-6.7 us a call, 2 per layer, for Q4_0
// 13% of the op time of a token. Here the projection adds its rows into the residual as it writes them, and the
// block that finishes last (an arrival counter, the threadFenceReduction pattern) normalizes the whole residual
// (16 KB at dim 4096, read from L2): the normed row is ready when the grid completes, one launch fewer.
//
// Numerics: the last block uses norm.cu's vector kernel's arithmetic and order (256 threads; thread t holds float4s
// t, t + 256, ...; fmaf sum of squares over them in order; warp shuffles; the 8 warp sums added in warp order;
// scale = 1 / sqrtf(total / dim + eps); y = v * scale * w), so the fused op writes the same bits as matvec +
// add_rms_norm (tests/cuda/matvec_add_norm_test.cpp checks it).
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/matvec.cuh"
#include "backends/cuda/matvec_stream_plan.cuh"

namespace ferry::cuda_ops::v7 {

// Output row `row` of the matvec, y (the warps' partials added, + bias): written to out and, with the epilogue on,
// added into the residual (residual + y, the one rounding add_rms_norm's residual + delta makes); with
// MatvecParams::peer_push also stored (volatile, system scope) into every peer's all-reduce slot.
__device__ __forceinline__ void store_row(const MatvecParams& p, int64_t row, float y) {
  p.out[row] = y;
  if (p.add_norm.residual != nullptr) p.add_norm.residual[row] += y;
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

__device__ __forceinline__ uint32_t add_norm_bf16x2(float lo, float hi) {
  return uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

inline constexpr int kNormThreads = kConsumerWarps * 32;                      // 256, norm.cu's block size
inline constexpr int kNormMaxVecs = int(kAddNormMaxRows / 4 / kNormThreads);  // float4 per thread at the widest: 8

// Every consumer thread loads its float4s of a residual of dim values (a multiple of 4 up to kAddNormMaxRows) for
// consumer_norm_scale: t, t + 256, ... (zeros past dim / 4), through L2 (ld.cg: other blocks of this grid, or the
// previous kernel, wrote them). delta (or null): residual + delta, add_rms_norm's one rounding, float4 lane by lane.
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

// Every consumer thread of every block calls it once, after its block's rows are stored (blocks without rows
// too: the counter needs every block's arrival). dim: the residual's width (the weight's rows), a multiple of 4
// up to kAddNormMaxRows. Does nothing when e.residual is null.
__device__ __forceinline__ void add_norm_tail(const MatvecAddNorm& e, int64_t dim) {
  __shared__ int is_last;
  if (e.residual == nullptr) return;
  __threadfence();  // this thread's residual rows are visible device-wide before the block's arrival
  consumers_sync();
  if (threadIdx.x == 0) is_last = atomicAdd(e.counter, 1u) == gridDim.x - 1u;
  consumers_sync();
  if (!is_last) return;
  __threadfence();  // acquire side: every other block's rows, read through L2 (ld.cg) below
  const int t = int(threadIdx.x);
  const int64_t vecs = dim / 4;
  float4 v[kNormMaxVecs];
  load_norm_vecs(e.residual, dim, v);
  const float scale = consumer_norm_scale(v, dim, e.eps);
  const float4* w4 = reinterpret_cast<const float4*>(e.weight);
#pragma unroll
  for (int i = 0; i < kNormMaxVecs; ++i) {
    const int64_t j = t + int64_t(i) * kNormThreads;
    if (j >= vecs) continue;
    const float4 g = w4[j];
    const float4 y = make_float4(v[i].x * scale * g.x, v[i].y * scale * g.y, v[i].z * scale * g.z, v[i].w * scale * g.w);
    if (e.out_bf16 != nullptr) {
      reinterpret_cast<uint2*>(e.out_bf16)[j] = make_uint2(add_norm_bf16x2(y.x, y.y), add_norm_bf16x2(y.z, y.w));
    } else {
      reinterpret_cast<float4*>(e.out)[j] = y;
    }
  }
  if (t == 0) *e.counter = 0u;  // the next fused call on this stream starts after this grid completes
}

}  // namespace ferry::cuda_ops::v7
