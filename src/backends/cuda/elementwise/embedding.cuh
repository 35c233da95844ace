// Embedding lookup: out (n, dim) f32 = dequantized rows ids[i] of a prepared table (vocab, dim).
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/common/device_errors.h"
#include "backends/cuda/matmul/weight_layout.cuh"

namespace ferry::cuda_ops {

struct EmbeddingParams {
  WeightView table;      // (vocab, dim) prepared weight of a native type
  const int32_t* ids;    // (n) i32, device; an id outside [0, vocab) sets kBadTokenId and its row is left as is
  float* out;            // (n, dim) f32, 16-byte aligned
  int64_t n;
  DeviceErrors* errors;
};

void embedding(DType ttype, const EmbeddingParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
