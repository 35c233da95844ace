// SwiGLU's element: silu(g) * u = g / (1 + e^-g) * u in fp32, one definition for every kernel that computes it
// (the swiglu ops, and the streamed matvec that applies it while loading its activations), so they agree bit
// for bit.
#pragma once

#include <cuda_runtime.h>

namespace ferry::cuda_ops {

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

}  // namespace ferry::cuda_ops
