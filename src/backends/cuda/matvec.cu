// Design: one warp per output row, 4 warps (rows) per block. Lane l walks the row's chunks l, l+32, ...
// (a chunk = one 16-byte load of quant data, weight_layout.cuh), kUnroll chunks loaded before any is used
// so several 16-byte loads per lane are in flight, dequantizes in registers, and multiplies the values with
// up to kTok tokens' activations (f32, read with 16-byte loads; they stay in L1/L2: n_in * 4 bytes per
// token). fp32 accumulation, a warp shuffle reduction at the end, lane 0 writes the kTok outputs.
#include "backends/cuda/matvec.cuh"

#include "backends/cuda/common.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kWarps = 4;   // rows per block
constexpr int kUnroll = 4;  // chunks per lane loaded ahead

template <class D>
__device__ __forceinline__ void fma_runs(const float* v, const float* xrow, int64_t c, float& acc) {
#pragma unroll
  for (int r = 0; r < D::kRuns; ++r) {
    const float4* xp = reinterpret_cast<const float4*>(xrow + D::run_start(c, r));
#pragma unroll
    for (int j = 0; j < D::kRunLen / 4; ++j) {
      const float4 xv = __ldg(xp + j);
      const float* vv = v + r * D::kRunLen + 4 * j;
      acc = fmaf(vv[0], xv.x, acc);
      acc = fmaf(vv[1], xv.y, acc);
      acc = fmaf(vv[2], xv.z, acc);
      acc = fmaf(vv[3], xv.w, acc);
    }
  }
}

template <class D, int kTok>
__global__ void __launch_bounds__(kWarps * 32) matvec_kernel(MatvecParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= p.w.rows) return;
  const int64_t n_in = p.w.cols, n_chunks = D::chunks(n_in);
  const int n_tok = p.n_tokens < kTok ? p.n_tokens : kTok;
  float acc[kTok];
#pragma unroll
  for (int t = 0; t < kTok; ++t) acc[t] = 0.0f;

  for (int64_t c0 = lane; c0 < n_chunks; c0 += 32 * kUnroll) {
    typename D::Raw raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + 32 * u;
      if (c < n_chunks) raw[u] = D::load(p.w, row, c);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + 32 * u;
      if (c >= n_chunks) break;
      float v[D::kVals];
      D::decode(raw[u], v);
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
        if (t < n_tok) fma_runs<D>(v, p.x + size_t(t) * size_t(n_in), c, acc[t]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTok; ++t) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc[t] += __shfl_xor_sync(0xFFFFFFFFu, acc[t], off);
  }
  if (lane == 0) {
    const float b = p.bias ? p.bias[row] : 0.0f;
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      if (t < n_tok) p.out[size_t(t) * size_t(p.w.rows) + size_t(row)] = acc[t] + b;
    }
  }
}

}  // namespace

void matvec(DType wtype, const MatvecParams& p, cudaStream_t stream) {
  FERRY_CUDA_REQUIRE(p.n_tokens >= 1 && p.w.rows >= 1 && p.w.cols >= 1);
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0);
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.w.data) % 16 == 0);
  const unsigned grid = grid_for(p.w.rows, kWarps);
  const bool ok = visit_decoder(wtype, [&]<class D>() {
    FERRY_CUDA_REQUIRE(p.w.cols % D::kVals == 0);
    if (p.n_tokens == 1) {
      matvec_kernel<D, 1><<<grid, kWarps * 32, 0, stream>>>(p);
      FERRY_CUDA_CHECK_LAUNCH(matvec_kernel);
      return;
    }
    for (int t0 = 0; t0 < p.n_tokens; t0 += kMatvecTokens) {
      MatvecParams q = p;
      q.x = p.x + size_t(t0) * size_t(p.w.cols);
      q.out = p.out + size_t(t0) * size_t(p.w.rows);
      q.n_tokens = p.n_tokens - t0 < kMatvecTokens ? p.n_tokens - t0 : kMatvecTokens;
      matvec_kernel<D, kMatvecTokens><<<grid, kWarps * 32, 0, stream>>>(q);
      FERRY_CUDA_CHECK_LAUNCH(matvec_kernel);
    }
  });
  FERRY_CUDA_REQUIRE(ok);
}

}  // namespace ferry::cuda_ops
