// The matmul baseline for many tokens: cuBLASLt, bf16 inputs, fp32 accumulation and output.
// A hand-written TMA + wgmma GEMM replaces it in a later issue; this one is the correctness baseline.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ferry::cuda_ops {

class CublasLtGemm {
 public:
  CublasLtGemm();  // creates the handle (throws ferry::Error on failure)
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // out (n, n_out) f32 row-major = x (n, n_in) bf16 row-major · w (n_out, n_in) bf16 row-majorᵀ.
  // workspace: `workspace_bytes` of device memory for cuBLASLt (256-byte aligned). Runs on `stream`.
  void run(float* out, const uint16_t* x, const uint16_t* w, int64_t n, int64_t n_out, int64_t n_in,
           void* workspace, size_t workspace_bytes, cudaStream_t stream);

 private:
  cublasLtHandle_t handle_ = nullptr;
};

}  // namespace ferry::cuda_ops
