// Matvec version 11's Q4_0 instances (design: matvec_v11.cuh; kernel: matvec_v11_kernel.cuh).
#include "backends/cuda/matvec_v11_kernel.cuh"

namespace ferry::cuda_ops::v11 {

void launch_q4(const MatvecParams& p, const StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream) {
  launch_type<DType::Q4_0>(p, plan, grid, smem, stream);
}

}  // namespace ferry::cuda_ops::v11
