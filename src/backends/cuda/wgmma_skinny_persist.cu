// The persistent wgmma skinny GEMM (design in wgmma_skinny_persist.cuh): one block per SM, an equal contiguous
// share of the (row tile, 64-k stage) units each, shared tiles reduced in participant order through a workspace.
#include <cuda.h>

#include "backends/cuda/common.cuh"
#include "backends/cuda/hopper.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/tensor_map.h"
#include "backends/cuda/wgmma_skinny_mma.cuh"
#include "backends/cuda/wgmma_skinny_persist.cuh"

namespace ferry::cuda_ops {

namespace {

using namespace sm90;

constexpr int kRowBytes = kWgSkinnyStageK * 2;  // one row's 64 bf16 of one stage: 128 bytes (the swizzle span)
constexpr int kBarrierBytes = 1024;             // the mbarriers, ahead of the 1024-aligned ring
constexpr int kConsumerThreads = 256;           // two warpgroups, one m64 of the 128-row tile each
constexpr int kThreads = kConsumerThreads + 32;  // then the producer warp
constexpr int kConsumerBarrier = 1;             // named barrier of the consumer threads (0 is __syncthreads)

// Sizes of one instantiation: kNt tokens are the wgmma's N, kStages ring stages.
template <int kNt, int kStages>
struct PersistConfig {
  static constexpr int kBm = kWgPersistTileRows;
  static constexpr int kWBytes = kBm * kRowBytes;  // weight tile: 128 rows x 128 B = 16 KB
  static constexpr int kXBytes = kNt * kRowBytes;  // x tile: kNt rows x 128 B
  static constexpr int kStageBytes = kWBytes + kXBytes;
  static constexpr int kSmemBytes = 1024 + kBarrierBytes + kStages * kStageBytes;  // + alignment slack
  static constexpr int kAcc = kNt / 2;              // f32 accumulators per thread (one m64 x kNt tile a warpgroup)
  static constexpr int kSlotFloats = kBm * kNt;     // one partial: kNt/8 groups x 256 threads x float4
  static_assert(kStages >= 2 && 2 * kStages * 8 <= kBarrierBytes);
  static_assert(kSmemBytes <= 227 * 1024);
  static_assert(2 * (kSmemBytes + 1024) > 228 * 1024, "one block per SM: every block of the grid is resident");
};

struct PersistArgs {
  float* out;          // (n, rows) f32 row-major
  float* partials;     // (2 grid slots, kNt/8 groups, 256 consumer threads, 4) f32: partials of shared tiles
  uint32_t* counters;  // (row_tiles): arrivals at a shared tile; zero between launches
  int n;               // tokens, 1..kNt
  int rows;            // weight rows
  int64_t k_stages;    // ceil(k / 64)
  int64_t units;       // row_tiles x k_stages
};

__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kConsumerBarrier), "n"(kConsumerThreads) : "memory");
}
// fence.acq_rel + relaxed add: every write the block made before consumer_sync() is visible before the count.
__device__ __forceinline__ void add_release(uint32_t* p, uint32_t v) {
  asm volatile("fence.acq_rel.gpu;\nred.relaxed.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The tile's first and last participant (the blocks holding its first and last unit).
struct Participants {
  int first, last;
};
__device__ __forceinline__ Participants participants(const PersistArgs& a, int64_t t) {
  const int g = int(gridDim.x);
  return {wg_persist_block_of(a.units, g, t * a.k_stages), wg_persist_block_of(a.units, g, (t + 1) * a.k_stages - 1)};
}
// Block b's workspace slot for tile t.
__device__ __forceinline__ int64_t slot_of(const PersistArgs& a, int b, int64_t t) {
  const int64_t first_tile = wg_persist_unit_begin(a.units, int(gridDim.x), b) / a.k_stages;
  return wg_persist_slot(b, t != first_tile);
}

// Stores 4 values of the fragment group (j, thread tc) of tile row0: v.x (token tok, row r), v.y (tok + 1, r),
// v.z (tok, r + 8), v.w (tok + 1, r + 8), tok = 8 j + 2 (lane % 4), r = row0 + 64 warpgroup + 16 warp + lane / 4
// (wgmma's accumulator layout). A warp's store covers 4 tokens x 8 consecutive rows: four full 32-byte sectors.
__device__ __forceinline__ void store_group(const PersistArgs& a, int row0, int j, int tc, float4 v) {
  const int lane = tc % 32;
  const int tok = 8 * j + 2 * (lane % 4);
  const int r = row0 + (tc / 128) * 64 + 16 * ((tc / 32) % 4) + lane / 4;
  float* o = a.out + int64_t(tok) * a.rows + r;
  const bool t1 = tok + 1 < a.n;
  if (tok < a.n) {
    if (r < a.rows) o[0] = v.x;
    if (r + 8 < a.rows) o[8] = v.z;
  }
  if (t1) {
    if (r < a.rows) o[a.rows] = v.y;
    if (r + 8 < a.rows) o[a.rows + 8] = v.w;
  }
}

// Block b's slice (q of p) of shared tile t: the sum over the p participants' partials in order, stored to out.
// Waits (one thread) until every partial is in; then counts itself again, and the last of the p resets the counter.
template <int kNt>
__device__ void reduce_shared_tile(const PersistArgs& a, int b, int64_t t, int tc) {
  constexpr int64_t kSlotFloats = int64_t(kWgPersistTileRows) * kNt;
  const Participants pt = participants(a, t);
  const uint32_t p = uint32_t(pt.last - pt.first + 1);
  if (tc == 0) {
    while (load_acquire(&a.counters[t]) < p) __nanosleep(32);
    if (atomicAdd(&a.counters[t], 1u) == 2 * p - 1) atomicExch(&a.counters[t], 0u);
  }
  consumer_sync();
  const int groups = (a.n + 7) / 8;  // token groups of 8 with at least one token below n
  const int total = groups * kConsumerThreads;  // float4 units of the partial tile
  const int q = b - pt.first;
  const int e0 = int(int64_t(total) * q / p), e1 = int(int64_t(total) * (q + 1) / p);
  const int row0 = int(t) * kWgPersistTileRows;
  // Partial i's float4s: participant first's own slot, then slots 2 (first + i) (the share of every later
  // participant starts inside tile t, so t is its first tile).
  const float4* part0 = reinterpret_cast<const float4*>(a.partials + slot_of(a, pt.first, t) * kSlotFloats);
  const float4* part1 = reinterpret_cast<const float4*>(a.partials + wg_persist_slot(pt.first + 1, false) * kSlotFloats);
  constexpr int64_t kPartStride = 2 * kSlotFloats / 4;  // float4s from one later participant's slot to the next
  // Two elements a thread at once, participants in batches of 4: up to 8 independent L2 loads in flight.
  for (int e = e0 + tc; e < e1; e += 2 * kConsumerThreads) {
    const int e2 = e + kConsumerThreads;
    const bool has2 = e2 < e1;
    float4 s0 = make_float4(0.f, 0.f, 0.f, 0.f), s1 = s0;
    for (int i0 = 0; i0 < int(p); i0 += 4) {
      float4 v0[4], v1[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (i0 + u < int(p)) {
          const float4* src = i0 + u == 0 ? part0 : part1 + (i0 + u - 1) * kPartStride;
          v0[u] = __ldcg(src + e);
          if (has2) v1[u] = __ldcg(src + e2);
        }
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (i0 + u < int(p)) {  // participant order; the first partial is added to zeros (exact)
          s0.x += v0[u].x, s0.y += v0[u].y, s0.z += v0[u].z, s0.w += v0[u].w;
          if (has2) s1.x += v1[u].x, s1.y += v1[u].y, s1.z += v1[u].z, s1.w += v1[u].w;
        }
      }
    }
    store_group(a, row0, e / kConsumerThreads, e % kConsumerThreads, s0);
    if (has2) store_group(a, row0, e2 / kConsumerThreads, e2 % kConsumerThreads, s1);
  }
}

// grid (plan.grid): one block per SM; kThreads threads; PersistConfig::kSmemBytes dynamic shared memory.
// tmap_w: w (rows, k) bf16, box 64 (k) x 128 (rows), 128B swizzle; tmap_x: x (n, k) bf16, box 64 x kNt.
// Shared memory (1024-aligned): kBarrierBytes of mbarriers (full[kStages], empty[kStages]), then the ring:
// kStages x [weight tile (128 rows x 128 B) | x tile (kNt rows x 128 B)], TMA's 128B swizzle.
template <int kNt, int kStages>
__global__ void __launch_bounds__(kThreads, 1)
    wg_persist_kernel(const __grid_constant__ CUtensorMap tmap_w, const __grid_constant__ CUtensorMap tmap_x,
                      const PersistArgs a) {
  using C = PersistConfig<kNt, kStages>;
  extern __shared__ uint8_t smem_raw[];
  pdl_allow_dependents();
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);  // stage landed (TMA bytes)
  uint64_t* empty = full + kStages;                     // stage consumed by both consumer warpgroups
  uint8_t* ring = smem + kBarrierBytes;

  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int b = int(blockIdx.x);
  const int64_t u0 = wg_persist_unit_begin(a.units, int(gridDim.x), b);
  const int64_t u1 = wg_persist_unit_begin(a.units, int(gridDim.x), b + 1);  // > u0: grid <= units
  const int nu = int(u1 - u0);  // units of this block (below 2^31: run() checks units / grid)

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 2);
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warp == kConsumerThreads / 32) {
    // Producer: one thread streams every unit of the share, tile after tile, through the ring.
    if (lane == 0) {
      prefetch_tmap(&tmap_w);
      prefetch_tmap(&tmap_x);
      const uint64_t policy = l2_evict_first_policy();
      const int first = min(nu, kStages);
      int64_t t = u0 / a.k_stages;
      int st = int(u0 - t * a.k_stages);
      // The first ring's weights before the PDL wait (constant data), their x after it.
      {
        int64_t tt = t;
        int ss = st;
        for (int s = 0; s < first; ++s) {
          mbar_arrive_expect_tx(&full[s], C::kStageBytes);
          tma_load_2d_hint(ring + s * C::kStageBytes, &tmap_w, &full[s], ss * kWgSkinnyStageK, int(tt) * C::kBm,
                           policy);
          if (++ss == a.k_stages) ss = 0, ++tt;
        }
      }
      pdl_wait();
      for (int s = 0; s < first; ++s) {
        tma_load_2d(ring + s * C::kStageBytes + C::kWBytes, &tmap_x, &full[s], st * kWgSkinnyStageK, 0);
        if (++st == a.k_stages) st = 0, ++t;
      }
      for (int it = kStages; it < nu; ++it) {
        const int slot = it % kStages;
        mbar_wait(&empty[slot], uint32_t((it / kStages - 1) & 1));  // use it/kStages - 1 of the slot consumed
        mbar_arrive_expect_tx(&full[slot], C::kStageBytes);
        uint8_t* dst = ring + slot * C::kStageBytes;
        tma_load_2d_hint(dst, &tmap_w, &full[slot], st * kWgSkinnyStageK, int(t) * C::kBm, policy);
        tma_load_2d(dst + C::kWBytes, &tmap_x, &full[slot], st * kWgSkinnyStageK, 0);
        if (++st == a.k_stages) st = 0, ++t;
      }
    } else {
      pdl_wait();
    }
    return;  // the consumers synchronise among themselves (named barrier) from here on
  }

  // Consumers: warpgroup c owns rows [64 c, 64 c + 64) of every tile; thread tc = threadIdx.x.
  const int tc = int(threadIdx.x), c = warp / 4;
  pdl_wait();  // out, the partials and the counters are written below: every earlier kernel is done with them
  const int64_t t_first = u0 / a.k_stages, t_last = (u1 - 1) / a.k_stages;
  float acc[C::kAcc];
  int it = 0;
  for (int64_t t = t_first; t <= t_last; ++t) {
    const int sb = int(max(u0, t * a.k_stages) - t * a.k_stages);        // this segment's stages [sb, se)
    const int se = int(min(u1, (t + 1) * a.k_stages) - t * a.k_stages);
    for (int s = sb; s < se; ++s, ++it) {
      const int slot = it % kStages;
      mbar_wait(&full[slot], uint32_t((it / kStages) & 1));
      const uint8_t* sw = ring + slot * C::kStageBytes + c * 64 * kRowBytes;
      const uint8_t* sx = ring + slot * C::kStageBytes + C::kWBytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kWgSkinnyStageK / 16; ++kk) {  // 32 bytes of the 128-byte row per k16
        wgmma_tile<kNt>(acc, smem_desc_sw128(sw + kk * 32), smem_desc_sw128(sx + kk * 32), (s > sb || kk > 0) ? 1 : 0);
      }
      wgmma_commit();
      wgmma_wait<0>();  // as the cluster kernel: the loop waits on HBM, the slot goes back at once
      if (tc % 128 == 0) mbar_arrive(&empty[slot]);
    }
    fence_operands(acc);
    const int row0 = int(t) * C::kBm;
    const Participants pt = participants(a, t);
    if (pt.first == pt.last) {
      // A whole tile: straight to out. acc[4j + h + 2v] is token 8j + 2 (lane % 4) + h, row 16 w + lane/4 + 8 v.
#pragma unroll
      for (int j = 0; j < kNt / 8; ++j) {
        if (8 * j < a.n) store_group(a, row0, j, tc, make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
      }
    } else {
      // A shared tile: the partial to this block's slot (group-major, float4 per thread), then one arrival.
      float4* dst = reinterpret_cast<float4*>(a.partials + slot_of(a, b, t) * C::kSlotFloats);
#pragma unroll
      for (int j = 0; j < kNt / 8; ++j) {
        if (8 * j < a.n) {
          __stcg(dst + j * kConsumerThreads + tc, make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
        }
      }
      consumer_sync();
      if (tc == 0) add_release(&a.counters[t], 1u);
    }
  }
  // Every partial of this block is published; now the slices of the shared tiles at the share's two ends.
  if (participants(a, t_first).first != participants(a, t_first).last) reduce_shared_tile<kNt>(a, b, t_first, tc);
  if (t_last != t_first && participants(a, t_last).first != participants(a, t_last).last) {
    reduce_shared_tile<kNt>(a, b, t_last, tc);
  }
}

// The instances: n_tile and ring stages (a ring of ~192 KB each: one block per SM).
template <int kNt>
struct Instance;
template <> struct Instance<64> { static constexpr int kStages = 8; };   // 24 KB x 8
template <> struct Instance<128> { static constexpr int kStages = 6; };  // 32 KB x 6
template <> struct Instance<192> { static constexpr int kStages = 5; };  // 40 KB x 5
template <> struct Instance<256> { static constexpr int kStages = 4; };  // 48 KB x 4

template <int kNt>
void raise_smem_limit() {
  constexpr int kStages = Instance<kNt>::kStages;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(wg_persist_kernel<kNt, kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        PersistConfig<kNt, kStages>::kSmemBytes));
}

template <int kNt>
void launch(void* encode, const WgSkinnyParams& p, const WgPersistPlan& plan, void* workspace, cudaStream_t stream) {
  constexpr int kStages = Instance<kNt>::kStages;
  using C = PersistConfig<kNt, kStages>;
  const CUtensorMap tw = make_bf16_tmap(encode, p.w, p.rows, p.k, kWgSkinnyStageK, C::kBm);
  const CUtensorMap tx = make_bf16_tmap(encode, p.x, p.n, p.k, kWgSkinnyStageK, kNt);
  const size_t counter_bytes = (size_t(plan.row_tiles) * 4 + 255) / 256 * 256;  // as wg_persist_workspace_bytes
  const PersistArgs args{.out = p.out,
                         .partials = reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + counter_bytes),
                         .counters = static_cast<uint32_t*>(workspace),
                         .n = int(p.n),
                         .rows = int(p.rows),
                         .k_stages = plan.k_stages,
                         .units = plan.units};
  launch_pdl(wg_persist_kernel<kNt, kStages>, dim3(unsigned(plan.grid)), dim3(kThreads), size_t(C::kSmemBytes), stream,
             tw, tx, args);
}

}  // namespace

WgSkinnyPersistGemm::WgSkinnyPersistGemm(int device) {
  const HopperTma tma = find_hopper_tma(device);
  num_sms_ = tma.num_sms;
  void* fn = tma.encode;
  if (fn == nullptr) return;
  raise_smem_limit<64>();
  raise_smem_limit<128>();
  raise_smem_limit<192>();
  raise_smem_limit<256>();
  encode_ = fn;
}

void WgSkinnyPersistGemm::run(const WgSkinnyParams& p, const WgPersistPlan& plan, void* workspace,
                              cudaStream_t stream) const {
  FERRY_CUDA_REQUIRE(available() && wg_skinny_supports(p.n, p.rows, p.k));
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0);
  FERRY_CUDA_REQUIRE(workspace != nullptr && reinterpret_cast<uintptr_t>(workspace) % 256 == 0);
  FERRY_CUDA_REQUIRE(plan.n_tile == wg_skinny_n_tile(p.n));
  FERRY_CUDA_REQUIRE(plan.row_tiles == (p.rows + kWgPersistTileRows - 1) / kWgPersistTileRows &&
                     plan.k_stages == (p.k + kWgSkinnyStageK - 1) / kWgSkinnyStageK &&
                     plan.units == plan.row_tiles * plan.k_stages);
  FERRY_CUDA_REQUIRE(plan.grid >= 1 && plan.grid <= num_sms_ && plan.grid <= plan.units &&
                     plan.units / plan.grid < (int64_t(1) << 30));
  switch (plan.n_tile) {
    case 64: launch<64>(encode_, p, plan, workspace, stream); break;
    case 128: launch<128>(encode_, p, plan, workspace, stream); break;
    case 192: launch<192>(encode_, p, plan, workspace, stream); break;
    default: launch<256>(encode_, p, plan, workspace, stream); break;
  }
}

}  // namespace ferry::cuda_ops
