// fp32 sums over a warp and over a block, in a fixed order (the same bits for the same inputs): shuffles within
// each warp, then one word per warp in shared memory added in warp order by every thread. Used by the norms and
// by the fused all-reduce + RMSNorm of peer_all_reduce.cu.
#pragma once

#include <cuda_runtime.h>

namespace ferry::cuda_ops {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  return v;
}

// ss + v.x^2 + v.y^2 + v.z^2 + v.w^2 as four fmaf in that order: the norms' sum of squares (norm.cu, and the norm
// prologue of the streamed quantized matvec, which must give norm.cu's bits).
__device__ __forceinline__ float add_squares(float4 v, float ss) {
  ss = fmaf(v.x, v.x, ss);
  ss = fmaf(v.y, v.y, ss);
  ss = fmaf(v.z, v.z, ss);
  return fmaf(v.w, v.w, ss);
}

// Every one of the kThreads threads calls it once per use and gets the block's total. Two uses in one kernel
// need a __syncthreads() between them (the per-warp words live in one static shared array).
template <int kThreads>
__device__ __forceinline__ float block_sum(float v) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024);
  __shared__ float partial[kThreads / 32];
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  return total;
}

}  // namespace ferry::cuda_ops
