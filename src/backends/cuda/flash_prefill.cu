// Layout of the work (see flash_prefill.cuh for the contract):
//  - Block: 4 warps, kTileQ = 64 * MT query rows, one query head. Warp w owns the m16 tiles at rows
//    16w + 64i (i < MT) of the block's tile.
//  - Shared memory (bf16, rows padded to D + 8 elements: the row stride is 16 bytes mod 128, so the eight
//    16-byte row reads of an ldmatrix hit eight different bank groups):
//      qs (kTileQ, D + 8)            Q · scale · log2e, written once
//      ks, vs (2, kTileK, D + 8)     two stages of K and V tiles, filled by cp.async
//  - Per key tile (kTileK = KT positions, 64 by default): issue the next tile's copies, wait for this tile, then per
//    m16 tile of the warp: S (16 x 64) = Q·Kᵀ from (D/16) x 4 ldmatrix.x4 of K and (D/16) x 8 mma; mask
//    only when the tile crosses the m-tile's first position; online softmax per row (2 rows per thread,
//    max over the 4 lanes of a quad); P rounded to bf16 in registers and reused as the A fragment of
//    P·V (the C layout of two adjacent n8 tiles is the A layout of one k16 step); V B-fragments via
//    ldmatrix.x4.trans, each shared by the MT m-tiles.
//  - A warp whose m-tiles all end before the key tile skips its math.
//  - Tiles of one sequence run last-first (the longest causal ranges start first); heads are the fast grid
//    dimension, so the blocks in flight share their K/V tiles in L2 (GQA groups too).
#include "backends/cuda/flash_prefill.cuh"

#include <cmath>

#include "backends/cuda/attention_mma.cuh"
#include "backends/cuda/common.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFull = 0xFFFFFFFFu;

template <int D, int MT, int KT>
struct PrefillShape {
  static constexpr int kTileQ = 64 * MT;
  static constexpr int kTileK = KT;
  static constexpr int kStride = D + 8;  // bf16 elements per shared-memory row
  static constexpr int kQElems = kTileQ * kStride;
  static constexpr int kKvElems = kTileK * kStride;
  static constexpr size_t kSmemBytes = size_t(kQElems + 4 * kKvElems) * 2;  // q, 2 x k, 2 x v
};

// Block b's (sequence, tile index within it) among the sequences with q_len >= 2, each owning
// ceil(q_len / tile_q) tiles in sequence order. Each warp computes it (a warp-wide prefix sum over 32
// sequences at a time); false when b is past the last tile.
__device__ inline bool find_tile(const AttentionParams& p, int tile_q, int b, int& s_out, int& tile_out) {
  const int lane = threadIdx.x % 32;
  int base = 0;
  for (int c = 0; c < p.n_seqs; c += 32) {
    const int i = c + lane;
    int t = 0;
    if (i < p.n_seqs) {
      const int ql = p.q_len[i];
      t = ql >= 2 ? (ql + tile_q - 1) / tile_q : 0;
    }
    int incl = t;
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const int y = __shfl_up_sync(kFull, incl, off);
      if (lane >= off) incl += y;
    }
    const int total = __shfl_sync(kFull, incl, 31);
    if (b < base + total) {
      const int excl = incl - t;
      const unsigned ball = __ballot_sync(kFull, b >= base + excl && b < base + incl);
      const int src = __ffs(int(ball)) - 1;
      s_out = c + src;
      tile_out = b - base - __shfl_sync(kFull, excl, src);
      return true;
    }
    base += total;
  }
  return false;
}

// Issues the copies of K and V rows of positions [k0, k0 + kTileK) of one KV head into ks/vs
// (kTileK, D + 8) bf16; positions at or past k_end, and positions whose block table entry is out of range
// (reported), are zero-filled.
template <int D, int kTileK>
__device__ inline void load_kv_tile_async(const AttentionParams& p, const int32_t* table, int kvh, int k0,
                                          int k_end, __nv_bfloat16* ks, __nv_bfloat16* vs) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr int kPerThread = kTileK * kChunks / kThreads;
  constexpr int kStride = D + 8;
  const int64_t kv_row = int64_t(p.n_kv_heads) * D;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int idx = threadIdx.x + kThreads * i;
    const int key = idx / kChunks, c = idx % kChunks;
    const int pos = k0 + key;
    int64_t off = 0;
    int bytes = 0;
    if (pos < k_end) {
      const int32_t blk = table[pos / p.block_size];
      if (blk >= 0 && blk < p.n_blocks) {
        off = (int64_t(blk) * p.block_size + pos % p.block_size) * kv_row + int64_t(kvh) * D + 8 * c;
        bytes = 16;
      } else if (c == 0) {
        report_error(p.errors, kBadBlock, blk);
      }
    }
    cp_async_16(ks + key * kStride + 8 * c, p.k_cache + off, bytes);
    cp_async_16(vs + key * kStride + 8 * c, p.v_cache + off, bytes);
  }
}

// Blocks per SM the register allocation must allow. Shared memory allows 2 at D = 128 (104 / 87 KB per
// block for MT = 2 / 1) and 4 at D = 64 (55 / 46 KB); registers: D = 128, MT = 2 needs ~250 per thread.
template <int D, int MT>
constexpr int kMinBlocks = (D == 64 && MT == 1) ? 3 : 2;

template <int D, int MT, int KT>
__global__ void __launch_bounds__(kThreads, (kMinBlocks<D, MT>)) flash_prefill_kernel(AttentionParams p) {
  using Sh = PrefillShape<D, MT, KT>;
  constexpr int kTileQ = Sh::kTileQ, kTileK = Sh::kTileK, kStride = Sh::kStride;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* ks = qs + Sh::kQElems;          // 2 stages
  __nv_bfloat16* vs = ks + 2 * Sh::kKvElems;     // 2 stages

  int s = 0, tile = 0;
  if (!find_tile(p, kTileQ, int(blockIdx.y), s, tile)) return;  // same answer in every warp
  const int h = blockIdx.x, kvh = h / (p.n_heads / p.n_kv_heads);
  const int q_len = p.q_len[s], kv_len = p.kv_len[s], q_row0 = p.q_start[s];
  const int n_tiles = (q_len + kTileQ - 1) / kTileQ;
  const int i0 = (n_tiles - 1 - tile) * kTileQ;  // last tile first
  const int pos0 = kv_len - q_len;               // position of query row 0
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int k_end = pos0 + min(i0 + kTileQ, q_len);  // keys the block needs: [0, k_end)
  const int32_t* table = p.block_tables + int64_t(s) * p.max_blocks_per_seq;
  const int n_k_tiles = (k_end + kTileK - 1) / kTileK;

  // First K/V tile in flight before Q is staged.
  load_kv_tile_async<D, kTileK>(p, table, kvh, 0, k_end, ks, vs);
  cp_async_commit();

  // Q rows [i0, i0 + kTileQ) of head h -> qs, scaled, bf16; rows past q_len are zeros.
  {
    constexpr int kVecs = D / 4;
    const float qscale = p.scale * kLog2e;
#pragma unroll 4
    for (int idx = threadIdx.x; idx < kTileQ * kVecs; idx += kThreads) {
      const int r = idx / kVecs, c = idx % kVecs;
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (i0 + r < q_len)
        v = *reinterpret_cast<const float4*>(p.q + (int64_t(q_row0) + i0 + r) * p.n_heads * D + int64_t(h) * D + 4 * c);
      *reinterpret_cast<uint2*>(qs + r * kStride + 4 * c) =
          make_uint2(pack_bf16x2(v.x * qscale, v.y * qscale), pack_bf16x2(v.z * qscale, v.w * qscale));
    }
  }

  // Per m-tile of this warp: first row (within the sequence), its position, and the last key it needs.
  int mt_row0[MT], mt_pos_first[MT], mt_k_last[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    mt_row0[mt] = i0 + warp * 16 + mt * 64;
    mt_pos_first[mt] = pos0 + mt_row0[mt];
    mt_k_last[mt] = mt_row0[mt] < q_len ? pos0 + min(mt_row0[mt] + 15, q_len - 1) : -1;  // -1: no valid row
  }

  float o[MT][D / 8][4];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) o[mt][nt][0] = o[mt][nt][1] = o[mt][nt][2] = o[mt][nt][3] = 0.0f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }

  for (int j = 0; j < n_k_tiles; ++j) {
    const int k0 = j * kTileK;
    const __nv_bfloat16* kt = ks + (j & 1) * Sh::kKvElems;
    const __nv_bfloat16* vt = vs + (j & 1) * Sh::kKvElems;
    if (j + 1 < n_k_tiles) {
      load_kv_tile_async<D, kTileK>(p, table, kvh, k0 + kTileK, k_end, ks + ((j + 1) & 1) * Sh::kKvElems,
                            vs + ((j + 1) & 1) * Sh::kKvElems);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // tile j (and, on the first pass, qs) visible to every warp

    // The warp skips a tile past all its rows; otherwise every m-tile computes it (an m-tile whose rows all
    // end before the tile gets an all-masked S: P = 0, its state unchanged; branching per m-tile inside the
    // mma loops costs more than that diagonal work).
    bool any = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) any = any || k0 <= mt_k_last[mt];
    if (any) {
      float sc[MT][kTileK / 8][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kTileK / 8; ++nt) sc[mt][nt][0] = sc[mt][nt][1] = sc[mt][nt][2] = sc[mt][nt][3] = 0.0f;

      // S = Q·Kᵀ
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          ldmatrix_x4(a[mt], qs + (warp * 16 + mt * 64 + (lane % 16)) * kStride + kk * 16 + (lane / 16) * 8);
#pragma unroll
        for (int nt2 = 0; nt2 < kTileK / 16; ++nt2) {
          uint32_t b[4];
          ldmatrix_x4(b, kt + (nt2 * 16 + (lane % 8) + (lane / 16) * 8) * kStride + kk * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16_16816(sc[mt][2 * nt2], a[mt], b[0], b[1]);
            mma_bf16_16816(sc[mt][2 * nt2 + 1], a[mt], b[2], b[3]);
          }
        }
      }

      // Mask, online softmax, P as bf16 A fragments.
      uint32_t pa[MT][kTileK / 16][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if (k0 + kTileK - 1 > mt_pos_first[mt]) {  // some position in the tile is past some row's own
#pragma unroll
          for (int nt = 0; nt < kTileK / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = k0 + nt * 8 + 2 * t + (e & 1);
              const int limit = min(mt_pos_first[mt] + g + 8 * (e >> 1), k_end - 1);
              if (key > limit) sc[mt][nt][e] = -INFINITY;
            }
          }
        }
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          float mx = -INFINITY;
#pragma unroll
          for (int nt = 0; nt < kTileK / 8; ++nt) mx = fmaxf(mx, fmaxf(sc[mt][nt][2 * rr], sc[mt][nt][2 * rr + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
          const float m_new = fmaxf(m[mt][rr], mx);
          const float m_use = m_new == -INFINITY ? 0.0f : m_new;
          const float corr = fast_exp2(m[mt][rr] - m_use);
          m[mt][rr] = m_new;
          l[mt][rr] *= corr;
#pragma unroll
          for (int nt = 0; nt < D / 8; ++nt) {
            o[mt][nt][2 * rr] *= corr;
            o[mt][nt][2 * rr + 1] *= corr;
          }
#pragma unroll
          for (int nt = 0; nt < kTileK / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float x = fast_exp2(sc[mt][nt][2 * rr + e] - m_use);
              sc[mt][nt][2 * rr + e] = x;
              l[mt][rr] += x;
            }
          }
        }
#pragma unroll
        for (int kk = 0; kk < kTileK / 16; ++kk) {
          pa[mt][kk][0] = pack_bf16x2(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
          pa[mt][kk][1] = pack_bf16x2(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
          pa[mt][kk][2] = pack_bf16x2(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
          pa[mt][kk][3] = pack_bf16x2(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
        }
      }

      // O += P·V
#pragma unroll
      for (int kk = 0; kk < kTileK / 16; ++kk) {
        const __nv_bfloat16* vrow = vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride + (lane >> 4) * 8;
#pragma unroll
        for (int nt2 = 0; nt2 < D / 16; ++nt2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, vrow + nt2 * 16);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16_16816(o[mt][2 * nt2], pa[mt][kk], b[0], b[1]);
            mma_bf16_16816(o[mt][2 * nt2 + 1], pa[mt][kk], b[2], b[3]);
          }
        }
      }
    }
    __syncthreads();  // every warp is done with stage j & 1 before the next iteration refills it
  }

#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float lsum = l[mt][rr];
      lsum += __shfl_xor_sync(kFull, lsum, 1);
      lsum += __shfl_xor_sync(kFull, lsum, 2);
      const int row = mt_row0[mt] + g + 8 * rr;
      if (row >= q_len) continue;
      const float inv = 1.0f / lsum;
      float* op = p.out + (int64_t(q_row0) + row) * p.n_heads * D + int64_t(h) * D;
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt)
        *reinterpret_cast<float2*>(op + nt * 8 + 2 * t) =
            make_float2(o[mt][nt][2 * rr] * inv, o[mt][nt][2 * rr + 1] * inv);
    }
  }
}

template <int D, int MT, int KT>
void launch_prefill(const AttentionParams& p, cudaStream_t stream) {
  using Sh = PrefillShape<D, MT, KT>;
  // Tiles: sum over sequences of ceil(q_len / kTileQ) <= n_tokens / kTileQ + n_seqs.
  const int64_t max_tiles = (int64_t(p.n_tokens) + Sh::kTileQ - 1) / Sh::kTileQ + p.n_seqs;
  FERRY_CUDA_REQUIRE(max_tiles <= 65535);
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(flash_prefill_kernel<D, MT, KT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(Sh::kSmemBytes)));
  const dim3 grid(unsigned(p.n_heads), unsigned(max_tiles));
  flash_prefill_kernel<D, MT, KT><<<grid, kThreads, Sh::kSmemBytes, stream>>>(p);
  FERRY_CUDA_CHECK_LAUNCH(flash_prefill_kernel);
}

}  // namespace

bool flash_prefill_supports(int head_dim) { return head_dim == 64 || head_dim == 128; }

void flash_prefill_attention(const AttentionParams& p, cudaStream_t stream, FlashPrefillVariant variant) {
  if (p.n_tokens == 0 || p.n_seqs == 0) return;
  FERRY_CUDA_REQUIRE(flash_prefill_supports(p.head_dim));
  FERRY_CUDA_REQUIRE(p.n_heads <= 65535 && p.n_kv_heads >= 1 && p.n_heads % p.n_kv_heads == 0);
  switch (variant) {
    case FlashPrefillVariant::kRows64:
      p.head_dim == 64 ? launch_prefill<64, 1, 64>(p, stream) : launch_prefill<128, 1, 64>(p, stream);
      break;
    case FlashPrefillVariant::kRows128Keys32:
      p.head_dim == 64 ? launch_prefill<64, 2, 32>(p, stream) : launch_prefill<128, 2, 32>(p, stream);
      break;
    default:
      p.head_dim == 64 ? launch_prefill<64, 2, 64>(p, stream) : launch_prefill<128, 2, 64>(p, stream);
      break;
  }
}

}  // namespace ferry::cuda_ops
