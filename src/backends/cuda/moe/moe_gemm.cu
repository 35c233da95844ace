// moe_experts_gemm: the grouped GEMM of the MoE prefill on tensor cores (mma.sync m16n8k16, bf16 in, f32
// accumulation), "swap AB" as matmul/skinny_mma.cu: weight rows are the M of the MMAs, slots their N.
//  - Grid (tile i of moe_group's list, weight-row tile). Tiles are the fast index: the blocks in flight together
//    are consecutive tiles at one row tile, so an expert with two tiles reads those weight rows from HBM once.
//  - Block: kTileN = 128 weight rows of tile i's expert (warp w: rows 16 w .. 16 w + 15, one m16 tile) against the
//    tile's m_count <= kTileM = 64 slots (eight n8 tiles; the pairs of n8 tiles wholly past m_count are skipped).
//  - Per k-step of kTileK = 128 columns: each thread decodes its MoeTile<D>::kLoads weight chunks (D::decode) to
//    bf16 (BF16 chunks need no decoding: cp.async copies them global -> shared) and rounds its kMoeActLoads
//    float4s of activations to bf16, into one of two shared-memory stages (swizzled rows of 256 bytes,
//    moe_gemm_tile.cuh); the warps read fragments with ldmatrix.x4. The next step's loads (raw chunks and
//    activations into registers, or BF16's cp.async) are issued before the current step's MMAs and stored into
//    the other stage after them, so a step's global loads are in flight while the tensor cores work: one barrier a
//    step. Two blocks an SM (96 KB of shared memory, 128 registers; F32 weights: one block, 255 registers).
//  - Deterministic: every output has one accumulator, fed the k16 steps in ascending order; a slot's column of
//    the MMA never mixes with another's, so its result does not depend on the other slots of its tile or on n.
//    Weight rows past `rows`, columns past `cols` and slots past the tile are zeros, and only the tile's slots
//    and rows below `rows` are stored.
#include <cuda_bf16.h>

#include <type_traits>

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/common/silu.cuh"
#include "backends/cuda/matmul/weight_layout.cuh"
#include "backends/cuda/moe/moe_experts.cuh"
#include "backends/cuda/moe/moe_gemm_tile.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kThreads = kMoeGemmThreads;
constexpr int kTileM = kMoeGemmTileM, kTileN = kMoeGemmTileN, kTileK = kMoeGemmTileK;
constexpr int kNTiles = kTileM / 8;                       // n8 tiles of a slot tile
constexpr int kWeightTileBytes = kTileN * kMoeRowBytes;   // (kTileN, kTileK) bf16: 32 KB
constexpr int kSlotTileBytes = kTileM * kMoeRowBytes;     // (kTileM, kTileK) bf16: 16 KB
constexpr int kStageBytes = kWeightTileBytes + kSlotTileBytes;
constexpr int kSmemBytes = 2 * kStageBytes;               // 96 KB: two blocks an SM
// Blocks an SM (the register budget): two, except F32 weights, whose 16 prefetched chunks a k-step (64
// registers) need more than the 128 registers of two blocks.
template <class D>
constexpr int kMinBlocks = D::kVals >= 8 ? 2 : 1;
// BF16 weights need no decoding: their chunks are copied global -> shared as they are (cp.async, no registers).
template <class D>
constexpr bool kCopiesChunks = std::is_same_v<D, DecodeHalf<true>>;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; src_bytes 0 writes zeros (src is then not read but must be a valid address).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Four 8x8 b16 matrices; lanes 8i .. 8i + 7 give the row addresses of matrix i; r[i] gets matrix i's fragment
// (thread t: row t / 4, columns 2 (t % 4), +1).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// d (16x8 f32) += a (16x16 bf16, row) . b (16x8 bf16, col).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// lo and hi rounded to bf16 (to nearest even), lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return uint32_t(__bfloat16_as_ushort(h.x)) | uint32_t(__bfloat16_as_ushort(h.y)) << 16;
}

// What a block works on: weight rows row0 .. row0 + kTileN of expert w, against tile slots 0 .. m_count - 1.
struct BlockTile {
  WeightView w;
  int64_t row0;
  int m_count;
};

// What this thread loads every k-step: chunks of weight row row0 + row (row_in: below rows, else zeros), and
// float4s of activation row x_row (null: a slot past m_count, zeros).
struct ThreadLoads {
  int row;
  bool row_in;
  const float* x_row;  // (cols) f32
};

// One k-step in registers, loaded a step ahead.
template <class D>
struct StepRegs {
  // load l: chunk load_chunk(tid, l) of the thread's weight row (BF16: copied to the stage directly, unused)
  typename D::Raw w[kCopiesChunks<D> ? 1 : MoeTile<D>::kLoads];
  float4 x[kMoeActLoads];                 // load l: float4 moe_act_quad(tid, l) of the thread's slot
};

// Whether weight chunk cc of the thread's row at k-step k0 is in the weight (else it reads as zeros).
template <class D>
__device__ __forceinline__ bool weight_chunk_in(const BlockTile& b, const ThreadLoads& t, int cc, int64_t k0) {
  return t.row_in && MoeTile<D>::chunk(k0, cc) < D::chunks(b.w.cols);
}

// Issues the global loads of k-step k0, whose stage is `stage` (BF16 weights go there directly).
template <class D>
__device__ __forceinline__ void load_step(const BlockTile& b, const ThreadLoads& t, int64_t k0, StepRegs<D>& regs,
                                          uint8_t* stage) {
  const int tid = int(threadIdx.x);
FERRY_UNROLL
  for (int l = 0; l < MoeTile<D>::kLoads; ++l) {
    const int cc = MoeTile<D>::load_chunk(tid, l);
    const bool in = weight_chunk_in<D>(b, t, cc, k0);
    if constexpr (kCopiesChunks<D>) {
      const uint8_t* src = in ? b.w.data + (size_t(b.row0 + t.row) * size_t(b.w.cols) + size_t(k0) + 8 * cc) * 2
                              : b.w.data;
      cp_async16(smem_u32(stage + moe_smem_offset(t.row, MoeTile<D>::column(k0, cc, 0, 0))), src, in ? 16u : 0u);
    } else {
      regs.w[l] = in ? D::load(b.w, b.row0 + t.row, MoeTile<D>::chunk(k0, cc)) : typename D::Raw{};
    }
  }
  if constexpr (kCopiesChunks<D>) cp_async_commit();
FERRY_UNROLL
  for (int l = 0; l < kMoeActLoads; ++l) {
    const int64_t col = k0 + 4 * moe_act_quad(tid, l);  // cols % 4 == 0: a float4 is wholly in or past the row
    regs.x[l] = t.x_row != nullptr && col < b.w.cols ? __ldg(reinterpret_cast<const float4*>(t.x_row + col))
                                                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// Decodes and rounds k-step k0's registers into a stage: (kTileN, kTileK) weight tile, then (kTileM, kTileK)
// slot tile, bf16, swizzled.
template <class D>
__device__ __forceinline__ void store_step(const BlockTile& b, const ThreadLoads& t, int64_t k0,
                                           const StepRegs<D>& regs, uint8_t* stage) {
  const int tid = int(threadIdx.x);
  uint8_t* slots = stage + kWeightTileBytes;
  const int m = moe_act_slot(tid);
FERRY_UNROLL
  for (int l = 0; l < kMoeActLoads; ++l) {  // first: frees the activation registers for the decoding
    const float4 x = regs.x[l];
    *reinterpret_cast<uint2*>(slots + moe_smem_offset(m, 4 * moe_act_quad(tid, l))) =
        make_uint2(pack_bf16x2(x.x, x.y), pack_bf16x2(x.z, x.w));
  }
  if constexpr (kCopiesChunks<D>) {
    cp_async_wait_all();  // this thread's chunks are in the stage (the barrier after shows them to the block)
  } else {
    constexpr int kUnit = MoeTile<D>::kStoreVals;
FERRY_UNROLL
    for (int l = 0; l < MoeTile<D>::kLoads; ++l) {
      const int cc = MoeTile<D>::load_chunk(tid, l);
      float v[D::kVals];
      if (weight_chunk_in<D>(b, t, cc, k0)) {
        D::decode(regs.w[l], v);
      } else {
FERRY_UNROLL
        for (int q = 0; q < D::kVals; ++q) v[q] = 0.0f;
      }
FERRY_UNROLL
      for (int r = 0; r < D::kRuns; ++r)
FERRY_UNROLL
        for (int u = 0; u < D::kRunLen / kUnit; ++u) {
          const float* vu = v + r * D::kRunLen + u * kUnit;
          uint8_t* dst = stage + moe_smem_offset(t.row, MoeTile<D>::column(k0, cc, r, u * kUnit));
          if constexpr (kUnit == 8) {
            *reinterpret_cast<uint4*>(dst) = make_uint4(pack_bf16x2(vu[0], vu[1]), pack_bf16x2(vu[2], vu[3]),
                                                        pack_bf16x2(vu[4], vu[5]), pack_bf16x2(vu[6], vu[7]));
          } else {
            static_assert(kUnit == 4, "store units of 8 or 4 values");
            *reinterpret_cast<uint2*>(dst) = make_uint2(pack_bf16x2(vu[0], vu[1]), pack_bf16x2(vu[2], vu[3]));
          }
        }
    }
  }
}

// The lane's ldmatrix offsets within a stage for k16 steps 0..3 (moe_step_offset gives the others): a_off into the
// weight tile (the warp's m16 tile), b_off into the slot tile (n8 tiles 0 and 1; pair p is 16 p rows further).
struct LaneOffsets {
  uint32_t a_off[4], b_off[4];
};
__device__ __forceinline__ LaneOffsets lane_offsets(int warp, int lane) {
  LaneOffsets o;
FERRY_UNROLL
  for (int kk = 0; kk < 4; ++kk) {
    const MoeLaneRow al = moe_a_lane(warp * kMoeGemmWarpRows, kk, lane), bl = moe_b_lane(0, kk, lane);
    o.a_off[kk] = moe_smem_offset(al.row, al.col);
    o.b_off[kk] = uint32_t(kWeightTileBytes) + moe_smem_offset(bl.row, bl.col);
  }
  return o;
}

// acc (n8 tile, fragment) += the warp's 16 weight rows . the stage's slots, over the stage's kTileK columns in
// ascending k16 steps. Pairs of n8 tiles wholly past m_count are skipped (m_count is the same for the block).
__device__ __forceinline__ void mma_step(const uint8_t* stage, const LaneOffsets& o, int m_count,
                                         float (&acc)[kNTiles][4]) {
  const uint32_t base = smem_u32(stage);
FERRY_UNROLL
  for (int kk = 0; kk < kTileK / 16; ++kk) {
    uint32_t a[4];
    ldmatrix_x4(a, base + moe_step_offset(o.a_off, kk));
FERRY_UNROLL
    for (int pair = 0; pair < kNTiles / 2; ++pair) {
      if (16 * pair < m_count) {
        uint32_t bf[4];
        ldmatrix_x4(bf, base + moe_step_offset(o.b_off, kk) + uint32_t(16 * pair * kMoeRowBytes));
        mma_bf16(acc[2 * pair], a, bf[0], bf[1]);
        mma_bf16(acc[2 * pair + 1], a, bf[2], bf[3]);
      }
    }
  }
}

// out[slot][row] = acc (Store) or silu(gate[slot][row]) * acc (SwiGlu), for the tile's slots and rows < rows.
__device__ __forceinline__ void store_out(const MoeExpertsParams& p, const BlockTile& b, const int32_t* tile_slot,
                                          int warp, int lane, const float (&acc)[kNTiles][4]) {
FERRY_UNROLL
  for (int j = 0; j < kNTiles; ++j)
FERRY_UNROLL
    for (int i = 0; i < 4; ++i) {
      const int m = 8 * j + moe_acc_slot(lane, i);
      const int64_t row = b.row0 + warp * kMoeGemmWarpRows + moe_acc_row(lane, i);
      if (m < b.m_count && row < p.rows) {
        const size_t o = size_t(tile_slot[m]) * size_t(p.rows) + size_t(row);
        p.out[o] = p.epilogue == MoeEpilogue::SwiGlu ? silu_mul(p.gate[o], acc[j][i]) : acc[j][i];
      }
    }
}

// grid (max_groups, row tiles of kTileN), kThreads threads, kSmemBytes dynamic shared memory.
template <class D>
__global__ void __launch_bounds__(kThreads, kMinBlocks<D>) experts_gemm_kernel(MoeExpertsParams p) {
  extern __shared__ __align__(128) uint8_t smem[];  // 2 stages of kStageBytes: weight tile | slot tile
  __shared__ int32_t tile_slot[kTileM];             // the tile's slot ids, -1 past m_count
  pdl_allow_dependents();
  pdl_wait();  // the tile list, the slots and the activations come from the kernels before
  const int i = int(blockIdx.x);
  if (i >= p.counts[1]) return;
  const int e = p.tile_expert[i];
  const int32_t begin = p.tile_begin[i], group_end = p.offsets[e + 1];
  const MoeExpertWeight ew = p.experts[e];
  const BlockTile b{.w = {ew.data, p.rows, p.cols, ew.scales},
                    .row0 = int64_t(blockIdx.y) * kTileN,
                    .m_count = group_end - begin < kTileM ? group_end - begin : kTileM};
  const int tid = int(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  if (tid < kTileM) tile_slot[tid] = tid < b.m_count ? p.slots[begin + tid] : -1;
  __syncthreads();
  const int32_t my_slot = tile_slot[moe_act_slot(tid)];
  const ThreadLoads t{.row = MoeTile<D>::load_row(tid),
                      .row_in = b.row0 + MoeTile<D>::load_row(tid) < p.rows,
                      .x_row = my_slot >= 0 ? p.a + size_t(my_slot / p.a_div) * size_t(p.cols) : nullptr};
  const LaneOffsets o = lane_offsets(warp, lane);

  StepRegs<D> regs;
  load_step<D>(b, t, 0, regs, smem);
  store_step<D>(b, t, 0, regs, smem);
  __syncthreads();
  float acc[kNTiles][4] = {};  // n8 tile j, fragment i: weight row moe_acc_row(lane, i), slot 8 j + moe_acc_slot
  const int n_steps = int((p.cols + kTileK - 1) / kTileK);
  for (int step = 0; step < n_steps; ++step) {
    // Stage step % 2 is complete (the barrier below); stage (step + 1) % 2 was last read in step - 1, before it.
    const bool more = step + 1 < n_steps;
    const int64_t k_next = int64_t(step + 1) * kTileK;
    uint8_t* next = smem + ((step + 1) & 1) * kStageBytes;
    if (more) load_step<D>(b, t, k_next, regs, next);
    mma_step(smem + (step & 1) * kStageBytes, o, b.m_count, acc);
    if (more) store_step<D>(b, t, k_next, regs, next);
    __syncthreads();
  }
  store_out(p, b, tile_slot, warp, lane, acc);
}

}  // namespace

void moe_experts_gemm(DType type, const MoeExpertsParams& p, cudaStream_t stream) {
  if (p.max_groups == 0) return;
  FERRY_CUDA_REQUIRE(p.max_groups <= 65535 && p.rows > 0 && p.cols > 0 && p.cols % 4 == 0 && p.a_div >= 1);
  FERRY_CUDA_REQUIRE(p.cols <= 0x7FFFFFFF - kTileK);
  FERRY_CUDA_REQUIRE(grid_for(p.rows, kTileN) <= 65535u && reinterpret_cast<uintptr_t>(p.a) % 16 == 0);
  FERRY_CUDA_REQUIRE(p.epilogue == MoeEpilogue::Store || (p.epilogue == MoeEpilogue::SwiGlu && p.gate != nullptr));
  const dim3 grid(unsigned(p.max_groups), grid_for(p.rows, kTileN));
  FERRY_CUDA_REQUIRE(visit_decoder(type, [&]<class D>() {
    const auto kernel = experts_gemm_kernel<D>;
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    launch_pdl(kernel, grid, dim3(kThreads), size_t(kSmemBytes), stream, p);
  }));
}

}  // namespace ferry::cuda_ops
