// The work of one block of the tensor-core split-KV decode kernel (decode_mma.cu, which describes it), as a
// device function, so that another kernel can run decode units too: decode_mma_kernel runs one per block, the
// mixed-step kernel (mixed_attention.cu) runs them beside prefill tiles in one launch. Device code only
// (include from .cu files); the constants live in decode_mma_detail.
#pragma once

#include <cuda_bf16.h>

#include <cmath>

#include "backends/cuda/attention/attention.cuh"
#include "backends/cuda/attention/attention_mma.cuh"
#include "backends/cuda/attention/attention_split_heuristic.cuh"
#include "backends/cuda/attention/decode_fused_qkv.cuh"
#include "backends/cuda/attention/decode_merge.cuh"
#include "backends/cuda/attention/decode_split.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops::decode_mma_detail {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 16;  // positions per tile (the k extent of one PV mma)
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFull = 0xFFFFFFFFu;

template <int D, int kStages>
struct MmaShape {
  static constexpr int kChunks = D / 8;                  // 16-byte chunks per K/V row
  static constexpr int kRowsPerPass = 32 / kChunks;      // rows one warp-wide copy covers: 2 (D 128), 4 (D 64)
  static constexpr int kPasses = kTile / kRowsPerPass;   // copies per lane per tile, each of K and V
  static constexpr int kTileBytes = kTile * D * 2;       // K (or V) of one tile: (16, D) bf16, swizzled
  static constexpr int kStageBytes = 2 * kTileBytes;     // K then V
  static constexpr size_t kSmemBytes = size_t(kWarps) * kStages * kStageBytes;  // (kWarps, kStages, K|V)
  static constexpr int kMinBlocks = kSmemBytes <= 110 * 1024 ? 2 : 1;
};

// Byte offset of chunk c of row r in a (16, D) bf16 tile.
template <int D>
__device__ inline int tile_offset(int r, int c) {
  return (r * (D / 8) + (c ^ (r & 7))) * 16;
}

__device__ inline float bf16_lo(uint32_t x) { return __uint_as_float(x << 16); }
__device__ inline float bf16_hi(uint32_t x) { return __uint_as_float(x & 0xFFFF0000u); }

// (a, b) as bf16 hi parts and the bf16 residuals.
__device__ inline void split_bf16x2(float a, float b, uint32_t& hi, uint32_t& lo) {
  hi = pack_bf16x2(a, b);
  lo = pack_bf16x2(a - bf16_lo(hi), b - bf16_hi(hi));
}

// Issues the copies of tile [p0, p0 + 16) into `stage` (K at 0, V at kTileBytes); rows at or past `end` and
// rows in bad blocks (reported) are zero-filled, rows before `begin` (the window's first position) are not valid.
// Returns the tile's valid-row mask (bit r: position p0 + r), the same in every lane. bs16: block_size % 16 == 0
// and p0 % 16 == 0, so the tile lies in one block: one table read, one base offset, rows at a fixed stride (the
// common case; ~4 instructions per copy). Otherwise each row finds its block (and the lanes vote the mask).
template <int D, int kStages>
__device__ inline uint32_t issue_tile(const AttentionParams& p, const int32_t* table, int kvh, int p0, int begin,
                                      int end, bool bs16, bool bs_pow2, int bs_shift, unsigned char* stage) {
  using Sh = MmaShape<D, kStages>;
  const int lane = threadIdx.x % 32, c = lane % Sh::kChunks, rr = lane / Sh::kChunks;
  const int64_t kv_row = int64_t(p.n_kv_heads) * D;
  const int bs = p.block_size;
  if (bs16) {
    int n_valid = 0;
    int64_t base = int64_t(kvh) * D + 8 * c;  // rows stay inside the first block when the tile is not valid
    if (p0 < end) {
      const int bi = bs_pow2 ? p0 >> bs_shift : p0 / bs;
      const int32_t blk = __ldg(table + bi);
      if (blk >= 0 && blk < p.n_blocks) {
        n_valid = min(kTile, end - p0);
        base += (int64_t(blk) * bs + (p0 - bi * bs)) * kv_row;
      } else if (lane == 0) {
        report_error(p.errors, kBadBlock, blk);
      }
    }
    // Running pointers: row rr + i * kRowsPerPass of the tile.
    const int step = Sh::kRowsPerPass * p.n_kv_heads * D;
    const __nv_bfloat16* kp = p.k_cache + base + rr * (p.n_kv_heads * D);
    const __nv_bfloat16* vp = p.v_cache + base + rr * (p.n_kv_heads * D);
#pragma unroll
    for (int i = 0; i < Sh::kPasses; ++i) {
      const int r = rr + i * Sh::kRowsPerPass;
      const int bytes = r < n_valid ? 16 : 0;  // 0: zero fill, nothing read
      const int o = tile_offset<D>(r, c);
      cp_async_16(stage + o, kp, bytes);
      cp_async_16(stage + Sh::kTileBytes + o, vp, bytes);
      kp += step;
      vp += step;
    }
    // Rows before `begin` share the tile's block with it (begin - p0 < 16 when begin > p0: the chunks start at
    // decode_split_base(begin)), so they were read from a block in use; they are masked here.
    const uint32_t below = begin > p0 ? (1u << min(begin - p0, kTile)) - 1u : 0u;
    return (n_valid >= 32 ? 0xFFFFFFFFu : (1u << n_valid) - 1u) & ~below;
  }
  uint32_t valid = 0;
#pragma unroll
  for (int i = 0; i < Sh::kPasses; ++i) {
    const int r = rr + i * Sh::kRowsPerPass;
    const int pos = p0 + r;
    int64_t off = 0;
    int bytes = 0;
    if (pos >= begin && pos < end) {
      const int bi = bs_pow2 ? pos >> bs_shift : pos / bs;
      const int32_t blk = __ldg(table + bi);
      if (blk >= 0 && blk < p.n_blocks) {
        off = (int64_t(blk) * bs + (pos - bi * bs)) * kv_row + int64_t(kvh) * D + 8 * c;
        bytes = 16;
      } else if (c == 0) {
        report_error(p.errors, kBadBlock, blk);
      }
    }
    const int o = tile_offset<D>(r, c);
    cp_async_16(stage + o, p.k_cache + off, bytes);
    cp_async_16(stage + Sh::kTileBytes + o, p.v_cache + off, bytes);
    const uint32_t vote = __ballot_sync(kFull, bytes != 0);
#pragma unroll
    for (int q = 0; q < Sh::kRowsPerPass; ++q) valid |= ((vote >> (q * Sh::kChunks)) & 1u) << (q + i * Sh::kRowsPerPass);
  }
  return valid;
}

// Block (chunk `split`, sequence s, z = KV head * n_row_groups + row group) of a plan with plan.rows == kM,
// plan.stages == kStages. Shared memory: smem_ring (kWarps, kStages, K (16, D) | V (16, D)) bf16, 128-byte
// aligned, MmaShape<D, kStages>::kSmemBytes; s_valid (kWarps, kStages) u32 (valid-row mask of each ring slot);
// es the epilogue's. kFused (p.qkv set): the q/k/v epilogue runs here too (decode_fused_qkv.cuh), in fs.
// Every thread of the block (kThreads) calls it; it returns uniformly over the block and leaves the shared memory
// free for the caller's next use only after a __syncthreads().
// kOwnWait (the standalone kernel, launched with PDL): the caller has not waited for the previous kernel; this
// function calls pdl_wait() itself on every path, after issuing (plan.early_kv) the ring's first tiles of positions
// below kv_len - 1, so their DRAM round trip overlaps the previous kernel's tail. Why that is safe: the only reads
// before the wait are the step's metadata (q_len, kv_len, block table) and K/V rows of positions < kv_len - 1 of a
// sequence with one query row, all written before the step began: a step starts with a stream-ordered host -> device
// copy of its inputs (LlamaModel::enqueue_step; in a captured step the graph's copy node), which waits for
// every earlier kernel to complete, and a step writes only its own tokens' K/V (for a one-row sequence: position
// kv_len - 1, written by the q/k/v epilogue just before or by this kernel itself). The chain of PDL launches does
// NOT give that on its own: every kernel of a decode step calls launch_dependents first thing, before its own
// wait, so kernel N may start while kernel N - 2 still runs. Callers that write a one-row sequence's older K/V
// with a kernel must put a full dependency (a copy, an event, a plain launch) between it and this kernel.
// kOnePass: the epilogue may take the one-pass merge (plan.one_pass_merge).
template <int D, int kM, int kStages, bool kFused = false, bool kOwnWait = false, bool kOnePass = false>
__device__ __forceinline__ void decode_mma_block(const AttentionParams& p, const DecodeSplitPlan& plan, int split,
                                                 int s, int z, unsigned char* smem_ring,
                                                 uint32_t (*s_valid)[kStages], DecodeEpilogueSmem<kM, kWarps>& es,
                                                 FusedQkvSmem<D, kM>* fs = nullptr) {
  using Sh = MmaShape<D, kStages>;
  constexpr int kK = D / 16;  // 16-dim k-steps of QK^T, and 16-dim column pairs of PV
  stamp(p.stamps, 0);
  // After the main loop the ring is free: the warps' accumulators (kWarps, kM, D) f32 reuse it.
  float(*s_acc)[kM][D] = reinterpret_cast<float(*)[kM][D]>(smem_ring);
  static_assert(sizeof(float) * kWarps * kM * D <= Sh::kSmemBytes);

  const int kvh = z / plan.n_row_groups, rg = z % plan.n_row_groups;
  const int q_len = p.q_len[s], kv = p.kv_len[s];  // both requested at once (kv_len is valid for every sequence)
  // Chunks from decode_split_base of the row's first attended position (0 without a window).
  const int lo = window_begin(p, kv - 1), base = decode_split_base(lo);
  const int chunk = decode_chunk(plan, kv - base);  // the row's own chunk (plan.fit_chunk), else plan.chunk
  const int start = base + split * chunk;
  // Not a decode row, or an empty chunk (the merge does not wait for it): uniform over the block. With kOwnWait
  // the block still waits: a kernel whose blocks all exited without waiting could complete before its predecessor.
  if (q_len != 1 || start >= kv) {
    if constexpr (kOwnWait) pdl_wait();
    return;
  }
  const int end = split == plan.n_splits - 1 ? kv : min(kv, start + chunk);
  const int group = p.n_heads / p.n_kv_heads;
  const int r0 = rg * kM, n_rows = min(kM, group - r0);
  const int row = p.q_start[s];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int32_t* table = p.block_tables + int64_t(s) * p.max_blocks_per_seq;
  const int bs = p.block_size;
  const bool bs_pow2 = (bs & (bs - 1)) == 0;
  const int bs_shift = __ffs(bs) - 1;
  const bool bs16 = bs % kTile == 0 && start % kTile == 0;
  unsigned char* ring = smem_ring + size_t(warp) * kStages * Sh::kStageBytes;

  // Warp tile `it` covers positions [first + it * stride, + 16).
  const int first = start + warp * kTile, stride = kWarps * kTile;
  const int n_iters = first < end ? (end - first + stride - 1) / stride : 0;
  // The prologue's tiles 0 .. kStages - 2, in order, one commit group each (empty groups keep the count uniform).
  // With kOwnWait && plan.early_kv, the leading tiles whose 16 positions all lie below kv - 1 go before the wait
  // (the step's own position, kv - 1, may still be being written by the previous kernel). With kFused too, every
  // prologue tile goes before the wait: the row of position kv - 1 is not read but zero-filled (issue_tile's end
  // is kv - 1 for it) and counted valid, since fused_qkv_patch writes the step's key and value there once the
  // tile has landed. At a short context every K/V row of the step is then requested before the projection ends,
  // and none after. Measured (2026-11-30, in-call): the same tg128; the tiles' wait was not the round trip's
  // count but its length behind the matvecs' queued weight reads (CudaBackendOptions::ring_inflight_quant).
  int n_early = 0;
  if constexpr (kOwnWait) {
    if (plan.early_kv) {
#pragma unroll
      for (int it = 0; it < kStages - 1; ++it)
        n_early += it == n_early && it < n_iters && (kFused || first + it * stride + kTile <= kv - 1) ? 1 : 0;
    }
  }
  const auto prologue_tile = [&](int it, bool early) {
    if (it < n_iters) {
      const int p0 = first + it * stride;
      // The tile holds the step's own position (in this chunk: end == kv); uniform over the warp.
      const bool skip_last = kFused && early && end == kv && p0 <= kv - 1 && kv - 1 < p0 + kTile;
      uint32_t v = issue_tile<D, kStages>(p, table, kvh, p0, lo, skip_last ? kv - 1 : end, bs16, bs_pow2, bs_shift,
                                          ring + it * Sh::kStageBytes);
      if (skip_last) v |= 1u << (kv - 1 - p0);
      if (lane == 0) s_valid[warp][it] = v;
    }
    cp_async_commit();
  };
#pragma unroll
  for (int it = 0; it < kStages - 1; ++it)
    if (it < n_early) prologue_tile(it, true);
  // The fused epilogue's RoPE table: step inputs only (positions), so before the wait too.
  if constexpr (kFused) fused_qkv_rope_table<D, kM, kWarps>(p, row, *fs);
  if constexpr (kOwnWait) pdl_wait();  // from here on: what the previous kernels wrote (q or qkv, the new K/V)
  stamp(p.stamps, 1);
#pragma unroll
  for (int it = 0; it < kStages - 1; ++it)
    if (it >= n_early) prologue_tile(it, false);

  // Fused epilogue: this block's query heads (and, where its chunk holds the step's token, that key and value)
  // from the raw projection, while the first tiles' copies are in flight.
  const bool covers_last = kFused && start <= kv - 1 && kv - 1 < end;
  if constexpr (kFused) {
    fused_qkv_prepare<D, kM, kWarps>(p, row, kvh, kvh * group + r0, n_rows, covers_last, covers_last && rg == 0, *fs);
  }
  stamp(p.stamps, 2);

  // Q as mma A fragments (row = query head r0 + mma row; rows >= n_rows are zero), scaled by scale * log2e,
  // split into bf16 hi + lo: q_hi[k] / q_lo[k] for dims [16k, 16k + 16): a0 = (row g, dims 2t, 2t+1),
  // a1 = (row g+8, ..), a2 = (row g, dims 2t+8, 2t+9), a3 = (row g+8, ..).
  uint32_t q_hi[kK][4], q_lo[kK][4];
  {
    const float qscale = p.scale * kLog2e;
    const int h0 = kvh * group + r0;
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // mma rows g (half 0) and g + 8 (half 1)
      if (kM == 8 && half == 1) {  // constant zeros: rows 8-15 of an 8-row tile
#pragma unroll
        for (int k = 0; k < kK; ++k) q_hi[k][1] = q_hi[k][3] = q_lo[k][1] = q_lo[k][3] = 0u;
        continue;
      }
      const int r = g + 8 * half;
      const bool has = r < n_rows && (kM == 16 || half == 0);
      const float* qp = kFused ? &fs->q[has ? r : 0][2 * t] : p.q + (int64_t(row) * p.n_heads + h0 + (has ? r : 0)) * D + 2 * t;
#pragma unroll
      for (int k = 0; k < kK; ++k) {
#pragma unroll
        for (int hi8 = 0; hi8 < 2; ++hi8) {
          float2 x = make_float2(0.f, 0.f);
          if (has) x = *reinterpret_cast<const float2*>(qp + 16 * k + 8 * hi8);
          split_bf16x2(x.x * qscale, x.y * qscale, q_hi[k][2 * hi8 + half], q_lo[k][2 * hi8 + half]);
        }
      }
    }
  }

  // O fragments: o[j] = dims [8j, 8j + 8): c0, c1 = (row g, dims 8j + 2t, +1), c2, c3 = (row g+8, ..).
  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g, g + 8 (this lane's share of l)

  // ldmatrix row addresses, lane L gives row L % 8 of matrix L / 8. K (QK^T, k-step k): matrices (positions
  // 0-7 | 8-15) x (chunk 2k | 2k+1) -> b0, b1 of n-tile 0, b0, b1 of n-tile 1. V (PV, dims 16j..): .trans,
  // matrices (positions 0-7 | 8-15) x (chunk 2j | 2j+1) -> b0, b1 of dims 16j.., b0, b1 of dims 16j+8...
  const int mi = lane / 8, lr = lane % 8;
  const int k_row = (mi >> 1) * 8 + lr, k_cadd = mi & 1;
  const int v_row = (mi & 1) * 8 + lr, v_cadd = mi >> 1;

  for (int it = 0; it < n_iters; ++it) {
    __syncwarp();  // every lane is done reading the slot the next copies overwrite
    const int ahead = it + kStages - 1;
    if (ahead < n_iters) {
      const uint32_t v = issue_tile<D, kStages>(p, table, kvh, first + ahead * stride, lo, end, bs16, bs_pow2,
                                                bs_shift, ring + (ahead % kStages) * Sh::kStageBytes);
      if (lane == 0) s_valid[warp][ahead % kStages] = v;
    }
    cp_async_commit();
    cp_async_wait<kStages - 1>();  // this lane's copies of tile `it` have landed
    __syncwarp();                  // ... and every other lane's
    if (it == 0) stamp(p.stamps, 5);
    if constexpr (kFused) {
      if (covers_last) {
        unsigned char* slot = ring + (it % kStages) * Sh::kStageBytes;
        fused_qkv_patch<D, kM>(first + it * stride, kv - 1, slot, slot + Sh::kTileBytes, *fs,
                               [](int r, int c) { return tile_offset<D>(r, c); });
      }
    }
    const unsigned char* kt = ring + (it % kStages) * Sh::kStageBytes;
    const unsigned char* vt = kt + Sh::kTileBytes;
    const uint32_t valid = s_valid[warp][it % kStages];

    // S = Q . K^T: sc[n] = positions [8n, 8n + 8): c0, c1 = (row g, positions 8n + 2t, +1), c2, c3 = row g+8.
    float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      uint32_t b[4];
      ldmatrix_x4(b, kt + tile_offset<D>(k_row, 2 * k + k_cadd));
      mma_bf16_16816(sc[0], q_hi[k], b[0], b[1]);
      mma_bf16_16816(sc[0], q_lo[k], b[0], b[1]);
      mma_bf16_16816(sc[1], q_hi[k], b[2], b[3]);
      mma_bf16_16816(sc[1], q_lo[k], b[2], b[3]);
    }

    if (p.softcap > 0) {
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[n][e] = softcap_log2(p, sc[n][e]);
    }
    // Online softmax per row (rows g, g + 8; the second only with 16 mma rows).
#pragma unroll
    for (int half = 0; half < (kM == 16 ? 2 : 1); ++half) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int pos = 8 * n + 2 * t + e;
          float& x = sc[n][2 * half + e];
          if (!((valid >> pos) & 1u)) x = -INFINITY;
          mx = fmaxf(mx, x);
        }
      }
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
      const float m_new = fmaxf(m[half], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no usable position yet: every weight is 0
      const float corr = exp2f(m[half] - m_use);
      m[half] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = sc[n][2 * half + e];
          x = exp2f(x - m_use);
          sum += x;
        }
      }
      l[half] = l[half] * corr + sum;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        o[j][2 * half] *= corr;
        o[j][2 * half + 1] *= corr;
      }
    }

    // P as A fragments (k = the tile's 16 positions): a0 = (row g, 2t..), a1 = (row g+8, 2t..),
    // a2 = (row g, 2t+8..), a3 = (row g+8, 2t+8..); hi + lo.
    uint32_t p_hi[4], p_lo[4];
    split_bf16x2(sc[0][0], sc[0][1], p_hi[0], p_lo[0]);
    split_bf16x2(sc[1][0], sc[1][1], p_hi[2], p_lo[2]);
    if constexpr (kM == 16) {
      split_bf16x2(sc[0][2], sc[0][3], p_hi[1], p_lo[1]);
      split_bf16x2(sc[1][2], sc[1][3], p_hi[3], p_lo[3]);
    } else {
      p_hi[1] = p_lo[1] = p_hi[3] = p_lo[3] = 0u;
    }
#pragma unroll
    for (int j = 0; j < kK; ++j) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, vt + tile_offset<D>(v_row, 2 * j + v_cadd));
      mma_bf16_16816(o[2 * j], p_hi, b[0], b[1]);
      mma_bf16_16816(o[2 * j], p_lo, b[0], b[1]);
      mma_bf16_16816(o[2 * j + 1], p_hi, b[2], b[3]);
      mma_bf16_16816(o[2 * j + 1], p_lo, b[2], b[3]);
    }
    if (it == 0) stamp(p.stamps, 6);
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with its ring before s_acc overwrites it
  stamp(p.stamps, 3);

  // This warp's state to shared memory: l summed over the quad (each lane summed its own positions).
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l[half] += __shfl_xor_sync(kFull, l[half], 1);
    l[half] += __shfl_xor_sync(kFull, l[half], 2);
    const int r = g + 8 * half;
    if (r < n_rows && (kM == 16 || half == 0)) {
      if (t == 0) {
        es.m[warp][r] = m[half];
        es.l[warp][r] = l[half];
      }
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<float2*>(&s_acc[warp][r][8 * j + 2 * t]) = make_float2(o[j][2 * half], o[j][2 * half + 1]);
    }
  }
  __syncthreads();
  const DecodeBlockPos where{s, kvh, rg, split, kv - base, row, group, r0, n_rows};
  decode_block_epilogue<D, kM, kWarps, kOnePass>(p, plan, where, s_acc, es);
  stamp(p.stamps, 4);
}

}  // namespace ferry::cuda_ops::decode_mma_detail
