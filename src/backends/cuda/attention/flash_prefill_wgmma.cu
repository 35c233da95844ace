// The wgmma prefill attention kernel (contract and structure: flash_prefill_wgmma.cuh).
// Shared memory (1024-byte aligned; every tile in the 128-byte swizzled layout of sw128_offset, D / 64 column blocks
// of 128 rows x 128 bytes):
//   sq            (128, D) bf16    Q · scale · log2e, rows of the tile (consumer warpgroup c: rows 64c..64c+63)
//   sk[kStages]   (128, D) bf16    K rows of a key tile (row = key position within the tile)
//   sv[kStages]   (128, D) bf16    V rows, same layout (read as the MN-major B operand of P·V)
//   full_k[kStages], full_v[kStages]  mbarriers, 128 arrivals each (every producer thread's cp.async.mbarrier.arrive)
//   empty[kStages]                    mbarriers, 8 arrivals (lane 0 of each consumer warp once its wgmmas are done)
// Key tile j sits in stage j % kStages, phase (j / kStages) & 1. Producer and consumers walk the block's key tiles
// 0 .. n_k_tiles - 1 in order; a consumer warpgroup whose rows all end before tile j (the diagonal's far side, or
// rows past q_len) waits for its K/V and releases the stage without computing.
// Fragments (consumer thread t of its warpgroup, warp w = t / 32, lane = 4g + tq): s[4j + h + 2v] = S at row
// 16w + g + 8v of the warpgroup's 64, key 8j + 2tq + h of the tile; o[b][4j + h + 2v] = O at that row, head dim
// 64b + 8j + 2tq + h; pa[kk] = P's bf16 A fragment for keys 16kk..16kk+15.
#include "backends/cuda/attention/flash_prefill_wgmma.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "backends/cuda/attention/attention_mma.cuh"
#include "backends/cuda/attention/flash_prefill.cuh"
#include "backends/cuda/attention/flash_prefill_block.cuh"
#include "backends/cuda/attention/flash_prefill_wgmma_mma.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

using namespace sm90;
using prefill_detail::find_tile;
using prefill_detail::TileGeom;
using prefill_detail::tile_geometry;

constexpr int kTileQ = 128;          // query rows per block: 2 consumer warpgroups x 64
constexpr int kTileK = 128;          // key positions per tile (the N of S = Q·Kᵀ)
constexpr int kThreads = 384;        // producer warpgroup + 2 consumer warpgroups
constexpr int kProducerThreads = 128;
constexpr int kConsumerWarps = 8;
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFull = 0xFFFFFFFFu;

template <int D, int kStages>
struct WgShape {
  static constexpr int kBlockBytes = 128 * 128;          // one column block of a 128-row tile
  static constexpr int kTileBytes = 128 * D * 2;         // sq, or one K or V stage
  static constexpr int kKOff = kTileBytes;               // sk[0]
  static constexpr int kVOff = kKOff + kStages * kTileBytes;
  static constexpr int kBarOff = kVOff + kStages * kTileBytes;
  static constexpr size_t kSmemBytes = size_t(kBarOff) + 3 * kStages * 8 + 1024;  // + barriers, + alignment slack
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
};

// The consumer's per-tile softmax state: running max m (log2 domain, the same in the 4 lanes of a quad) and this
// lane's part of the denominator l, for its rows g (v = 0) and g + 8 (v = 1).
struct RowState {
  float m[2];
  float l[2];
};

// Mask (when the tile crosses a row's own position or its window's start), running max, exp2 in place, l update: s
// becomes P (f32) and corr[v] the factor the row's O must be multiplied by before P·V of this tile is added.
// [lower[v], limit[v]]: the key positions row v may see; k0: the tile's first position; masked: whether any key of
// the tile is outside some row's range.
__device__ __forceinline__ void softmax_tile(float (&s)[64], RowState& st, float (&corr)[2], const int (&lower)[2],
                                             const int (&limit)[2], int k0, bool masked, int tq) {
  if (masked) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int v = 0; v < 2; ++v) {
          const int key = k0 + 8 * j + 2 * tq + h;
          if (key > limit[v] || key < lower[v]) s[4 * j + h + 2 * v] = -INFINITY;
        }
  }
#pragma unroll
  for (int v = 0; v < 2; ++v) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < 16; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * v], s[4 * j + 1 + 2 * v]));
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
    const float m_new = fmaxf(st.m[v], mx);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    corr[v] = fast_exp2(st.m[v] - m_use);
    st.m[v] = m_new;
    float l = st.l[v] * corr[v];
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float x = fast_exp2(s[4 * j + h + 2 * v] - m_use);
        s[4 * j + h + 2 * v] = x;
        l += x;
      }
    st.l[v] = l;
  }
}

// O *= corr per row, skipped when no row of the warp has a new max (corr == 1 exactly: the same bits).
template <int kB>
__device__ __forceinline__ void rescale_o(float (&o)[kB][32], const float (&corr)[2]) {
  if (!__any_sync(kFull, corr[0] != 1.0f || corr[1] != 1.0f)) return;
#pragma unroll
  for (int b = 0; b < kB; ++b)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[b][4 * j + i] *= corr[i >> 1];
}

// P (f32, the S fragment layout) -> bf16 A fragments of the 8 k16 steps of P·V.
__device__ __forceinline__ void pack_p(const float (&s)[64], uint32_t (&pa)[8][4]) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    pa[kk][0] = pack_bf16x2(s[8 * kk + 0], s[8 * kk + 1]);
    pa[kk][1] = pack_bf16x2(s[8 * kk + 2], s[8 * kk + 3]);
    pa[kk][2] = pack_bf16x2(s[8 * kk + 4], s[8 * kk + 5]);
    pa[kk][3] = pack_bf16x2(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

// Issues S = Q·Kᵀ (D / 16 wgmma m64n128k16, one commit group). dq: descriptor of the warpgroup's Q rows, dk: of the
// K stage (both K-major); step kk reads column block kk / 4 at byte 32 (kk % 4).
template <int D>
__device__ __forceinline__ void issue_qk(float (&s)[64], uint64_t dq, uint64_t dk) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint64_t off = uint64_t(((kk / 4) * 128 * 128 + (kk % 4) * 32) >> 4);
    wgmma_m64n128k16(s, dq + off, dk + off, kk > 0 ? 1 : 0);
  }
  wgmma_commit();
}

// Issues O += P·V (8 k16 steps over the tile's keys, one commit group). dv: MN-major descriptor of the V stage
// (LBO = one column block); step kk starts 16 keys = 2048 bytes further. D = 128: one m64n128k16; D = 64: one
// m64n64k16.
template <int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 64][32], uint32_t (&pa)[8][4], uint64_t dv, int scale_d) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    const uint64_t dk = dv + uint64_t((kk * 2048) >> 4);
    if constexpr (D == 128) {
      wgmma_m64n128k16_rs_tb(o[0], o[1], pa[kk], dk, scale_d);
    } else {
#pragma unroll
      for (int b = 0; b < D / 64; ++b) wgmma_m64n64k16_rs_tb(o[b], pa[kk], dk + uint64_t((b * 128 * 128) >> 4), scale_d);
    }
  }
  wgmma_commit();
}

template <int D, int kStages>
__global__ void __launch_bounds__(kThreads, 1) flash_prefill_wgmma_kernel(AttentionParams p) {
  using Sh = WgShape<D, kStages>;
  pdl_wait();
  int s_idx = 0, tile = 0;
  if (!find_tile(p, kTileQ, int(blockIdx.y), s_idx, tile)) return;  // the same in every warp
  const int h = int(blockIdx.x);
  const TileGeom tg = tile_geometry<kTileQ, kTileK>(p, s_idx, tile);
  const int kvh = h / (p.n_heads / p.n_kv_heads);

  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem =
      reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full_k = reinterpret_cast<uint64_t*>(smem + Sh::kBarOff);  // (kStages)
  uint64_t* full_v = full_k + kStages;                                   // (kStages)
  uint64_t* empty = full_v + kStages;                                    // (kStages)
  if (threadIdx.x == 0) {
    for (int st = 0; st < kStages; ++st) {
      mbar_init(&full_k[st], kProducerThreads);
      mbar_init(&full_v[st], kProducerThreads);
      mbar_init(&empty[st], kConsumerWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();

  const int wg = int(threadIdx.x) / 128;
  const int lane = int(threadIdx.x) % 32;
  if (wg == 0) {
    // ---- producer: K/V tiles through the block table ----
    reg_dealloc<64>();
    constexpr int kChunks = D / 8;             // 16-byte chunks per K/V row
    constexpr int kKeysPerStep = 32 / kChunks; // keys a warp copies per step
    constexpr int kSteps = 32 / kKeysPerStep;  // steps per warp per tensor: the warp's 32 keys
    const int pt = int(threadIdx.x), pw = pt / 32;
    const int32_t* table = p.block_tables + int64_t(s_idx) * p.max_blocks_per_seq;
    const uint32_t row_bytes = uint32_t(p.n_kv_heads) * D * 2;  // < 2^31 (flash_prefill_cache_fits)
    const int c = lane % kChunks;
    const char* kbase = reinterpret_cast<const char*>(p.k_cache + int64_t(kvh) * D) + 16 * c;
    const char* vbase = reinterpret_cast<const char*>(p.v_cache + int64_t(kvh) * D) + 16 * c;
    // This thread's key of tile j (position j * 128 + pt): its cache row, or -1 (outside [k_begin, k_end) or a bad
    // block: zeros).
    const auto lookup = [&](int j) {
      const int pos = j * kTileK + pt;
      if (pos < tg.k_begin || pos >= tg.k_end) return -1;
      const int blk = __ldg(table + pos / p.block_size);
      if (blk < 0 || blk >= p.n_blocks) {
        report_error(p.errors, kBadBlock, blk);
        return -1;
      }
      return blk * p.block_size + pos % p.block_size;
    };
    int row = lookup(tg.j_first);
    for (int j = tg.j_first; j < tg.n_k_tiles; ++j) {  // walk index j - j_first picks the stage and phase
      const int st = (j - tg.j_first) % kStages;
      const uint32_t phase = uint32_t((j - tg.j_first) / kStages) & 1u;
      const int next_row = j + 1 < tg.n_k_tiles ? lookup(j + 1) : -1;  // in flight during the wait and the copies
      mbar_wait(&empty[st], phase ^ 1u);
      unsigned char* kd = smem + Sh::kKOff + st * Sh::kTileBytes;
      unsigned char* vd = smem + Sh::kVOff + st * Sh::kTileBytes;
      // Step i: this lane's chunk of key i * kKeysPerStep + lane / kChunks of the warp's 32 (row by shuffle from the
      // lane that looked it up; the shuffle is repeated for V rather than holding 3 x kSteps registers).
      // Destination: sw128_offset<kTileK>(key, c) = lane_base + i * kKeysPerStep * 128 + swz[i % kPeriod] (the swizzle
      // term repeats every 8 keys; kept in kPeriod registers instead of kSteps).
      constexpr int kPeriod = 8 / kKeysPerStep;
      const uint32_t lane_base = uint32_t((c >> 3) * (kTileK * 128) + (pw * 32 + lane / kChunks) * 128);
      uint32_t swz[kPeriod];  // (kPeriod) byte offset of this lane's chunk inside its swizzled 128-byte row
#pragma unroll
      for (int i = 0; i < kPeriod; ++i) swz[i] = uint32_t(((c & 7) ^ ((lane / kChunks + i * kKeysPerStep) & 7)) << 4);
      const auto copy = [&](unsigned char* dst_tile, const char* src) {
#pragma unroll
        for (int i = 0; i < kSteps; ++i) {
          const int r = __shfl_sync(kFull, row, i * kKeysPerStep + lane / kChunks);
          cp_async_16_zfill(dst_tile + lane_base + i * kKeysPerStep * 128 + swz[i % kPeriod],
                            src + uint64_t(uint32_t(max(r, 0))) * row_bytes, r < 0);
        }
      };
      copy(kd, kbase);
      cp_async_mbar_arrive_noinc(&full_k[st]);
      copy(vd, vbase);
      cp_async_mbar_arrive_noinc(&full_v[st]);
      row = next_row;
    }
    cp_async_wait_all();
    return;
  }

  // ---- consumers: 64 query rows each ----
  reg_alloc<216>();
  const int cw = wg - 1;
  const int t = int(threadIdx.x) % 128, warp = t / 32, g = lane / 4, tq = lane % 4;
  unsigned char* sq = smem;

  // Q rows [i0 + 64 cw, +64) of head h -> sq rows 64 cw.., scaled, bf16; rows past q_len are zeros. All loads of the
  // thread are issued before any store.
  {
    constexpr int kVecs = D / 4;             // float4 per row
    constexpr int kPer = 64 * kVecs / 128;   // float4 per thread
    const float qscale = p.scale * kLog2e;
    const int64_t qrow_stride = int64_t(p.n_heads) * D;
    const float* qbase = p.q + (int64_t(tg.q_row0) + tg.i0 + 64 * cw) * qrow_stride + int64_t(h) * D;
    float4 v[kPer];  // (kPer) f32 x 4: elements 4c.. of row r, idx = t + i * 128
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int idx = t + i * 128, r = idx / kVecs, c4 = idx % kVecs;
      v[i] = tg.i0 + 64 * cw + r < tg.q_len ? __ldg(reinterpret_cast<const float4*>(qbase + r * qrow_stride + 4 * c4))
                                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int idx = t + i * 128, r = idx / kVecs, c4 = idx % kVecs;
      *reinterpret_cast<uint2*>(sq + sw128_offset<kTileQ>(64 * cw + r, c4 / 2) + (c4 % 2) * 8) = make_uint2(
          pack_bf16x2(v[i].x * qscale, v[i].y * qscale), pack_bf16x2(v[i].z * qscale, v[i].w * qscale));
    }
    fence_proxy_async_smem();  // the stores above are read by wgmma (async proxy)
    named_bar_sync<128>(1 + cw);
  }

  // The warpgroup's rows: first row within the sequence, first position, last key any of its rows needs.
  const int wg_row0 = tg.i0 + 64 * cw;
  const int wg_pos_first = tg.pos0 + wg_row0;
  const int wg_k_last = wg_row0 < tg.q_len ? tg.pos0 + min(wg_row0 + 63, tg.q_len - 1) : -1;
  const int n_tiles = wg_k_last < 0 ? 0 : min(wg_k_last / kTileK + 1, tg.n_k_tiles);  // tiles it computes
  int lower[2], limit[2];  // the first and last key position each of this thread's rows may see
#pragma unroll
  for (int v = 0; v < 2; ++v) {
    lower[v] = window_begin(p, wg_pos_first + 16 * warp + g + 8 * v);
    limit[v] = min(wg_pos_first + 16 * warp + g + 8 * v, tg.k_end - 1);
  }
  // A window's start inside the tile for some row of the warpgroup (its last row's start is the largest).
  const int window_edge = p.window > 0 ? wg_pos_first + 64 - p.window : INT_MIN;

  const uint32_t base = smem_addr(smem);
  const uint64_t dq = desc_k_sw128(base + uint32_t(cw * 64 * 128));
  const auto dk = [&](int st) { return desc_k_sw128(base + uint32_t(Sh::kKOff + st * Sh::kTileBytes)); };
  const auto dv = [&](int st) { return desc_mn_sw128(base + uint32_t(Sh::kVOff + st * Sh::kTileBytes), Sh::kBlockBytes); };
  const auto release = [&](int st) {
    if (lane == 0) mbar_arrive(&empty[st]);
  };

  float o[D / 64][32];
#pragma unroll
  for (int b = 0; b < D / 64; ++b)
#pragma unroll
    for (int i = 0; i < 32; ++i) o[b][i] = 0.0f;
  RowState st{{-INFINITY, -INFINITY}, {0.0f, 0.0f}};
  float s[64];
  uint32_t pa[8][4];
  float corr[2];

  for (int j = tg.j_first; j < n_tiles; ++j) {
    const int stg = (j - tg.j_first) % kStages;
    const uint32_t phase = uint32_t((j - tg.j_first) / kStages) & 1u;
    const int k0 = j * kTileK;
    mbar_wait(&full_k[stg], phase);
    issue_qk<D>(s, dq, dk(stg));
    wgmma_wait<0>();
    fence_operands(s);
    if (p.softcap > 0) {
#pragma unroll
      for (int i = 0; i < 64; ++i) s[i] = softcap_log2(p, s[i]);
    }
    softmax_tile(s, st, corr, lower, limit, k0, k0 + kTileK - 1 > wg_pos_first || k0 < window_edge, tq);
    rescale_o<D / 64>(o, corr);
    pack_p(s, pa);
    mbar_wait(&full_v[stg], phase);
    issue_pv<D>(o, pa, dv(stg), 1);
    wgmma_wait<0>();
#pragma unroll
    for (int b = 0; b < D / 64; ++b) fence_operands(o[b]);
    fence_regs(pa);
    release(stg);
  }
  // Key tiles past all of the warpgroup's rows: wait for them to land (so this warpgroup never runs a phase ahead of
  // the producer) and hand the stage back.
  for (int j = max(n_tiles, tg.j_first); j < tg.n_k_tiles; ++j) {
    const int stg = (j - tg.j_first) % kStages;
    mbar_wait(&full_v[stg], uint32_t((j - tg.j_first) / kStages) & 1u);
    release(stg);
  }

  // out = O / l for the rows below q_len.
#pragma unroll
  for (int v = 0; v < 2; ++v) {
    float lsum = st.l[v];
    lsum += __shfl_xor_sync(kFull, lsum, 1);
    lsum += __shfl_xor_sync(kFull, lsum, 2);
    const int row = wg_row0 + 16 * warp + g + 8 * v;
    if (row >= tg.q_len) continue;
    const float inv = 1.0f / lsum;
    const int64_t op = (int64_t(tg.q_row0) + row) * p.n_heads * D + int64_t(h) * D + 2 * tq;
#pragma unroll
    for (int b = 0; b < D / 64; ++b)
#pragma unroll
      for (int j = 0; j < 8; ++j)
        store_attention_out2(p, op + 64 * b + 8 * j, o[b][4 * j + 2 * v] * inv, o[b][4 * j + 1 + 2 * v] * inv);
  }
}

template <int D, int kStages>
void launch(const AttentionParams& p, cudaStream_t stream) {
  using Sh = WgShape<D, kStages>;
  // Tiles: sum over sequences of ceil(q_len / 128) <= n_tokens / 128 + n_seqs, or the host's bound (in a step with
  // many decode rows the loose bound adds a column of blocks per decode row that find no tile).
  int64_t max_tiles = (int64_t(p.n_tokens) + kTileQ - 1) / kTileQ + p.n_seqs;
  if (p.prefill_tiles >= 0) max_tiles = std::min<int64_t>(max_tiles, p.prefill_tiles);
  if (max_tiles == 0) return;
  FERRY_CUDA_REQUIRE(max_tiles <= 65535);
  const auto kernel = flash_prefill_wgmma_kernel<D, kStages>;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Sh::kSmemBytes)));
  kernel<<<dim3(unsigned(p.n_heads), unsigned(max_tiles)), kThreads, Sh::kSmemBytes, stream>>>(p);
  FERRY_CUDA_CHECK_LAUNCH(flash_prefill_wgmma_kernel);
}

}  // namespace

bool flash_prefill_wgmma_supports(int head_dim) { return head_dim == 64 || head_dim == 128; }

void flash_prefill_wgmma_attention(const AttentionParams& p, cudaStream_t stream) {
  if (p.n_tokens == 0 || p.n_seqs == 0) return;
  FERRY_CUDA_REQUIRE(flash_prefill_wgmma_supports(p.head_dim));
  FERRY_CUDA_REQUIRE(p.n_heads <= 65535 && p.n_kv_heads >= 1 && p.n_heads % p.n_kv_heads == 0);
  FERRY_CUDA_REQUIRE(p.block_size >= 1 && flash_prefill_cache_fits(p));
  // The fastest measured: 2 K/V stages at head_dim 128, 3 at 64; FA3's intra-warpgroup overlap, a split P.V and the
  // other stage counts lost (docs/perf-log.md "## 2026-11-30: prefill attention on wgmma (FlashAttention-3
  // structure)").
  if (p.head_dim == 128) {
    launch<128, 2>(p, stream);
  } else {
    launch<64, 3>(p, stream);
  }
}

}  // namespace ferry::cuda_ops
