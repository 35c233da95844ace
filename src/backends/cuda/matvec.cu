// Design (docs/perf-log.md, "## CUDA decode"):
//  - A block = kWarps warps; a warp owns kRows consecutive output rows; lane l walks the chunks l, l+32, ...
//    of its rows (a chunk = one 16-byte load of quant data, weight_layout.cuh), kRows x kUnroll 16-byte
//    loads in flight per lane.
//  - The activations of all n tokens are staged ONCE per block in shared memory (f32, K-tiled when
//    n x n_in is large), in a padded layout (4 floats of padding after every 32 values) so that a lane's
//    16-byte reads of "its" chunk are bank-conflict free; each activation read serves the warp's kRows rows.
//    The first version read activations from L1 with lanes 128 bytes apart (32 lines per warp load): that,
//    not DRAM, limited Q4_0 to ~10% of the roofline.
//  - Quantized weights are turned into floats with byte permutes instead of int->float conversions (I2F runs
//    at 1/4 rate): Q4_0/Q4_1 nibble q becomes the float 0.5 + q/256 (one PRMT), multiplied with x in fp32;
//    per block Σq·x = 256·S - 128·Σx with Σx (per 32 values) computed while staging. Q8_0 byte q becomes
//    1 + (q+128)/32768, minus 1 + 128/32768 (exact by Sterbenz) = q/32768 exactly.
//  - fp32 accumulation, a warp shuffle reduction per (row, token) at the end.
#include "backends/cuda/matvec.cuh"

#include <cooperative_groups.h>

#include <cstring>
#include <type_traits>

#include <cuda_fp16.h>

#include "backends/cuda/common.cuh"
#include "backends/cuda/matvec_v5.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kWarps = 4;     // warps per block
constexpr int kUnroll = 2;    // chunks per row and lane loaded ahead
// Output rows per warp (they share every activation read); Q4_K's decode needs more registers.
template <class D>
constexpr int kRowsPerWarp = 4;
template <>
constexpr int kRowsPerWarp<DecodeQ4K> = 2;
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
void launch_v2(const MatvecParams& p, cudaStream_t stream) {
  const int64_t aligned = (p.w.cols + kTileAlign - 1) / kTileAlign * kTileAlign;
  const int64_t budget = kTileBudget / kTok / kTileAlign * kTileAlign;
  const int tile = int(aligned < budget ? aligned : budget);
  const size_t smem = size_t(p.n_tokens) * size_t(padded_len(tile) + tile / 32) * sizeof(float);
  const auto kernel = matvec_kernel<D, kTok>;
  if (smem > 48 * 1024)  // above the default limit: opt in (not a stream operation: fine while capturing)
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<grid_for(p.w.rows, kWarps * kRowsPerWarp<D>), kWarps * 32, smem, stream>>>(p, tile);
  FERRY_CUDA_CHECK_LAUNCH(matvec_kernel);
}

// ---- Version 3 -------------------------------------------------------------------------------------------
// Same chunk math and smem layout as v2; what changes is where the time goes before and around it:
//  - split-K over a cluster of C blocks (C = 1, 2, 4, 8 chosen on the host): block `rank` of a cluster owns
//    K-slice [rank * slice, +slice) of the cluster's 16 rows and stages only that slice, so mid-size shapes
//    get 1000+ blocks (a short tail) without raising the staged-activation bytes per weight byte; partials
//    go through distributed shared memory to rank 0, summed in rank order (deterministic, no atomics,
//    no memset, no scratch buffer);
//  - the first weight loads of a tile are issued before its activations are staged, and the staging is
//    cp.async (every 16-byte request in flight at once, no register round trip), so the DRAM latency of
//    the first loads and the L2 latency of the staging overlap;
//  - the main loop is double-buffered: the next step's weight loads are issued before this step's math.
namespace cg = cooperative_groups;

// Chunks per row and lane per step (x2: double buffer); 1 where registers run short (32-value chunks, n >= 8).
template <class D, int kTok>
constexpr int kUnrollV3 = D::kVals >= 32 || kTok >= 8 ? 1 : 2;
template <class D>
constexpr bool kNeedsSums = std::is_same_v<D, DecodeQ4<false>> || std::is_same_v<D, DecodeQ4<true>>;
constexpr int kClusterBlocksTarget = 1600;  // enough blocks for ~4 waves at ~3 blocks per SM on 132 SMs
constexpr int kMinSlice = 1024;             // smallest K-slice per block (values): fixed costs stay small

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}

// Issues one step's weight loads: chunks c0 + 32 u (u < kUnroll) of the warp's rows.
template <class D, int kUnroll, int kRows>
__device__ __forceinline__ void load_step(typename D::Raw (&raw)[kUnroll][kRows], const WeightView& w,
                                          int64_t row0, int rows_here, int64_t c0, int64_t c_end) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (c0 + 32 * u < c_end && r < rows_here) raw[u][r] = D::load(w, row0 + r, c0 + 32 * u);
    }
  }
}

template <class D, int kTok>
__global__ void __launch_bounds__(kWarps * 32, 1) matvec_v3_kernel(MatvecParams p, int tile, int slice) {
  using M = ChunkMath<D>;
  using Raw = typename D::Raw;
  constexpr int kRows = kRowsPerWarp<D>;
  constexpr int kUnroll = kUnrollV3<D, kTok>;
  extern __shared__ float4 smem_f4[];
  const int n_tok = p.n_tokens < kTok ? p.n_tokens : kTok;
  const int plen = padded_len(tile), n_sums = tile / 32;
  float* xs = reinterpret_cast<float*>(smem_f4);  // (n_tok, plen) activations of the current tile
  float* sums = xs + n_tok * plen;                // (n_tok, n_sums) sum of every 32 of them
  float* red = sums + n_tok * n_sums;             // (kWarps, kRows, kTok) this block's partial results

  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank()), n_ranks = int(cluster.num_blocks());
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t row0 = (int64_t(blockIdx.x / n_ranks) * kWarps + warp) * kRows;
  const int64_t n_in = p.w.cols, n_out = p.w.rows;
  int rows_here = int(n_out - row0 < kRows ? n_out - row0 : kRows);  // <= 0: this warp only helps staging
  if (rows_here < 0) rows_here = 0;
  const int64_t k_lo = int64_t(rank) * slice;
  const int64_t k_hi = n_in < k_lo + slice ? n_in : k_lo + slice;  // k_lo >= k_hi: nothing (partials 0)

  float acc[kRows][kTok];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int t = 0; t < kTok; ++t) acc[r][t] = 0.0f;
  }

  for (int64_t k0 = k_lo; k0 < k_hi; k0 += tile) {
    const int kt = int(k_hi - k0 < tile ? k_hi - k0 : tile);
    const int64_t c_begin = D::chunks(k0), c_end = D::chunks(k0 + kt);
    Raw cur[kUnroll][kRows];
    load_step<D>(cur, p.w, row0, rows_here, c_begin + lane, c_end);  // in flight during the staging
    __syncthreads();  // the previous tile's readers are done
    {
      const int n4 = kt / 4;
      for (int t = 0; t < n_tok; ++t) {
        const float* xt = p.x + size_t(t) * size_t(n_in) + size_t(k0);
        for (int i = threadIdx.x; i < n4; i += blockDim.x) cp_async16(xs + t * plen + padded(4 * i), xt + 4 * i);
      }
      cp_async_wait_all();
    }
    __syncthreads();
    if constexpr (kNeedsSums<D>) {
      const int groups = kt / 32;
      for (int i = threadIdx.x; i < n_tok * groups; i += blockDim.x) {
        const int t = i / groups, g = i % groups;
        const float4* v = reinterpret_cast<const float4*>(xs + t * plen + padded(32 * g));
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
        sums[t * n_sums + g] = s;
      }
      __syncthreads();
    }
    for (int64_t c0 = c_begin + lane; c0 < c_end; c0 += 32 * kUnroll) {
      Raw nxt[kUnroll][kRows];
      if (c0 + 32 * kUnroll < c_end) load_step<D>(nxt, p.w, row0, rows_here, c0 + 32 * kUnroll, c_end);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + 32 * u;
        if (c >= c_end) break;
        typename M::Pre pre[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (r < rows_here) pre[r] = M::prep(cur[u][r]);
        }
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
          const float sum_x = kNeedsSums<D> ? sums[t * n_sums + sum_index] : 0.0f;
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            if (r < rows_here) acc[r][t] += M::finish(pre[r], M::dot(pre[r], xv), sum_x);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) cur[u][r] = nxt[u][r];
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
#pragma unroll
      for (int t = 0; t < kTok; ++t) red[(warp * kRows + r) * kTok + t] = acc[r][t];
    }
  }
  cluster.sync();  // every block's partials are in its shared memory (release/acquire across the cluster)
  if (rank == 0) {
    for (int i = threadIdx.x; i < kWarps * kRows * kTok; i += blockDim.x) {
      const int t = i % kTok;
      const int64_t row = int64_t(blockIdx.x / n_ranks) * kWarps * kRows + i / kTok;
      if (t >= n_tok || row >= n_out) continue;
      float s = 0.0f;
      for (int q = 0; q < n_ranks; ++q) s += cluster.map_shared_rank(red, q)[i];
      p.out[size_t(t) * size_t(n_out) + size_t(row)] = s + (p.bias ? p.bias[row] : 0.0f);
    }
  }
  cluster.sync();  // the other blocks keep their shared memory until rank 0 has read it
}

// K-slice per cluster block for C blocks: a multiple of 256 values (whole Q4_K super-blocks, 32-blocks).
inline int64_t slice_for(int64_t n_in, int c) {
  const int64_t per = (n_in + c - 1) / c;
  return (per + kTileAlign - 1) / kTileAlign * kTileAlign;
}

template <class D, int kTok>
void launch_v3(const MatvecParams& p, cudaStream_t stream) {
  const int64_t row_blocks = (p.w.rows + kWarps * kRowsPerWarp<D> - 1) / (kWarps * kRowsPerWarp<D>);
  // Double the cluster while the grid is short of the target, every slice keeps >= kMinSlice values, and
  // no block is left without columns.
  int c = 1;
  while (c < 8 && row_blocks * c < kClusterBlocksTarget) {
    const int next = 2 * c;
    const int64_t s = slice_for(p.w.cols, next);
    if (s < kMinSlice || (next - 1) * s >= p.w.cols) break;
    c = next;
  }
  const int64_t slice = slice_for(p.w.cols, c);
  const int64_t budget = kTileBudget / kTok / kTileAlign * kTileAlign;
  const int tile = int(slice < budget ? slice : budget);
  const size_t smem = size_t(p.n_tokens) * size_t(padded_len(tile) + tile / 32) * sizeof(float) +
                      size_t(kWarps * kRowsPerWarp<D> * kTok) * sizeof(float);
  const auto kernel = matvec_v3_kernel<D, kTok>;
  if (smem > 48 * 1024)  // above the default limit: opt in (not a stream operation: fine while capturing)
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(row_blocks * c), 1, 1);
  cfg.blockDim = dim3(kWarps * 32, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(c);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  FERRY_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p, tile, int(slice)));
}

// ---- Version 4 -------------------------------------------------------------------------------------------
// v2's structure (4 warps x 4 rows, activations staged once per block in padded shared memory, 16-byte
// weight loads, 2 chunks x 4 rows in flight per lane) with half the instructions per value for Q8_0, Q4_0
// and Q4_1 (every other type runs v2):
//  - activations staged as f16, each 32-value block scaled by a power of two s (|x s| in [16, 32): no f16
//    overflow or underflow whatever the activations' range) with (1/s, Σx) kept in f32 per block; within
//    every 4 values the order is (0, 2, 1, 3), the order the weight bit tricks below produce pairs in;
//  - weights to f16x2 by bit tricks, two values per instruction: Q4 nibble q -> 0x6400 | q = 1024 + q (one
//    LOP3 for the low nibbles of bytes 0 and 2), minus 1032 = q - 8 exactly (HADD2); high nibbles
//    0x6400 | 16 q -> x/16 - 72 = q - 8 exactly (HFMA2); Q8_0 byte q -> 0x6400 | (q ^ 0x80) = 1152 + q (PRMT
//    of two bytes under 0x64), minus 1152 = q exactly (HADD2);
//  - HFMA2 over one chunk (16 or 32 values) into half2 partials, then f32: acc += (d / s) Σ(q - 8) x' (Q4_1:
//    + (m + 8 d) Σx). f16 rounding touches the activations (2^-12 relative) and sums of at most 16 products.
template <class D>
struct ChunkMathV4;  // Q8_0, Q4_0, Q4_1 only

__device__ __forceinline__ __half2 h2_bits(uint32_t u) {
  __half2 h;
  memcpy(&h, &u, 4);
  return h;
}

template <>
struct ChunkMathV4<DecodeQ8_0> {
  static constexpr int kX = 2;  // uint4 of staged activations per chunk (16 halves)
  struct Pre {
    __half2 w[8];  // the chunk's 16 quants as exact f16 pairs in staged order
    float d;
  };
  __device__ __forceinline__ static Pre prep(const DecodeQ8_0::Raw& r) {
    Pre p;
    const uint32_t q[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
    const __half2 k1152 = h2_bits(0x64806480u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t u = q[i] ^ 0x80808080u;  // q + 128 per byte
      p.w[2 * i] = __hsub2(h2_bits(__byte_perm(u, 0x64u, 0x4240u)), k1152);      // values 0, 2
      p.w[2 * i + 1] = __hsub2(h2_bits(__byte_perm(u, 0x64u, 0x4341u)), k1152);  // values 1, 3
    }
    p.d = __half2float(__ushort_as_half(r.d));
    return p;
  }
  // x: the chunk's 16 staged activations (8 pairs); returns the f16 partial's two halves in f32.
  __device__ __forceinline__ static float dot(const Pre& p, const __half2* x) {
    __half2 a[2];  // two chains of 4 (f16 rounding error grows with the chain)
#pragma unroll
    for (int i = 0; i < 2; ++i) a[i] = __hmul2(p.w[i], x[i]);
#pragma unroll
    for (int i = 2; i < 8; ++i) a[i % 2] = __hfma2(p.w[i], x[i], a[i % 2]);
    const float2 f = __half22float2(__hadd2(a[0], a[1]));
    return f.x + f.y;
  }
  // sx = (1/s, Σx) of the chunk's 32-block.
  __device__ __forceinline__ static float finish(const Pre& p, float s, float2 sx, float acc) {
    return fmaf(s, p.d * sx.x, acc);
  }
};

template <bool kHasMin>
struct ChunkMathV4<DecodeQ4<kHasMin>> {
  static constexpr int kX = 4;  // 32 halves
  struct Pre {
    uint32_t q[4];
    float d, m8;  // m8 = m + 8 d (Q4_1)
  };
  __device__ __forceinline__ static Pre prep(const typename DecodeQ4<kHasMin>::Raw& r) {
    Pre p;
    p.q[0] = r.q.x;
    p.q[1] = r.q.y;
    p.q[2] = r.q.z;
    p.q[3] = r.q.w;
    p.d = __half2float(__ushort_as_half(uint16_t(r.s & 0xFFFF)));
    p.m8 = kHasMin ? fmaf(8.0f, p.d, __half2float(__ushort_as_half(uint16_t(r.s >> 16)))) : 0.0f;
    return p;
  }
  // x: 16 pairs; pairs 2w, 2w + 1 = values (4w, 4w+2), (4w+1, 4w+3); pairs 8 + ... the same for 16 + ...
  __device__ __forceinline__ static float dot(const Pre& p, const __half2* x) {
    const __half2 k1032 = h2_bits(0x64086408u), k16th = h2_bits(0x2C002C00u), km72 = h2_bits(0xD480D480u);
    __half2 a[4];  // chains of 4: (low, high nibbles) x (bytes 0 and 2, bytes 1 and 3)
#pragma unroll
    for (int w = 0; w < 4; ++w) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint32_t q = j == 0 ? p.q[w] : p.q[w] >> 8;  // bytes 0, 2 / bytes 1, 3
        const __half2 l = __hsub2(h2_bits((q & 0x000F000Fu) | 0x64006400u), k1032);        // q - 8
        const __half2 h = __hfma2(h2_bits((q & 0x00F000F0u) | 0x64006400u), k16th, km72);  // q - 8
        a[j] = w == 0 ? __hmul2(l, x[2 * w + j]) : __hfma2(l, x[2 * w + j], a[j]);
        a[2 + j] = w == 0 ? __hmul2(h, x[8 + 2 * w + j]) : __hfma2(h, x[8 + 2 * w + j], a[2 + j]);
      }
    }
    const float2 f = __half22float2(__hadd2(__hadd2(a[0], a[1]), __hadd2(a[2], a[3])));
    return f.x + f.y;
  }
  __device__ __forceinline__ static float finish(const Pre& p, float s, float2 sx, float acc) {
    acc = fmaf(s, p.d * sx.x, acc);
    return kHasMin ? fmaf(p.m8, sx.y, acc) : acc;
  }
};

// Padded f16 index of value i of a token's tile: 8 halves (16 bytes) after every kPad values, so the lanes'
// 16-byte reads of consecutive chunks (kPad values each) are bank-conflict free (48- / 80-byte lane stride).
template <int kPad>
__device__ __forceinline__ int padded_h(int i) { return i + i / kPad * 8; }
template <int kPad>
__host__ __device__ inline int padded_len_h(int tile) { return tile + tile / kPad * 8; }

// Stages tokens' activations [k0, k0 + kt) as scaled f16 (padded, (0, 2, 1, 3) order within each 4) and
// (1/s, Σx) per 32 values. xs: (n_tok, plen) halves; bsx: (n_tok, tile / 32) float2.
template <int kPad>
__device__ __forceinline__ void stage_v4(const float* x, int64_t n_in, int64_t k0, int kt, int n_tok, __half* xs,
                                         int plen, float2* bsx, int n_blk) {
  const int n4 = kt / 4;
  const int n4_round = (n4 + 31) / 32 * 32;  // every lane of a warp runs the same iterations (shuffles)
  for (int t = 0; t < n_tok; ++t) {
    const float* xt = x + size_t(t) * size_t(n_in) + size_t(k0);
    for (int i = threadIdx.x; i < n4_round; i += blockDim.x) {
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (i < n4) v = __ldg(reinterpret_cast<const float4*>(xt) + i);
      float s = (v.x + v.y) + (v.z + v.w);
      float a = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
      for (int o = 1; o < 8; o *= 2) {
        s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
        a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
      }
      // a in [2^(e-127), 2^(e-126)): scale 2^(131-e) puts it in [16, 32); e clamped so both scales are normal.
      int e = int(__float_as_uint(a) >> 23);
      e = e < 5 ? 5 : (e > 254 ? 254 : e);
      const float scale = __uint_as_float(uint32_t(258 - e) << 23), inv = __uint_as_float(uint32_t(e - 4) << 23);
      if (i < n4) {
        const __half2 p0 = __floats2half2_rn(v.x * scale, v.z * scale);
        const __half2 p1 = __floats2half2_rn(v.y * scale, v.w * scale);
        uint2 u;
        memcpy(&u.x, &p0, 4);
        memcpy(&u.y, &p1, 4);
        *reinterpret_cast<uint2*>(xs + t * plen + padded_h<kPad>(4 * i)) = u;
        if (i % 8 == 0) bsx[t * n_blk + i / 8] = make_float2(inv, s);
      }
    }
  }
}

template <class D, int kTok>
__global__ void __launch_bounds__(kWarps * 32) matvec_v4_kernel(MatvecParams p, int tile) {
  using M = ChunkMathV4<D>;
  constexpr int kRows = kRowsPerWarp<D>;
  constexpr int kPad = D::kVals;
  extern __shared__ float4 smem_f4[];
  const int n_tok = p.n_tokens < kTok ? p.n_tokens : kTok;
  const int plen = padded_len_h<kPad>(tile), n_blk = tile / 32;
  float2* bsx = reinterpret_cast<float2*>(smem_f4);                  // (n_tok, n_blk) (1/s, Σx)
  __half* xs = reinterpret_cast<__half*>(bsx + kTok * n_blk);        // (n_tok, plen) scaled f16 activations

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
    stage_v4<kPad>(p.x, n_in, k0, kt, n_tok, xs, plen, bsx, n_blk);
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
        const int v0 = int(D::run_start(c, 0) - k0);  // the chunk's first value in the tile
        const int off = padded_h<kPad>(v0), blk = v0 / 32;
#pragma unroll
        for (int t = 0; t < kTok; ++t) {
          if (t >= n_tok) break;
          uint4 xr[M::kX];
#pragma unroll
          for (int i = 0; i < M::kX; ++i) xr[i] = reinterpret_cast<const uint4*>(xs + t * plen + off)[i];
          const __half2* xh = reinterpret_cast<const __half2*>(xr);
          const float2 sx = bsx[t * n_blk + blk];
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            if (r < rows_here) acc[r][t] = M::finish(pre[r], M::dot(pre[r], xh), sx, acc[r][t]);
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

template <class D>
constexpr bool kHasV4 = std::is_same_v<D, DecodeQ8_0> || std::is_same_v<D, DecodeQ4<false>> ||
                        std::is_same_v<D, DecodeQ4<true>>;

template <class D, int kTok>
void launch_v4(const MatvecParams& p, cudaStream_t stream) {
  if constexpr (!kHasV4<D>) {
    launch_v2<D, kTok>(p, stream);  // BF16, F16, F32, Q4_K: v2's kernel
  } else {
    const int64_t aligned = (p.w.cols + kTileAlign - 1) / kTileAlign * kTileAlign;
    const int64_t budget = kTileBudget / kTok / kTileAlign * kTileAlign;
    const int tile = int(aligned < budget ? aligned : budget);
    // (1/s, Σx) for kTok tokens first (8-byte aligned), then n_tokens rows of halves.
    const size_t smem = size_t(kTok) * size_t(tile / 32) * sizeof(float2) +
                        size_t(p.n_tokens) * size_t(padded_len_h<D::kVals>(tile)) * sizeof(__half);
    const auto kernel = matvec_v4_kernel<D, kTok>;
    if (smem > 48 * 1024)  // above the default limit: opt in (not a stream operation: fine while capturing)
      FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    kernel<<<grid_for(p.w.rows, kWarps * kRowsPerWarp<D>), kWarps * 32, smem, stream>>>(p, tile);
    FERRY_CUDA_CHECK_LAUNCH(matvec_v4_kernel);
  }
}

template <class D, int kTok>
void launch(const MatvecParams& p, cudaStream_t stream) {
  if (p.version == 2) {
    launch_v2<D, kTok>(p, stream);
  } else if (p.version == 3) {
    launch_v3<D, kTok>(p, stream);
  } else {
    launch_v4<D, kTok>(p, stream);
  }
}

}  // namespace

size_t matvec_scratch_bytes(DType wtype, int version, int n_tokens, int64_t n_in) {
  const bool quant = wtype == DType::Q8_0 || wtype == DType::Q4_0 || wtype == DType::Q4_1 || wtype == DType::Q4_K;
  return version == 5 && quant ? matvec_v5_scratch_bytes(n_tokens, n_in) : 0;
}

void matvec(DType wtype, const MatvecParams& p, cudaStream_t stream) {
  FERRY_CUDA_REQUIRE(p.n_tokens >= 1 && p.n_tokens <= kMatvecMaxTokens && p.w.rows >= 1 && p.w.cols >= 1);
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0);
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.w.data) % 16 == 0);
  FERRY_CUDA_REQUIRE(p.version >= 2 && p.version <= 5);
  if (p.version == 5) {
    FERRY_CUDA_REQUIRE(is_native_weight_type(wtype));
    matvec_v5(wtype, p, stream);
    return;
  }
  const bool ok = visit_decoder(wtype, [&]<class D>() {
    FERRY_CUDA_REQUIRE(p.w.cols % D::kVals == 0);
    if (p.n_tokens == 1) {
      launch<D, 1>(p, stream);
    } else if (p.n_tokens == 2) {
      launch<D, 2>(p, stream);
    } else if (p.n_tokens <= 4) {
      launch<D, 4>(p, stream);
    } else if (p.n_tokens <= 8) {
      launch<D, 8>(p, stream);
    } else {
      launch<D, 16>(p, stream);
    }
  });
  FERRY_CUDA_REQUIRE(ok);
}

}  // namespace ferry::cuda_ops
