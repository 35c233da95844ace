#include "backends/cuda/moe/moe_routing.cuh"

#include <cmath>

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/moe/moe_dot.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kLogitWarps = 8;   // router rows (experts) per block
constexpr int kLogitTokens = 8;  // tokens per block: each router row read once for all of them
constexpr int kRouteWarps = 4;   // tokens per block of moe_route
constexpr int kGroupThreads = 1024;

// Block (expert rows e0 .. e0 + 7, tokens t0 .. t0 + 7): warp w dots router row e0 + w with the block's tokens
// (every warp of the block calls it; a warp past the last expert does nothing).
template <class D>
__device__ void router_logits_block(const MoeRouterLogitsParams& p) {
  const int64_t e = int64_t(blockIdx.x) * kLogitWarps + (threadIdx.x >> 5);
  const int64_t t0 = int64_t(blockIdx.y) * kLogitTokens;
  if (e >= p.router.rows) return;
  const int nb = int(p.n - t0 < kLogitTokens ? p.n - t0 : kLogitTokens);
  const float* xrow[kLogitTokens];
FERRY_UNROLL
  for (int t = 0; t < kLogitTokens; ++t) xrow[t] = p.x + size_t(t0 + (t < nb ? t : 0)) * size_t(p.router.cols);
  const WeightView w[1] = {p.router};
  const int64_t row[1] = {e};
  float acc[1][kLogitTokens];
  warp_dot_rows<D, 1, kLogitTokens>(w, row, xrow, nb, acc);
  const int lane = int(threadIdx.x & 31);
FERRY_UNROLL
  for (int t = 0; t < kLogitTokens; ++t)
    if (t < nb && lane == t) p.logits[size_t(t0 + t) * size_t(p.router.rows) + size_t(e)] = acc[0][t];
}

template <class D>
__global__ void __launch_bounds__(kLogitWarps * 32) router_logits_kernel(MoeRouterLogitsParams p) {
  pdl_allow_dependents();
  pdl_wait();
  router_logits_block<D>(p);
}

// Token t's softmax and top-k, by one warp (every lane calls it); prob: (E) f32 shared memory of this warp. The
// logits are read through L2 (__ldcg): in route_decode_kernel other blocks of the same launch wrote them.
__device__ void route_token(const MoeRouteParams& p, int64_t t, float* prob) {
  const int lane = int(threadIdx.x & 31);
  const int E = p.n_experts, k = p.top_k;
  const float* z = p.logits + size_t(t) * size_t(E);
  // max, with non-finite logits reported (the CPU reference refuses them)
  float mx = -INFINITY;
  bool finite = true;
  for (int e = lane; e < E; e += 32) {
    const float v = __ldcg(z + e);
    finite &= isfinite(v);
    mx = fmaxf(mx, v);
  }
  finite = __all_sync(0xFFFFFFFFu, finite);
  if (!finite) {
    if (lane == 0) {
      report_error(p.errors, kBadRouterLogit, t);
      for (int j = 0; j < k; ++j) {
        p.expert[size_t(t) * size_t(k) + size_t(j)] = j;
        p.weight[size_t(t) * size_t(k) + size_t(j)] = 0.0f;
      }
    }
    return;
  }
FERRY_UNROLL
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
  float sum = 0.0f;
  for (int e = lane; e < E; e += 32) {
    const float v = expf(__ldcg(z + e) - mx);
    prob[e] = v;
    sum += v;
  }
FERRY_UNROLL
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
  for (int e = lane; e < E; e += 32) prob[e] = prob[e] / sum;
  __syncwarp();
  // k arg-max passes; a chosen expert's p becomes -1 (every p >= 0)
  float chosen = 0.0f;
  for (int j = 0; j < k; ++j) {
    float best = -2.0f;
    int best_e = E;
    for (int e = lane; e < E; e += 32) {
      const float v = prob[e];
      if (v > best) {  // ascending e within a lane: a tie keeps the lower index
        best = v;
        best_e = e;
      }
    }
FERRY_UNROLL
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xFFFFFFFFu, best, o);
      const int oe = __shfl_xor_sync(0xFFFFFFFFu, best_e, o);
      if (ob > best || (ob == best && oe < best_e)) {
        best = ob;
        best_e = oe;
      }
    }
    // every lane now holds the same (best, best_e)
    if (lane == 0) {
      p.expert[size_t(t) * size_t(k) + size_t(j)] = best_e;
      p.weight[size_t(t) * size_t(k) + size_t(j)] = best;
      chosen += best;  // slot order, as route_moe sums them
    }
    if (lane == (best_e & 31)) prob[best_e] = -1.0f;
    __syncwarp();
  }
  if (p.renormalize && lane == 0)
    for (int j = 0; j < k; ++j) {
      float* w = p.weight + size_t(t) * size_t(k) + size_t(j);
      *w = *w / chosen;
    }
}

// One warp per token; p[e] in shared memory.
__global__ void __launch_bounds__(kRouteWarps * 32) route_kernel(MoeRouteParams p) {
  pdl_allow_dependents();
  pdl_wait();
  extern __shared__ float route_smem[];  // (kRouteWarps, E) f32
  const int warp = int(threadIdx.x >> 5);
  const int64_t t = int64_t(blockIdx.x) * kRouteWarps + warp;
  if (t >= p.n) return;
  route_token(p, t, route_smem + size_t(warp) * size_t(p.n_experts));
}

// The counting sort by the whole block (blockDim.x threads); count, fill: (E) shared memory. p.expert was written
// by this block or by earlier kernels.
__device__ void group_slots(const MoeGroupParams& p, int32_t* count, int32_t* fill) {
  const int E = p.n_experts;
  const int threads = int(blockDim.x);
  for (int e = int(threadIdx.x); e < E; e += threads) count[e] = 0;
  __syncthreads();
  for (int32_t s = int32_t(threadIdx.x); s < p.n_slots; s += threads) {
    const int32_t e = p.expert[s];
    if (e < 0 || e >= E) {
      report_error(p.errors, kBadExpert, e);
      continue;
    }
    atomicAdd(&count[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // E <= 1024 and tiles <= max_tiles: a short serial pass
    int32_t off = 0, n_active = 0, n_tiles = 0;
    for (int e = 0; e < E; ++e) {
      const int32_t c = count[e];
      p.offsets[e] = off;
      fill[e] = off;
      if (c > 0) {
        p.active[n_active++] = e;
        for (int32_t r = 0; r < c; r += p.tile_rows) {
          p.tile_expert[n_tiles] = e;
          p.tile_begin[n_tiles] = off + r;
          ++n_tiles;
        }
      }
      off += c;
    }
    p.offsets[E] = off;
    p.counts[0] = n_active;
    p.counts[1] = n_tiles;
  }
  __syncthreads();
  for (int32_t s = int32_t(threadIdx.x); s < p.n_slots; s += threads) {
    const int32_t e = p.expert[s];
    if (e < 0 || e >= E) continue;
    p.slots[atomicAdd(&fill[e], 1)] = s;
  }
}

__global__ void __launch_bounds__(kGroupThreads) group_kernel(MoeGroupParams p) {
  pdl_allow_dependents();
  pdl_wait();
  __shared__ int32_t count[kMoeMaxExperts];
  __shared__ int32_t fill[kMoeMaxExperts];
  group_slots(p, count, fill);
}

// moe_route_decode: the router-logits blocks of router_logits_kernel; the block that finishes last (a counter
// in device memory, reset by that block for the next launch) routes every token (a warp per token) and groups the
// slots, so a decode step's routing is one launch instead of three.
template <class D>
__global__ void __launch_bounds__(kLogitWarps * 32) route_decode_kernel(MoeRouteDecodeParams p) {
  pdl_allow_dependents();
  pdl_wait();
  extern __shared__ float route_smem[];  // (kLogitWarps, E) f32
  __shared__ int32_t count[kMoeMaxExperts];
  __shared__ int32_t fill[kMoeMaxExperts];
  __shared__ bool last;
  const int warp = int(threadIdx.x >> 5);
  router_logits_block<D>(p.logits);
  __threadfence();  // this block's logits are visible device-wide before it counts itself done
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(p.done, 1u) == gridDim.x * gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int64_t t = warp; t < p.route.n; t += kLogitWarps)
    route_token(p.route, t, route_smem + size_t(warp) * size_t(p.route.n_experts));
  __syncthreads();  // every token's experts are written (global memory, this block)
  group_slots(p.group, count, fill);
  if (threadIdx.x == 0) *p.done = 0u;
}

template <class D>
void launch_router_logits(const MoeRouterLogitsParams& p, cudaStream_t stream) {
  const dim3 grid(grid_for(p.router.rows, kLogitWarps), grid_for(p.n, kLogitTokens));
  launch_pdl(router_logits_kernel<D>, grid, dim3(kLogitWarps * 32), 0, stream, p);
}

}  // namespace

void moe_router_logits(DType type, const MoeRouterLogitsParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  FERRY_CUDA_REQUIRE(p.router.rows > 0 && p.router.rows <= kMoeMaxExperts && p.router.cols % 4 == 0);
  FERRY_CUDA_REQUIRE(p.n <= 65535 * int64_t(kLogitTokens));
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0);
  FERRY_CUDA_REQUIRE(visit_decoder(type, [&]<class D>() { launch_router_logits<D>(p, stream); }));
}

void moe_route(const MoeRouteParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  FERRY_CUDA_REQUIRE(p.n_experts > 0 && p.n_experts <= kMoeMaxExperts);
  FERRY_CUDA_REQUIRE(p.top_k >= 1 && p.top_k <= p.n_experts && p.top_k <= kMoeMaxTopK);
  FERRY_CUDA_REQUIRE(grid_for(p.n, kRouteWarps) <= 0x7FFFFFFFu);
  const size_t smem = size_t(kRouteWarps) * size_t(p.n_experts) * 4;  // <= 16 KB
  launch_pdl(route_kernel, dim3(grid_for(p.n, kRouteWarps)), dim3(kRouteWarps * 32), smem, stream, p);
}

void moe_route_decode(DType type, const MoeRouteDecodeParams& p, cudaStream_t stream) {
  const MoeRouterLogitsParams& lp = p.logits;
  if (lp.n == 0) return;
  FERRY_CUDA_REQUIRE(lp.router.rows > 0 && lp.router.rows <= kMoeMaxExperts && lp.router.cols % 4 == 0);
  FERRY_CUDA_REQUIRE(lp.n <= kMoeRouteDecodeMaxTokens && p.route.n == lp.n && p.route.logits == lp.logits);
  FERRY_CUDA_REQUIRE(p.route.n_experts == int(lp.router.rows) && p.group.n_experts == p.route.n_experts);
  FERRY_CUDA_REQUIRE(p.route.top_k >= 1 && p.route.top_k <= p.route.n_experts && p.route.top_k <= kMoeMaxTopK);
  FERRY_CUDA_REQUIRE(p.group.expert == p.route.expert && p.group.n_slots == int32_t(lp.n * p.route.top_k));
  FERRY_CUDA_REQUIRE(p.done != nullptr && reinterpret_cast<uintptr_t>(lp.x) % 16 == 0);
  const dim3 grid(grid_for(lp.router.rows, kLogitWarps), grid_for(lp.n, kLogitTokens));
  const size_t smem = size_t(kLogitWarps) * size_t(p.route.n_experts) * 4;  // <= 32 KB
  FERRY_CUDA_REQUIRE(visit_decoder(type, [&]<class D>() {
    launch_pdl(route_decode_kernel<D>, grid, dim3(kLogitWarps * 32), smem, stream, p);
  }));
}

void moe_group(const MoeGroupParams& p, cudaStream_t stream) {
  FERRY_CUDA_REQUIRE(p.n_experts > 0 && p.n_experts <= kMoeMaxExperts && p.tile_rows > 0 && p.n_slots >= 0);
  launch_pdl(group_kernel, dim3(1), dim3(kGroupThreads), 0, stream, p);
}

}  // namespace ferry::cuda_ops
