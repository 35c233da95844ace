// RMSNorm, plain and fused with the residual add.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferry::cuda_ops {

struct RmsNormParams {
  float* out;            // (rows, cols) f32; may alias x (rms_norm) — each element is read before it is written;
                         // null when out_bf16 is set
  const float* x;        // (rows, cols) f32 (rms_norm)
  float* residual;       // (rows, cols) f32, += delta in place (add_rms_norm), then normalized into out
  const float* delta;    // (rows, cols) f32 (add_rms_norm)
  const float* weight;   // (cols) f32
  int64_t rows, cols;
  float eps;
  // (rows, cols) bf16, or null: the normalized rows rounded to bf16 (round to nearest even, as f32_to_bf16)
  // instead of out, for a matmul that reads bf16 activations. The f32 values rounded are those out would hold.
  uint16_t* out_bf16 = nullptr;
};

// out = x / sqrt(mean(x²) + eps) * weight, per row (x, out used; residual, delta ignored).
void rms_norm(const RmsNormParams& p, cudaStream_t stream);
// residual += delta; out = rms_norm(residual) * weight (residual, delta, out used; x ignored).
void add_rms_norm(const RmsNormParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
