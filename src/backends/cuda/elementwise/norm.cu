// Two shapes of the same math:
//  - vector kernel (cols % 4 == 0, 16-byte aligned rows, cols <= 8192): a row per block of 256 threads
//    (cols >= 1024) or per warp (cols < 1024, e.g. Qwen3's per-head q/k norm); each thread loads its kV float4s
//    of the row (and of delta) into registers with all loads issued first, updates the residual, and writes
//    the scaled values from registers: one pass over memory (the scalar kernel reads each row twice with 4-byte
//    loads; both measured in docs/perf-log.md).
//  - scalar kernel (anything else): a row per block; thread t owns elements t, t + kThreads, ...
// In both, the sum of squares is fp32 (per thread, then warp shuffles, then one word per warp in shared memory)
// and every element is read before it is written by the same thread, so out may alias x. Either writes f32 rows
// (out) or the same values rounded to bf16 (out_bf16: the input of a bf16 GEMM, without a conversion pass).
#include "backends/cuda/elementwise/norm.cuh"

#include <cuda_bf16.h>

#include "backends/cuda/common/block_reduce.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kThreads = 256;

__device__ inline uint32_t bf16x2_bits(float lo, float hi) {
  return uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

template <bool kAdd, bool kBf16>
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
  const float scale = 1.0f / sqrtf(block_sum<kThreads>(ss) / float(p.cols) + p.eps);
  for (int64_t j = threadIdx.x; j < p.cols; j += kThreads) {
    const float y = src[j] * scale * p.weight[j];
    if constexpr (kBf16) {
      p.out_bf16[base + j] = __bfloat16_as_ushort(__float2bfloat16_rn(y));
    } else {
      p.out[base + j] = y;
    }
  }
}

// A row per group of kGroup threads (256: one block; 32: one warp, 8 rows per block); kV float4 per thread.
template <bool kAdd, bool kBf16, int kGroup, int kV>
__global__ void __launch_bounds__(kThreads) rms_norm_vec_kernel(RmsNormParams p) {
  pdl_allow_dependents();
  constexpr int kRowsPerBlock = kThreads / kGroup;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kGroup;
  const int lane = threadIdx.x % kGroup;
  const int64_t vecs = p.cols / 4;
  const bool live = row < p.rows;  // a partial last block: dead warps still join the block reduction
  // The norm's weight is constant: requested before the wait, so its round trip (from DRAM after a layer's weights
  // went through L2) overlaps the previous kernel's tail instead of following the block reduction.
  const float4* w = reinterpret_cast<const float4*>(p.weight);
  float4 g[kV];
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int64_t j = lane + int64_t(i) * kGroup;
    g[i] = live && j < vecs ? w[j] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  pdl_wait();
  const size_t base = size_t(live ? row : 0) * size_t(vecs);
  const float4* src = reinterpret_cast<const float4*>(kAdd ? p.residual : p.x) + base;
  float4 v[kV];
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int64_t j = lane + int64_t(i) * kGroup;
    v[i] = live && j < vecs ? src[j] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  if constexpr (kAdd) {
    const float4* d = reinterpret_cast<const float4*>(p.delta) + base;
    float4 dv[kV];
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const int64_t j = lane + int64_t(i) * kGroup;
      dv[i] = live && j < vecs ? d[j] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float4* r = reinterpret_cast<float4*>(p.residual) + base;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      v[i].x += dv[i].x, v[i].y += dv[i].y, v[i].z += dv[i].z, v[i].w += dv[i].w;
      const int64_t j = lane + int64_t(i) * kGroup;
      if (live && j < vecs) r[j] = v[i];
    }
  }
  float ss = 0;
#pragma unroll
  for (int i = 0; i < kV; ++i) ss = add_squares(v[i], ss);
  float total;
  if constexpr (kGroup == kThreads) {
    total = block_sum<kThreads>(ss);
  } else {
    total = warp_sum(ss);
  }
  const float scale = 1.0f / sqrtf(total / float(p.cols) + p.eps);
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int64_t j = lane + int64_t(i) * kGroup;
    if (!live || j >= vecs) continue;
    const float4 y = make_float4(v[i].x * scale * g[i].x, v[i].y * scale * g[i].y, v[i].z * scale * g[i].z,
                                 v[i].w * scale * g[i].w);
    if constexpr (kBf16) {
      reinterpret_cast<uint2*>(p.out_bf16)[base + j] = make_uint2(bf16x2_bits(y.x, y.y), bf16x2_bits(y.z, y.w));
    } else {
      reinterpret_cast<float4*>(p.out)[base + j] = y;
    }
  }
}

// Launches the vector kernel when the shape takes it; false otherwise.
template <bool kAdd, bool kBf16>
bool launch_vec(const RmsNormParams& p, cudaStream_t stream) {
  const auto aligned = [](const void* q) { return q == nullptr || reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  if (p.cols % 4 != 0 || p.cols > 8192 || !aligned(p.out) || !aligned(p.x) || !aligned(p.residual) ||
      !aligned(p.delta) || !aligned(p.weight) || reinterpret_cast<uintptr_t>(p.out_bf16) % 8 != 0)
    return false;
  const int64_t vecs = p.cols / 4;
  const auto go = [&]<int kGroup, int kV>() {
    constexpr int kRowsPerBlock = kThreads / kGroup;
    launch_pdl(rms_norm_vec_kernel<kAdd, kBf16, kGroup, kV>, dim3(unsigned((p.rows + kRowsPerBlock - 1) / kRowsPerBlock)),
               dim3(kThreads), 0, stream, p);
  };
  if (vecs < kThreads) {  // cols < 1024: a warp per row
    if (vecs <= 32) go.template operator()<32, 1>();
    else if (vecs <= 64) go.template operator()<32, 2>();
    else if (vecs <= 128) go.template operator()<32, 4>();
    else go.template operator()<32, 8>();
  } else if (vecs <= kThreads) {
    go.template operator()<kThreads, 1>();
  } else if (vecs <= 2 * kThreads) {
    go.template operator()<kThreads, 2>();
  } else if (vecs <= 4 * kThreads) {
    go.template operator()<kThreads, 4>();
  } else {
    go.template operator()<kThreads, 8>();
  }
  return true;
}

template <bool kAdd, bool kBf16>
void launch_as(const RmsNormParams& p, cudaStream_t stream) {
  if (launch_vec<kAdd, kBf16>(p, stream)) {
    FERRY_CUDA_CHECK_LAUNCH(rms_norm_vec_kernel);
    return;
  }
  launch_pdl(rms_norm_kernel<kAdd, kBf16>, dim3(unsigned(p.rows)), dim3(kThreads), 0, stream, p);
  FERRY_CUDA_CHECK_LAUNCH(rms_norm_kernel);
}

void launch(const RmsNormParams& p, bool add, cudaStream_t stream) {
  if (p.rows == 0) return;
  FERRY_CUDA_REQUIRE(p.cols > 0 && p.rows <= 0x7FFFFFFF);
  FERRY_CUDA_REQUIRE((p.out != nullptr) != (p.out_bf16 != nullptr));
  if (p.out_bf16 != nullptr) {
    add ? launch_as<true, true>(p, stream) : launch_as<false, true>(p, stream);
  } else {
    add ? launch_as<true, false>(p, stream) : launch_as<false, false>(p, stream);
  }
}

}  // namespace

void rms_norm(const RmsNormParams& p, cudaStream_t stream) { launch(p, false, stream); }
void add_rms_norm(const RmsNormParams& p, cudaStream_t stream) { launch(p, true, stream); }

}  // namespace ferry::cuda_ops
