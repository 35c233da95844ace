// The end of a split-KV decode block, shared by the CUDA-core kernel (decode_split.cu) and the tensor-core
// kernel (decode_mma.cu): the block's warps have each left (m, l, acc) per query row in shared memory; this
// merges the warps, writes the output rows (one split) or the block's partial to scratch, counts the block on
// its unit's arrival counter, and the last block of the unit merges every split's partial into the output.
// Device code only (include from .cu files).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/attention/attention.cuh"
#include "backends/cuda/attention/attention_split_heuristic.cuh"
#include "backends/cuda/attention/decode_split.cuh"

namespace ferry::cuda_ops {

// o += x * w, component by component (one fmaf each): the split merges' weighted sum of partial outputs.
__device__ __forceinline__ void fma_float4(float4& o, const float4& x, float w) {
  o.x = fmaf(x.x, w, o.x);
  o.y = fmaf(x.y, w, o.y);
  o.z = fmaf(x.z, w, o.z);
  o.w = fmaf(x.w, w, o.w);
}

// Scratch of decode_split_attention: counters, then the splits' partials.
struct DecodeScratch {
  int32_t* counters;  // (kMaxCounters) i32, one per (sequence, KV head, row group); zero between launches
  float* acc;         // (n_seqs, n_heads, n_splits, head_dim) f32: unnormalised partial outputs
  float* ml;          // (n_seqs, n_heads, n_splits, 2) f32: (running max m in the log2 domain, denominator l)
};

__host__ __device__ inline DecodeScratch decode_scratch(const AttentionParams& p, int n_splits) {
  DecodeScratch L;
  L.counters = reinterpret_cast<int32_t*>(p.scratch);
  L.acc = p.scratch + DecodeSplitLimits::kMaxCounters;
  L.ml = L.acc + int64_t(p.n_seqs) * p.n_heads * n_splits * p.head_dim;
  return L;
}

// Shared memory of the epilogue (R rows per block, kWarps warps).
template <int R, int kWarps>
struct DecodeEpilogueSmem {
  float m[kWarps][R], l[kWarps][R];         // each warp's running max (log2 domain) and denominator per row
  float w[R][DecodeSplitLimits::kMaxSplits];  // merge weights of the splits
  float inv_l[R];
  int last;
};

// Where this block sits: sequence s (its query row `row`), KV head kvh, row group rg (query heads
// kvh * group + r0 + [0, n_rows)), chunk `split` of the n_keys positions the chunks cover (from decode_split_base of
// the row's first attended position to kv_len).
struct DecodeBlockPos {
  int s, kvh, rg, split, n_keys, row, group, r0, n_rows;
};

// The last block's merge of n_used (<= kMaxSplits) splits' partials into the output rows in one round trip to L2:
// each thread first requests its first (row, 4 dims)'s partials of up to kOnePassSplits splits into registers,
// then the warps load every split's (m, l) once (kept in registers) and form the weights, then the sums run in
// ascending split order with the same fmaf sequence as the batched merge below (same bits). The batched form
// waits on ~6 dependent L2 round trips at 32 splits (m; m and l again; 4 batches of 8 partials), a large part of
// the fixed cost at batch 1 (docs/perf-log.md "## 2026-11-30: decode attention at batch 1"). Registers: 32 float4
// (128) on top of the epilogue's; the tensor-core kernel (up to 255 per thread at 2 blocks of 128 threads per SM) has them free here.
template <int D, int R, int kWarps>
__device__ inline void decode_merge_one_pass(const AttentionParams& p, const DecodeBlockPos& b, int64_t n_splits,
                                             int n_used, const DecodeScratch& L, DecodeEpilogueSmem<R, kWarps>& sm) {
  constexpr int kThreads = kWarps * 32;
  constexpr unsigned kFull = 0xFFFFFFFFu;
  constexpr int kOnePassSplits = 32;                                  // partials in flight per thread
  constexpr int kMlPerLane = DecodeSplitLimits::kMaxSplits / 32;      // (m, l) pairs per lane
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n_items = b.n_rows * D / 4;  // (row, 4 dims) per item
  const auto acc_ptr = [&](int idx) {
    const int r = idx / (D / 4), d = idx % (D / 4) * 4;
    const int h = b.kvh * b.group + b.r0 + r;
    return reinterpret_cast<const float4*>(L.acc + (int64_t(b.s) * p.n_heads + h) * n_splits * D + d);
  };
  // 1. This thread's first item: partials of splits [0, kOnePassSplits) requested now.
  float4 a[kOnePassSplits];
  if (threadIdx.x < n_items) {
    const float4* acc_p = acc_ptr(threadIdx.x);
#pragma unroll
    for (int u = 0; u < kOnePassSplits; ++u)
      if (u < n_used) a[u] = __ldcg(acc_p + int64_t(u) * (D / 4));
  }
  // 2. Weights: lane i of row r's warp holds splits i, i + 32, ... (m, l) from one load each.
  for (int r = warp; r < b.n_rows; r += kWarps) {
    const int h = b.kvh * b.group + b.r0 + r;
    const float2* ml = reinterpret_cast<const float2*>(L.ml + (int64_t(b.s) * p.n_heads + h) * n_splits * 2);
    float2 v[kMlPerLane];
#pragma unroll
    for (int j = 0; j < kMlPerLane; ++j) {
      const int i = lane + 32 * j;
      v[j] = i < n_used ? __ldcg(ml + i) : make_float2(-INFINITY, 0.0f);
    }
    float m_all = -INFINITY;
#pragma unroll
    for (int j = 0; j < kMlPerLane; ++j) m_all = fmaxf(m_all, v[j].x);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) m_all = fmaxf(m_all, __shfl_xor_sync(kFull, m_all, off));
    float l_all = 0.0f;
#pragma unroll
    for (int j = 0; j < kMlPerLane; ++j) {
      const int i = lane + 32 * j;
      if (i < n_used) {
        const float w = v[j].x == -INFINITY ? 0.0f : exp2f(v[j].x - m_all);
        sm.w[r][i] = w;
        l_all = fmaf(v[j].y, w, l_all);
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) l_all += __shfl_xor_sync(kFull, l_all, off);
    if (lane == 0) sm.inv_l[r] = 1.0f / l_all;
  }
  __syncthreads();
  // 3. Sums in ascending split order (the batched merge's order: the same bits).
  for (int idx = threadIdx.x; idx < n_items; idx += kThreads) {
    const int r = idx / (D / 4), d = idx % (D / 4) * 4;
    const int h = b.kvh * b.group + b.r0 + r;
    const float4* acc_p = acc_ptr(idx);
    if (idx != int(threadIdx.x)) {  // later items (more than kThreads of them): request now
#pragma unroll
      for (int u = 0; u < kOnePassSplits; ++u)
        if (u < n_used) a[u] = __ldcg(acc_p + int64_t(u) * (D / 4));
    }
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    const auto add = [&](const float4& x, float w) { fma_float4(o, x, w); };
#pragma unroll
    for (int u = 0; u < kOnePassSplits; ++u)
      if (u < n_used) add(a[u], sm.w[r][u]);
    for (int i = kOnePassSplits; i < n_used; i += kOnePassSplits) {  // past 32 splits: further rounds
#pragma unroll
      for (int u = 0; u < kOnePassSplits; ++u)
        if (i + u < n_used) a[u] = __ldcg(acc_p + int64_t(i + u) * (D / 4));
#pragma unroll
      for (int u = 0; u < kOnePassSplits; ++u)
        if (i + u < n_used) add(a[u], sm.w[r][i + u]);
    }
    const float inv = sm.inv_l[r];
    store_attention_out4(p, (int64_t(b.row) * p.n_heads + h) * D + d,
                         make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv));
  }
}

// Call after __syncthreads() once sm.m / sm.l / acc (kWarps, R, D) f32 hold every warp's state (dims [0, kHd) of
// each row: the head_dim, <= D, the register layout's width). Every thread of the block (kWarps * 32) must call it.
// kOnePass: the last block's merge may take the one-pass form (decode_merge_one_pass, when plan.one_pass_merge): same
// arithmetic in the same order, so the same bits.
template <int D, int R, int kWarps, bool kOnePass = false, int kHd = D>
__device__ inline void decode_block_epilogue(const AttentionParams& p, const DecodeSplitPlan& plan,
                                             const DecodeBlockPos& b, const float (*acc)[R][D],
                                             DecodeEpilogueSmem<R, kWarps>& sm) {
  constexpr int kThreads = kWarps * 32;
  constexpr unsigned kFull = 0xFFFFFFFFu;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Merge the warps: one (row, dim) per thread and pass.
  const int64_t n_splits = plan.n_splits;
  const DecodeScratch L = decode_scratch(p, plan.n_splits);
  for (int idx = threadIdx.x; idx < b.n_rows * kHd; idx += kThreads) {
    const int r = idx / kHd, d = idx % kHd;
    const int h = b.kvh * b.group + b.r0 + r;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, sm.m[w][r]);
    float o = 0.0f, l_all = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wgt = sm.m[w][r] == -INFINITY ? 0.0f : exp2f(sm.m[w][r] - m_all);
      l_all = fmaf(sm.l[w][r], wgt, l_all);
      o = fmaf(acc[w][r][d], wgt, o);
    }
    if (n_splits == 1) {
      store_attention_out(p, (int64_t(b.row) * p.n_heads + h) * kHd + d, o / l_all);
    } else {
      const int64_t part = (int64_t(b.s) * p.n_heads + h) * n_splits + b.split;
      L.acc[part * kHd + d] = o;
      if (d == 0) {
        L.ml[part * 2] = m_all;
        L.ml[part * 2 + 1] = l_all;
      }
    }
  }
  if (n_splits == 1) return;

  // Count this chunk in; the last of the unit's non-empty chunks merges them.
  const int chunk = decode_chunk(plan, b.n_keys);
  const int n_used = min(plan.n_splits, (b.n_keys + chunk - 1) / chunk);
  __threadfence();  // this block's partials are visible device-wide before it is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t* ctr = L.counters + (int64_t(b.s) * p.n_kv_heads + b.kvh) * plan.n_row_groups + b.rg;
    const int prev = atomicAdd(ctr, 1);
    sm.last = prev == n_used - 1;
    if (sm.last) atomicExch(ctr, 0);  // every chunk has arrived: ready for the next launch
  }
  __syncthreads();
  if (!sm.last) return;
  __threadfence();
  if constexpr (kOnePass) {
    if (plan.one_pass_merge) {
      decode_merge_one_pass<kHd, R, kWarps>(p, b, n_splits, n_used, L, sm);
      return;
    }
  }

  for (int r = warp; r < b.n_rows; r += kWarps) {
    const int h = b.kvh * b.group + b.r0 + r;
    const float* ml = L.ml + (int64_t(b.s) * p.n_heads + h) * n_splits * 2;
    float m_all = -INFINITY;
    for (int i = lane; i < n_used; i += 32) m_all = fmaxf(m_all, __ldcg(ml + 2 * i));
#pragma unroll
    for (int off = 16; off > 0; off /= 2) m_all = fmaxf(m_all, __shfl_xor_sync(kFull, m_all, off));
    float l_all = 0.0f;
    for (int i = lane; i < n_used; i += 32) {
      const float mi = __ldcg(ml + 2 * i);
      const float w = mi == -INFINITY ? 0.0f : exp2f(mi - m_all);
      sm.w[r][i] = w;
      l_all = fmaf(__ldcg(ml + 2 * i + 1), w, l_all);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) l_all += __shfl_xor_sync(kFull, l_all, off);
    if (lane == 0) sm.inv_l[r] = 1.0f / l_all;
  }
  __syncthreads();
  // Four dims per thread (float4), the splits' partials loaded kBatch at a time before they are summed (one
  // dependent L2 load per split and dim took most of a batch-1 call: docs/perf-log.md).
  // The sum runs over the splits in ascending order (the same bits whatever the batch).
  constexpr int kBatch = 8;
  for (int idx = threadIdx.x; idx < b.n_rows * kHd / 4; idx += kThreads) {
    const int r = idx / (kHd / 4), d = idx % (kHd / 4) * 4;
    const int h = b.kvh * b.group + b.r0 + r;
    const float4* acc_p = reinterpret_cast<const float4*>(L.acc + (int64_t(b.s) * p.n_heads + h) * n_splits * kHd + d);
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    const auto add = [&](const float4& x, float w) { fma_float4(o, x, w); };
    int i = 0;
    for (; i + kBatch <= n_used; i += kBatch) {
      float4 a[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) a[u] = __ldcg(acc_p + int64_t(i + u) * (kHd / 4));
#pragma unroll
      for (int u = 0; u < kBatch; ++u) add(a[u], sm.w[r][i + u]);
    }
    for (; i < n_used; ++i) add(__ldcg(acc_p + int64_t(i) * (kHd / 4)), sm.w[r][i]);
    const float inv = sm.inv_l[r];
    store_attention_out4(p, (int64_t(b.row) * p.n_heads + h) * kHd + d,
                         make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv));
  }
}

}  // namespace ferry::cuda_ops
