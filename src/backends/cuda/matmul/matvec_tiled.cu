// The tiled matvec (kTiled; design: matvec_tiled.cuh, docs/perf-log.md "## 2026-11-29: matvec v5 and fused
// memory-bound ops").
//  - Grid: one block of kWarps warps per SM (fewer when there are fewer row groups). The weight's rows are
//    cut into groups of kR rows (16 for the tensor-core path); block b owns groups [b G / grid, (b+1) G /
//    grid): the SMs get equal bytes to +-1 group. An "item" = (group, K-slice s of S); warp w runs items
//    w, w + kWarps, ... S (1..16) is picked on the host so the items fill the warps evenly (e.g. 4096 rows:
//    8 groups of 4 per SM, S = 2 -> 16 items); with S > 1 the slices' partial sums meet in shared memory
//    and are added in slice order after one barrier (deterministic, no atomics).
//  - Within an item, lane l takes units (chunks of weight_layout.cuh, or 32-column steps for mma)
//    c_lo + l, + 32, ...; kU units x kR rows of 16-byte weight loads are issued before any math.
#include "backends/cuda/matmul/matvec_tiled.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/matmul/matvec.cuh"
#include "backends/cuda/matmul/matvec_tiled_paths.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kWarps = 16;
constexpr int kThreads = kWarps * 32;
constexpr size_t kMaxPartialBytes = 160 * 1024;  // shared memory for the split-K partials of one block


// Programmatic dependent launch (pdl.cuh): every tiled-matvec kernel lets the next kernel launch early and calls
// pdl_wait() after its first weight loads are issued (weights are constants) and before any activation read or
// output write; the pre-pass lets the matvec's weight loads overlap it.

// ---- activation pre-pass (matvec_tiled.cuh's scratch layout) ----------------------------------------------
// One warp per 32-value block. x: (n, K) f32; hi, lo: (n, K) int8; meta: (n, K / 32) float4.
__global__ void quantize_act_kernel(const float* __restrict__ x, int64_t n_blocks, int8_t* __restrict__ hi,
                                    int8_t* __restrict__ lo, float4* __restrict__ meta) {
  pdl_allow_dependents();
  pdl_wait();  // x is the previous kernel's output
  const int64_t blk = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (blk >= n_blocks) return;  // whole warps leave together
  const int64_t i = blk * 32 + lane;
  const float v = x[i];
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  const float dx2 = amax / 127.0f * (1.0f / 256.0f);
  int q1, q2;
  quantize_value(v, amax, &q1, &q2);
  hi[i] = int8_t(q1);
  lo[i] = int8_t(q2);
  int s = 256 * q1 + q2;
#pragma unroll
  for (int o = 1; o < 16; o *= 2) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
  const int s_hi = __shfl_xor_sync(0xFFFFFFFFu, s, 16);
  if (lane == 0) meta[blk] = make_meta(dx2, s, s_hi);
}

// Where path P reads activations: x (float paths) or the pre-pass scratch (dp4a paths).
template <class P>
__device__ __forceinline__ typename P::Ctx context_of(const MatvecParams& p) {
  if constexpr (std::is_same_v<typename P::Ctx, ActView>) {
    return act_view(p.scratch, p.n_tokens, p.w.cols);
  } else {
    return p.x;
  }
}

// The block's group range and the end of the block: partials (gpb, S, kR, kTok) summed in slice order.
struct BlockRange {
  int64_t g_begin, g_end;
};
__device__ __forceinline__ BlockRange block_range(const Plan& pl) {
  return {int64_t(blockIdx.x) * pl.n_groups / gridDim.x, int64_t(blockIdx.x + 1) * pl.n_groups / gridDim.x};
}

// Writes one (row, token) result of an item: straight to out when S == 1, else to the partials.
template <int kR, int kTok>
__device__ __forceinline__ void put(const MatvecParams& p, const Plan& pl, float* partials, int64_t g_local,
                                    int s, int64_t row0, int r, int t, float v) {
  const int64_t row = row0 + r;
  if (pl.split == 1) {
    if (row < p.w.rows && t < p.n_tokens)
      p.out[size_t(t) * size_t(p.w.rows) + size_t(row)] = v + (p.bias ? __ldg(p.bias + row) : 0.0f);
  } else {
    partials[((g_local * pl.split + s) * kR + r) * kTok + t] = v;
  }
}

template <int kR, int kTok>
__device__ __forceinline__ void finish_split(const MatvecParams& p, const Plan& pl, const BlockRange& br,
                                             const float* partials) {
  if (pl.split == 1) return;
  __syncthreads();
  const int64_t n = (br.g_end - br.g_begin) * kR * kTok;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t g = i / (kR * kTok);
    const int r = int(i / kTok % kR), t = int(i % kTok);
    const int64_t row = (br.g_begin + g) * kR + r;
    if (row >= p.w.rows || t >= p.n_tokens) continue;
    float v = 0.0f;
    for (int s = 0; s < pl.split; ++s) v += partials[((g * pl.split + s) * kR + r) * kTok + t];
    p.out[size_t(t) * size_t(p.w.rows) + size_t(row)] = v + (p.bias ? __ldg(p.bias + row) : 0.0f);
  }
}

// ---- CUDA-core kernel (float and dp4a paths) ---------------------------------------------------------------
template <class D, int kTok, int kR, int kU>
__global__ void __launch_bounds__(kThreads, 1) matvec_tiled_kernel(MatvecParams p, Plan pl) {
  pdl_allow_dependents();  // the next kernel's blocks take SMs as this one's finish (they wait for its results)
  using P = typename PathOf<D>::type;
  extern __shared__ float4 v5_smem[];
  float* partials = reinterpret_cast<float*>(v5_smem);  // (gpb, S, kR, kTok) when S > 1
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const BlockRange br = block_range(pl);
  const int64_t n_items = (br.g_end - br.g_begin) * pl.split;
  const int n_tok = p.n_tokens < kTok ? p.n_tokens : kTok;
  const auto ctx = context_of<P>(p);
  const int64_t k = p.w.cols;
  bool waited = false;

  for (int64_t item = warp; item < n_items; item += kWarps) {
    const int64_t g_local = item / pl.split;
    const int s = int(item % pl.split);
    const int64_t row0 = (br.g_begin + g_local) * kR;
    const int rows_here = int(p.w.rows - row0 < kR ? p.w.rows - row0 : kR);
    const int64_t c_lo = int64_t(s) * pl.slice;
    const int64_t c_hi = c_lo + pl.slice < pl.n_units ? c_lo + pl.slice : pl.n_units;
    float acc[kR][kTok];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
#pragma unroll
      for (int t = 0; t < kTok; ++t) acc[r][t] = 0.0f;
    }
    for (int64_t c0 = c_lo + lane; c0 < c_hi; c0 += 32 * kU) {
      typename P::Raw raw[kU][kR];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          if (c0 + 32 * u < c_hi && r < rows_here) raw[u][r] = D::load(p.w, row0 + r, c0 + 32 * u);
        }
      }
      if (!waited) {
        pdl_wait();
        waited = true;
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t c = c0 + 32 * u;
        if (c >= c_hi) break;
#pragma unroll
        for (int t = 0; t < kTok; ++t) {
          if (t >= n_tok) break;
          const typename P::X xv = P::load_x(ctx, k, t, c);
#pragma unroll
          for (int r = 0; r < kR; ++r) {
            if (r < rows_here) acc[r][t] += P::dot(raw[u][r], xv);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) {
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
#pragma unroll
        for (int o = 16; o > 0; o /= 2) acc[r][t] += __shfl_xor_sync(0xFFFFFFFFu, acc[r][t], o);
      }
    }
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < kR; ++r) {
#pragma unroll
        for (int t = 0; t < kTok; ++t) put<kR, kTok>(p, pl, partials, g_local, s, row0, r, t, acc[r][t]);
      }
    }
  }
  if (!waited) pdl_wait();  // a warp without items still writes in finish_split
  finish_split<kR, kTok>(p, pl, br, partials);
}

// ---- BF16 tensor-core kernel (2..16 tokens) ----------------------------------------------------------------
// A unit = 32 columns. Lane (g = lane / 4, q = lane % 4) loads 16 bytes (columns 8q..8q+7 of the unit) of rows
// g and g + 8 of the warp's 16-row group, and columns 8q..8q+7 of token g's (and g + 8's) activations. The
// 32 columns are fed to two m16n8k16 MMAs in a permuted k order that A and B share: MMA h takes the lane's
// columns 8q + 4h + {0, 1} as k = 2q + {0, 1} and 8q + 4h + {2, 3} as k = 8 + 2q + {0, 1}.
// Tokens: kTok = 4: B columns 0..3 = bf16 hi of tokens 0..3, columns 4..7 = their lo (one MMA per k16, the two
// halves added by a shuffle at the end); kTok = 8: hi and lo MMAs into one accumulator; kTok = 16: two n-tiles.
__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t bf2_bits(__nv_bfloat162 v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}
// x's two pairs (x.x, x.y), (x.z, x.w) as bf16x2 hi parts (h0, h1) and the rounded remainders (l0, l1).
__device__ __forceinline__ void split_bf16(const float4& x, uint32_t& h0, uint32_t& h1, uint32_t& l0, uint32_t& l1) {
  const __nv_bfloat162 a = __floats2bfloat162_rn(x.x, x.y), b = __floats2bfloat162_rn(x.z, x.w);
  const float2 af = __bfloat1622float2(a), bf = __bfloat1622float2(b);
  h0 = bf2_bits(a);
  h1 = bf2_bits(b);
  l0 = bf2_bits(__floats2bfloat162_rn(x.x - af.x, x.y - af.y));
  l1 = bf2_bits(__floats2bfloat162_rn(x.z - bf.x, x.w - bf.y));
}

template <int kTok, int kU>
__global__ void __launch_bounds__(kThreads, 1) matvec_tiled_mma_kernel(MatvecParams p, Plan pl) {
  pdl_allow_dependents();
  constexpr int kR = 16;
  constexpr int kNT = kTok == 16 ? 2 : 1;  // n-tiles of 8 tokens
  extern __shared__ float4 v5_smem[];
  float* partials = reinterpret_cast<float*>(v5_smem);  // (gpb, S, 16, kTok) when S > 1
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, q = lane % 4;
  const BlockRange br = block_range(pl);
  const int64_t n_items = (br.g_end - br.g_begin) * pl.split;
  const int64_t k = p.w.cols, n_out = p.w.rows;
  const int n_tok = p.n_tokens;
  const uint16_t* w = reinterpret_cast<const uint16_t*>(p.w.data);
  // B rows this lane feeds: kTok 4: token g % 4 (hi for g < 4, lo otherwise); else token g (+ 8 for tile 1).
  const float* xrow[kNT];
  bool xvalid[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    const int tok = kTok == 4 ? g % 4 : g + 8 * nt;
    xvalid[nt] = tok < n_tok;
    xrow[nt] = p.x + size_t(xvalid[nt] ? tok : 0) * size_t(k) + 8 * q;
  }
  const bool take_lo = kTok == 4 && g >= 4;
  bool waited = false;

  for (int64_t item = warp; item < n_items; item += kWarps) {
    const int64_t g_local = item / pl.split;
    const int s = int(item % pl.split);
    const int64_t row0 = (br.g_begin + g_local) * kR;
    const int64_t ra = row0 + g < n_out ? row0 + g : n_out - 1, rb = row0 + g + 8 < n_out ? row0 + g + 8 : n_out - 1;
    const uint16_t* wa = w + size_t(ra) * size_t(k) + 8 * q;
    const uint16_t* wb = w + size_t(rb) * size_t(k) + 8 * q;
    const int64_t u_lo = int64_t(s) * pl.slice;
    const int64_t u_hi = u_lo + pl.slice < pl.n_units ? u_lo + pl.slice : pl.n_units;
    float c[kNT][4];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) c[nt][0] = c[nt][1] = c[nt][2] = c[nt][3] = 0.0f;
    for (int64_t u0 = u_lo; u0 < u_hi; u0 += kU) {
      uint4 a[kU][2];
      float4 x[kU][kNT][2];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (u0 + u < u_hi) {
          const size_t col = size_t(u0 + u) * 32;
          a[u][0] = __ldg(reinterpret_cast<const uint4*>(wa + col));
          a[u][1] = __ldg(reinterpret_cast<const uint4*>(wb + col));
        }
      }
      if (!waited) {
        pdl_wait();
        waited = true;
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (u0 + u < u_hi) {
          const size_t col = size_t(u0 + u) * 32;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
            const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            x[u][nt][0] = xvalid[nt] ? __ldg(reinterpret_cast<const float4*>(xrow[nt] + col)) : z;
            x[u][nt][1] = xvalid[nt] ? __ldg(reinterpret_cast<const float4*>(xrow[nt] + col + 4)) : z;
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (u0 + u >= u_hi) break;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t a0 = h == 0 ? a[u][0].x : a[u][0].z, a1 = h == 0 ? a[u][1].x : a[u][1].z;
          const uint32_t a2 = h == 0 ? a[u][0].y : a[u][0].w, a3 = h == 0 ? a[u][1].y : a[u][1].w;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
            uint32_t h0, h1, l0, l1;
            split_bf16(x[u][nt][h], h0, h1, l0, l1);
            if (kTok == 4) {
              mma_bf16(c[nt], a0, a1, a2, a3, take_lo ? l0 : h0, take_lo ? l1 : h1);
            } else {
              mma_bf16(c[nt], a0, a1, a2, a3, h0, h1);
              mma_bf16(c[nt], a0, a1, a2, a3, l0, l1);
            }
          }
        }
      }
    }
    // c[nt]: rows g (0, 1) and g + 8 (2, 3), B columns 2q, 2q + 1 of tile nt.
    if (kTok == 4) {  // lanes q = 2, 3 hold the lo columns: fold them into q = 0, 1
#pragma unroll
      for (int i = 0; i < 4; ++i) c[0][i] += __shfl_xor_sync(0xFFFFFFFFu, c[0][i], 2);
    }
#pragma unroll
    for (int nt = 0; nt < (kTok == 4 && q >= 2 ? 0 : kNT); ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int t = 8 * nt + 2 * q + (i & 1), r = g + (i >= 2 ? 8 : 0);
        if (t < kTok) put<kR, kTok>(p, pl, partials, g_local, s, row0, r, t, c[nt][i]);
      }
    }
  }
  if (!waited) pdl_wait();
  finish_split<kR, kTok>(p, pl, br, partials);
}

// ---- host ---------------------------------------------------------------------------------------------------
int sm_count() {
  int dev = 0, n = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&dev));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

int plan_for(int64_t rows, int r_per_group, int64_t n_units, int64_t min_slice, size_t partial_bytes_per_item,
             Plan* pl) {
  return make_plan(rows, r_per_group, n_units, min_slice, partial_bytes_per_item, sm_count(), kWarps,
                   kMaxPartialBytes, pl);
}

template <class K>
void launch_kernel(K kernel, int grid, size_t smem, cudaStream_t stream, const MatvecParams& p, const Plan& pl) {
  if (smem > 48 * 1024)  // above the default limit: opt in (not a stream operation: fine while capturing)
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  launch_pdl(kernel, dim3(unsigned(grid)), dim3(kThreads), smem, stream, p, pl);
}

template <class D, int kTok>
void launch_cuda_core(const MatvecParams& p, cudaStream_t stream) {
  using P = typename PathOf<D>::type;
  constexpr int kR = CoreShape<D, kTok>::kR, kU = CoreShape<D, kTok>::kU;
  Plan pl;
  const int grid = plan_for(p.w.rows, kR, P::units(p.w.cols), 32, size_t(kR) * kTok * sizeof(float), &pl);
  const size_t smem = pl.split > 1 ? size_t(pl.gpb) * pl.split * kR * kTok * sizeof(float) : 0;
  launch_kernel(matvec_tiled_kernel<D, kTok, kR, kU>, grid, smem, stream, p, pl);
}

template <int kTok>
void launch_mma(const MatvecParams& p, cudaStream_t stream) {
  constexpr int kU = kTok == 16 ? 2 : 4;
  Plan pl;
  const int grid = plan_for(p.w.rows, 16, p.w.cols / 32, kU, size_t(16) * kTok * sizeof(float), &pl);
  const size_t smem = pl.split > 1 ? size_t(pl.gpb) * pl.split * 16 * kTok * sizeof(float) : 0;
  launch_kernel(matvec_tiled_mma_kernel<kTok, kU>, grid, smem, stream, p, pl);
}

template <class D>
void launch_tokens(const MatvecParams& p, cudaStream_t stream) {
  const int n = p.n_tokens;
  if (n == 1) {
    launch_cuda_core<D, 1>(p, stream);
  } else if (n == 2) {
    launch_cuda_core<D, 2>(p, stream);
  } else if (n <= 4) {
    launch_cuda_core<D, 4>(p, stream);
  } else if (n <= 8) {
    launch_cuda_core<D, 8>(p, stream);
  } else {
    launch_cuda_core<D, 16>(p, stream);
  }
}

}  // namespace

void matvec_tiled(DType wtype, const MatvecParams& p, cudaStream_t stream) {
  if (tiled_quantizes_acts(wtype)) {
    FERRY_CUDA_REQUIRE(p.scratch != nullptr && reinterpret_cast<uintptr_t>(p.scratch) % 16 == 0);
    FERRY_CUDA_REQUIRE(p.w.cols % 32 == 0);
    const int64_t n_blocks = int64_t(p.n_tokens) * (p.w.cols / 32);
    const size_t nk = size_t(p.n_tokens) * size_t(p.w.cols);
    auto* base = static_cast<int8_t*>(p.scratch);
    launch_pdl(quantize_act_kernel, dim3(grid_for(n_blocks * 32, 256)), dim3(256), 0, stream, p.x, n_blocks, base,
               base + nk, reinterpret_cast<float4*>(base + (2 * nk + 15) / 16 * 16));
  }
  if (wtype == DType::BF16 && p.n_tokens >= 2 && p.w.cols % 32 == 0) {
    if (p.n_tokens <= 4) {
      launch_mma<4>(p, stream);
    } else if (p.n_tokens <= 8) {
      launch_mma<8>(p, stream);
    } else {
      launch_mma<16>(p, stream);
    }
    return;
  }
  const bool ok = visit_decoder(wtype, [&]<class D>() {
    FERRY_CUDA_REQUIRE(p.w.cols % D::kVals == 0);
    launch_tokens<D>(p, stream);
  });
  FERRY_CUDA_REQUIRE(ok);
}

}  // namespace ferry::cuda_ops
