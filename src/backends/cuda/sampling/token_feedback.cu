#include "backends/cuda/sampling/token_feedback.cuh"

#include "backends/cuda/common/launch.cuh"

namespace ferry::cuda_ops {

namespace {

__global__ void resolve_placeholders_kernel(PlaceholderParams p) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.n) return;
  const int32_t id = p.ids[i];
  if (id >= 0) return;
  const int64_t row = -int64_t(id) - 1;
  if (row >= p.n_sampled) {
    report_error(p.errors, kBadTokenId, id);
    return;
  }
  const int32_t t = p.sampled[row];
  p.ids[i] = t >= 0 ? t : 0;  // -1: nothing was drawn; that request fails at its postprocess, this row is wasted
}

}  // namespace

void resolve_placeholders(const PlaceholderParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  constexpr int kThreads = 256;
  const auto blocks = unsigned((p.n + kThreads - 1) / kThreads);
  resolve_placeholders_kernel<<<blocks, kThreads, 0, stream>>>(p);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ferry::cuda_ops
