// Skinny matmul for a few tokens (decode, short prompt chunks): out (n, n_out) = x (n, n_in) · wᵀ [+ bias].
// Memory-bound on the weight: each weight element is read once per pass of up to kMatvecTokens tokens.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/weight_layout.cuh"

namespace ferry::cuda_ops {

inline constexpr int kMatvecTokens = 8;     // tokens sharing one pass over the weight
inline constexpr int kMatvecMaxTokens = 16; // the backend uses this kernel for n <= this, cuBLASLt above

struct MatvecParams {
  WeightView w;        // (n_out, n_in) prepared weight (weight_layout.cuh), dtype given separately
  const float* x;      // (n, n_in) f32, rows contiguous, 16-byte aligned
  const float* bias;   // (n_out) f32 or null
  float* out;          // (n, n_out) f32
  int n_tokens;        // n >= 1
};

// Launches ceil(n / kMatvecTokens) passes on `stream`. Requires a native weight type (weight_layout.cuh).
void matvec(DType wtype, const MatvecParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
