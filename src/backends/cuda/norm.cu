// One block per row. Each thread owns the elements j = tid, tid + kThreads, ...: it reads (and, for the fused
// op, updates) them, the block sums their squares in fp32 (warp shuffles, then one word per warp in shared
// memory), and the thread writes its own elements scaled. No element is written before every thread has
// read it (the reduction's barriers sit in between), so out may alias x.
#include "backends/cuda/norm.cuh"

#include "backends/cuda/common.cuh"
#include "backends/cuda/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kThreads = 256;

__device__ float block_sum(float v) {
  __shared__ float partial[kThreads / 32];
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  return total;
}

template <bool kAdd>
__global__ void __launch_bounds__(kThreads) rms_norm_kernel(RmsNormParams p) {
  pdl_allow_dependents();
  pdl_wait();
  const size_t base = size_t(blockIdx.x) * size_t(p.cols);
  const float* src = kAdd ? p.residual + base : p.x + base;
  float ss = 0;
  for (int64_t j = threadIdx.x; j < p.cols; j += kThreads) {
    float v = src[j];
    if constexpr (kAdd) {
      v += p.delta[base + j];
      p.residual[base + j] = v;
    }
    ss = fmaf(v, v, ss);
  }
  const float scale = 1.0f / sqrtf(block_sum(ss) / float(p.cols) + p.eps);
  for (int64_t j = threadIdx.x; j < p.cols; j += kThreads) p.out[base + j] = src[j] * scale * p.weight[j];
}

void launch(const RmsNormParams& p, bool add, cudaStream_t stream) {
  if (p.rows == 0) return;
  FERRY_CUDA_REQUIRE(p.cols > 0 && p.rows <= 0x7FFFFFFF);
  if (add) {
    launch_pdl(rms_norm_kernel<true>, dim3(unsigned(p.rows)), dim3(kThreads), 0, stream, p);
  } else {
    launch_pdl(rms_norm_kernel<false>, dim3(unsigned(p.rows)), dim3(kThreads), 0, stream, p);
  }
  FERRY_CUDA_CHECK_LAUNCH(rms_norm_kernel);
}

}  // namespace

void rms_norm(const RmsNormParams& p, cudaStream_t stream) { launch(p, false, stream); }
void add_rms_norm(const RmsNormParams& p, cudaStream_t stream) { launch(p, true, stream); }

}  // namespace ferry::cuda_ops
