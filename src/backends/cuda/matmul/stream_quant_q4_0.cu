// The streamed quantized matvec's Q4_0 instances (design: stream_quant.cuh; kernel: stream_quant_kernel.cuh).
#include "backends/cuda/matmul/stream_quant_kernel.cuh"

namespace ferry::cuda_ops::quant_stream {

void launch_q4(const MatvecParams& p, const streaming::StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream) {
  launch_type<DType::Q4_0>(p, plan, grid, smem, stream);
}

void launch_q4_swiglu(const MatvecParams& p, const streaming::StreamPlan& plan, int64_t grid, size_t smem,
                      cudaStream_t stream) {
  launch_type<DType::Q4_0, true>(p, plan, grid, smem, stream);
}

}  // namespace ferry::cuda_ops::quant_stream
