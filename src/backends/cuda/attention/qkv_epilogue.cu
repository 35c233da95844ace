// qkv_epilogue: grid (token, group of heads), kWarps warps per block, each warp taking heads_per_warp of the
// group's heads one after the other. The block first computes the token's RoPE sines and cosines in double (as
// rope.cu and the CPU reference: positions up to 1e6 times frequencies near 1 keep their precision) into shared
// memory; each warp then loads a head into its own shared row (coalesced), applies the RMSNorm (fp32
// warp-shuffle sum, x * scale * w as norm.cu), rotates the pairs (one lane per pair, a * c - b * s /
// a * s + b * c as rope.cu) and writes the head to q or to its cache slot. At head_dim 64 and 128 with full
// rotation (every Llama/Qwen model) a head stays in registers instead (qkv_head.cuh's qkv_head_lane: a lane's 2 or
// 4 contiguous values, one vector load and one vector store, where scalar loads, a shared row and scalar stores
// per head left the prompt-step launch at a third of the copy bandwidth: docs/perf-log.md).
// Heads per warp (the launcher): 1 while one head per warp fits in one wave of resident blocks, else as many as
// make the grid one wave. At decode (n = 1, Llama-3-8B: 48 heads of 128) that is 12 blocks of 128 threads, one
// launch for what took five. At a 512-token prompt step one head per warp was 6,144 blocks (~3 waves of 2,112
// resident on 132 SMs, each block a chain of latencies: the PDL wait, the double sincos, one load round trip;
// the 2026-11-30 serving profile in docs/perf-log.md); 3 heads per warp make it 2,048 blocks, one wave,
// computing each token's sines 4 times instead of 12.
//
// swiglu_fused: grid (column quads, rows), one float4 of gate and of up per thread (16-byte accesses, as
// elementwise.cu's swiglu4), scalar when hidden % 4 != 0 or a pointer is not aligned; f32 or bf16 output
// (SwigluFusedParams::out_bf16: the down projection's GEMM input, so matmul skips its f32_to_bf16 pass).
#include "backends/cuda/attention/qkv_epilogue.cuh"

#include <cuda_bf16.h>

#include <algorithm>

#include "backends/cuda/attention/qkv_head.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/common/silu.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kWarps = 4;  // heads per block
constexpr int kThreads = kWarps * 32;
constexpr int kSwigluThreads = 256;
constexpr int64_t kMaxGridY = 65535;

__device__ __forceinline__ void store_kv_value(float* dst, float v) { *dst = v; }
__device__ __forceinline__ void store_kv_value(__nv_bfloat16* dst, float v) { *dst = __float2bfloat16_rn(v); }

// kV values of a lane to dst + kV * lane (f32: one float4 / float2 store; bf16: one 8 / 4-byte store).
template <int kV>
__device__ __forceinline__ void store_lane(float* dst, const float (&x)[kV]) {
  const int lane = threadIdx.x % 32;
  if constexpr (kV == 4) {
    reinterpret_cast<float4*>(dst)[lane] = make_float4(x[0], x[1], x[2], x[3]);
  } else {
    reinterpret_cast<float2*>(dst)[lane] = make_float2(x[0], x[1]);
  }
}
template <int kV>
__device__ __forceinline__ void store_lane(__nv_bfloat16* dst, const float (&x)[kV]) {
  const int lane = threadIdx.x % 32;
  const __nv_bfloat162 lo = __floats2bfloat162_rn(x[0], x[1]);
  if constexpr (kV == 4) {
    const __nv_bfloat162 hi = __floats2bfloat162_rn(x[2], x[3]);
    reinterpret_cast<uint2*>(dst)[lane] =
        make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
  } else {
    reinterpret_cast<__nv_bfloat162*>(dst)[lane] = lo;
  }
}

// kV > 0: head_dim 32 * kV with full rotation, each head in registers (qkv_head_lane: one vector load and one vector
// store per lane, no shared row); kV == 0: any head_dim and rotation, through the warp's shared row.
template <typename KvT, int kV>
__global__ void __launch_bounds__(kThreads) qkv_epilogue_kernel(QkvEpilogueParams p) {
  pdl_allow_dependents();
  pdl_wait();
  extern __shared__ float smem[];  // cos (half) | sin (half) | kWarps rows of head_dim
  float* cos_t = smem;
  float* sin_t = smem + p.half;
  const int64_t t = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t H = p.n_heads, KVH = p.n_kv_heads, D = p.head_dim, n_all = H + 2 * KVH;
  // This block's heads: [h0, h0 + kWarps * heads_per_warp); warp w takes h0 + w, h0 + w + kWarps, ...
  const int64_t h0 = int64_t(blockIdx.y) * kWarps * p.heads_per_warp;
  // Every head this warp will read, requested into L1 now: the sines below and the earlier heads' work then
  // overlap the later heads' loads instead of waiting one round trip per head (a prefetch changes no value).
  for (int64_t off = int64_t(lane) * 32; off < p.heads_per_warp * D; off += 32 * 32) {
    const int64_t h = h0 + (off / D) * kWarps + warp;
    if (h < n_all) asm volatile("prefetch.global.L1 [%0];" ::"l"(p.qkv + (t * n_all + h) * D + off % D));
  }
  const int32_t pos = p.positions[t];
  for (int64_t k = threadIdx.x; k < p.half; k += kThreads) {
    double s, c;
    sincos(double(pos) * double(p.inv_freq[k]), &s, &c);
    cos_t[k] = float(c);
    sin_t[k] = float(s);
  }
  __syncthreads();

  float* buf = smem + 2 * p.half + int64_t(warp) * D;
  const int64_t slot = p.slots[t];
  const bool bad_slot = slot < 0 || slot >= p.n_slots;
  for (int64_t i = 0; i < p.heads_per_warp; ++i) {
    const int64_t h = h0 + i * kWarps + warp;
    if (h >= n_all) return;  // no block-wide barrier follows
    const float* src = p.qkv + (t * n_all + h) * D;
    const bool is_v = h >= H + KVH;
    const float* norm_w = is_v || p.q_norm == nullptr ? nullptr : h < H ? p.q_norm : p.k_norm;
    // The head, prepared in the lane's registers (kV > 0) or in the warp's shared row; store(dst) writes it.
    float x[kV > 0 ? kV : 1];
    if constexpr (kV > 0) {
      qkv_head_lane<kV>(src, x, norm_w, p.eps, !is_v, cos_t, sin_t, p.interleaved);
    } else {
      prepare_qkv_head(src, buf, D, norm_w, p.eps, !is_v, cos_t, sin_t, p.half, p.interleaved);
    }
    const auto store = [&](auto* dst) {
      if constexpr (kV > 0) {
        store_lane<kV>(dst, x);
      } else {
        for (int64_t j = lane; j < D; j += 32) store_kv_value(dst + j, buf[j]);
      }
    };
    if (h < H) {
      store(p.q + (t * H + h) * D);
    } else {
      const int64_t kh = is_v ? h - H - KVH : h - H;  // KV head index
      float* copy = is_v ? p.v_out : p.k_out;
      if (copy != nullptr) store(copy + (t * KVH + kh) * D);
      if (bad_slot) {
        if (lane == 0) report_error(p.errors, kBadSlot, slot);
      } else {
        store(static_cast<KvT*>(is_v ? p.v_cache : p.k_cache) + (slot * KVH + kh) * D);
      }
    }
    if constexpr (kV == 0) __syncwarp();  // the next head overwrites buf
  }
}

// One value's store: f32, or bf16 bits rounded to nearest even (the down projection's GEMM input).
template <bool kBf16>
__device__ __forceinline__ void store_swiglu(const SwigluFusedParams& p, int64_t i, float y) {
  if constexpr (kBf16) {
    p.out_bf16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(y));
  } else {
    p.out[i] = y;
  }
}

template <bool kBf16>
__global__ void __launch_bounds__(kSwigluThreads) swiglu_fused4_kernel(SwigluFusedParams p) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t quads = p.hidden / 4, j = int64_t(blockIdx.x) * kSwigluThreads + threadIdx.x;
  if (j >= quads) return;
  for (int64_t t = blockIdx.y; t < p.n; t += gridDim.y) {
    const float4* row = reinterpret_cast<const float4*>(p.gate_up + t * 2 * p.hidden);
    const float4 g = row[j], u = row[quads + j];
    const float4 y = make_float4(silu_mul(g.x, u.x), silu_mul(g.y, u.y), silu_mul(g.z, u.z), silu_mul(g.w, u.w));
    if constexpr (kBf16) {  // 8-byte stores: two bf16 pairs
      const __nv_bfloat162 lo = __floats2bfloat162_rn(y.x, y.y), hi = __floats2bfloat162_rn(y.z, y.w);
      reinterpret_cast<uint2*>(p.out_bf16 + t * p.hidden)[j] =
          make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
    } else {
      reinterpret_cast<float4*>(p.out + t * p.hidden)[j] = y;
    }
  }
}

template <bool kBf16>
__global__ void __launch_bounds__(kSwigluThreads) swiglu_fused_kernel(SwigluFusedParams p) {
  pdl_allow_dependents();
  pdl_wait();
  const int64_t j = int64_t(blockIdx.x) * kSwigluThreads + threadIdx.x;
  if (j >= p.hidden) return;
  for (int64_t t = blockIdx.y; t < p.n; t += gridDim.y) {
    const float* row = p.gate_up + t * 2 * p.hidden;
    store_swiglu<kBf16>(p, t * p.hidden + j, silu_mul(row[j], row[p.hidden + j]));
  }
}

}  // namespace

void qkv_epilogue(const QkvEpilogueParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  const int64_t n_all = p.n_heads + 2 * p.n_kv_heads;
  FERRY_CUDA_REQUIRE(p.n <= 0x7FFFFFFF && p.n_heads > 0 && p.n_kv_heads > 0 && p.head_dim > 0);
  FERRY_CUDA_REQUIRE(p.half >= 0 && 2 * p.half <= p.head_dim);
  FERRY_CUDA_REQUIRE((p.q_norm == nullptr) == (p.k_norm == nullptr));
  FERRY_CUDA_REQUIRE(p.qkv && p.positions && p.slots && p.q && p.k_cache && p.v_cache && p.errors);
  FERRY_CUDA_REQUIRE(p.half == 0 || p.inv_freq != nullptr);
  const size_t smem = size_t(2 * p.half + kWarps * p.head_dim) * sizeof(float);
  FERRY_CUDA_REQUIRE(smem <= 48 * 1024);  // head_dim up to ~2900: every model ferry reads
  // Heads per warp: the fewest that make the grid one wave of resident blocks (see the top of the file).
  int dev = 0, n_sms = 0, per_sm = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&dev));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, dev));
  // Head dims 64 and 128 with full rotation run in registers (kV 2 / 4); the rest through the shared rows.
  const int kv_width = p.half * 2 == p.head_dim ? (p.head_dim == 128 ? 4 : p.head_dim == 64 ? 2 : 0) : 0;
  const bool bf16 = p.kv_type == KvCacheType::BF16;
  const auto kernel = kv_width == 4 ? (bf16 ? qkv_epilogue_kernel<__nv_bfloat16, 4> : qkv_epilogue_kernel<float, 4>)
                      : kv_width == 2 ? (bf16 ? qkv_epilogue_kernel<__nv_bfloat16, 2> : qkv_epilogue_kernel<float, 2>)
                                      : (bf16 ? qkv_epilogue_kernel<__nv_bfloat16, 0> : qkv_epilogue_kernel<float, 0>);
  FERRY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  const int64_t groups_one = (n_all + kWarps - 1) / kWarps;  // blocks per token at one head per warp
  const int64_t resident = std::max<int64_t>(1, int64_t(n_sms) * std::max(per_sm, 1));
  QkvEpilogueParams q = p;
  q.heads_per_warp = std::clamp<int64_t>((p.n * groups_one + resident - 1) / resident, 1, groups_one);
  const int64_t blocks_y = (n_all + kWarps * q.heads_per_warp - 1) / (kWarps * q.heads_per_warp);
  FERRY_CUDA_REQUIRE(blocks_y <= kMaxGridY);
  const dim3 grid(unsigned(p.n), unsigned(blocks_y));
  launch_pdl(kernel, dim3(grid), dim3(kThreads), smem, stream, q);
  FERRY_CUDA_CHECK_LAUNCH(qkv_epilogue_kernel);
}

void swiglu_fused(const SwigluFusedParams& p, cudaStream_t stream) {
  if (p.n == 0 || p.hidden == 0) return;
  const bool bf16 = p.out_bf16 != nullptr;
  FERRY_CUDA_REQUIRE(p.n > 0 && p.hidden > 0 && (p.out != nullptr) != bf16 && p.gate_up);
  const auto aligned = [](const void* q, int bytes) { return reinterpret_cast<uintptr_t>(q) % bytes == 0; };
  const unsigned rows = unsigned(p.n < kMaxGridY ? p.n : kMaxGridY);
  if (p.hidden % 4 == 0 && aligned(p.gate_up, 16) && (bf16 ? aligned(p.out_bf16, 8) : aligned(p.out, 16))) {
    const dim3 grid(grid_for(p.hidden / 4, kSwigluThreads), rows);
    if (bf16) {
      launch_pdl(swiglu_fused4_kernel<true>, dim3(grid), dim3(kSwigluThreads), 0, stream, p);
    } else {
      launch_pdl(swiglu_fused4_kernel<false>, dim3(grid), dim3(kSwigluThreads), 0, stream, p);
    }
    FERRY_CUDA_CHECK_LAUNCH(swiglu_fused4_kernel);
    return;
  }
  const dim3 grid(grid_for(p.hidden, kSwigluThreads), rows);
  if (bf16) {
    launch_pdl(swiglu_fused_kernel<true>, dim3(grid), dim3(kSwigluThreads), 0, stream, p);
  } else {
    launch_pdl(swiglu_fused_kernel<false>, dim3(grid), dim3(kSwigluThreads), 0, stream, p);
  }
  FERRY_CUDA_CHECK_LAUNCH(swiglu_fused_kernel);
}

}  // namespace ferry::cuda_ops
