// The work of one block of the flash prefill kernel (flash_prefill.cu, whose head comment describes the layout):
// one query tile of one sequence and one head, as a device function, so that the mixed-step kernel
// (mixed_attention.cu) can run prefill tiles beside decode units in one launch. Device code only (include from
// .cu files); the constants live in prefill_detail.
#pragma once

#include <cuda_bf16.h>

#include <cmath>

#include "backends/cuda/attention.cuh"
#include "backends/cuda/attention_mma.cuh"
#include "backends/cuda/common.cuh"

namespace ferry::cuda_ops::prefill_detail {

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

// Query tiles of tile_q rows over all sequences with q_len >= 2 (the count find_tile indexes), the same in
// every lane of the calling warp.
__device__ inline int count_tiles(const AttentionParams& p, int tile_q) {
  const int lane = threadIdx.x % 32;
  int total = 0;
  for (int i = lane; i < p.n_seqs; i += 32) {
    const int ql = p.q_len[i];
    total += ql >= 2 ? (ql + tile_q - 1) / tile_q : 0;
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) total += __shfl_xor_sync(kFull, total, off);
  return total;
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

// Query tile `tile` (0: the sequence's last rows, which see the most keys) of sequence s (q_len >= 2) and
// query head h. smem_raw: PrefillShape<D, MT, KT>::kSmemBytes of dynamic shared memory, 16-byte aligned. Every
// thread of the block (kThreads) calls it; it ends with a __syncthreads() after its last shared-memory read,
// so the caller may reuse the shared memory at once.
template <int D, int MT, int KT>
__device__ __forceinline__ void flash_prefill_tile(const AttentionParams& p, int s, int tile, int h,
                                                   unsigned char* smem_raw) {
  using Sh = PrefillShape<D, MT, KT>;
  constexpr int kTileQ = Sh::kTileQ, kTileK = Sh::kTileK, kStride = Sh::kStride;
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* ks = qs + Sh::kQElems;          // 2 stages
  __nv_bfloat16* vs = ks + 2 * Sh::kKvElems;     // 2 stages

  const int kvh = h / (p.n_heads / p.n_kv_heads);
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

}  // namespace ferry::cuda_ops::prefill_detail
