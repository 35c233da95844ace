// Matvec version 10's Q8_0 instances (design: matvec_v10.cuh; kernel: matvec_v10_kernel.cuh).
#include "backends/cuda/matvec_v10_kernel.cuh"

namespace ferry::cuda_ops::v10 {

void launch_q8(const MatvecParams& p, const v7::StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream) {
  launch_type<DType::Q8_0>(p, plan, grid, smem, stream);
}

void launch_q8_swiglu(const MatvecParams& p, const v7::StreamPlan& plan, int64_t grid, size_t smem,
                      cudaStream_t stream) {
  launch_type<DType::Q8_0, true>(p, plan, grid, smem, stream);
}

}  // namespace ferry::cuda_ops::v10
