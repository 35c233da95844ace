// The decode FFN kernel's Q8_0 instances (design: decode_ffn.cuh; kernel: decode_ffn_kernel.cuh).
#include "backends/cuda/decode_ffn_kernel.cuh"

namespace ferry::cuda_ops::ffn {

void launch_q8(const DecodeFfnParams& p, const Plan& plan, int grid, size_t smem, cudaStream_t stream) {
  launch_type<DType::Q8_0>(p, plan, grid, smem, stream);
}

}  // namespace ferry::cuda_ops::ffn
