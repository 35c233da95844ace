#include "backends/cuda/sampling/token_mask.cuh"

#include "backends/cuda/common/launch.cuh"

namespace ferry::cuda_ops {

namespace {

__global__ void apply_token_mask_kernel(TokenMaskParams p) {
  // A warp covers 32 consecutive logits of a row: one 32-bit half of a mask word, read by every lane (broadcast).
  const int64_t row = blockIdx.y;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= p.vocab) return;
  const uint64_t word = p.mask[row * p.words + t / 64];
  if (!((word >> (t % 64)) & 1u)) p.logits[row * p.vocab + t] = -__int_as_float(0x7f800000);  // -inf
}

}  // namespace

void apply_token_mask(const TokenMaskParams& p, cudaStream_t stream) {
  if (p.m == 0 || p.vocab == 0) return;
  constexpr int kThreads = 256;
  const dim3 grid(unsigned((p.vocab + kThreads - 1) / kThreads), unsigned(p.m));
  apply_token_mask_kernel<<<grid, kThreads, 0, stream>>>(p);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ferry::cuda_ops
