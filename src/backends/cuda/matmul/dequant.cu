#include "backends/cuda/matmul/dequant.cuh"

#include <cuda_bf16.h>

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kThreads = 256;

__device__ inline uint32_t bf16_pair(float lo, float hi) {
  const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);  // lo in the low 16 bits
  return *reinterpret_cast<const uint32_t*>(&b);
}

// One thread per chunk: decode, then write each run with 16-byte stores (8 bf16; runs of 4 values: one
// 8-byte store). The first version wrote 4-byte pairs: a warp's store then touched 32 sectors for 128
// useful bytes, and the pass ran far below copy bandwidth.
template <class D>
__global__ void dequantize_to_bf16_kernel(WeightView w, uint16_t* out) {
  pdl_allow_dependents();
  pdl_wait();
  static_assert(D::kRunLen % 8 == 0 || D::kRunLen == 4, "runs of 4 or of a multiple of 8 values");
  const int64_t per_row = D::chunks(w.cols);
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= w.rows * per_row) return;
  const int64_t row = i / per_row, c = i % per_row;
  float v[D::kVals];
  D::decode(D::load(w, row, c), v);
#pragma unroll
  for (int r = 0; r < D::kRuns; ++r) {
    uint16_t* dst = out + size_t(row) * size_t(w.cols) + D::run_start(c, r);
    const float* src = v + r * D::kRunLen;
    if constexpr (D::kRunLen == 4) {
      *reinterpret_cast<uint2*>(dst) = make_uint2(bf16_pair(src[0], src[1]), bf16_pair(src[2], src[3]));
    } else {
#pragma unroll
      for (int j = 0; j < D::kRunLen / 8; ++j) {
        const float* q = src + 8 * j;
        reinterpret_cast<uint4*>(dst)[j] = make_uint4(bf16_pair(q[0], q[1]), bf16_pair(q[2], q[3]),
                                                      bf16_pair(q[4], q[5]), bf16_pair(q[6], q[7]));
      }
    }
  }
}

__global__ void f32_to_bf16_kernel(const float* x, uint16_t* out, int64_t count) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i < count) out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}

// x: (count) f32, 32-byte aligned; out: (count) bf16, 16-byte aligned; count a multiple of 8. One thread per
// 8 values: two 16-byte loads, one 16-byte store (the scalar kernel's 2-byte stores ran well under copy
// bandwidth, and this pass precedes every prefill GEMM).
__global__ void f32_to_bf16_x8_kernel(const float4* x, uint4* out, int64_t count8) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= count8) return;
  const float4 a = x[2 * i], b = x[2 * i + 1];
  out[i] = make_uint4(bf16_pair(a.x, a.y), bf16_pair(a.z, a.w), bf16_pair(b.x, b.y), bf16_pair(b.z, b.w));
}

__global__ void add_bias_kernel(float* out, const float* bias, int64_t rows, int64_t cols) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i < rows * cols) out[i] += bias[i % cols];
}

}  // namespace

void dequantize_to_bf16(DType wtype, const WeightView& w, uint16_t* out, cudaStream_t stream) {
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(out) % 16 == 0);
  const bool ok = visit_decoder(wtype, [&]<class D>() {
    FERRY_CUDA_REQUIRE(w.cols % D::kVals == 0);
    const int64_t total = w.rows * D::chunks(w.cols);
    launch_pdl(dequantize_to_bf16_kernel<D>, dim3(grid_for(total, kThreads)), dim3(kThreads), 0, stream, w, out);
    FERRY_CUDA_CHECK_LAUNCH(dequantize_to_bf16_kernel);
  });
  FERRY_CUDA_REQUIRE(ok);
}

void f32_to_bf16(const float* x, uint16_t* out, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  if (count % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 32 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0) {
    launch_pdl(f32_to_bf16_x8_kernel, dim3(grid_for(count / 8, kThreads)), dim3(kThreads), 0, stream,
               reinterpret_cast<const float4*>(x), reinterpret_cast<uint4*>(out), count / 8);
    FERRY_CUDA_CHECK_LAUNCH(f32_to_bf16_x8_kernel);
    return;
  }
  launch_pdl(f32_to_bf16_kernel, dim3(grid_for(count, kThreads)), dim3(kThreads), 0, stream, x, out, count);
  FERRY_CUDA_CHECK_LAUNCH(f32_to_bf16_kernel);
}

void add_bias(float* out, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  launch_pdl(add_bias_kernel, dim3(grid_for(rows * cols, kThreads)), dim3(kThreads), 0, stream, out, bias, rows, cols);
  FERRY_CUDA_CHECK_LAUNCH(add_bias_kernel);
}

}  // namespace ferry::cuda_ops
