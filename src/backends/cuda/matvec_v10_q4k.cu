// Matvec version 10's Q4_K instances (design: matvec_v10.cuh; kernel: matvec_v10_kernel.cuh; lane math:
// matvec_v10_math.cuh's Q4_K section).
#include "backends/cuda/matvec_v10_kernel.cuh"

namespace ferry::cuda_ops::v10 {

void launch_q4k(const MatvecParams& p, const v7::StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream) {
  launch_type<DType::Q4_K>(p, plan, grid, smem, stream);
}

void launch_q4k_swiglu(const MatvecParams& p, const v7::StreamPlan& plan, int64_t grid, size_t smem,
                      cudaStream_t stream) {
  launch_type<DType::Q4_K, true>(p, plan, grid, smem, stream);
}

}  // namespace ferry::cuda_ops::v10
