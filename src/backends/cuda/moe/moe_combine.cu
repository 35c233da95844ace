// moe_combine: one thread per output element, the top_k slots summed in slot order (most probable first).
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/moe/moe_experts.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) combine_kernel(MoeCombineParams p) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t t = blockIdx.y;
  const int64_t d = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (d >= p.dim) return;
  float acc = 0.0f;
  for (int j = 0; j < p.top_k; ++j) {
    const size_t s = size_t(t) * size_t(p.top_k) + size_t(j);
    acc += p.weight[s] * p.y[s * size_t(p.dim) + size_t(d)];
  }
  p.out[size_t(t) * size_t(p.dim) + size_t(d)] = acc;
}

}  // namespace

void moe_combine(const MoeCombineParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  FERRY_CUDA_REQUIRE(p.n <= 65535 && p.top_k >= 1 && p.dim > 0);
  launch_pdl(combine_kernel, dim3(grid_for(p.dim, kThreads), unsigned(p.n)), dim3(kThreads), 0, stream, p);
}

}  // namespace ferry::cuda_ops
