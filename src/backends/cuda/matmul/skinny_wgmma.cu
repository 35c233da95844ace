// The wgmma skinny GEMM (design in skinny_wgmma.cuh): weights as wgmma's M, tokens as its N, a TMA ring fed by
// one producer warp, split K reduced over a thread-block cluster through distributed shared memory.
#include <cooperative_groups.h>
#include <cuda.h>

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/matmul/skinny_wgmma.cuh"
#include "backends/cuda/matmul/skinny_wgmma_mma.cuh"
#include "backends/cuda/sm90/hopper.cuh"
#include "backends/cuda/sm90/pdl.cuh"
#include "backends/cuda/sm90/tensor_map.h"

namespace ferry::cuda_ops {

namespace {

namespace cg = cooperative_groups;
using namespace sm90;

constexpr int kRowBytes = kWgSkinnyStageK * 2;  // one row's 64 bf16 of one stage: 128 bytes (the swizzle span)
constexpr int kBarrierBytes = 1024;             // the mbarriers, ahead of the 1024-aligned ring

// Sizes of one instantiation: kConsumers warpgroups of kMt m64 tiles each make the block tile kBm; kNt tokens
// are the wgmma's N; kStages ring stages; kMinBlocks blocks per SM (launch bounds).
template <int kNt, int kConsumers, int kMt, int kStages, int kMinBlocks>
struct WgConfig {
  static constexpr int kBm = kConsumers * kMt * 64;
  static constexpr int kThreads = kConsumers * 128 + 32;           // consumer warpgroups, then the producer warp
  static constexpr int kWBytes = kBm * kRowBytes;                  // weight tile: kBm rows x 128 B
  static constexpr int kXBytes = kNt * kRowBytes;                  // x tile: kNt rows x 128 B
  static constexpr int kStageBytes = kWBytes + kXBytes;
  static constexpr int kRedPitch = kBm + 4;                        // floats per token row of the partial tile
  static constexpr int kRedBytes = kNt * kRedPitch * 4;
  static constexpr int kRingBytes = kStages * kStageBytes > kRedBytes ? kStages * kStageBytes : kRedBytes;
  static constexpr int kSmemBytes = 1024 + kBarrierBytes + kRingBytes;  // + alignment slack
  static constexpr int kAcc = kNt / 2;                             // f32 accumulators per thread per m64 tile
  static_assert(kStages >= 2 && 2 * kStages * 8 <= kBarrierBytes);
  static_assert(kBm <= 256 && kNt <= 256, "TMA boxes are at most 256 rows");
  static_assert(kSmemBytes <= 227 * 1024);
  static_assert(kMinBlocks * (kSmemBytes + 1024) <= 228 * 1024, "the blocks per SM must fit in shared memory");
};

struct WgKernelArgs {
  float* out;       // (n, rows) f32 row-major
  int n;            // tokens, 1..kNt
  int rows;         // weight rows
  int k;            // multiple of 8
  int k_per_split;  // multiple of kWgSkinnyStageK
  bool vec_out;     // rows % 4 == 0 and out 16-byte aligned: float4 stores
};

// grid (splits, row tiles), cluster (splits, 1, 1), Config::kThreads threads, Config::kSmemBytes dynamic shared.
// tmap_w: w (rows, k) bf16, box 64 (k) x kBm (rows), 128B swizzle; tmap_x: x (n, k) bf16, box 64 x kNt.
// Shared memory (1024-aligned): kBarrierBytes of mbarriers (full[kStages], empty[kStages]), then the ring:
// kStages x [weight tile (kBm rows x 128 B) | x tile (kNt rows x 128 B)], TMA's 128B swizzle; after the main
// loop the ring's bytes hold this block's partial out tile red (kNt, kRedPitch) f32, token-major.
template <int kNt, int kConsumers, int kMt, int kStages, int kMinBlocks>
__global__ void __launch_bounds__(kConsumers * 128 + 32, kMinBlocks)
    wg_skinny_kernel(const __grid_constant__ CUtensorMap tmap_w, const __grid_constant__ CUtensorMap tmap_x,
                     const WgKernelArgs a) {
  using C = WgConfig<kNt, kConsumers, kMt, kStages, kMinBlocks>;
  extern __shared__ uint8_t smem_raw[];
  pdl_allow_dependents();
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);  // stage landed (TMA bytes)
  uint64_t* empty = full + kStages;                     // stage consumed by every consumer warpgroup
  uint8_t* ring = smem + kBarrierBytes;

  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int row0 = int(blockIdx.y) * C::kBm;
  const int kb = int(blockIdx.x) * a.k_per_split;
  const int ke = min(a.k, kb + a.k_per_split);
  const int nk = (ke - kb + kWgSkinnyStageK - 1) / kWgSkinnyStageK;  // stages of this split (>= 1 by the plan)

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumers);
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warp == kConsumers * 4) {
    // Producer: one thread issues every TMA load of this block.
    if (lane == 0) {
      prefetch_tmap(&tmap_w);
      prefetch_tmap(&tmap_x);
      const uint64_t policy = l2_evict_first_policy();
      const int first = min(nk, kStages);
      // The first ring's weights before the PDL wait (constant data), their x after it.
      for (int s = 0; s < first; ++s) {
        mbar_arrive_expect_tx(&full[s], C::kStageBytes);
        tma_load_2d_hint(ring + s * C::kStageBytes, &tmap_w, &full[s], kb + s * kWgSkinnyStageK, row0, policy);
      }
      pdl_wait();
      for (int s = 0; s < first; ++s) {
        tma_load_2d(ring + s * C::kStageBytes + C::kWBytes, &tmap_x, &full[s], kb + s * kWgSkinnyStageK, 0);
      }
      for (int it = kStages; it < nk; ++it) {
        const int slot = it % kStages;
        mbar_wait(&empty[slot], uint32_t((it / kStages - 1) & 1));  // use it/kStages - 1 of the slot consumed
        mbar_arrive_expect_tx(&full[slot], C::kStageBytes);
        uint8_t* dst = ring + slot * C::kStageBytes;
        const int kc = kb + it * kWgSkinnyStageK;
        tma_load_2d_hint(dst, &tmap_w, &full[slot], kc, row0, policy);
        tma_load_2d(dst + C::kWBytes, &tmap_x, &full[slot], kc, 0);
      }
    } else {
      pdl_wait();
    }
    __syncwarp();
  }

  // Consumers: warpgroup c owns rows [c kMt 64, (c + 1) kMt 64) of the tile; acc[mt] its m64 tile mt.
  float acc[kMt][C::kAcc];
  const int c = warp / 4, t = int(threadIdx.x) % 128;
  if (warp < kConsumers * 4) {
    pdl_wait();  // out is written below: every earlier kernel's reads of it are done
    for (int it = 0; it < nk; ++it) {
      const int slot = it % kStages;
      mbar_wait(&full[slot], uint32_t((it / kStages) & 1));
      const uint8_t* sw = ring + slot * C::kStageBytes + c * kMt * 64 * kRowBytes;
      const uint8_t* sx = ring + slot * C::kStageBytes + C::kWBytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kWgSkinnyStageK / 16; ++kk) {  // 32 bytes of the 128-byte row per k16
        const uint64_t db = smem_desc_sw128(sx + kk * 32);
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          wgmma_tile<kNt>(acc[mt], smem_desc_sw128(sw + mt * 64 * kRowBytes + kk * 32), db,
                          (it > 0 || kk > 0) ? 1 : 0);
        }
      }
      wgmma_commit();
      // Wait for this stage's wgmmas at once and hand the slot back: the loop waits on HBM, not on the tensor
      // cores (64-256 cycles of wgmma per stage against ~500+ of weight bytes per SM), so keeping a group in
      // flight (wait<1>) would only hold one slot of the ring back from the loads.
      wgmma_wait<0>();
      if (t == 0) mbar_arrive(&empty[slot]);
    }
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) fence_operands(acc[mt]);
  }
  __syncthreads();  // every stage consumed by both warpgroups: the ring's bytes become red

  // red (kNt, kRedPitch) f32: this block's partial, token-major. d[4j + h + 2v] is row 16 w + l/4 + 8 v of the
  // m64 tile, token 8 j + 2 (l % 4) + h; token tiles wholly past n are skipped (warp-uniform).
  float* red = reinterpret_cast<float*>(ring);
  if (warp < kConsumers * 4) {
    const int w = warp % 4;
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
      const int r = (c * kMt + mt) * 64 + 16 * w + lane / 4;
#pragma unroll
      for (int j = 0; j < kNt / 8; ++j) {
        if (8 * j < a.n) {
          const int tok = 8 * j + 2 * (lane % 4);
          red[tok * C::kRedPitch + r] = acc[mt][4 * j];
          red[(tok + 1) * C::kRedPitch + r] = acc[mt][4 * j + 1];
          red[tok * C::kRedPitch + r + 8] = acc[mt][4 * j + 2];
          red[(tok + 1) * C::kRedPitch + r + 8] = acc[mt][4 * j + 3];
        }
      }
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every partial of the cluster written (and visible cluster-wide)

  // This block's share of the tile (an equal slice of its n x kBm/4 float4 units): the sum over the cluster's
  // partials in rank order 0..splits-1, stored to out.
  constexpr int kUnits = C::kBm / 4;
  const int splits = int(gridDim.x);
  const int total = a.n * kUnits;
  const int q = int(cluster.block_rank());
  const int e0 = total * q / splits, e1 = total * (q + 1) / splits;
  for (int e = e0 + int(threadIdx.x); e < e1; e += C::kThreads) {
    const int tok = e / kUnits, r4 = (e - tok * kUnits) * 4;
    const int at = tok * C::kRedPitch + r4;
    float4 sum = *reinterpret_cast<const float4*>(cluster.map_shared_rank(red, 0u) + at);
    for (int s = 1; s < splits; ++s) {
      const float4 v = *reinterpret_cast<const float4*>(cluster.map_shared_rank(red, unsigned(s)) + at);
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    const int row = row0 + r4;
    float* dst = a.out + int64_t(tok) * a.rows + row;
    if (a.vec_out && row + 3 < a.rows) {
      *reinterpret_cast<float4*>(dst) = sum;
    } else {
      if (row < a.rows) dst[0] = sum.x;
      if (row + 1 < a.rows) dst[1] = sum.y;
      if (row + 2 < a.rows) dst[2] = sum.z;
      if (row + 3 < a.rows) dst[3] = sum.w;
    }
  }
  cluster.sync();  // no block leaves while another still reads its shared memory
}

// The instances: (n_tile, consumers, m64 tiles per consumer, stages, blocks per SM). Two-per-SM instances keep
// a block under 113 KB of shared memory; one-per-SM instances take about 200 KB (stage bytes in comments).
template <int kNt, WgSkinnyTile kTile>
struct Instance;
// k128x1: 128 rows x (64 k) = 16 KB of weights per stage.
template <> struct Instance<64, WgSkinnyTile::k128x1> { using C = WgConfig<64, 1, 2, 4, 2>; };    // 24 KB x 4
template <> struct Instance<128, WgSkinnyTile::k128x1> { using C = WgConfig<128, 1, 2, 3, 2>; };  // 32 KB x 3
// k128x2
template <> struct Instance<64, WgSkinnyTile::k128x2> { using C = WgConfig<64, 2, 1, 4, 2>; };    // 24 KB x 4
template <> struct Instance<128, WgSkinnyTile::k128x2> { using C = WgConfig<128, 2, 1, 3, 2>; };  // 32 KB x 3
template <> struct Instance<192, WgSkinnyTile::k128x2> { using C = WgConfig<192, 2, 1, 5, 1>; };  // 40 KB x 5
template <> struct Instance<256, WgSkinnyTile::k128x2> { using C = WgConfig<256, 2, 1, 4, 1>; };  // 48 KB x 4
// k256: 32 KB of weights per stage.
template <> struct Instance<64, WgSkinnyTile::k256> { using C = WgConfig<64, 2, 2, 5, 1>; };      // 40 KB x 5
template <> struct Instance<128, WgSkinnyTile::k256> { using C = WgConfig<128, 2, 2, 4, 1>; };    // 48 KB x 4

template <class C>
struct KernelOf;
template <int kNt, int kConsumers, int kMt, int kStages, int kMinBlocks>
struct KernelOf<WgConfig<kNt, kConsumers, kMt, kStages, kMinBlocks>> {
  static constexpr auto value = wg_skinny_kernel<kNt, kConsumers, kMt, kStages, kMinBlocks>;
};

// The launch configuration of one instance: grid (splits, row tiles), cluster (splits, 1, 1), PDL on streams
// other than the legacy default stream (as launch_pdl). attr: storage for the two attributes cfg points to.
template <class C>
cudaLaunchConfig_t launch_config(const WgSkinnyPlan& plan, cudaStream_t stream, cudaLaunchAttribute (&attr)[2]) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(plan.splits), unsigned(plan.row_tiles));
  cfg.blockDim = dim3(C::kThreads);
  cfg.dynamicSmemBytes = C::kSmemBytes;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(plan.splits);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = stream != nullptr ? 2 : 1;
  return cfg;
}

template <int kNt, WgSkinnyTile kTile>
void launch(void* encode, const WgSkinnyParams& p, const WgSkinnyPlan& plan, cudaStream_t stream) {
  using C = typename Instance<kNt, kTile>::C;
  const CUtensorMap tw = make_bf16_tmap(encode, p.w, p.rows, p.k, kWgSkinnyStageK, C::kBm);
  const CUtensorMap tx = make_bf16_tmap(encode, p.x, p.n, p.k, kWgSkinnyStageK, kNt);
  const WgKernelArgs args{.out = p.out, .n = int(p.n), .rows = int(p.rows), .k = int(p.k),
                          .k_per_split = int(plan.k_per_split),
                          .vec_out = p.rows % 4 == 0 && reinterpret_cast<uintptr_t>(p.out) % 16 == 0};
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg = launch_config<C>(plan, stream, attr);
  FERRY_CUDA_CHECK(cudaLaunchKernelEx(&cfg, KernelOf<C>::value, tw, tx, args));
}

template <int kNt, WgSkinnyTile kTile>
int active_clusters(const WgSkinnyPlan& plan) {
  using C = typename Instance<kNt, kTile>::C;
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg = launch_config<C>(plan, nullptr, attr);
  int count = 0;
  FERRY_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&count, KernelOf<C>::value, &cfg));
  return count;
}

// f.template operator()<kNt, kTile>() for the instance that runs n tokens with `tile` (n_tile of n).
template <class F>
auto with_instance(WgSkinnyTile tile, int64_t n, F&& f) {
  const int nt = wg_skinny_n_tile(n);
  switch (tile) {
    case WgSkinnyTile::k128x1:
      if (nt == 64) return f.template operator()<64, WgSkinnyTile::k128x1>();
      return f.template operator()<128, WgSkinnyTile::k128x1>();
    case WgSkinnyTile::k256:
      if (nt == 64) return f.template operator()<64, WgSkinnyTile::k256>();
      return f.template operator()<128, WgSkinnyTile::k256>();
    case WgSkinnyTile::k128x2:
      break;
  }
  if (nt == 64) return f.template operator()<64, WgSkinnyTile::k128x2>();
  if (nt == 128) return f.template operator()<128, WgSkinnyTile::k128x2>();
  if (nt == 192) return f.template operator()<192, WgSkinnyTile::k128x2>();
  return f.template operator()<256, WgSkinnyTile::k128x2>();
}

template <int kNt, WgSkinnyTile kTile>
void raise_smem_limit() {
  using C = typename Instance<kNt, kTile>::C;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(KernelOf<C>::value, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
}

}  // namespace

WgSkinnyGemm::WgSkinnyGemm(int device) {
  const HopperTma tma = find_hopper_tma(device);
  num_sms_ = tma.num_sms;
  void* fn = tma.encode;
  if (fn == nullptr) return;
  raise_smem_limit<64, WgSkinnyTile::k128x1>();
  raise_smem_limit<128, WgSkinnyTile::k128x1>();
  raise_smem_limit<64, WgSkinnyTile::k128x2>();
  raise_smem_limit<128, WgSkinnyTile::k128x2>();
  raise_smem_limit<192, WgSkinnyTile::k128x2>();
  raise_smem_limit<256, WgSkinnyTile::k128x2>();
  raise_smem_limit<64, WgSkinnyTile::k256>();
  raise_smem_limit<128, WgSkinnyTile::k256>();
  encode_ = fn;
}

void WgSkinnyGemm::run(const WgSkinnyParams& p, const WgSkinnyPlan& plan, cudaStream_t stream) const {
  FERRY_CUDA_REQUIRE(available() && wg_skinny_supports(p.n, p.rows, p.k));
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0);
  FERRY_CUDA_REQUIRE(p.n <= wg_skinny_tile_max_tokens(plan.tile));
  const int64_t bm = wg_skinny_tile_rows(plan.tile);
  FERRY_CUDA_REQUIRE(plan.row_tiles == (p.rows + bm - 1) / bm);
  FERRY_CUDA_REQUIRE(plan.splits >= 1 && plan.splits <= kWgSkinnyMaxSplits && plan.k_per_split > 0 &&
                     plan.k_per_split % kWgSkinnyStageK == 0);
  FERRY_CUDA_REQUIRE(int64_t(plan.splits) * plan.k_per_split >= p.k &&
                     int64_t(plan.splits - 1) * plan.k_per_split < p.k);
  with_instance(plan.tile, p.n, [&]<int kNt, WgSkinnyTile kTile>() { launch<kNt, kTile>(encode_, p, plan, stream); });
}

int WgSkinnyGemm::max_active_clusters(int64_t n, const WgSkinnyPlan& plan) const {
  FERRY_CUDA_REQUIRE(available() && n >= 1 && n <= wg_skinny_tile_max_tokens(plan.tile));
  return with_instance(plan.tile, n, [&]<int kNt, WgSkinnyTile kTile>() { return active_clusters<kNt, kTile>(plan); });
}

}  // namespace ferry::cuda_ops
