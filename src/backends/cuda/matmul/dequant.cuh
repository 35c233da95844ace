// Conversions that feed the cuBLASLt path of matmul (n > kMatvecMaxTokens): a prepared weight dequantized
// to a bf16 scratch matrix, f32 activations rounded to bf16, and the bias added to the f32 result.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/matmul/weight_layout.cuh"

namespace ferry::cuda_ops {

// out: (w.rows, w.cols) bf16 row-major (raw uint16 bits), 16-byte aligned; w: a prepared native weight
// (every run of a chunk starts at a multiple of 8 columns, or of 4 for F32; so 16/8-byte stores align).
void dequantize_to_bf16(DType wtype, const WeightView& w, uint16_t* out, cudaStream_t stream);
// out: (count) bf16 bits = round-to-nearest-even(x); x: (count) f32.
void f32_to_bf16(const float* x, uint16_t* out, int64_t count, cudaStream_t stream);
// out: (rows, cols) f32, out[r][c] += bias[c]; bias: (cols) f32.
void add_bias(float* out, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace ferry::cuda_ops
