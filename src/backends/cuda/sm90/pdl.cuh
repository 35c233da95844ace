// Programmatic dependent launch (Hopper): the decode step is hundreds of short kernels on one stream, and
// between two of them the GPU otherwise idles while the next grid is launched and ramps up. A kernel launched
// with launch_pdl may start while the previous kernel on the stream is still running:
//  - pdl_allow_dependents(): called first by every kernel of the decode path, so the next kernel's blocks are
//    placed on SMs as soon as every block of this one has started (not when the last one exits);
//  - pdl_wait(): blocks until the previous kernel has completed and its writes are visible. A kernel launched
//    with launch_pdl must call it before its first global-memory access that depends on (or overwrites) what
//    earlier kernels read or write. Only constant data (weights) may be read before it: matvec_tiled issues its
//    first weight loads, then waits.
// Both are no-ops for a kernel launched plainly (<<<>>>), and they compose: a waiting kernel's predecessor
// has itself waited for its own, so completion is transitive. CUDA graphs keep the programmatic edges.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backends/cuda/common/launch.cuh"

namespace ferry::cuda_ops {

#ifdef __CUDACC__
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
#endif

// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization; checks the launch.
// The legacy default stream (nullptr) gets a plain launch.
template <class... KArgs, class... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = stream != nullptr ? 1 : 0;
  FERRY_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace ferry::cuda_ops
