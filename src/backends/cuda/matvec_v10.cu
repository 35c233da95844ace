// Matvec version 10 (design: matvec_v10.cuh): which shapes it takes and the launch.
#include "backends/cuda/matvec_v10.cuh"

#include "backends/cuda/common.cuh"
#include "backends/cuda/matvec.cuh"
#include "backends/cuda/matvec_v10_plan.cuh"

namespace ferry::cuda_ops {

bool matvec_v10_supports(DType wtype, int n_tokens, int64_t rows, int64_t cols, int n_sms, size_t max_smem) {
  if (wtype != DType::Q8_0 && wtype != DType::Q4_0 && wtype != DType::Q4_K) return false;
  if (n_tokens != 1 || rows < 1 || n_sms < 1) return false;
  if (cols < v10::kSegVals || cols % v10::kSegVals != 0 || cols > v10::kMaxCols) return false;
  const int64_t grid = v7::stream_grid(rows, n_sms);
  const v7::StreamPlan plan = v10::make_plan(wtype, rows, cols, grid);
  return plan.stages >= 2 && v10::smem_bytes(plan, wtype, cols) <= max_smem;
}

bool matvec_v10_applies(DType wtype, int n_tokens, int64_t rows, int64_t cols) {
  return matvec_v10_supports(wtype, n_tokens, rows, cols, v7::device_sm_count(), v7::device_max_smem());
}

void matvec_v10(DType wtype, const MatvecParams& p, cudaStream_t stream) {
  const int n_sms = v7::device_sm_count();
  const size_t max_smem = v7::device_max_smem();
  FERRY_CUDA_REQUIRE(matvec_v10_supports(wtype, p.n_tokens, p.w.rows, p.w.cols, n_sms, max_smem));
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w.data) % 16 == 0);
  FERRY_CUDA_REQUIRE(p.w.scales % 16 == 0);
  const int64_t grid = v7::stream_grid(p.w.rows, n_sms);
  const v7::StreamPlan plan = v10::make_plan(wtype, p.w.rows, p.w.cols, grid);
  const size_t smem = v7::one_block_per_sm(v10::smem_bytes(plan, wtype, p.w.cols));
  if (wtype == DType::Q8_0) {
    v10::launch_q8(p, plan, grid, smem, stream);
  } else if (wtype == DType::Q4_0) {
    v10::launch_q4(p, plan, grid, smem, stream);
  } else {
    v10::launch_q4k(p, plan, grid, smem, stream);
  }
}

bool matvec_v10_swiglu_supports(DType wtype, int n_tokens, int64_t weight_rows, int64_t cols, int n_sms,
                                size_t max_smem) {
  if (wtype != DType::Q8_0 && wtype != DType::Q4_0 && wtype != DType::Q4_K) return false;
  if (n_tokens != 1 || weight_rows < 2 || weight_rows % 2 != 0 || n_sms < 1) return false;
  if (cols < v10::kSegVals || cols % v10::kSegVals != 0 || cols > v10::kSwigluMaxCols) return false;
  if (v10::stage_rows(wtype, cols) < 2) return false;
  const int64_t hidden = weight_rows / 2;
  const v7::StreamPlan plan = v10::make_plan(wtype, hidden, cols, v7::stream_grid(hidden, n_sms));
  return plan.stages >= 2 && v10::smem_bytes(plan, wtype, cols, true) <= max_smem;
}

bool matvec_v10_swiglu_applies(DType wtype, int n_tokens, int64_t weight_rows, int64_t cols) {
  return matvec_v10_swiglu_supports(wtype, n_tokens, weight_rows, cols, v7::device_sm_count(), v7::device_max_smem());
}

void matvec_v10_swiglu(DType wtype, const MatvecParams& p, cudaStream_t stream) {
  const int n_sms = v7::device_sm_count();
  const size_t max_smem = v7::device_max_smem();
  FERRY_CUDA_REQUIRE(matvec_v10_swiglu_supports(wtype, p.n_tokens, p.w.rows, p.w.cols, n_sms, max_smem));
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w.data) % 16 == 0);
  FERRY_CUDA_REQUIRE(p.w.scales % 16 == 0 && p.bias == nullptr && p.add_norm.residual == nullptr);
  const int64_t hidden = p.w.rows / 2;
  const int64_t grid = v7::stream_grid(hidden, n_sms);
  const v7::StreamPlan plan = v10::make_plan(wtype, hidden, p.w.cols, grid);
  const size_t smem = v7::one_block_per_sm(v10::smem_bytes(plan, wtype, p.w.cols, true));
  if (wtype == DType::Q8_0) {
    v10::launch_q8_swiglu(p, plan, grid, smem, stream);
  } else if (wtype == DType::Q4_0) {
    v10::launch_q4_swiglu(p, plan, grid, smem, stream);
  } else {
    v10::launch_q4k_swiglu(p, plan, grid, smem, stream);
  }
}

}  // namespace ferry::cuda_ops
