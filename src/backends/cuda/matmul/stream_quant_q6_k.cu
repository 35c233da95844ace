// The streamed quantized matvec's Q6_K instances (design: stream_quant.cuh; kernel: stream_quant_kernel.cuh; lane math:
// stream_quant_kquant_math.cuh).
#include "backends/cuda/matmul/stream_quant_kernel.cuh"

namespace ferry::cuda_ops::quant_stream {

void launch_q6k(const MatvecParams& p, const streaming::StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream) {
  launch_type<DType::Q6_K>(p, plan, grid, smem, stream);
}

void launch_q6k_swiglu(const MatvecParams& p, const streaming::StreamPlan& plan, int64_t grid, size_t smem,
                      cudaStream_t stream) {
  launch_type<DType::Q6_K, true>(p, plan, grid, smem, stream);
}

}  // namespace ferry::cuda_ops::quant_stream
