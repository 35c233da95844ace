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
