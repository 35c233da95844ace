// Matvec version 11 (design: matvec_v11.cuh): which shapes it takes and the launch.
#include "backends/cuda/matvec_v11.cuh"

#include "backends/cuda/common.cuh"
#include "backends/cuda/matvec.cuh"
#include "backends/cuda/matvec_v10.cuh"
#include "backends/cuda/matvec_v11_kernel.cuh"

namespace ferry::cuda_ops {

bool matvec_v11_supports(DType wtype, int n_tokens, int64_t rows, int64_t cols, int n_sms, size_t max_smem) {
  if (!matvec_v10_supports(wtype, n_tokens, rows, cols, n_sms, max_smem)) return false;
  const int64_t grid = v7::stream_grid(rows, n_sms);
  const v7::StreamPlan plan = v10::make_plan(wtype, rows, cols, grid);
  return v11::smem_bytes(plan, wtype, cols) <= max_smem;
}

bool matvec_v11_applies(DType wtype, int n_tokens, int64_t rows, int64_t cols) {
  return matvec_v11_supports(wtype, n_tokens, rows, cols, v7::device_sm_count(), v7::device_max_smem());
}

void matvec_v11(DType wtype, const MatvecParams& p, cudaStream_t stream) {
  const int n_sms = v7::device_sm_count();
  const size_t max_smem = v7::device_max_smem();
  FERRY_CUDA_REQUIRE(matvec_v11_supports(wtype, p.n_tokens, p.w.rows, p.w.cols, n_sms, max_smem));
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w.data) % 16 == 0);
  FERRY_CUDA_REQUIRE(p.w.scales % 16 == 0);
  const int64_t grid = v7::stream_grid(p.w.rows, n_sms);
  const v7::StreamPlan plan = v10::make_plan(wtype, p.w.rows, p.w.cols, grid);
  const size_t smem = v7::one_block_per_sm(v11::smem_bytes(plan, wtype, p.w.cols));
  if (wtype == DType::Q8_0) {
    v11::launch_q8(p, plan, grid, smem, stream);
  } else if (wtype == DType::Q4_0) {
    v11::launch_q4(p, plan, grid, smem, stream);
  } else {
    v11::launch_q4k(p, plan, grid, smem, stream);
  }
}

}  // namespace ferry::cuda_ops
