// A barrier over every block of a grid whose blocks are all resident at once (the persistent decode kernels:
// one block per SM, grid = SM count; decode_ffn.cuh). The counter lives in global memory, is zeroed once and is
// never reset: each barrier adds gridDim.x to it, and a block waits until the count reaches the next multiple
// of gridDim.x past its own arrival. So every launch of every kernel that shares one counter must use the same
// grid size, and a grid must never stop between barriers (a kernel that faults kills the context anyway).
// 64 bits: at 100 barriers a token and 1,000 tokens a second it would take ~5 million years to wrap.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferry::cuda_ops {

__device__ __forceinline__ unsigned long long ld_acquire_gpu(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Every thread of kThreads (named barrier kBarrierId over the threads that take part, e.g. a block's consumer warps
// while its producer warp streams on; thread 0 among them) calls it. Writes to global memory by any of them before
// the call are visible to every participating thread of the grid after it (bar.sync, then thread 0's fence and
// atomic: the pattern of cooperative groups' grid.sync).
template <int kBarrierId, int kThreads>
__device__ __forceinline__ void grid_barrier(unsigned long long* counter) {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kBarrierId), "n"(kThreads) : "memory");
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned long long grid = gridDim.x;
    const unsigned long long target = (atomicAdd(counter, 1ull) / grid + 1) * grid;
    while (ld_acquire_gpu(counter) < target) {
    }
    __threadfence();
  }
  asm volatile("bar.sync %0, %1;\n" ::"n"(kBarrierId), "n"(kThreads) : "memory");
}

}  // namespace ferry::cuda_ops
