// The first version of the flash prefill block's key walk (flash_prefill_block.cuh has the current one), kept so
// that attention_bench can time both in one run (FlashPrefillVariant::kRows128V1 / kRows64V1). Same contract and
// same arithmetic as flash_prefill_walk; it differs in how K/V tiles arrive: every 16-byte copy looks its key up in
// the block table itself (an integer division and a dependent global load per copy, 8 per thread per tile at
// D = 128), the copies of tile j + 1 are issued before tile j's wait, two barriers per tile, and O is rescaled on
// every tile. Device code only.
#pragma once

#include "backends/cuda/flash_prefill_block.cuh"

namespace ferry::cuda_ops::prefill_v1 {

using prefill_detail::kFull;
using prefill_detail::kLog2e;
using prefill_detail::kThreads;
using prefill_detail::PrefillShape;
using prefill_detail::TileAcc;
using prefill_detail::TileGeom;

// Issues the copies of K and V rows of positions [k0, k0 + kTileK) of one KV head into ks/vs
// (kTileK, D + 8) bf16; positions at or past k_end, and positions whose block table entry is out of range
// (reported), are zero-filled.
template <int D, int kTileK>
__device__ inline void load_kv_tile_async_v1(const AttentionParams& p, const int32_t* table, int kvh, int k0,
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

// Walks key tiles [j_begin, j_end) (0 <= j_begin < j_end <= tg.n_k_tiles) of query tile tg of sequence s for query
// head h from a fresh state into acc. smem_raw: PrefillShape<D, MT, KT>::kSmemBytes of dynamic shared memory,
// 16-byte aligned (Q tile, then 2 stages of K and V tiles). Every thread of the block (kThreads) calls it; it ends
// with a __syncthreads() after its last shared-memory read, so the caller may reuse the shared memory at once.
// Key tile j's arithmetic does not depend on j_begin: a split range computes what the whole walk computes for
// those tiles, from its own running max.
template <int D, int MT, int KT>
__device__ __forceinline__ void flash_prefill_walk_v1(const AttentionParams& p, const TileGeom& tg, int s, int h,
                                                   int j_begin, int j_end, unsigned char* smem_raw,
                                                   TileAcc<D, MT>& acc) {
  using Sh = PrefillShape<D, MT, KT>;
  constexpr int kTileQ = Sh::kTileQ, kTileK = Sh::kTileK, kStride = Sh::kStride;
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* ks = qs + Sh::kQElems;          // 2 stages
  __nv_bfloat16* vs = ks + 2 * Sh::kKvElems;     // 2 stages

  const int kvh = h / (p.n_heads / p.n_kv_heads);
  const int q_len = tg.q_len, q_row0 = tg.q_row0, i0 = tg.i0, pos0 = tg.pos0, k_end = tg.k_end;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int32_t* table = p.block_tables + int64_t(s) * p.max_blocks_per_seq;

  // First K/V tile in flight before Q is staged.
  load_kv_tile_async_v1<D, kTileK>(p, table, kvh, j_begin * kTileK, k_end, ks, vs);
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

  float (&o)[MT][D / 8][4] = acc.o;
  float (&m)[MT][2] = acc.m;
  float (&l)[MT][2] = acc.l;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) o[mt][nt][0] = o[mt][nt][1] = o[mt][nt][2] = o[mt][nt][3] = 0.0f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }

  for (int j = j_begin; j < j_end; ++j) {
    const int k0 = j * kTileK;
    const int stage = (j - j_begin) & 1;
    const __nv_bfloat16* kt = ks + stage * Sh::kKvElems;
    const __nv_bfloat16* vt = vs + stage * Sh::kKvElems;
    if (j + 1 < j_end) {
      load_kv_tile_async_v1<D, kTileK>(p, table, kvh, k0 + kTileK, k_end, ks + (stage ^ 1) * Sh::kKvElems,
                                    vs + (stage ^ 1) * Sh::kKvElems);
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
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
  }
}

// Query tile `tile` of sequence s, head h, all its keys, with the first-version walk (flash_prefill_tile's v1).
template <int D, int MT, int KT>
__device__ __forceinline__ void flash_prefill_tile_v1(const AttentionParams& p, int s, int tile, int h,
                                                      unsigned char* smem_raw) {
  const TileGeom tg = prefill_detail::tile_geometry<PrefillShape<D, MT, KT>::kTileQ, KT>(p, s, tile);
  TileAcc<D, MT> acc;
  flash_prefill_walk_v1<D, MT, KT>(p, tg, s, h, 0, tg.n_k_tiles, smem_raw, acc);
  prefill_detail::write_tile_rows<D, MT>(p, tg, h, acc);
}

}  // namespace ferry::cuda_ops::prefill_v1
