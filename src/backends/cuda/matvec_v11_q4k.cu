// Matvec version 11's Q4_K instances (design: matvec_v11.cuh; kernel: matvec_v11_kernel.cuh).
#include "backends/cuda/matvec_v11_kernel.cuh"

namespace ferry::cuda_ops::v11 {

void launch_q4k(const MatvecParams& p, const StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream) {
  launch_type<DType::Q4_K>(p, plan, grid, smem, stream);
}

}  // namespace ferry::cuda_ops::v11
