// Split-KV decode attention: the rows of sequences with q_len == 1, over the paged bf16 KV cache. The KV
// range of each (sequence, KV head) is cut into plan.n_splits chunks of decode_chunk positions (its kv_len's share,
// or plan.chunk; attention_split_heuristic.cuh); one block per (chunk, sequence, KV head x row group) takes up to
// plan.rows query heads of the GQA group, so each K/V row it loads serves all of them. With one chunk the
// block writes the output row directly; otherwise each block writes an unnormalised partial (acc, running
// max m, denominator l) to scratch, counts itself on its unit's arrival counter, and the last block of
// the unit merges the partials into the output rows and resets the counter to zero (no second launch).
// K/V are read 16 bytes (8 values) per lane, fp32 math. plan.kernel == kTensorCores runs the same contract on
// tensor cores instead (decode_mma.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/attention/attention.cuh"
#include "backends/cuda/attention/attention_split_heuristic.cuh"

namespace ferry::cuda_ops {

// Where a decode row's chunks start: its first attended position (window_begin; 0 without a window) rounded down
// to 16 positions, so the tensor-core kernel's tiles stay aligned (positions before the window are masked, never
// read). Both decode kernels and the merge's chunk count use it.
#ifdef __CUDACC__
__device__ __forceinline__ int decode_split_base(int first_pos) { return first_pos & ~15; }

// Positions per chunk of a row whose chunks cover n_keys positions (kv_len - decode_split_base of its first attended
// position): plan.chunk, or with plan.fit_chunk the row's own share, n_keys over plan.n_splits rounded up to
// kChunkAlign, at least kMinChunk and at most plan.chunk (the bound's). Both decode kernels and the merge's chunk
// count use it, so a row's chunks, and its bits, depend on its kv_len and the plan only. Example: 33 splits, plan
// chunk 2,048 (bound 65,536), kv_len 32,896 -> 1,024 (33 busy splits); kv_len 65,536 -> 2,048 (32 busy).
__device__ __forceinline__ int decode_chunk(const DecodeSplitPlan& plan, int n_keys) {
  using L = DecodeSplitLimits;
  if (!plan.fit_chunk || plan.n_splits == 1) return plan.chunk;
  const int share = (n_keys + plan.n_splits - 1) / plan.n_splits;
  return min(plan.chunk, max(L::kMinChunk, (share + L::kChunkAlign - 1) / L::kChunkAlign * L::kChunkAlign));
}
#endif

// head_dim 32, 64, 96, 128 or 256 (the tensor-core kernel: 64 and 128; other sizes run on CUDA cores, 96 in the
// 128 layout).
bool decode_split_supports(int head_dim);
// The kernel the dispatcher runs for these sizes (chosen from head_dim and the GQA group only, never from the
// batch, so batch-invariant mode keeps one kernel): tensor cores wherever they apply, faster at every batch and
// depth measured (docs/perf-log.md "## 2026-11-30: decode attention on tensor cores" and "... at batch 1").
DecodeKernel default_decode_kernel(int head_dim, int group);
// plan_decode_split (attention_split_heuristic.cuh) for p's sizes with the default kernel, or a given one
// (tests and the harness; kTensorCores at a head_dim it does not support falls back to kCudaCores). In
// batch-invariant mode (p.batch_invariant) the fixed-chunk plan.
DecodeSplitPlan plan_decode_split(const AttentionParams& p, int n_sms);
DecodeSplitPlan plan_decode_split(const AttentionParams& p, int n_sms, DecodeKernel kernel);
// Scratch: counters (kMaxCounters) i32, then partials acc (n_seqs, n_heads, n_splits, head_dim) f32 and
// (m, l) (n_seqs, n_heads, n_splits, 2) f32 when n_splits > 1. The counters must be zero at the first use.
size_t decode_split_scratch_bytes(const AttentionParams& p, const DecodeSplitPlan& plan);
// Writes out rows of the sequences with q_len == 1; leaves every other row alone. With the tensor-core kernel and
// plan.early_kv (the default) each block reads its sequence's metadata and the K/V of positions below kv_len - 1
// BEFORE it waits for the previous kernel (PDL): those must have been written before the last full dependency on
// the stream (a copy, an event wait, a plain launch), as a step's input copy guarantees; see decode_mma_block.cuh.
void decode_split_attention(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream);

}  // namespace ferry::cuda_ops
