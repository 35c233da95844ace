// Rotary position embedding, in place.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferry::cuda_ops {

struct RopeParams {
  float* x;                 // (n, n_heads, head_dim) f32, rotated in place
  const int32_t* positions; // (n) i32
  const float* inv_freq;    // (half) f32; the first 2 * half dims of each head rotate
  int64_t n, n_heads, head_dim, half;
  bool interleaved;         // pairs (2i, 2i+1); else NeoX pairs (i, i + head_dim/2)
};

void rope(const RopeParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
