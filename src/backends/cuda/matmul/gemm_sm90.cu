#include "backends/cuda/matmul/gemm_sm90.cuh"

#include <cuda.h>
#include <cuda_bf16.h>

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/common/silu.cuh"
#include "backends/cuda/sm90/hopper.cuh"
#include "backends/cuda/sm90/pdl.cuh"
#include "backends/cuda/sm90/tensor_map.h"

namespace ferry::cuda_ops {
namespace {

using namespace sm90;

constexpr int kBlockM = 128;  // output rows per tile: two consumer warpgroups x 64
constexpr int kBlockK = 64;   // k per stage: one 128-byte swizzle row of bf16
constexpr int kThreads = 384; // producer warpgroup + two consumer warpgroups

template <int kBN>
struct Cfg {
  static constexpr int kStages = kBN == 256 ? 4 : kBN == 192 ? 5 : 6;  // 4 x 48 / 5 x 40 / 6 x 32 KB of 227 KB
  static constexpr int kABytes = kBlockM * kBlockK * 2;         // one x tile: 128 rows x 128 bytes
  static constexpr int kBBytes = kBN * kBlockK * 2;             // one w tile: kBN rows x 128 bytes
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + 1024;  // + barriers + alignment
  static constexpr int kAcc = kBN / 2;                          // f32 accumulators per consumer thread
};

// Tile `tile` of the walk in gemm_heuristics.h: groups of group_m tile rows, m fastest inside a group.
__device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, int group_m, int& mb, int& nb) {
  const int per_group = group_m * tiles_n;
  const int g = tile / per_group, first_m = g * group_m;
  const int rows_here = min(tiles_m - first_m, group_m);
  const int r = tile - g * per_group;
  mb = first_m + r % rows_here;
  nb = r / rows_here;
}

// The work of one block: segments (tile, k steps [kb, ke)). Whole tiles (stream_k false): tiles blockIdx.x,
// + gridDim.x, ..., each over all k_iters steps. Stream-K: the walk g = tile * k_iters + ki (g < steps = tiles *
// k_iters) cut into gridDim.x shares, block b taking [floor(b steps / G), floor((b + 1) steps / G)); the host keeps
// G <= steps, so every share is at least one step and shares start strictly increasing. Only a block's first
// segment can start inside a tile (kb > 0): its later segments start tiles.
struct Walk {
  int64_t g = 0, g_end = 0;  // stream-K: what is left of this block's share
  int tile = 0;              // whole tiles: the next tile
  int tiles = 0, k_iters = 0;
  bool stream = false;

  __device__ Walk(bool stream_k, int tiles_, int k_iters_) : tiles(tiles_), k_iters(k_iters_), stream(stream_k) {
    if (stream) {
      const int64_t steps = int64_t(tiles) * k_iters;
      g = int64_t(blockIdx.x) * steps / gridDim.x;
      g_end = (int64_t(blockIdx.x) + 1) * steps / gridDim.x;
    } else {
      tile = blockIdx.x;
    }
  }
  __device__ bool next(int& t, int& kb, int& ke) {
    if (stream) {
      if (g >= g_end) return false;
      t = int(g / k_iters);
      kb = int(g - int64_t(t) * k_iters);
      ke = int(min(int64_t(k_iters), kb + (g_end - g)));
      g += ke - kb;
      return true;
    }
    if (tile >= tiles) return false;
    t = tile;
    kb = 0;
    ke = k_iters;
    tile += gridDim.x;
    return true;
  }
  // Stream-K: the block whose share holds step x (the largest b with floor(b steps / G) <= x).
  __device__ int owner_of(int64_t x) const {
    const int64_t steps = int64_t(tiles) * k_iters;
    return int(((x + 1) * int64_t(gridDim.x) - 1) / steps);
  }
};

// Barrier of one consumer warpgroup's 128 threads (ids 1, 2; 0 is __syncthreads).
__device__ __forceinline__ void wg_bar_sync(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void st_release(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// tmap_x: x (m, k) bf16, box 64 (k) x 128 (rows), 128B swizzle; tmap_w: w (n, k) bf16, box 64 x kBN.
// out: (m, n) f32 row-major (out_bf16 must be false).
// kSwiglu (run_swiglu / run_swiglu_bf16): n is hidden; tmap_w is w_gate (hidden, k) and tmap_up w_up (hidden, k),
// each box 64 x kBN/2, and out is (m, hidden) f32, or bf16 when out_bf16, = silu(x . w_gate^T) * (x . w_up^T). Tile
// nb's B stage is gate rows [nb kBN/2, +kBN/2) then the same up rows, two TMA boxes stacked in shared memory (kBN/2 is a multiple of the
// 8-row swizzle atom, so the stage is laid out exactly as one kBN-row box: the wgmma loop is unchanged); the
// epilogue pairs accumulator column c (gate) with c + kBN/2 (up) and writes kBN/2 outputs.
// kPdl (launched with programmatic stream serialization, Sm90Gemm's pdl option): the producer issues the weight
// (B) boxes of the first tile's first stages before griddepcontrol.wait and the x (A) boxes after it; every other
// thread waits at its start. So the grid's set-up and its first weight reads overlap the previous kernel's tail,
// as the stage-batched stream does; nothing this grid writes or reads of x happens before the previous kernel has completed.
// stream_k (GemmPlan::stream_k): the blocks walk equal shares of the (tile, k step) walk (Walk above). A segment that
// is a tile's whole k walk is stored as usual. Else consumer warpgroup c of a block whose segment starts inside
// the tile (kb > 0; always its first) writes its raw accumulators to partial slot (blockIdx.x, c) and sets
// flags[2 blockIdx.x + c]; the block holding the tile's k = 0 share waits for each later share's flag (the blocks
// owner_of(first step) + 1 .. owner_of(last step)), adds their partials in k order to its own, resets the flags
// for the next launch and stores (SwiGLU too). partial: (gridDim.x, 2, kAcc / 4, 128) float4, a thread's fragment
// as its registers hold it (the owner's thread t of the same warpgroup reads what the writer's thread t wrote);
// flags: (gridDim.x, 2) int, zero between launches. Unused (may be null) without stream_k.
template <int kBN, bool kSwiglu = false, bool kPdl = false>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap tmap_x, const __grid_constant__ CUtensorMap tmap_w,
                     const __grid_constant__ CUtensorMap tmap_up, void* __restrict__ out, bool out_bf16, int m, int n,
                     int k, int group_m, bool stream_k, float* __restrict__ partial, int* __restrict__ flags) {
  using C = Cfg<kBN>;
  constexpr int kBNOut = kSwiglu ? kBN / 2 : kBN;  // output columns per tile
  static_assert(kBNOut % 8 == 0, "a w box must be whole 8-row swizzle atoms");
  extern __shared__ uint8_t smem_raw[];
  // 128B-swizzled TMA tiles want 1024-byte alignment.
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* sa = smem;                          // kStages x (128 x 64) bf16
  uint8_t* sb = smem + C::kStages * C::kABytes;  // kStages x (kBN x 64) bf16
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kStages * C::kStageBytes);  // TMA landed
  uint64_t* empty = full + C::kStages;                                                // both consumers done

  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  if constexpr (kPdl) pdl_allow_dependents();  // one block per SM: dependents fill only what this grid leaves
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 2);
    }
    fence_barrier_init();
  }
  __syncthreads();

  const int tiles_m = (m + kBlockM - 1) / kBlockM, tiles_n = (n + kBNOut - 1) / kBNOut;
  const int tiles = tiles_m * tiles_n, k_iters = (k + kBlockK - 1) / kBlockK;

  if (wg == 0) {
    reg_dealloc<40>();
    if (t == 0) {
      prefetch_tmap(&tmap_x);
      prefetch_tmap(&tmap_w);
      if constexpr (kSwiglu) prefetch_tmap(&tmap_up);
      const auto load_b = [&](int st, int ki, int nb) {
        if constexpr (kSwiglu) {  // rows past hidden arrive as zeros in both halves (the two maps end there)
          tma_load_2d(sb + st * C::kBBytes, &tmap_w, &full[st], ki * kBlockK, nb * kBNOut);
          tma_load_2d(sb + st * C::kBBytes + kBNOut * 128, &tmap_up, &full[st], ki * kBlockK, nb * kBNOut);
        } else {
          tma_load_2d(sb + st * C::kBBytes, &tmap_w, &full[st], ki * kBlockK, nb * kBN);
        }
      };
      // kPdl: the first tile's first stages get their weight boxes (and their whole byte count) before the wait;
      // the loop below then adds only their x boxes. Fresh stages need no empty-wait.
      Walk walk(stream_k, tiles, k_iters);
      int tile, kb, ke;
      bool more = walk.next(tile, kb, ke);
      int prefetched = 0;
      if constexpr (kPdl) {
        if (more) {
          int mb0, nb0;
          tile_coords(tile, tiles_m, tiles_n, group_m, mb0, nb0);
          prefetched = min(C::kStages, ke - kb);
          for (int i = 0; i < prefetched; ++i) {
            mbar_arrive_expect_tx(&full[i], C::kStageBytes);
            load_b(i, kb + i, nb0);
          }
        }
        pdl_wait();
      }
      int stage = 0;
      uint32_t phase = 0;
      for (bool first = true; more; more = walk.next(tile, kb, ke), first = false) {
        int mb, nb;
        tile_coords(tile, tiles_m, tiles_n, group_m, mb, nb);
        for (int ki = kb; ki < ke; ++ki) {
          const bool early = first && ki - kb < prefetched;  // its B and byte count are issued
          if (!early) {
            mbar_wait(&empty[stage], phase ^ 1);
            mbar_arrive_expect_tx(&full[stage], C::kStageBytes);
          }
          tma_load_2d(sa + stage * C::kABytes, &tmap_x, &full[stage], ki * kBlockK, mb * kBlockM);
          if (!early) load_b(stage, ki, nb);
          if (++stage == C::kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {
    reg_alloc<232>();
    if constexpr (kPdl) pdl_wait();  // before any write of out (the previous kernel may still read it)
    const int c = wg - 1;  // this consumer's rows of the tile: [64 c, 64 c + 64)
    const int warp = t / 32, lane = t % 32;
    float acc[C::kAcc];
    int stage = 0;
    uint32_t phase = 0;
    Walk walk(stream_k, tiles, k_iters);
    int tile, kb, ke;
    while (walk.next(tile, kb, ke)) {
      int mb, nb;
      tile_coords(tile, tiles_m, tiles_n, group_m, mb, nb);
      int prev = -1;
      for (int ki = kb; ki < ke; ++ki) {
        mbar_wait(&full[stage], phase);
        const uint8_t* a = sa + stage * C::kABytes + c * 64 * 128;
        const uint8_t* b = sb + stage * C::kBBytes;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBlockK / 16; ++kk) {
          const uint64_t da = smem_desc_sw128(a + kk * 32), db = smem_desc_sw128(b + kk * 32);
          if constexpr (kBN == 256) {
            wgmma_m64n256k16(acc, da, db, (ki > kb || kk > 0) ? 1 : 0);
          } else if constexpr (kBN == 192) {
            wgmma_m64n192k16(acc, da, db, (ki > kb || kk > 0) ? 1 : 0);
          } else {
            wgmma_m64n128k16(acc, da, db, (ki > kb || kk > 0) ? 1 : 0);
          }
        }
        wgmma_commit();
        wgmma_wait<1>();  // the previous stage's wgmmas are done: hand its buffers back
        if (prev >= 0 && t == 0) mbar_arrive(&empty[prev]);
        prev = stage;
        if (++stage == C::kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
      wgmma_wait<0>();
      fence_operands(acc);
      if (t == 0) mbar_arrive(&empty[prev]);

      if (kb > 0 || ke < k_iters) {  // stream-K: a share of the tile's k walk
        float4* slots = reinterpret_cast<float4*>(partial);
        constexpr int kSlot = C::kAcc / 4 * 128;  // float4 per warpgroup slot
        if (kb > 0) {  // a later share: leave the partial for the tile's k = 0 block
          float4* dst = slots + (size_t(blockIdx.x) * 2 + c) * kSlot + t;
#pragma unroll
          for (int i = 0; i < C::kAcc / 4; ++i) {
            __stcg(dst + i * 128, make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
          }
          __threadfence();
          wg_bar_sync(1 + c);
          if (t == 0) st_release(flags + 2 * blockIdx.x + c, 1);
          continue;
        }
        const int64_t first_step = int64_t(tile) * k_iters;
        const int b0 = walk.owner_of(first_step), b1 = walk.owner_of(first_step + k_iters - 1);
        for (int b = b0 + 1; b <= b1; ++b) {  // k order
          if (t == 0) {
            int* f = flags + 2 * b + c;
            while (ld_acquire(f) == 0) {
            }
            *f = 0;  // for the next launch (the writer sets it once per launch)
          }
          wg_bar_sync(1 + c);
          const float4* src = slots + (size_t(b) * 2 + c) * kSlot + t;
#pragma unroll
          for (int i = 0; i < C::kAcc / 4; ++i) {
            const float4 p = __ldcg(src + i * 128);
            acc[4 * i] += p.x;
            acc[4 * i + 1] += p.y;
            acc[4 * i + 2] += p.z;
            acc[4 * i + 3] += p.w;
          }
        }
      }

      // Epilogue: d[4j + h + 2v] is row 16 warp + lane / 4 + 8 v, column 8 j + 2 (lane % 4) + h.
      // kSwiglu: the up value of gate column 8 j + ... is in column group j + kBN/16 of the same thread.
      const int row0 = mb * kBlockM + c * 64 + warp * 16 + lane / 4;
      const int col0 = nb * kBNOut + 2 * (lane % 4);
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        const int row = row0 + 8 * v;
        if (row >= m) continue;
        float* dst = static_cast<float*>(out) + size_t(row) * size_t(n);
        uint16_t* dst_bf16 = static_cast<uint16_t*>(out) + size_t(row) * size_t(n);
#pragma unroll
        for (int j = 0; j < kBNOut / 8; ++j) {
          const int col = col0 + 8 * j;
          if (col >= n) continue;
          if constexpr (kSwiglu) {
            constexpr int kUp = 4 * (kBN / 16);  // accumulator offset of column c + kBN/2
            const float2 y = make_float2(silu_mul(acc[4 * j + 2 * v], acc[kUp + 4 * j + 2 * v]),
                                         silu_mul(acc[4 * j + 2 * v + 1], acc[kUp + 4 * j + 2 * v + 1]));
            if (out_bf16) {  // rounded as f32_to_bf16 would round the f32 output (the down projection's input)
              *reinterpret_cast<__nv_bfloat162*>(dst_bf16 + col) = __floats2bfloat162_rn(y.x, y.y);
            } else {
              *reinterpret_cast<float2*>(dst + col) = y;
            }
          } else {
            *reinterpret_cast<float2*>(dst + col) = make_float2(acc[4 * j + 2 * v], acc[4 * j + 2 * v + 1]);
          }
        }
      }
    }
  }
}

// partial, flags: Sm90Gemm's stream-K workspace (see the kernel).
template <int kBN>
void launch(void* encode, bool pdl, const GemmPlan& plan, float* out, const uint16_t* x, const uint16_t* w,
            int64_t m, int64_t n, int64_t k, float* partial, int* flags, cudaStream_t stream) {
  const CUtensorMap tx = make_bf16_tmap(encode, x, m, k, kBlockK, kBlockM);
  const CUtensorMap tw = make_bf16_tmap(encode, w, n, k, kBlockK, kBN);
  if (pdl) {
    launch_pdl(gemm_sm90_kernel<kBN, false, true>, dim3(plan.grid), dim3(kThreads), Cfg<kBN>::kSmemBytes, stream, tx,
               tw, tw, static_cast<void*>(out), false, int(m), int(n), int(k), plan.group_m, plan.stream_k, partial,
               flags);
  } else {
    gemm_sm90_kernel<kBN><<<plan.grid, kThreads, Cfg<kBN>::kSmemBytes, stream>>>(
        tx, tw, tw, out, false, int(m), int(n), int(k), plan.group_m, plan.stream_k, partial, flags);
  }
  FERRY_CUDA_CHECK_LAUNCH(gemm_sm90_kernel);
}

// w: (2 hidden, k), gate rows then up rows; two maps of hidden rows each, boxes of kBN/2 rows.
template <int kBN>
void launch_swiglu(void* encode, bool pdl, const GemmPlan& plan, void* out, bool out_bf16, const uint16_t* x,
                   const uint16_t* w, int64_t m, int64_t hidden, int64_t k, cudaStream_t stream) {
  const CUtensorMap tx = make_bf16_tmap(encode, x, m, k, kBlockK, kBlockM);
  const CUtensorMap tg = make_bf16_tmap(encode, w, hidden, k, kBlockK, kBN / 2);
  const CUtensorMap tu = make_bf16_tmap(encode, w + size_t(hidden) * size_t(k), hidden, k, kBlockK, kBN / 2);
  if (pdl) {
    launch_pdl(gemm_sm90_kernel<kBN, true, true>, dim3(plan.grid), dim3(kThreads), Cfg<kBN>::kSmemBytes, stream, tx,
               tg, tu, out, out_bf16, int(m), int(hidden), int(k), plan.group_m, false, nullptr, nullptr);
  } else {
    gemm_sm90_kernel<kBN, true><<<plan.grid, kThreads, Cfg<kBN>::kSmemBytes, stream>>>(
        tx, tg, tu, out, out_bf16, int(m), int(hidden), int(k), plan.group_m, false, nullptr, nullptr);
  }
  FERRY_CUDA_CHECK_LAUNCH(gemm_sm90_kernel);
}

template <int kBN, bool kSwiglu, bool kPdl>
void allow_smem() {
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(gemm_sm90_kernel<kBN, kSwiglu, kPdl>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg<kBN>::kSmemBytes));
}

}  // namespace

Sm90Gemm::Sm90Gemm(int device, bool pdl) : pdl_(pdl) {
  const HopperTma tma = find_hopper_tma(device);
  num_sms_ = tma.num_sms;
  void* fn = tma.encode;
  if (fn == nullptr) return;
  const auto allow_all = [&]<bool kPdl>() {
    allow_smem<256, false, kPdl>();
    allow_smem<192, false, kPdl>();
    allow_smem<128, false, kPdl>();
    allow_smem<256, true, kPdl>();
    allow_smem<192, true, kPdl>();
    allow_smem<128, true, kPdl>();
  };
  if (pdl) {
    allow_all.template operator()<true>();
  } else {
    allow_all.template operator()<false>();
  }
  // Stream-K workspace: one partial slot per block and consumer warpgroup at the widest tile (64 x 256 f32 =
  // 64 KB), num_sms x 2 flags; allocated once here, so run() allocates nothing (graph capture).
  device_ = device;
  FERRY_CUDA_CHECK(cudaMalloc(&partial_, size_t(num_sms_) * 2 * 64 * 256 * sizeof(float)));
  FERRY_CUDA_CHECK(cudaMalloc(&flags_, size_t(num_sms_) * 2 * sizeof(int)));
  FERRY_CUDA_CHECK(cudaMemset(flags_, 0, size_t(num_sms_) * 2 * sizeof(int)));
  encode_ = fn;
}

Sm90Gemm::~Sm90Gemm() {
  // Errors are ignored: a destructor must not throw. The workspace belongs to device_.
  if (partial_ == nullptr && flags_ == nullptr) return;
  int cur = -1;
  const bool switch_device = cudaGetDevice(&cur) == cudaSuccess && cur != device_;
  if (switch_device) (void)cudaSetDevice(device_);
  (void)cudaFree(partial_);
  (void)cudaFree(flags_);
  if (switch_device) (void)cudaSetDevice(cur);
  (void)cudaGetLastError();
}

bool Sm90Gemm::supports(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kMax = int64_t(1) << 31;
  return m >= 1 && n >= 1 && k >= 1 && m < kMax && n < kMax && k < kMax && k % 8 == 0 && n % 2 == 0;
}

bool Sm90Gemm::supports_swiglu(int64_t m, int64_t hidden, int64_t k) {
  return hidden >= 1 && supports(m, 2 * hidden, k) && hidden % 2 == 0;
}

GemmPlan Sm90Gemm::swiglu_plan(int64_t m, int64_t hidden, int num_sms, const GemmTile* force) {
  GemmPlan plan = make_tile_plan(m, 2 * hidden, num_sms, force);
  const int64_t half = plan.block_n / 2;
  plan.tiles = ((m + 127) / 128) * ((hidden + half - 1) / half);
  plan.grid = int(plan.tiles < num_sms ? plan.tiles : num_sms);
  return plan;
}

void Sm90Gemm::run_swiglu(float* out, const uint16_t* x, const uint16_t* w, int64_t m, int64_t hidden, int64_t k,
                          cudaStream_t stream, const GemmTile* force) const {
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(out) % 8 == 0);
  swiglu_any(out, false, x, w, m, hidden, k, stream, force);
}

void Sm90Gemm::run_swiglu_bf16(uint16_t* out, const uint16_t* x, const uint16_t* w, int64_t m, int64_t hidden,
                               int64_t k, cudaStream_t stream, const GemmTile* force) const {
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(out) % 4 == 0);
  swiglu_any(out, true, x, w, m, hidden, k, stream, force);
}

void Sm90Gemm::swiglu_any(void* out, bool out_bf16, const uint16_t* x, const uint16_t* w, int64_t m, int64_t hidden,
                          int64_t k, cudaStream_t stream, const GemmTile* force) const {
  FERRY_CUDA_REQUIRE(available() && supports_swiglu(m, hidden, k));
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0);
  const GemmPlan plan = swiglu_plan(m, hidden, num_sms_, force);
  if (plan.tile == GemmTile::k128x256) {
    launch_swiglu<256>(encode_, pdl_, plan, out, out_bf16, x, w, m, hidden, k, stream);
  } else if (plan.tile == GemmTile::k128x192) {
    launch_swiglu<192>(encode_, pdl_, plan, out, out_bf16, x, w, m, hidden, k, stream);
  } else {
    launch_swiglu<128>(encode_, pdl_, plan, out, out_bf16, x, w, m, hidden, k, stream);
  }
}

GemmPlan Sm90Gemm::plan(int64_t m, int64_t n, int64_t k, const GemmTile* force, int force_units) const {
  return make_gemm_plan(m, n, k, num_sms_, force, force_units);
}

void Sm90Gemm::run(float* out, const uint16_t* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                   cudaStream_t stream, const GemmTile* force, int force_units) const {
  FERRY_CUDA_REQUIRE(available() && supports(m, n, k));
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0);
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(out) % 8 == 0);
  const GemmPlan p = plan(m, n, k, force, force_units);
  FERRY_CUDA_REQUIRE(!p.stream_k || (p.grid <= num_sms_ && partial_ != nullptr));
  if (p.tile == GemmTile::k128x256) {
    launch<256>(encode_, pdl_, p, out, x, w, m, n, k, partial_, flags_, stream);
  } else if (p.tile == GemmTile::k128x192) {
    launch<192>(encode_, pdl_, p, out, x, w, m, n, k, partial_, flags_, stream);
  } else {
    launch<128>(encode_, pdl_, p, out, x, w, m, n, k, partial_, flags_, stream);
  }
}

}  // namespace ferry::cuda_ops
