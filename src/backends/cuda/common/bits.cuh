// Float bits on the host and the device alike (the weight decoders and the sampler read raw words), and the one
// product both round the same way.
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/cuda/common/launch.cuh"  // FERRY_HD

namespace ferry::cuda_ops {

FERRY_HD inline float bits_to_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// a * b rounded to f32, never fused with a following add (nvcc contracts a * b + c into an fma by default): where
// the CPU reference rounds the product first (the sampler's exp, the Q2_K decoder's d sc q - dmin mn).
FERRY_HD inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

}  // namespace ferry::cuda_ops
