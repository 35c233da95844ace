// One block per token; each thread converts 4 values at a time (16-byte f32 loads, 8-byte bf16 stores).
#include "backends/cuda/attention/attention_store.cuh"

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kThreads = 128;

__device__ inline uint2 to_bf16x4(float4 f) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(f.x, f.y), hi = __floats2bfloat162_rn(f.z, f.w);
  return make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
}

__global__ void __launch_bounds__(kThreads) store_kv_bf16_kernel(StoreKvBf16Params p) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int64_t slot = p.slots[t];
  if (slot < 0 || slot >= p.n_slots) {
    if (threadIdx.x == 0) report_error(p.errors, kBadSlot, slot);
    return;
  }
  const int64_t quads = p.row / 4;
  const float4* k = reinterpret_cast<const float4*>(p.k + t * p.row);
  const float4* v = reinterpret_cast<const float4*>(p.v + t * p.row);
  uint2* kc = reinterpret_cast<uint2*>(p.k_cache + slot * p.row);
  uint2* vc = reinterpret_cast<uint2*>(p.v_cache + slot * p.row);
  for (int64_t j = threadIdx.x; j < quads; j += kThreads) {
    kc[j] = to_bf16x4(k[j]);
    vc[j] = to_bf16x4(v[j]);
  }
}

}  // namespace

void store_kv_bf16(const StoreKvBf16Params& p, cudaStream_t stream) {
  if (p.n == 0) return;
  FERRY_CUDA_REQUIRE(p.n <= 0x7FFFFFFF && p.row % 4 == 0);
  launch_pdl(store_kv_bf16_kernel, dim3(unsigned(p.n)), dim3(kThreads), 0, stream, p);
  FERRY_CUDA_CHECK_LAUNCH(store_kv_bf16_kernel);
}

}  // namespace ferry::cuda_ops
