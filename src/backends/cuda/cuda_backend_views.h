// Tensor checks and views shared by the CudaBackend's source files (cuda_backend.cpp, cuda_backend_attention.cpp,
// cuda_backend_decode.cpp).
#pragma once

#include "backends/cuda/matmul/weight_layout.cuh"
#include "core/tensor.h"

namespace ferry {

// Throws ferry::Error "CUDA backend: <what> is not in device memory" unless t is.
void require_cuda(const Tensor& t, const char* what);
// The kernels' view of a prepared weight (the split layouts' scale offset where there is one).
cuda_ops::WeightView weight_view(const Tensor& w);
// An optional f32 tensor's pointer: null when the tensor is empty.
float* f32_or_null(const Tensor& t);
// The profile key's token count: exact up to 16, then the power-of-two bucket at or above it.
int64_t token_bucket(int64_t n);

}  // namespace ferry
