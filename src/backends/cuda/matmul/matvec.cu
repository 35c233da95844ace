// Design (docs/perf-log.md, "## 2026-11-29: CUDA decode matvec"):
//  - A block = kWarps warps; a warp owns kRows consecutive output rows; lane l walks the chunks l, l+32, ...
//    of its rows (a chunk = one 16-byte load of quant data, weight_layout.cuh), kRows x kUnroll 16-byte
//    loads in flight per lane.
//  - The activations of all n tokens are staged ONCE per block in shared memory (f32, K-tiled when
//    n x n_in is large), in a padded layout (4 floats of padding after every 32 values) so that a lane's
//    16-byte reads of "its" chunk are bank-conflict free; each activation read serves the warp's kRows rows.
//    (Activations read from L1 with lanes 128 bytes apart, 32 lines per warp load, limited the first version:
//    docs/perf-log.md.)
//  - Quantized weights are turned into floats with byte permutes instead of int->float conversions (I2F runs
//    at 1/4 rate): Q4_0/Q4_1 nibble q becomes the float 0.5 + q/256 (one PRMT), multiplied with x in fp32;
//    per block Σq·x = 256·S - 128·Σx with Σx (per 32 values) computed while staging. Q8_0 byte q becomes
//    1 + (q+128)/32768, minus 1 + 128/32768 (exact by Sterbenz) = q/32768 exactly.
//  - fp32 accumulation, a warp shuffle reduction per (row, token) at the end.
#include "backends/cuda/matmul/matvec.cuh"

#include <cstring>
#include <type_traits>

#include <cuda_fp16.h>

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/matmul/matvec_tiled.cuh"
#include "backends/cuda/matmul/stream_half.cuh"
#include "backends/cuda/matmul/stream_quant.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kWarps = 4;     // warps per block
constexpr int kUnroll = 2;    // chunks per row and lane loaded ahead
// Output rows per warp (they share every activation read); Q4_K's decode needs more registers.
template <class D>
constexpr int kRowsPerWarp = 4;
template <>
constexpr int kRowsPerWarp<DecodeQ4K> = 2;
// The types the row-block kernel is built for: the ones it served before the tiled and streamed matvecs (BF16's
// longest rows still take it, FERRY_CUDA_TUNE=matvec=rows the others); the later types (Q5_0, Q5_1, Q5_K, Q6_K, F8,
// Q2_K, Q3_K) go to kTiled, and leaving them out keeps this file's instances, the longest compile of the build, few.
template <class D>
constexpr bool kRowBlocksBuilt = !std::is_same_v<D, DecodeQ5<false>> && !std::is_same_v<D, DecodeQ5<true>> &&
                                 !std::is_same_v<D, DecodeQ5K> && !std::is_same_v<D, DecodeQ6K> &&
                                 !std::is_same_v<D, DecodeF8> && !std::is_same_v<D, DecodeQ2K> &&
                                 !std::is_same_v<D, DecodeQ3K>;
constexpr int kTileBudget = 16384;  // tokens x values staged at once (~74 KB of shared memory)
constexpr int kTileAlign = 256;     // tiles start at multiples of this many values (a Q4_K super-block)

// Padded shared-memory index of value i of a token's tile: 4 floats of padding after every 32 values.
__device__ __forceinline__ int padded(int i) { return i + ((i >> 5) << 2); }
__host__ __device__ inline int padded_len(int tile) { return tile + tile / 32 * 4; }

// Generic chunk math: decode the weight chunk to floats, dot with the chunk's activations.
template <class D>
struct ChunkMath {
  using Pre = typename D::Raw;
  __device__ __forceinline__ static Pre prep(const typename D::Raw& r) { return r; }
  __device__ __forceinline__ static float dot(const Pre& p, const float* xv) {
    float v[D::kVals];
    D::decode(p, v);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < D::kVals; ++i) s = fmaf(v[i], xv[i], s);
    return s;
  }
  __device__ __forceinline__ static float finish(const Pre&, float s, float /*sum_x*/) { return s; }
};

// Q4_0 / Q4_1: nibble q -> float 0.5 + q/256 via PRMT (bits 16..19 under exponent 0x7E).
__device__ __forceinline__ float nibble_float(uint32_t nibbles, int b) {
  return __uint_as_float(__byte_perm(nibbles, 0x3Fu, 0x4055u | (uint32_t(b) << 8)));
}

template <bool kHasMin>
struct ChunkMath<DecodeQ4<kHasMin>> {
  struct Pre {
    uint32_t q[4];  // the 16 quant bytes (nibbles split in dot: fewer live registers)
    float d, m;
  };
  __device__ __forceinline__ static Pre prep(const typename DecodeQ4<kHasMin>::Raw& r) {
    Pre p;
    p.q[0] = r.q.x;
    p.q[1] = r.q.y;
    p.q[2] = r.q.z;
    p.q[3] = r.q.w;
    p.d = __half2float(__ushort_as_half(uint16_t(r.s & 0xFFFF)));
    p.m = kHasMin ? __half2float(__ushort_as_half(uint16_t(r.s >> 16))) : 0.0f;
    return p;
  }
  // xv: the block's 32 activations; returns S = Σ (0.5 + q/256) x.
  __device__ __forceinline__ static float dot(const Pre& p, const float* xv) {
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t lo = p.q[w] & 0x0F0F0F0Fu, hi = (p.q[w] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        s0 = fmaf(nibble_float(lo, b), xv[4 * w + b], s0);
        s1 = fmaf(nibble_float(hi, b), xv[16 + 4 * w + b], s1);
      }
    }
    return s0 + s1;
  }
  // Σ q x = 256 S - 128 Σx; Q4_0: d (Σ q x - 8 Σx); Q4_1: d Σ q x + m Σx.
  __device__ __forceinline__ static float finish(const Pre& p, float s, float sum_x) {
    if constexpr (kHasMin) {
      return fmaf(256.0f * p.d, s, (p.m - 128.0f * p.d) * sum_x);
    } else {
      return p.d * fmaf(256.0f, s, -136.0f * sum_x);
    }
  }
};

// Q8_0: byte q -> 1 + (q + 128)/32768 via PRMT, minus (1 + 128/32768) = q/32768 exactly.
template <>
struct ChunkMath<DecodeQ8_0> {
  struct Pre {
    uint32_t u[4];  // quant bytes with the sign bit flipped (q + 128)
    float d;
  };
  __device__ __forceinline__ static Pre prep(const DecodeQ8_0::Raw& r) {
    Pre p;
    p.u[0] = r.q.x ^ 0x80808080u;
    p.u[1] = r.q.y ^ 0x80808080u;
    p.u[2] = r.q.z ^ 0x80808080u;
    p.u[3] = r.q.w ^ 0x80808080u;
    p.d = __half2float(__ushort_as_half(r.d)) * 32768.0f;
    return p;
  }
  __device__ __forceinline__ static float dot(const Pre& p, const float* xv) {
    constexpr float kOffset = 1.0f + 128.0f / 32768.0f;
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const float v = __uint_as_float(__byte_perm(p.u[w], 0x803Fu, 0x4506u | (uint32_t(b) << 4))) - kOffset;
        if (b % 2 == 0) {
          s0 = fmaf(v, xv[4 * w + b], s0);
        } else {
          s1 = fmaf(v, xv[4 * w + b], s1);
        }
      }
    }
    return s0 + s1;
  }
  __device__ __forceinline__ static float finish(const Pre& p, float s, float) { return p.d * s; }
};

// Copies tokens' activations [k0, k0 + kt) into shared memory (padded layout) and the sum of every 32 values
// into `sums`. xs: (n_tok, plen) f32; sums: (n_tok, tile / 32) f32.
__device__ __forceinline__ void stage(const float* x, int64_t n_in, int64_t k0, int kt, int n_tok, float* xs,
                                      int plen, float* sums, int n_sums) {
  const int n4 = kt / 4;
  const int n4_round = (n4 + 31) / 32 * 32;  // every lane of a warp runs the same iterations (shuffles)
  for (int t = 0; t < n_tok; ++t) {
    const float* xt = x + size_t(t) * size_t(n_in) + size_t(k0);
    for (int i = threadIdx.x; i < n4_round; i += blockDim.x) {
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (i < n4) {
        v = __ldg(reinterpret_cast<const float4*>(xt) + i);
        *reinterpret_cast<float4*>(xs + t * plen + padded(4 * i)) = v;
      }
      float s = (v.x + v.y) + (v.z + v.w);
      s += __shfl_xor_sync(0xFFFFFFFFu, s, 1);
      s += __shfl_xor_sync(0xFFFFFFFFu, s, 2);
      s += __shfl_xor_sync(0xFFFFFFFFu, s, 4);
      if (i % 8 == 0 && i < n4) sums[t * n_sums + i / 8] = s;
    }
  }
}

template <class D, int kTok>
__global__ void __launch_bounds__(kWarps * 32) matvec_kernel(MatvecParams p, int tile) {
  pdl_allow_dependents();
  pdl_wait();
  using M = ChunkMath<D>;
  constexpr int kRows = kRowsPerWarp<D>;
  extern __shared__ float4 smem_f4[];
  const int n_tok = p.n_tokens < kTok ? p.n_tokens : kTok;
  const int plen = padded_len(tile), n_sums = tile / 32;
  float* xs = reinterpret_cast<float*>(smem_f4);  // (n_tok, plen)
  float* sums = xs + n_tok * plen;                // (n_tok, n_sums)

  const int lane = threadIdx.x % 32;
  const int64_t row0 = (int64_t(blockIdx.x) * kWarps + threadIdx.x / 32) * kRows;
  const int64_t n_in = p.w.cols, n_out = p.w.rows;
  int rows_here = int(n_out - row0 < kRows ? n_out - row0 : kRows);  // <= 0: this warp only helps staging
  if (rows_here < 0) rows_here = 0;

  float acc[kRows][kTok];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int t = 0; t < kTok; ++t) acc[r][t] = 0.0f;
  }

  for (int64_t k0 = 0; k0 < n_in; k0 += tile) {
    const int kt = int(n_in - k0 < tile ? n_in - k0 : tile);
    __syncthreads();  // the previous tile's readers are done
    stage(p.x, n_in, k0, kt, n_tok, xs, plen, sums, n_sums);
    __syncthreads();
    const int64_t c_begin = D::chunks(k0), c_end = D::chunks(k0 + kt);
    for (int64_t c0 = c_begin + lane; c0 < c_end; c0 += 32 * kUnroll) {
      typename D::Raw raw[kUnroll][kRows];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (c0 + 32 * u < c_end && r < rows_here) raw[u][r] = D::load(p.w, row0 + r, c0 + 32 * u);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + 32 * u;
        if (c >= c_end) break;
        typename M::Pre pre[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (r < rows_here) pre[r] = M::prep(raw[u][r]);
        }
        // The chunk's activations: run j covers values [run_start(c, j) - k0, + kRunLen) of the tile.
        int off[D::kRuns];
#pragma unroll
        for (int j = 0; j < D::kRuns; ++j) off[j] = padded(int(D::run_start(c, j) - k0));
        const int sum_index = int((D::run_start(c, 0) - k0) / 32);
#pragma unroll
        for (int t = 0; t < kTok; ++t) {
          if (t >= n_tok) break;
          float xv[D::kVals];
#pragma unroll
          for (int j = 0; j < D::kRuns; ++j) {
#pragma unroll
            for (int i = 0; i < D::kRunLen / 4; ++i) {
              const float4 v = *reinterpret_cast<const float4*>(xs + t * plen + off[j] + 4 * i);
              xv[j * D::kRunLen + 4 * i + 0] = v.x;
              xv[j * D::kRunLen + 4 * i + 1] = v.y;
              xv[j * D::kRunLen + 4 * i + 2] = v.z;
              xv[j * D::kRunLen + 4 * i + 3] = v.w;
            }
          }
          const float sum_x = sums[t * n_sums + sum_index];
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            if (r < rows_here) acc[r][t] += M::finish(pre[r], M::dot(pre[r], xv), sum_x);
          }
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
#pragma unroll
      for (int o = 16; o > 0; o /= 2) acc[r][t] += __shfl_xor_sync(0xFFFFFFFFu, acc[r][t], o);
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= rows_here) break;
      const int64_t row = row0 + r;
      const float b = p.bias ? p.bias[row] : 0.0f;
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
        if (t < n_tok) p.out[size_t(t) * size_t(n_out) + size_t(row)] = acc[r][t] + b;
      }
    }
  }
}

template <class D, int kTok>
void launch_rows(const MatvecParams& p, cudaStream_t stream) {
  const int64_t aligned = (p.w.cols + kTileAlign - 1) / kTileAlign * kTileAlign;
  const int64_t budget = kTileBudget / kTok / kTileAlign * kTileAlign;
  const int tile = int(aligned < budget ? aligned : budget);
  const size_t smem = size_t(p.n_tokens) * size_t(padded_len(tile) + tile / 32) * sizeof(float);
  const auto kernel = matvec_kernel<D, kTok>;
  if (smem > 48 * 1024)  // above the default limit: opt in (not a stream operation: fine while capturing)
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  launch_pdl(kernel, dim3(grid_for(p.w.rows, kWarps * kRowsPerWarp<D>)), dim3(kWarps * 32), smem, stream, p, tile);
  FERRY_CUDA_CHECK_LAUNCH(matvec_kernel);
}


}  // namespace

const char* matvec_kernel_name(MatvecKernel k) {
  switch (k) {
    case MatvecKernel::kRowBlocks: return "rows";
    case MatvecKernel::kTiled: return "tiled";
    case MatvecKernel::kStreamHalf: return "stream_half";
    case MatvecKernel::kStreamQuant: return "stream_quant";
  }
  return "?";
}

size_t matvec_scratch_bytes(DType wtype, MatvecKernel kernel, int n_tokens, int64_t n_in) {
  return kernel == MatvecKernel::kTiled && tiled_quantizes_acts(wtype) ? matvec_tiled_scratch_bytes(n_tokens, n_in) : 0;
}

bool matvec_kernel_applies(MatvecKernel kernel, DType wtype, int n_tokens, int64_t rows, int64_t cols) {
  if (n_tokens < 1 || n_tokens > kMatvecMaxTokens || rows < 1 || cols < 1 || !is_native_weight_type(wtype)) return false;
  switch (kernel) {
    case MatvecKernel::kRowBlocks: {
      bool ok = false;
      visit_decoder(wtype, [&]<class D>() { ok = kRowBlocksBuilt<D> && cols % D::kVals == 0; });
      return ok;
    }
    case MatvecKernel::kTiled: return true;
    case MatvecKernel::kStreamHalf:
      return (wtype == DType::BF16 || wtype == DType::F16) && stream_half_applies(wtype, n_tokens, rows, cols);
    case MatvecKernel::kStreamQuant: return stream_quant_applies(wtype, n_tokens, rows, cols);
  }
  return false;
}

void matvec(DType wtype, const MatvecParams& p, cudaStream_t stream) {
  FERRY_CUDA_REQUIRE(p.n_tokens >= 1 && p.n_tokens <= kMatvecMaxTokens && p.w.rows >= 1 && p.w.cols >= 1);
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0);
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.w.data) % 16 == 0);
  FERRY_CUDA_REQUIRE(matvec_kernel_applies(p.kernel, wtype, p.n_tokens, p.w.rows, p.w.cols));
  const bool batched = p.kernel == MatvecKernel::kStreamHalf &&
                       stream_half_applies(wtype, p.n_tokens, p.w.rows, p.w.cols, /*batched=*/true);
  // The peer push exists in the kernels that store through streaming::store_row: never a silent fallback without it
  // (a peer would wait for values that never come).
  FERRY_CUDA_REQUIRE(p.peer_push.counter == nullptr ||
                     (p.n_tokens == 1 && (p.kernel == MatvecKernel::kStreamQuant || batched)));
  // The norm prologue and the deferred residual add exist in kStreamQuant only.
  FERRY_CUDA_REQUIRE((p.in_norm.residual == nullptr && p.residual_add.residual == nullptr) ||
                     p.kernel == MatvecKernel::kStreamQuant);
  switch (p.kernel) {
    case MatvecKernel::kStreamQuant: stream_quant(wtype, p, stream); return;
    case MatvecKernel::kStreamHalf:
      stream_half(wtype, p, batched ? StreamConsumer::kStageBatched : StreamConsumer::kRowByRow, stream);
      return;
    case MatvecKernel::kTiled: matvec_tiled(wtype, p, stream); return;
    case MatvecKernel::kRowBlocks: break;
  }
  const bool ok = visit_decoder(wtype, [&]<class D>() {
    if constexpr (!kRowBlocksBuilt<D>) {
      FERRY_CUDA_REQUIRE(false);  // matvec_kernel_applies said no
    } else if (p.n_tokens == 1) {
      launch_rows<D, 1>(p, stream);
    } else if (p.n_tokens == 2) {
      launch_rows<D, 2>(p, stream);
    } else if (p.n_tokens <= 4) {
      launch_rows<D, 4>(p, stream);
    } else if (p.n_tokens <= 8) {
      launch_rows<D, 8>(p, stream);
    } else {
      launch_rows<D, 16>(p, stream);
    }
  });
  FERRY_CUDA_REQUIRE(ok);
}

}  // namespace ferry::cuda_ops
