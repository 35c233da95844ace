// The streamed quantized matvec's stacked Q4_K + Q6_K instances (design: stream_quant.cuh, stream_quant_stacked; kernel:
// stream_quant_kernel.cuh).
#include "backends/cuda/matmul/stream_quant_kernel.cuh"

namespace ferry::cuda_ops::quant_stream {

void launch_stacked_q4k_q6k(const StackedLaunch& l, cudaStream_t stream) {
  launch_stacked_pair<DType::Q4_K, DType::Q6_K>(l, stream);
}

}  // namespace ferry::cuda_ops::quant_stream
