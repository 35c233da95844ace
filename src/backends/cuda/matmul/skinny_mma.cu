// The skinny GEMM (design in skinny_mma.cuh): mma.sync m16n8k16 with weight rows as M and tokens as N,
// a cp.async ring of (weight rows x 64 k, tokens x 64 k) stages, split K reduced over a thread-block cluster
// through distributed shared memory.
#include <cooperative_groups.h>

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/matmul/skinny_mma.cuh"
#include "backends/cuda/sm90/hopper.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {

namespace {

namespace cg = cooperative_groups;

constexpr int kRowBytes = kSkinnyStageK * 2;  // one row's 64 bf16 of one stage: 128 bytes = 8 chunks of 16

// Sizes of one instantiation. kWarps warps of 32 rows each (two m16 tiles) make the block tile kBm; kNt tokens
// (a multiple of 8) are the N of the MMAs; the ring takes as many stages as fit kSmemTarget bytes (at most 6).
template <int kWarps, int kNt, int kSmemTarget>
struct SkinnyConfig {
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kMt = 2;                               // m16 tiles per warp
  static constexpr int kBm = kWarps * 16 * kMt;               // weight rows per block
  static constexpr int kStageBytes = (kBm + kNt) * kRowBytes;  // weight tile then x tile
  static constexpr int kStages = kSmemTarget / kStageBytes < 6 ? kSmemTarget / kStageBytes : 6;
  static constexpr int kRedPitch = kBm + 4;  // floats per token row of the partial tile (conflict-free stores)
  static constexpr int kRedBytes = kNt * kRedPitch * 4;
  static constexpr int kSmemBytes = kStages * kStageBytes > kRedBytes ? kStages * kStageBytes : kRedBytes;
  static_assert(kStages >= 2, "the ring needs two stages");
  static_assert(kBm * 8 % kThreads == 0, "weight chunks spread evenly over the threads");
};

struct SkinnyKernelArgs {
  float* out;          // (n, rows) f32 row-major
  const uint16_t* x;   // (n, k) bf16 bits row-major, 16-byte aligned
  const uint16_t* w;   // (rows, k) bf16 bits row-major, 16-byte aligned
  int n;               // tokens, 1..kNt
  int rows;            // weight rows
  int k;               // multiple of 8
  int k_per_split;     // multiple of kSkinnyStageK
  int splits;          // gridDim.x = cluster size
  bool vec_out;        // rows % 4 == 0 and out 16-byte aligned: float4 stores
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; src_bytes 0 writes zeros (src is then not read but must be a valid address).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes), "l"(policy)
               : "memory");
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// d (16x8 f32) += a (16x16 bf16, row) . b (16x8 bf16, col). a0/a2: row g, a1/a3: row g+8; a0/a1 hold the
// first k pair of the thread, a2/a3 the second (k + 8); b0/b1 the same two k pairs of column g.
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Byte offset of 16-byte chunk c (0..7) of tile row r inside a stage tile of 128-byte rows. Odd rows flip bit 2
// of the chunk, so the 8 lanes of one lds.128 phase (rows 2p and 2p+1, chunks 4kk+0..3) hit 8 distinct chunks.
__device__ __forceinline__ uint32_t swizzled(int r, int c) {
  return uint32_t(r) * kRowBytes + uint32_t((c ^ ((r & 1) << 2)) << 4);
}

// grid (splits, row tiles), cluster (splits, 1, 1), kWarps*32 threads, Config::kSmemBytes dynamic shared memory.
// Shared memory: kStages x [weight tile (kBm rows x 128 B) | x tile (kNt rows x 128 B)], swizzled chunks; after
// the main loop the same bytes hold this block's partial out tile red (kNt, kRedPitch) f32, token-major.
template <int kWarps, int kNt, int kSmemTarget>
__global__ void __launch_bounds__(kWarps * 32, kWarps == 4 ? 2 : 1) skinny_gemm_kernel(const SkinnyKernelArgs a) {
  using C = SkinnyConfig<kWarps, kNt, kSmemTarget>;
  extern __shared__ __align__(128) uint8_t smem[];
  pdl_allow_dependents();
  const int tid = int(threadIdx.x), warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int64_t row0 = int64_t(blockIdx.y) * C::kBm;
  const int kb = int(blockIdx.x) * a.k_per_split;
  const int ke = int(min(int64_t(a.k), int64_t(kb) + a.k_per_split));
  const int nk = (ke - kb + kSkinnyStageK - 1) / kSkinnyStageK;  // stages of this split
  const uint64_t policy = sm90::l2_evict_first_policy();  // x and the outputs stay
  const uint32_t smem0 = smem_u32(smem);

  // Weight rows row0.. of stage s (k from kb + 64 s) into ring slot `slot`; rows past the end and k past ke
  // arrive as zeros.
  const auto load_w = [&](int s, int slot) {
    const int kc0 = kb + s * kSkinnyStageK;
    const uint32_t base = smem0 + uint32_t(slot * C::kStageBytes);
#pragma unroll
    for (int l = 0; l < C::kBm * 8 / C::kThreads; ++l) {
      const int i = tid + l * C::kThreads, r = i >> 3, c = i & 7, kc = kc0 + c * 8;
      const bool ok = row0 + r < a.rows && kc < ke;
      const uint16_t* src = ok ? a.w + (row0 + r) * int64_t(a.k) + kc : a.w;
      cp_async16(base + swizzled(r, c), src, ok ? 16u : 0u, policy);
    }
  };
  // The n tokens' x of stage s into the slot's x tile; tokens n..kNt-1 and k past ke are zeros.
  const auto load_x = [&](int s, int slot) {
    const int kc0 = kb + s * kSkinnyStageK;
    const uint32_t base = smem0 + uint32_t(slot * C::kStageBytes + C::kBm * kRowBytes);
#pragma unroll
    for (int l = 0; l < (kNt * 8 + C::kThreads - 1) / C::kThreads; ++l) {
      const int i = tid + l * C::kThreads, r = i >> 3, c = i & 7, kc = kc0 + c * 8;
      if (kNt * 8 % C::kThreads != 0 && i >= kNt * 8) break;
      const bool ok = r < a.n && kc < ke;
      const uint16_t* src = ok ? a.x + int64_t(r) * a.k + kc : a.x;
      cp_async16(base + swizzled(r, c), src, ok ? 16u : 0u);
    }
  };

  // Prologue: weights of the first kStages-1 stages before the PDL wait (one group each), then their x.
#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < nk) load_w(s, s);
    cp_async_commit();
  }
  pdl_wait();
#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < nk) load_x(s, s);
  }
  cp_async_commit();

  float acc[C::kMt][kNt / 8][4] = {};  // (m16 tile, n8 tile, fragment): rows warp*32 + mt*16 + g (+8)
  for (int it = 0; it < nk; ++it) {
    // Stage `it` was loaded by the prologue (it <= kStages-2: all of it waited for at it = 0) or by the group
    // of iteration it-kStages+1, behind which at most kStages-2 groups were committed.
    if (it == 0) {
      cp_async_wait<0>();
    } else {
      cp_async_wait<C::kStages - 2>();
    }
    __syncthreads();  // stage `it` visible to all; slot (it-1) % kStages no longer read
    const int next = it + C::kStages - 1;
    if (next < nk) {
      load_w(next, next % C::kStages);
      load_x(next, next % C::kStages);
    }
    cp_async_commit();

    const uint8_t* sw = smem + (it % C::kStages) * C::kStageBytes;
    const uint8_t* sx = sw + C::kBm * kRowBytes;
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {  // two 32-wide k steps per stage; chunk 4kk+t holds k 32kk+8t..+7
      const int c = 4 * kk + t;
      uint4 af[C::kMt][2];
#pragma unroll
      for (int mt = 0; mt < C::kMt; ++mt) {
        const int r = warp * 32 + mt * 16 + g;
        af[mt][0] = *reinterpret_cast<const uint4*>(sw + swizzled(r, c));
        af[mt][1] = *reinterpret_cast<const uint4*>(sw + swizzled(r + 8, c));
      }
#pragma unroll
      for (int j = 0; j < kNt / 8; ++j) {
        if (j * 8 < a.n) {  // warp-uniform: n8 tiles wholly past n are skipped
          const uint4 b = *reinterpret_cast<const uint4*>(sx + swizzled(j * 8 + g, c));
#pragma unroll
          for (int mt = 0; mt < C::kMt; ++mt) {
            // k pairs (8t, 8t+1) and (8t+2, 8t+3) as the MMA's (2t, 2t+1) and (2t+8, 2t+9); then 8t+4.. 8t+7.
            mma_bf16(acc[mt][j], af[mt][0].x, af[mt][1].x, af[mt][0].y, af[mt][1].y, b.x, b.y);
            mma_bf16(acc[mt][j], af[mt][0].z, af[mt][1].z, af[mt][0].w, af[mt][1].w, b.z, b.w);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the ring is no longer read: its bytes become red

  // red (kNt, kRedPitch) f32: this block's partial, token-major. c0/c1: row g, tokens 2t/2t+1; c2/c3: row g+8.
  float* red = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int mt = 0; mt < C::kMt; ++mt) {
#pragma unroll
    for (int j = 0; j < kNt / 8; ++j) {
      const int r = warp * 32 + mt * 16 + g, tok = j * 8 + 2 * t;
      red[tok * C::kRedPitch + r] = acc[mt][j][0];
      red[(tok + 1) * C::kRedPitch + r] = acc[mt][j][1];
      red[tok * C::kRedPitch + r + 8] = acc[mt][j][2];
      red[(tok + 1) * C::kRedPitch + r + 8] = acc[mt][j][3];
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every partial of the cluster written (and visible cluster-wide)

  // This block's share of the tile (an equal slice of its n x kBm/4 float4 units): the sum over the cluster's
  // partials in rank order 0..splits-1, stored to out.
  constexpr int kUnits = C::kBm / 4;
  const int total = min(a.n, kNt) * kUnits;
  const int q = int(blockIdx.x);
  const int e0 = total * q / a.splits, e1 = total * (q + 1) / a.splits;
  for (int e = e0 + tid; e < e1; e += C::kThreads) {
    const int tok = e / kUnits, r4 = (e - tok * kUnits) * 4;
    const int at = tok * C::kRedPitch + r4;
    float4 sum = *reinterpret_cast<const float4*>(cluster.map_shared_rank(red, 0u) + at);
    for (int s = 1; s < a.splits; ++s) {
      const float4 v = *reinterpret_cast<const float4*>(cluster.map_shared_rank(red, unsigned(s)) + at);
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    const int64_t row = row0 + r4;
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

template <int kWarps, int kNt, int kSmemTarget>
void launch(const SkinnyKernelArgs& args, int row_tiles, cudaStream_t stream) {
  using C = SkinnyConfig<kWarps, kNt, kSmemTarget>;
  const auto kernel = skinny_gemm_kernel<kWarps, kNt, kSmemTarget>;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(args.splits), unsigned(row_tiles));
  cfg.blockDim = dim3(C::kThreads);
  cfg.dynamicSmemBytes = C::kSmemBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(args.splits);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = stream != nullptr ? 2 : 1;  // the legacy default stream gets no PDL (as launch_pdl)
  FERRY_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args));
}

// Shared-memory budgets: 256-row tile one block per SM (<= 200 KiB), 128-row tile two per SM (<= 108 KiB each).
constexpr int kSmem256 = 200 * 1024;
constexpr int kSmem128 = 108 * 1024;

template <int kNt>
void launch_tile(SkinnyTile tile, const SkinnyKernelArgs& args, int row_tiles, cudaStream_t stream) {
  if (tile == SkinnyTile::k256) {
    launch<8, kNt, kSmem256>(args, row_tiles, stream);
  } else {
    launch<4, kNt, kSmem128>(args, row_tiles, stream);
  }
}

}  // namespace

void skinny_gemm(const SkinnyGemmParams& p, const SkinnyPlan& plan, cudaStream_t stream) {
  FERRY_CUDA_REQUIRE(skinny_gemm_supports(p.n, p.rows, p.k));
  FERRY_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0);
  const int64_t bm = skinny_tile_rows(plan.tile);
  FERRY_CUDA_REQUIRE(plan.row_tiles == (p.rows + bm - 1) / bm);
  FERRY_CUDA_REQUIRE(plan.splits >= 1 && plan.splits <= kSkinnyMaxSplits && plan.k_per_split > 0 &&
                     plan.k_per_split % kSkinnyStageK == 0);
  FERRY_CUDA_REQUIRE(int64_t(plan.splits) * plan.k_per_split >= p.k &&
                     int64_t(plan.splits - 1) * plan.k_per_split < p.k);
  const SkinnyKernelArgs args{.out = p.out, .x = p.x, .w = p.w, .n = int(p.n), .rows = int(p.rows), .k = int(p.k),
                              .k_per_split = int(plan.k_per_split), .splits = plan.splits,
                              .vec_out = p.rows % 4 == 0 && reinterpret_cast<uintptr_t>(p.out) % 16 == 0};
  const int row_tiles = int(plan.row_tiles);
  if (p.n <= 8) {
    launch_tile<8>(plan.tile, args, row_tiles, stream);
  } else if (p.n <= 16) {
    launch_tile<16>(plan.tile, args, row_tiles, stream);
  } else if (p.n <= 32) {
    launch_tile<32>(plan.tile, args, row_tiles, stream);
  } else if (p.n <= 64) {
    launch_tile<64>(plan.tile, args, row_tiles, stream);
  } else {
    launch_tile<128>(plan.tile, args, row_tiles, stream);
  }
}

}  // namespace ferry::cuda_ops
