// The tiled matvec (kTiled) : persistent blocks (one per SM, 16 warps) that
// split the weight's row groups evenly over the SMs and, when rows are few, split K among the block's warps;
// no shared-memory staging before the first weight load (activations are read through L1).
//  - BF16 weights, 2..16 tokens (cols % 32 == 0): tensor cores (mma.sync m16n8k16, weights as A, tokens as
//    B); each activation is split into bf16 hi + lo (x = hi + lo + O(2^-17 x)), so the weight is read once
//    for all tokens and the result keeps ~fp32 activations.
//  - Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q4_K / Q5_K / Q6_K: integer dot products (dp4a) against activations
//    quantized once per call by a pre-pass into `scratch` as two int8 levels per 32-value block (layout below):
//    x ~= dx (q1 + q2 / 256).
//  - F32 / F16 / BF16 at 1 token (and F32 / F16 / F8_E4M3_B128 at any count): fp32 FMA, activations read as f32.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace ferry::cuda_ops {

struct MatvecParams;

// Activation scratch of kTiled for quantized weights, n tokens of K = n_in values (K % 32 == 0):
//   hi:   int8 (n, K) at byte 0           q1 = rint(x / dx), dx = max|x| over the 32-value block / 127
//   lo:   int8 (n, K) at byte n K         q2 = clamp(rint(fma(-dx, q1, x) / (dx / 256)), -127, 127)
//   meta: float4 (n, K / 32) at byte 2 n K rounded up to 16:
//         (dx / 256, dx/256 * Σ v over values 0..15, dx/256 * Σ v over 16..31, int Σ v over all 32 as bits)
//   with v = 256 q1 + q2, so the quantized activation is x~ = (dx / 256) v (relative error ~2e-5 on
//   Gaussian data; all-zero blocks give dx = 0, q = 0). Every sum of products is exact in int32.
// The weight types whose kTiled path reads that scratch (the integer paths).
inline bool tiled_quantizes_acts(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 ||
         t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}
inline size_t matvec_tiled_scratch_bytes(int n_tokens, int64_t n_in) {
  const size_t planes = (2 * size_t(n_tokens) * size_t(n_in) + 15) / 16 * 16;
  return planes + size_t(n_tokens) * size_t(n_in / 32) * 16;
}

// kTiled on `stream`; quantized weights need p.scratch (>= matvec_tiled_scratch_bytes, 16-byte aligned).
void matvec_tiled(DType wtype, const MatvecParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
