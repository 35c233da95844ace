// The work of one block of the flash prefill kernel (flash_prefill.cu, whose head comment describes the layout):
// one query tile of one sequence and one head, as device functions, so that the mixed-step kernel
// (mixed_attention.cu) can run prefill tiles beside decode units in one launch: tile_geometry (where the tile
// sits), flash_prefill_walk (a range of its key tiles into a softmax state), write_tile_rows (the state -> out),
// flash_prefill_tile (all three over every key tile: the standalone kernel's block), and finish_key_split (the end
// of one of several blocks that split a tile's keys: partials in scratch, the last block merges them). Device
// code only (include from .cu files); the constants live in prefill_detail.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/attention/attention.cuh"
#include "backends/cuda/attention/attention_mma.cuh"
#include "backends/cuda/common/launch.cuh"

namespace ferry::cuda_ops::prefill_detail {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFull = 0xFFFFFFFFu;

// NW: warps per block (the standalone kernel's 8-warp tiles, kRows128W8; everything else 4 = kWarps). A warp
// owns MT m16 tiles, so kTileQ = 16 * NW * MT query rows.
template <int D, int MT, int KT, int NW = kWarps>
struct PrefillShape {
  static constexpr int kThreads = NW * 32;
  static constexpr int kTileQ = 16 * NW * MT;
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

// How the block's NW * 32 threads copy a K/V tile of kTileK positions: copy step i (< kPerThread) of thread tid
// moves the 16-byte chunk tid % kChunks of key (tid / kChunks) + i * kKeyStep, for K and for V. Warp w thus copies
// the keys w * kWarpKeys + sub + i * kKeyStep (sub < kWarpKeys), kTileK / NW of them, and its lane i * kWarpKeys + sub looks
// that key up in the block table once per tile (KeySlot); step i of lane l takes the row from lane
// i * kWarpKeys + l / kChunks with one shuffle.
template <int D, int kTileK, int NW = kWarps>
struct KvCopyMap {
  static constexpr int kBlockThreads = NW * 32;
  static constexpr int kChunks = D / 8;                                // 16-byte chunks per row
  static constexpr int kPerThread = kTileK * kChunks / kBlockThreads;  // copy steps per thread, per tensor
  static constexpr int kWarpKeys = 32 / kChunks;                       // keys one warp covers per step
  static constexpr int kKeyStep = kBlockThreads / kChunks;             // keys between a thread's steps
  static constexpr int kLookupLanes = kPerThread * kWarpKeys;          // = kTileK / NW: lanes with a key to look up
  static_assert(kChunks <= 32 && kTileK * kChunks % kBlockThreads == 0 && kPerThread >= 1 && kLookupLanes <= 32);
  // The key (within the tile) that `lane` of warp `warp` looks up (lane < kLookupLanes).
  __device__ static int lookup_key(int warp, int lane) {
    return warp * kWarpKeys + lane % kWarpKeys + (lane / kWarpKeys) * kKeyStep;
  }
};

// One lane's block-table lookup for one key of a K/V tile, fetched a tile ahead of its use so that the load's
// latency overlaps the math: blk = the table entry (unchecked), in = the position within its block; in = -1: no key
// (past k_end, or a lane without a key), zero-filled.
struct KeySlot {
  int blk;
  int in;
};

// Starts the lookup of the key this lane resolves for the tile at positions [k0, k0 + kTileK); keys outside
// [k_begin, k_end) have none.
template <int D, int kTileK, int NW = kWarps>
__device__ __forceinline__ KeySlot fetch_key_slot(const AttentionParams& p, const int32_t* table, int k0, int k_begin,
                                                  int k_end) {
  using Map = KvCopyMap<D, kTileK, NW>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int pos = k0 + Map::lookup_key(warp, lane);
  KeySlot ks{-1, -1};
  if (lane < Map::kLookupLanes && pos >= k_begin && pos < k_end) {
    ks.blk = __ldg(table + pos / p.block_size);
    ks.in = pos % p.block_size;
  }
  return ks;
}

// Issues the copies of K and V rows of the tile whose lookups are `slot` (fetch_key_slot) into ks/vs
// (kTileK, D + 8) bf16; keys past k_end, and keys whose block table entry is out of range (reported), are
// zero-filled. Every thread of the block (NW warps) calls it (warp shuffles).
template <int D, int kTileK, int NW = kWarps>
__device__ __forceinline__ void load_kv_tile_async(const AttentionParams& p, KeySlot slot, int kvh,
                                                   __nv_bfloat16* ks, __nv_bfloat16* vs) {
  using Map = KvCopyMap<D, kTileK, NW>;
  constexpr int kStride = D + 8;
  const int lane = threadIdx.x % 32;
  int row = -1;  // this lane's key: its row of the cache (block * block_size + in), -1: zero-fill
  if (slot.in >= 0) {
    if (slot.blk >= 0 && slot.blk < p.n_blocks) {
      row = slot.blk * p.block_size + slot.in;
    } else {
      report_error(p.errors, kBadBlock, slot.blk);
    }
  }
  // The row's byte offset in 32 x 32 -> 64-bit products: a row is n_kv_heads * D * 2 bytes (< 2^31), and the
  // cache's rows number below 2^31 (flash_prefill_attention / mixed_attention check both on the host).
  const int c = threadIdx.x % Map::kChunks;
  const int key0 = threadIdx.x / Map::kChunks;
  const uint32_t row_bytes = uint32_t(p.n_kv_heads) * D * 2;
  const char* kbase = reinterpret_cast<const char*>(p.k_cache + int64_t(kvh) * D + 8 * c);
  const char* vbase = reinterpret_cast<const char*>(p.v_cache + int64_t(kvh) * D + 8 * c);
#pragma unroll
  for (int i = 0; i < Map::kPerThread; ++i) {
    const int r = __shfl_sync(kFull, row, i * Map::kWarpKeys + lane / Map::kChunks);
    const int key = key0 + i * Map::kKeyStep;
    const uint64_t off = uint64_t(uint32_t(max(r, 0))) * row_bytes;
    cp_async_16_zfill(ks + key * kStride + 8 * c, kbase + off, r < 0);
    cp_async_16_zfill(vs + key * kStride + 8 * c, vbase + off, r < 0);
  }
}

// Blocks per SM the register allocation must allow. Shared memory allows 2 at D = 128 (104 / 87 KB per
// block for MT = 2 / 1) and 4 at D = 64 (55 / 46 KB); registers: D = 128, MT = 2 needs ~250 per thread.
// 8 warps (NW = 8, MT = 1): 1 block of 256 threads at ~200 registers (D 128); 2 at D = 64 (<= 128 registers).
// D = 256 (MT = 1, 64 rows): 165 KB of shared memory, 1 block per SM.
template <int D, int MT, int NW = kWarps>
constexpr int kMinBlocks = D == 256 ? 1 : NW == 8 ? (D == 64 ? 2 : 1) : (D == 64 && MT == 1) ? 3 : 2;

// Where query tile `tile` (0: the sequence's last rows, which see the most keys) of sequence s (q_len >= 2) sits,
// for tiles of kTileQ query rows and key tiles of kTileK positions. Any thread may compute it (reads q_len,
// kv_len, q_start of s).
struct TileGeom {
  int q_len;      // the sequence's query rows
  int q_row0;     // its first row in q / out
  int i0;         // the tile's first row within the sequence
  int pos0;       // position of the sequence's query row 0 (kv_len - q_len)
  int k_begin;    // keys the tile needs: positions [k_begin, k_end) (k_begin > 0 only with a window: that of the
  int k_end;      //   tile's first row; nothing before it is read, its blocks may have been given back)
  int j_first;    // the first key tile holding any of them: k_begin / kTileK
  int n_k_tiles;  // ceil(k_end / kTileK): key tiles [j_first, n_k_tiles) are walked
};

template <int kTileQ, int kTileK>
__device__ __forceinline__ TileGeom tile_geometry(const AttentionParams& p, int s, int tile) {
  TileGeom tg;
  tg.q_len = p.q_len[s];
  const int kv_len = p.kv_len[s];
  tg.q_row0 = p.q_start[s];
  const int n_tiles = (tg.q_len + kTileQ - 1) / kTileQ;
  tg.i0 = (n_tiles - 1 - tile) * kTileQ;  // last tile first
  tg.pos0 = kv_len - tg.q_len;
  tg.k_end = tg.pos0 + min(tg.i0 + kTileQ, tg.q_len);
  tg.k_begin = window_begin(p, tg.pos0 + tg.i0);
  tg.j_first = tg.k_begin / kTileK;
  tg.n_k_tiles = (tg.k_end + kTileK - 1) / kTileK;
  return tg;
}

// A tile's softmax state after a range of key tiles, in the m16n8k16 C-fragment layout: warp w's m-tile mt holds
// the tile's rows 16w + 64mt + g (rr = 0) and + 8 (rr = 1), columns 8nt + 2t + e (lane = 4g + t, e = 0, 1).
template <int D, int MT>
struct TileAcc {
  float o[MT][D / 8][4];  // unnormalised output: o[mt][nt][2rr + e]
  float m[MT][2];         // running max of the row's scores (log2 domain), the same in the 4 lanes of a quad
  float l[MT][2];         // this lane's part of the row's denominator (the quad's 4 parts sum to it)
};

// Walks key tiles [j_begin, j_end) (0 <= j_begin < j_end <= tg.n_k_tiles) of query tile tg of sequence s for query
// head h from a fresh state into acc. smem_raw: PrefillShape<D, MT, KT, NW>::kSmemBytes of dynamic shared memory,
// 16-byte aligned (Q tile, then 2 stages of K and V tiles). Every thread of the block (NW warps) calls it; it ends
// with a __syncthreads() after its last shared-memory read, so the caller may reuse the shared memory at once.
// Key tile j's arithmetic does not depend on j_begin: a split range computes what the whole walk computes for
// those tiles, from its own running max. Nor does a row's arithmetic depend on NW or MT (which warp holds it).
// Per tile: wait for its copies, one barrier (the tile is visible, and every warp is done with the previous tile,
// whose stage the next copies refill), issue the next tile's copies from block-table lookups fetched one tile
// earlier (so no global load latency sits on the path), then the math. With MT = 1 the warp's Q fragments stay
// in registers for the whole walk (32 registers at D = 128; MT = 2 has no room for 64). kSkipDiag (the standalone
// kernel), MT = 2: a key tile past all rows of the warp's first m-tile (the diagonal's last tile) is computed for
// the second m-tile alone (the same bits; a second copy of the tile math); and Q is staged in batches of 16 loads
// (below). The one-launch mixed kernel leaves both off: they took its 128-row instance from 68 to 180 bytes of
// spills. kWindowCap: the walk applies p.window and p.softcap (a separate instance: in the default one their masks
// took the 128-row tile from 48 to 72 bytes of spills); without it they must be 0 (the dispatch's job).
template <int D, int MT, int KT, int NW = kWarps, bool kSkipDiag = false, bool kWindowCap = false>
__device__ __forceinline__ void flash_prefill_walk(const AttentionParams& p, const TileGeom& tg, int s, int h,
                                                   int j_begin, int j_end, unsigned char* smem_raw,
                                                   TileAcc<D, MT>& acc) {
  using Sh = PrefillShape<D, MT, KT, NW>;
  constexpr int kTileQ = Sh::kTileQ, kTileK = Sh::kTileK, kStride = Sh::kStride, kBlockThreads = Sh::kThreads;
  constexpr bool kQInRegs = MT == 1 && D <= 128;  // D = 256: 64 more registers than the tile has room for
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // (kTileQ, D + 8) bf16
  __nv_bfloat16* ks = qs + Sh::kQElems;          // (2, kTileK, D + 8) bf16: 2 stages
  __nv_bfloat16* vs = ks + 2 * Sh::kKvElems;     // (2, kTileK, D + 8) bf16: 2 stages

  const int kvh = h / (p.n_heads / p.n_kv_heads);
  const int q_len = tg.q_len, q_row0 = tg.q_row0, i0 = tg.i0, pos0 = tg.pos0, k_end = tg.k_end;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int32_t* table = p.block_tables + int64_t(s) * p.max_blocks_per_seq;

  // First K/V tile in flight before Q is staged; the second tile's lookups in flight during the staging.
  const int k_begin = kWindowCap ? tg.k_begin : 0;
  load_kv_tile_async<D, kTileK, NW>(p, fetch_key_slot<D, kTileK, NW>(p, table, j_begin * kTileK, k_begin, k_end), kvh,
                                    ks, vs);
  cp_async_commit();
  KeySlot next = fetch_key_slot<D, kTileK, NW>(p, table, (j_begin + 1) * kTileK, k_begin, k_end);

  // Q rows [i0, i0 + kTileQ) of head h -> qs, scaled, bf16; rows past q_len are zeros. kSkipDiag (the standalone
  // kernel): all of a batch's loads are issued before any store (read-only loads: nothing orders them behind the
  // shared stores); the mixed kernel keeps the 4-deep loop (the batches cost it 68 -> 180 bytes of spills).
  if constexpr (kSkipDiag) {
    constexpr int kVecs = D / 4;                               // float4 per row
    constexpr int kPer = kTileQ * kVecs / kBlockThreads;       // float4 per thread
    constexpr int kBatch = kPer < 16 ? kPer : 16;
    static_assert(kTileQ * kVecs % kBlockThreads == 0 && kPer % kBatch == 0);
    const float qscale = p.scale * kLog2e;
    const float* qbase = p.q + (int64_t(q_row0) + i0) * p.n_heads * D + int64_t(h) * D;
    const int64_t qrow_stride = int64_t(p.n_heads) * D;
#pragma unroll
    for (int b0 = 0; b0 < kPer; b0 += kBatch) {
      float4 v[kBatch];  // (kBatch) f32 x 4: elements 4c.. of row r, idx = tid + (b0 + i) * threads
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int idx = threadIdx.x + (b0 + i) * kBlockThreads;
        const int r = idx / kVecs, c = idx % kVecs;
        v[i] = i0 + r < q_len ? __ldg(reinterpret_cast<const float4*>(qbase + r * qrow_stride + 4 * c))
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int idx = threadIdx.x + (b0 + i) * kBlockThreads;
        const int r = idx / kVecs, c = idx % kVecs;
        *reinterpret_cast<uint2*>(qs + r * kStride + 4 * c) = make_uint2(
            pack_bf16x2(v[i].x * qscale, v[i].y * qscale), pack_bf16x2(v[i].z * qscale, v[i].w * qscale));
      }
    }
  } else {
    constexpr int kVecs = D / 4;
    const float qscale = p.scale * kLog2e;
#pragma unroll 4
    for (int idx = threadIdx.x; idx < kTileQ * kVecs; idx += kBlockThreads) {
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
    mt_row0[mt] = i0 + warp * 16 + mt * 16 * NW;
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
  // The warp's Q A-fragments (kQInRegs: loaded after the first barrier, once).
  uint32_t qa[kQInRegs ? D / 16 : 1][4];

  // The math of key tile k0 (in kt / vt) for the warp's m-tiles [kMt0, MT).
  const auto tile_math = [&]<int kMt0>(int k0, const __nv_bfloat16* kt, const __nv_bfloat16* vt) {
    float sc[MT][kTileK / 8][4];
#pragma unroll
    for (int mt = kMt0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kTileK / 8; ++nt) sc[mt][nt][0] = sc[mt][nt][1] = sc[mt][nt][2] = sc[mt][nt][3] = 0.0f;

    // S = Q·Kᵀ
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[MT][4];
      if constexpr (kQInRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[0][e] = qa[kk][e];
      } else {
#pragma unroll
        for (int mt = kMt0; mt < MT; ++mt)
          ldmatrix_x4(a[mt], qs + (warp * 16 + mt * 16 * NW + (lane % 16)) * kStride + kk * 16 + (lane / 16) * 8);
      }
#pragma unroll
      for (int nt2 = 0; nt2 < kTileK / 16; ++nt2) {
        uint32_t b[4];
        ldmatrix_x4(b, kt + (nt2 * 16 + (lane % 8) + (lane / 16) * 8) * kStride + kk * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
        for (int mt = kMt0; mt < MT; ++mt) {
          mma_bf16_16816(sc[mt][2 * nt2], a[mt], b[0], b[1]);
          mma_bf16_16816(sc[mt][2 * nt2 + 1], a[mt], b[2], b[3]);
        }
      }
    }

    // Soft-cap, mask, online softmax, P as bf16 A fragments. O is rescaled only when some row of the warp has a new
    // max (corr == 1 exactly otherwise: skipping the multiply changes no bit).
    uint32_t pa[MT][kTileK / 16][4];
    float corr[MT][2];
    bool rescale = false;
#pragma unroll
    for (int mt = kMt0; mt < MT; ++mt) {
      if constexpr (kWindowCap) {
        if (p.softcap > 0) {
#pragma unroll
          for (int nt = 0; nt < kTileK / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) sc[mt][nt][e] = softcap_log2(p, sc[mt][nt][e]);
        }
        // Some position in the tile is past some row's own, or (a window) before some row's first.
        if (k0 + kTileK - 1 > mt_pos_first[mt] || (p.window > 0 && k0 < mt_pos_first[mt] + 16 - p.window)) {
#pragma unroll
          for (int nt = 0; nt < kTileK / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = k0 + nt * 8 + 2 * t + (e & 1);
              const int pos = mt_pos_first[mt] + g + 8 * (e >> 1);
              const int limit = min(pos, k_end - 1);
              if (key > limit || key < window_begin(p, pos)) sc[mt][nt][e] = -INFINITY;
            }
          }
        }
      } else if (k0 + kTileK - 1 > mt_pos_first[mt]) {  // some position in the tile is past some row's own
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
        corr[mt][rr] = fast_exp2(m[mt][rr] - m_use);
        rescale = rescale || corr[mt][rr] != 1.0f;
        m[mt][rr] = m_new;
        l[mt][rr] *= corr[mt][rr];
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
    if (__any_sync(kFull, rescale)) {
#pragma unroll
      for (int mt = kMt0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt) {
          o[mt][nt][0] *= corr[mt][0];
          o[mt][nt][1] *= corr[mt][0];
          o[mt][nt][2] *= corr[mt][1];
          o[mt][nt][3] *= corr[mt][1];
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
        for (int mt = kMt0; mt < MT; ++mt) {
          mma_bf16_16816(o[mt][2 * nt2], pa[mt][kk], b[0], b[1]);
          mma_bf16_16816(o[mt][2 * nt2 + 1], pa[mt][kk], b[2], b[3]);
        }
      }
    }
  };

  for (int j = j_begin; j < j_end; ++j) {
    const int k0 = j * kTileK;
    const int stage = (j - j_begin) & 1;
    const __nv_bfloat16* kt = ks + stage * Sh::kKvElems;
    const __nv_bfloat16* vt = vs + stage * Sh::kKvElems;
    cp_async_wait<0>();  // this thread's copies of tile j (the only group in flight)
    __syncthreads();     // tile j (and, on the first pass, qs) visible; every warp done with tile j - 1's stage
    if (j + 1 < j_end) {
      load_kv_tile_async<D, kTileK, NW>(p, next, kvh, ks + (stage ^ 1) * Sh::kKvElems, vs + (stage ^ 1) * Sh::kKvElems);
      cp_async_commit();
      if (j + 2 < j_end) next = fetch_key_slot<D, kTileK, NW>(p, table, k0 + 2 * kTileK, k_begin, k_end);
    }
    if constexpr (kQInRegs) {
      if (j == j_begin) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
          ldmatrix_x4(qa[kk], qs + (warp * 16 + (lane % 16)) * kStride + kk * 16 + (lane / 16) * 8);
      }
    }

    // The warp skips a tile past all its rows; with kSkipDiag a tile past all rows of its first m-tile is computed
    // for the second alone (the first's S would be all masked: P = 0, its state unchanged). Otherwise every m-tile
    // computes it (an m-tile whose rows all or partly end before the tile gets masked entries).
    if (k0 > mt_k_last[MT - 1] && (MT == 1 || k0 > mt_k_last[0])) continue;
    if constexpr (MT == 2 && kSkipDiag) {
      if (k0 > mt_k_last[0]) {
        tile_math.template operator()<1>(k0, kt, vt);
        continue;
      }
    }
    tile_math.template operator()<0>(k0, kt, vt);
  }
  __syncthreads();  // every warp is done with the shared memory
}

// Writes query tile tg's rows below q_len for query head h: out = o / l (the quad's denominator).
template <int D, int MT, int NW = kWarps>
__device__ __forceinline__ void write_tile_rows(const AttentionParams& p, const TileGeom& tg, int h,
                                                const TileAcc<D, MT>& acc) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float lsum = acc.l[mt][rr];
      lsum += __shfl_xor_sync(kFull, lsum, 1);
      lsum += __shfl_xor_sync(kFull, lsum, 2);
      const int row = tg.i0 + warp * 16 + mt * 16 * NW + g + 8 * rr;
      if (row >= tg.q_len) continue;
      const float inv = 1.0f / lsum;
      const int64_t op = (int64_t(tg.q_row0) + row) * p.n_heads * D + int64_t(h) * D;
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt)
        store_attention_out2(p, op + nt * 8 + 2 * t, acc.o[mt][nt][2 * rr] * inv, acc.o[mt][nt][2 * rr + 1] * inv);
    }
  }
}

// Query tile `tile` (0: the sequence's last rows, which see the most keys) of sequence s (q_len >= 2) and
// query head h, all its keys in one walk. smem_raw: PrefillShape<D, MT, KT, NW>::kSmemBytes of dynamic shared
// memory, 16-byte aligned. Every thread of the block (NW warps) calls it; it ends with a __syncthreads() after its
// last shared-memory read, so the caller may reuse the shared memory at once.
template <int D, int MT, int KT, int NW = kWarps, bool kSkipDiag = false, bool kWindowCap = false>
__device__ __forceinline__ void flash_prefill_tile(const AttentionParams& p, int s, int tile, int h,
                                                   unsigned char* smem_raw) {
  const TileGeom tg = tile_geometry<PrefillShape<D, MT, KT, NW>::kTileQ, KT>(p, s, tile);
  TileAcc<D, MT> acc;
  flash_prefill_walk<D, MT, KT, NW, kSkipDiag, kWindowCap>(p, tg, s, h, kWindowCap ? tg.j_first : 0, tg.n_k_tiles,
                                                           smem_raw, acc);
  write_tile_rows<D, MT, NW>(p, tg, h, acc);
}

// Key splits of a query tile (mixed_attention.cu): the scratch where each split leaves its rows' state, indexed by
// the tile's rows in q / out (so its size depends on n_tokens only), and the tiles' arrival counters.
struct PrefillSplitScratch {
  int32_t* counters;  // (n_counters) i32, counters[-i] for the launch's i-th (tile, head); zero between launches
  float* acc;         // (n_tokens, n_heads, n_splits, head_dim) f32: a split's unnormalised output rows
  float* ml;          // (n_tokens, n_heads, n_splits, 2) f32: (running max m, log2 domain; denominator l) per row
  int32_t n_splits;   // the stride: most splits of one tile
  int32_t n_counters; // (tile, head) pairs with a counter: a pair at or past it never splits
};

// The end of split `split` of n_used (2 .. S.n_splits) of query tile tg, query head h, once flash_prefill_walk has
// left the split's state in acc: writes the split's rows (o, m, l) to S, counts the split on *counter, and the
// last split to arrive merges the n_used partials of every row in ascending split order (all read back from S,
// its own too) into out = sum_j w_j o_j / sum_j w_j l_j, w_j = 2^(m_j - max_j m_j) (0 for a split that saw no key
// of the row). The arithmetic and its order do not depend on which split arrives last: the same bits every call.
// s_last: a shared int. Every thread of the block calls it.
template <int D, int MT, int kMaxSplits>
__device__ __forceinline__ void finish_key_split(const AttentionParams& p, const TileGeom& tg, int h, int split,
                                                 int n_used, const PrefillSplitScratch& S, int32_t* counter,
                                                 const TileAcc<D, MT>& acc, int& s_last) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // The split's rows: o (each lane its 2 x D / 8 float2), then (m, quad-summed l) from lane t == 0.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float lsum = acc.l[mt][rr];
      lsum += __shfl_xor_sync(kFull, lsum, 1);
      lsum += __shfl_xor_sync(kFull, lsum, 2);
      const int row = tg.i0 + warp * 16 + mt * 64 + g + 8 * rr;
      if (row >= tg.q_len) continue;
      const int64_t part = (int64_t(tg.q_row0 + row) * p.n_heads + h) * S.n_splits + split;
      float* ap = S.acc + part * D + 2 * t;
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt)
        *reinterpret_cast<float2*>(ap + nt * 8) = make_float2(acc.o[mt][nt][2 * rr], acc.o[mt][nt][2 * rr + 1]);
      if (t == 0) *reinterpret_cast<float2*>(S.ml + part * 2) = make_float2(acc.m[mt][rr], lsum);
    }
  }
  __threadfence();  // this block's partials are visible device-wide before it is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    const int prev = atomicAdd(counter, 1);
    s_last = prev == n_used - 1;
    if (s_last) atomicExch(counter, 0);  // every split has arrived: ready for the next launch
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();

  // Merge, per row this thread holds: the splits' (m, l) first (one L2 round trip), then their o, split by split.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int row = tg.i0 + warp * 16 + mt * 64 + g + 8 * rr;
      if (row >= tg.q_len) continue;
      const int64_t base = (int64_t(tg.q_row0 + row) * p.n_heads + h) * S.n_splits;
      float2 ml[kMaxSplits];
      float m_all = -INFINITY;
#pragma unroll
      for (int j = 0; j < kMaxSplits; ++j) {
        ml[j] = j < n_used ? __ldcg(reinterpret_cast<const float2*>(S.ml + (base + j) * 2))
                           : make_float2(-INFINITY, 0.0f);
        m_all = fmaxf(m_all, ml[j].x);
      }
      float w[kMaxSplits];
      float l_all = 0.0f;
#pragma unroll
      for (int j = 0; j < kMaxSplits; ++j) {
        w[j] = ml[j].x == -INFINITY ? 0.0f : exp2f(ml[j].x - m_all);
        if (j < n_used) l_all = fmaf(ml[j].y, w[j], l_all);
      }
      float2 o[D / 8];
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt) o[nt] = make_float2(0.0f, 0.0f);
#pragma unroll
      for (int j = 0; j < kMaxSplits; ++j) {
        if (j >= n_used) break;
        const float2* ap = reinterpret_cast<const float2*>(S.acc + (base + j) * D + 2 * t);
        float2 a[D / 8];
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt) a[nt] = __ldcg(ap + nt * 4);
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt) {
          o[nt].x = fmaf(a[nt].x, w[j], o[nt].x);
          o[nt].y = fmaf(a[nt].y, w[j], o[nt].y);
        }
      }
      const float inv = 1.0f / l_all;
      const int64_t op = (int64_t(tg.q_row0) + row) * p.n_heads * D + int64_t(h) * D;
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt) store_attention_out2(p, op + nt * 8 + 2 * t, o[nt].x * inv, o[nt].y * inv);
    }
  }
}

}  // namespace ferry::cuda_ops::prefill_detail
