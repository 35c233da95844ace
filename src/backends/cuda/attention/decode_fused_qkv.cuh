// The q/k/v epilogue of a decode step done inside the tensor-core decode block (AttentionParams::qkv set; see
// CudaBackend::qkv_attention): instead of a separate qkv_epilogue launch writing q and the step's key and value,
// each decode block
//   1. normalizes (Qwen3's q_norm / k_norm) and rotates its own query heads from the raw q|k|v projection into
//      shared memory (fused_qkv_prepare; the fragment loader then reads them there),
//   2. if its chunk holds the sequence's last position (the step's own token), also prepares that key and value
//      and patches them into the K/V tile of that position once the tile's copy has landed (fused_qkv_patch), so
//      no block depends on another block's cache write,
//   3. and, for row group 0 of that chunk only, writes the key and value to their cache slot for later steps.
// The per-head arithmetic is qkv_epilogue.cu's own function (qkv_head.cuh) with the same RoPE tables (sines and
// cosines in double), so the queries, the cache rows and therefore the output are bit for bit the two launches'.
// Device code only (include from decode_mma_block.cuh).
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/attention/attention.cuh"
#include "backends/cuda/attention/qkv_head.cuh"
#include "backends/cuda/common/device_errors.h"

namespace ferry::cuda_ops::decode_mma_detail {

// Shared memory of the fused epilogue for one block (static, beside the K/V rings): ~10 KB at D 128, kM 16.
template <int D, int kM>
struct FusedQkvSmem {
  __align__(16) float q[kM][D];  // the block's query rows (heads h0 ..), normed and rotated, f32 as qkv_epilogue
                                 // writes q (16-byte rows: prepare_qkv_head stores a lane's float4)
  float cos_t[D / 2];  // RoPE of the row's position: pair k rotates by pos * inv_freq[k]
  float sin_t[D / 2];
  __align__(16) float kv[2][D];  // the step's key (normed, rotated) and value, f32
  __align__(16) __nv_bfloat16 kv_bf16[2][D];  // the same rounded to the cache type: what the tile row holds
};

// The RoPE table of the row's position into fs (every thread of the block calls it; fused_qkv_prepare's first
// __syncthreads publishes it). It reads only the step's positions and the constant inv_freq, both written before
// the step began, so decode_mma_block calls it before griddepcontrol.wait: its double sincos is off the path that
// starts when the q|k|v projection completes.
template <int D, int kM, int kWarps>
__device__ inline void fused_qkv_rope_table(const AttentionParams& p, int row, FusedQkvSmem<D, kM>& fs) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kHalf = D / 2;  // full rotation (the launcher checks rope_half == D / 2)
  const int32_t pos = p.positions[row];
  for (int k = threadIdx.x; k < kHalf; k += kThreads) {
    double s, c;
    sincos(double(pos) * double(p.inv_freq[k]), &s, &c);
    fs.cos_t[k] = float(c);
    fs.sin_t[k] = float(s);
  }
}

// Every thread of the block calls it (kThreads threads, kWarps warps), after fused_qkv_rope_table. row: the
// sequence's query row; h0 / n_rows: the block's query heads; covers_last: the block's chunk holds position
// kv_len - 1; owner: it also writes the cache slot. On return fs is complete and visible to the whole block.
// A warp takes items warp, warp + kWarps, ... (query heads, then the key, then the value) and requests every one
// of its items' rows before the math of the first: one L2 round trip after the wait instead of one per item (the
// rows were written by the q|k|v projection just before). The launcher requires full rotation (rope_half == D /
// 2) at D = 64 or 128: the register form of qkv_head.cuh, whose arithmetic this keeps (same bits).
template <int D, int kM, int kWarps>
__device__ inline void fused_qkv_prepare(const AttentionParams& p, int row, int kvh, int h0, int n_rows,
                                         bool covers_last, bool owner, FusedQkvSmem<D, kM>& fs) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kV = D / 32;                            // elements per lane
  constexpr int kPerWarp = (kM + 2 + kWarps - 1) / kWarps;  // items per warp at most: kM query heads, key, value
  static_assert(D == 64 || D == 128, "the register form of qkv_head.cuh");
  __syncthreads();  // the RoPE table (fused_qkv_rope_table) is visible to every warp

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n_all = int64_t(p.n_heads) + 2 * p.n_kv_heads;
  const int n_items = n_rows + (covers_last ? 2 : 0);
  const auto head_of = [&](int i) -> int64_t {
    return i < n_rows ? h0 + i : (i == n_rows + 1 ? p.n_heads + p.n_kv_heads + kvh : p.n_heads + kvh);
  };
  float x[kPerWarp][kV];
#pragma unroll
  for (int j = 0; j < kPerWarp; ++j) {
    const int i = warp + j * kWarps;
    if (i < n_items) qkv_head_lane_load<kV>(p.qkv + (int64_t(row) * n_all + head_of(i)) * D, x[j]);
  }
#pragma unroll
  for (int j = 0; j < kPerWarp; ++j) {
    const int i = warp + j * kWarps;
    if (i >= n_items) break;  // uniform over the warp
    const bool is_q = i < n_rows, is_v = i == n_rows + 1;
    const float* norm_w = is_v || p.q_norm == nullptr ? nullptr : is_q ? p.q_norm : p.k_norm;
    qkv_head_lane_math<kV>(x[j], norm_w, p.norm_eps, !is_v, fs.cos_t, fs.sin_t, p.rope_interleaved);
    float* buf = is_q ? fs.q[i] : fs.kv[is_v ? 1 : 0];
#pragma unroll
    for (int e = 0; e < kV; ++e) buf[kV * lane + e] = x[j][e];
    if (!is_q) {
#pragma unroll
      for (int e = 0; e < kV; ++e) fs.kv_bf16[is_v ? 1 : 0][kV * lane + e] = __float2bfloat16_rn(x[j][e]);
    }
  }
  __syncthreads();
  if (owner) {
    const int64_t slot = p.slots[row];
    if (slot < 0 || slot >= p.n_slots) {
      if (threadIdx.x == 0) report_error(p.errors, kBadSlot, slot);
      return;
    }
    const int64_t at = (slot * p.n_kv_heads + kvh) * D;
    for (int j = threadIdx.x; j < 2 * D; j += kThreads) {
      const int which = j / D, d = j % D;
      (which == 0 ? p.k_cache_out : p.v_cache_out)[at + d] = fs.kv_bf16[which][d];
    }
  }
}

// One warp: if its tile [p0, p0 + 16) holds position `last`, overwrite that row of the tile's K and V (already
// landed in `k_tile` / `v_tile`, swizzled as tile_offset) with the prepared key and value.
template <int D, int kM, typename Offset>
__device__ inline void fused_qkv_patch(int p0, int last, unsigned char* k_tile, unsigned char* v_tile,
                                       const FusedQkvSmem<D, kM>& fs, Offset tile_offset) {
  if (last < p0 || last >= p0 + 16) return;  // uniform over the warp
  constexpr int kChunks = D / 8;
  const int lane = threadIdx.x % 32, r = last - p0;
  if (lane < 2 * kChunks) {
    const int c = lane % kChunks, which = lane / kChunks;
    const uint4 v = reinterpret_cast<const uint4*>(fs.kv_bf16[which])[c];
    *reinterpret_cast<uint4*>((which == 0 ? k_tile : v_tile) + tile_offset(r, c)) = v;
  }
  __syncwarp();
}

}  // namespace ferry::cuda_ops::decode_mma_detail
