// Float bits on the host and the device alike (the weight decoders and the sampler read raw words).
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

}  // namespace ferry::cuda_ops
