// Matvec version 7 (design: matvec_stream.cuh).
#include "backends/cuda/matvec_stream.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "backends/cuda/common.cuh"
#include "backends/cuda/hopper.cuh"
#include "backends/cuda/matvec.cuh"
#include "backends/cuda/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kConsumerWarps = 8;
constexpr int kThreads = (kConsumerWarps + 1) * 32;  // + one producer warp
constexpr int kStages = 6;
constexpr int kStageBytes = 16384;
constexpr int kStageVals = kStageBytes / 2;  // 2-byte weights
constexpr int kSegVals = 256;                // one warp-wide 16-byte load: 32 lanes x 8 values
constexpr int kRunSegs = 4;                  // segments per consumer warp per stage
static_assert(kStageVals == kConsumerWarps * kRunSegs * kSegVals);
static_assert(kRunSegs * kSegVals == kStreamColAlign);
constexpr int kBarrierBytes = 128;  // full[kStages], empty[kStages] mbarriers, padded

// Shared memory: barriers | ring (kStages x kStageVals weights) | partials f32 (kConsumerWarps, kTok, max_rows).
size_t stream_smem_bytes(int n_tokens, int64_t max_rows) {
  return size_t(kBarrierBytes) + size_t(kStages) * kStageBytes +
         size_t(kConsumerWarps) * size_t(n_tokens) * size_t(max_rows) * sizeof(float);
}

// One 1-D bulk copy global -> shared completing `bar`'s transaction count (bytes % 16 == 0, both 16-aligned).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          sm90::smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(sm90::smem_addr(bar))
      : "memory");
}

// 8 weights (one 16-byte chunk) as floats.
template <class T>
__device__ __forceinline__ void widen8(const uint4& c, float (&v)[8]) {
  const uint32_t u[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      v[2 * i] = __uint_as_float(u[i] << 16);
      v[2 * i + 1] = __uint_as_float(u[i] & 0xFFFF0000u);
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
}

// grid = blocks; block b owns rows [r0, r0 + n_rows): base rows_per_block, the first `extra` blocks one more.
template <class T, int kTok>
__global__ void __launch_bounds__(kThreads, 1)
    matvec_stream_kernel(MatvecParams p, int64_t rows_per_block, int64_t extra, int64_t max_rows) {
  pdl_allow_dependents();
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);  // [kStages]: a stage's bytes have landed
  uint64_t* empty = full + kStages;                    // [kStages]: every consumer warp is done with it
  T* ring = reinterpret_cast<T*>(smem + kBarrierBytes);          // (kStages, kStageVals) weights
  float* part = reinterpret_cast<float*>(ring + size_t(kStages) * kStageVals);  // (warps, kTok, max_rows)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.x;
  const int64_t r0 = b * rows_per_block + (b < extra ? b : extra);
  const int64_t n_rows = rows_per_block + (b < extra ? 1 : 0);
  const int64_t cols = p.w.cols;
  const int64_t total = n_rows * cols;  // values of this block's contiguous weight range
  const int64_t n_stage = (total + kStageVals - 1) / kStageVals;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      sm90::mbar_init(&full[s], 1);
      sm90::mbar_init(&empty[s], kConsumerWarps);
    }
    sm90::fence_barrier_init();
  }
  for (int64_t i = threadIdx.x; i < int64_t(kConsumerWarps) * kTok * max_rows; i += kThreads) part[i] = 0.0f;
  __syncthreads();

  if (warp == kConsumerWarps) {  // producer: weights only, so it never waits for the previous kernel
    if (lane == 0) {
      const T* src = reinterpret_cast<const T*>(p.w.data) + r0 * cols;
      for (int64_t g = 0; g < n_stage; ++g) {
        const int s = int(g % kStages);
        const uint32_t phase = uint32_t(g / kStages) & 1u;
        sm90::mbar_wait(&empty[s], phase ^ 1u);
        const int64_t left = total - g * kStageVals;
        const uint32_t bytes = uint32_t((left < kStageVals ? left : kStageVals) * int64_t(sizeof(T)));
        sm90::mbar_arrive_expect_tx(&full[s], bytes);
        bulk_load(ring + size_t(s) * kStageVals, src + g * kStageVals, bytes, &full[s]);
      }
    }
    return;
  }

  pdl_wait();  // x is written by the previous kernel
  float acc[kTok];
#pragma unroll
  for (int t = 0; t < kTok; ++t) acc[t] = 0.0f;
  int64_t cur = -1;  // the row (relative to r0) acc belongs to
  const auto flush = [&]() {
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      float v = acc[t];
#pragma unroll
      for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
      if (lane == 0 && cur >= 0) part[(int64_t(warp) * kTok + t) * max_rows + cur] = v;
      acc[t] = 0.0f;
    }
  };

  for (int64_t g = 0; g < n_stage; ++g) {
    const int s = int(g % kStages);
    sm90::mbar_wait(&full[s], uint32_t(g / kStages) & 1u);
    const int64_t v0 = g * kStageVals + int64_t(warp) * (kRunSegs * kSegVals);  // value offset in the range
    if (v0 < total) {
      const int64_t row = v0 / cols;
      const int64_t col = v0 - row * cols;
      if (row != cur) {
        flush();
        cur = row;
      }
      const T* wst = ring + size_t(s) * kStageVals + warp * (kRunSegs * kSegVals) + lane * 8;
      uint4 wc[kRunSegs];
#pragma unroll
      for (int j = 0; j < kRunSegs; ++j) wc[j] = *reinterpret_cast<const uint4*>(wst + j * kSegVals);
#pragma unroll
      for (int j = 0; j < kRunSegs; ++j) {
        float wv[8];
        widen8<T>(wc[j], wv);
#pragma unroll
        for (int t = 0; t < kTok; ++t) {
          if (t >= p.n_tokens) break;  // kTok is the token bucket: rows past n are not there
          const float4* xp = reinterpret_cast<const float4*>(p.x + t * cols + col + j * kSegVals + lane * 8);
          const float4 xa = __ldg(xp), xb = __ldg(xp + 1);
          float a = acc[t];
          a = fmaf(wv[0], xa.x, a);
          a = fmaf(wv[1], xa.y, a);
          a = fmaf(wv[2], xa.z, a);
          a = fmaf(wv[3], xa.w, a);
          a = fmaf(wv[4], xb.x, a);
          a = fmaf(wv[5], xb.y, a);
          a = fmaf(wv[6], xb.z, a);
          a = fmaf(wv[7], xb.w, a);
          acc[t] = a;
        }
      }
    }
    __syncwarp();
    if (lane == 0) sm90::mbar_arrive(&empty[s]);
  }
  flush();
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerWarps * 32) : "memory");  // consumers only

  const int64_t n_out = p.w.rows;
  for (int64_t i = threadIdx.x; i < int64_t(kTok) * n_rows; i += kConsumerWarps * 32) {
    const int t = int(i / n_rows);
    const int64_t r = i - int64_t(t) * n_rows;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kConsumerWarps; ++w) sum += part[(int64_t(w) * kTok + t) * max_rows + r];
    if (t < p.n_tokens) p.out[int64_t(t) * n_out + r0 + r] = sum + (p.bias ? p.bias[r0 + r] : 0.0f);
  }
}

int device_sm_count() {
  int dev = 0, n = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&dev));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

size_t device_max_smem() {
  int dev = 0, n = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&dev));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return size_t(n);
}

int64_t stream_grid(int64_t rows, int n_sms) { return rows < n_sms ? rows : n_sms; }

template <class T, int kTok>
void launch_stream(const MatvecParams& p, int n_sms, cudaStream_t stream) {
  const int64_t grid = stream_grid(p.w.rows, n_sms);
  const int64_t per = p.w.rows / grid, extra = p.w.rows % grid;
  const int64_t max_rows = per + (extra > 0 ? 1 : 0);
  const size_t smem = stream_smem_bytes(kTok, max_rows);
  const auto kernel = matvec_stream_kernel<T, kTok>;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  launch_pdl(kernel, dim3(unsigned(grid)), dim3(kThreads), smem, stream, p, per, extra, max_rows);
  FERRY_CUDA_CHECK_LAUNCH(matvec_stream_kernel);
}

int token_bucket(int n) { return n <= 1 ? 1 : n <= 2 ? 2 : 4; }

}  // namespace

bool matvec_stream_supports(DType wtype, int n_tokens, int64_t rows, int64_t cols, int n_sms, size_t max_smem) {
  if (wtype != DType::BF16 && wtype != DType::F16) return false;
  if (n_tokens < 1 || n_tokens > kStreamMaxTokens || rows < 1 || cols < kStreamColAlign) return false;
  if (cols % kStreamColAlign != 0 || n_sms < 1) return false;
  const int64_t grid = stream_grid(rows, n_sms);
  const int64_t max_rows = rows / grid + (rows % grid > 0 ? 1 : 0);
  return stream_smem_bytes(token_bucket(n_tokens), max_rows) <= max_smem;
}

bool matvec_stream_applies(DType wtype, int n_tokens, int64_t rows, int64_t cols) {
  return matvec_stream_supports(wtype, n_tokens, rows, cols, device_sm_count(), device_max_smem());
}

void matvec_stream(DType wtype, const MatvecParams& p, cudaStream_t stream) {
  const int n_sms = device_sm_count();
  FERRY_CUDA_REQUIRE(matvec_stream_supports(wtype, p.n_tokens, p.w.rows, p.w.cols, n_sms, device_max_smem()));
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w.data) % 16 == 0);
  const int bucket = token_bucket(p.n_tokens);
  if (wtype == DType::BF16) {
    if (bucket == 1) launch_stream<__nv_bfloat16, 1>(p, n_sms, stream);
    else if (bucket == 2) launch_stream<__nv_bfloat16, 2>(p, n_sms, stream);
    else launch_stream<__nv_bfloat16, 4>(p, n_sms, stream);
  } else {
    if (bucket == 1) launch_stream<__half, 1>(p, n_sms, stream);
    else if (bucket == 2) launch_stream<__half, 2>(p, n_sms, stream);
    else launch_stream<__half, 4>(p, n_sms, stream);
  }
}

}  // namespace ferry::cuda_ops
