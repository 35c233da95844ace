#include "backends/cuda/elementwise/elementwise.cuh"

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/common/silu.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kThreads = 256;

__global__ void swiglu_kernel(float* out, const float* gate, const float* up, int64_t count) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= count) return;
  out[i] = silu_mul(gate[i], up[i]);
}

// Same math, one float4 of each stream per thread (count % 4 == 0, 16-byte aligned pointers), where the scalar
// kernel's 4-byte accesses reached about half the copy bandwidth (docs/perf-log.md).
__global__ void swiglu4_kernel(float4* out, const float4* gate, const float4* up, int64_t count4) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= count4) return;
  const float4 g = gate[i], u = up[i];
  out[i] = make_float4(silu_mul(g.x, u.x), silu_mul(g.y, u.y), silu_mul(g.z, u.z), silu_mul(g.w, u.w));
}

__device__ __forceinline__ float gelu_tanh_mul(float g, float u) {
  constexpr float kK = 0.7978845608028654f, kC = 0.044715f;  // sqrt(2 / pi)
  return 0.5f * g * (1.0f + tanhf(kK * (g + kC * g * g * g))) * u;
}

__global__ void geglu_tanh_kernel(float* out, const float* gate, const float* up, int64_t count) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= count) return;
  out[i] = gelu_tanh_mul(gate[i], up[i]);
}

__global__ void softcap_kernel(float* x, float cap, int64_t count) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= count) return;
  x[i] = cap * tanhf(x[i] / cap);
}

// Thread i: element i of the (rows, n_leading) leading block.
__global__ void scale_leading_kernel(float* x, float s, int64_t rows, int64_t cols, int64_t n_leading) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= rows * n_leading) return;
  x[i / n_leading * cols + i % n_leading] *= s;
}

// One block per output row, threads copy 4-byte words.
__global__ void gather_rows_kernel(GatherRowsParams p) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t i = blockIdx.x;
  const int32_t r = p.rows[i];
  if (r < 0 || r >= p.x_rows) {
    if (threadIdx.x == 0) report_error(p.errors, kBadRow, r);
    return;
  }
  const uint32_t* src = static_cast<const uint32_t*>(p.x) + size_t(r) * size_t(p.row_words);
  uint32_t* dst = static_cast<uint32_t*>(p.out) + size_t(i) * size_t(p.row_words);
  for (int64_t j = threadIdx.x; j < p.row_words; j += kThreads) dst[j] = src[j];
}

// One block per token: its K and V rows (n_kv_heads * head_dim floats) go to the slot's row of each cache.
__global__ void store_kv_kernel(StoreKvParams p) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int64_t slot = p.slots[t];
  if (slot < 0 || slot >= p.n_slots) {
    if (threadIdx.x == 0) report_error(p.errors, kBadSlot, slot);
    return;
  }
  const size_t src = size_t(t) * size_t(p.row), dst = size_t(slot) * size_t(p.row);
  for (int64_t j = threadIdx.x; j < p.row; j += kThreads) {
    p.k_cache[dst + j] = p.k[src + j];
    p.v_cache[dst + j] = p.v[src + j];
  }
}

}  // namespace

void swiglu(float* out, const float* gate, const float* up, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  if (count % 4 == 0 && aligned(out) && aligned(gate) && aligned(up)) {
    launch_pdl(swiglu4_kernel, dim3(grid_for(count / 4, kThreads)), dim3(kThreads), 0, stream,
               reinterpret_cast<float4*>(out), reinterpret_cast<const float4*>(gate),
               reinterpret_cast<const float4*>(up), count / 4);
    FERRY_CUDA_CHECK_LAUNCH(swiglu4_kernel);
    return;
  }
  launch_pdl(swiglu_kernel, dim3(grid_for(count, kThreads)), dim3(kThreads), 0, stream, out, gate, up, count);
  FERRY_CUDA_CHECK_LAUNCH(swiglu_kernel);
}

void geglu_tanh(float* out, const float* gate, const float* up, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  launch_pdl(geglu_tanh_kernel, dim3(grid_for(count, kThreads)), dim3(kThreads), 0, stream, out, gate, up, count);
  FERRY_CUDA_CHECK_LAUNCH(geglu_tanh_kernel);
}

void softcap(float* x, float cap, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  FERRY_CUDA_REQUIRE(cap > 0);
  launch_pdl(softcap_kernel, dim3(grid_for(count, kThreads)), dim3(kThreads), 0, stream, x, cap, count);
  FERRY_CUDA_CHECK_LAUNCH(softcap_kernel);
}

void scale_leading(float* x, float s, int64_t rows, int64_t cols, int64_t n_leading, cudaStream_t stream) {
  if (rows == 0 || n_leading == 0) return;
  FERRY_CUDA_REQUIRE(n_leading <= cols);
  launch_pdl(scale_leading_kernel, dim3(grid_for(rows * n_leading, kThreads)), dim3(kThreads), 0, stream, x, s, rows,
             cols, n_leading);
  FERRY_CUDA_CHECK_LAUNCH(scale_leading_kernel);
}

void gather_rows(const GatherRowsParams& p, cudaStream_t stream) {
  if (p.m == 0) return;
  FERRY_CUDA_REQUIRE(p.m <= 0x7FFFFFFF);
  launch_pdl(gather_rows_kernel, dim3(unsigned(p.m)), dim3(kThreads), 0, stream, p);
  FERRY_CUDA_CHECK_LAUNCH(gather_rows_kernel);
}

void store_kv(const StoreKvParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  FERRY_CUDA_REQUIRE(p.n <= 0x7FFFFFFF);
  launch_pdl(store_kv_kernel, dim3(unsigned(p.n)), dim3(kThreads), 0, stream, p);
  FERRY_CUDA_CHECK_LAUNCH(store_kv_kernel);
}

}  // namespace ferry::cuda_ops
