// The matmul for many tokens: cuBLASLt, bf16 inputs, fp32 accumulation and output. Descriptors, layouts
// and the heuristic's algorithm are made once per shape and kept (a model has a handful of weight shapes
// times the prefill chunk sizes it sees), so a call is one cublasLtMatmul: no per-call heuristic query,
// no allocation. A hand-written TMA + wgmma GEMM replaces it in a later issue.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

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

  // Shapes planned so far (for tests and benchmarks).
  size_t cached_plans() const { return plans_.size(); }

 private:
  struct Plan;  // descriptors, layouts and algorithm of one (n, n_out, n_in, workspace) shape
  const Plan& plan_for(int64_t n, int64_t n_out, int64_t n_in, size_t workspace_bytes);

  cublasLtHandle_t handle_ = nullptr;
  std::vector<std::unique_ptr<Plan>> plans_;  // at most kMaxPlans; replaced round-robin beyond
  size_t next_victim_ = 0;
};

}  // namespace ferry::cuda_ops
