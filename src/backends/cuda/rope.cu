// One thread per (token, pair i): the angle pos * inv_freq[i] and its sine and cosine in double (as the CPU
// reference: positions up to 1e6 times frequencies near 1 keep their precision), then every head of the
// token is rotated with them. fp64 here costs nothing measurable: n * half threads, each a few flops.
#include "backends/cuda/rope.cuh"

#include "backends/cuda/common.cuh"
#include "backends/cuda/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kThreads = 128;

__global__ void rope_kernel(RopeParams p) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= p.n * p.half) return;
  const int64_t t = i / p.half, k = i % p.half;
  double s, c;
  sincos(double(p.positions[t]) * double(p.inv_freq[k]), &s, &c);
  const float cs = float(c), sn = float(s);
  const int64_t i0 = p.interleaved ? 2 * k : k;
  const int64_t i1 = p.interleaved ? 2 * k + 1 : k + p.half;  // NeoX: pairs (i, i + rotated dims / 2)
  for (int64_t h = 0; h < p.n_heads; ++h) {
    float* v = p.x + (t * p.n_heads + h) * p.head_dim;
    const float a = v[i0], b = v[i1];
    v[i0] = a * cs - b * sn;
    v[i1] = a * sn + b * cs;
  }
}

}  // namespace

void rope(const RopeParams& p, cudaStream_t stream) {
  if (p.n * p.half == 0) return;
  FERRY_CUDA_REQUIRE(2 * p.half <= p.head_dim);
  launch_pdl(rope_kernel, dim3(grid_for(p.n * p.half, kThreads)), dim3(kThreads), 0, stream, p);
  FERRY_CUDA_CHECK_LAUNCH(rope_kernel);
}

}  // namespace ferry::cuda_ops
