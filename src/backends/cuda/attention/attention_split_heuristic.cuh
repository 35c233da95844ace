// How split-KV decode attention cuts each sequence's context (decode_split.cuh). Host code only; the plan
// depends only on host-side sizes (the context bound max_blocks_per_seq * block_size, not the kv_len in
// device memory), so one captured graph serves every context up to that bound.
//
// Two kernels read the plan (DecodeKernel): the CUDA-core kernel (decode_split.cu, fp32 FMAs, any head_dim of
// 32/64/96/128/256) and the tensor-core kernel (decode_mma.cu, mma.sync bf16, head_dim 64/128). Both cut the
// context the same way; they differ in rows per block and ring depth.
//
// Rule: a block is one (sequence, KV head, row group, chunk); aim for at most kTargetBlocksPerSm blocks per
// SM in one launch (the kernels' shared-memory rings fit two blocks per SM: a third block would start a
// second, mostly empty wave), never a chunk shorter than kMinChunk positions, at most kMaxSplits chunks, and
// no split at all once the (sequence, KV head, row group) units alone fill the target.
//
// Worked example, Llama-3-8B (32 query heads, 8 KV heads: 4 rows per block, 1 row group) on the H200's
// 132 SMs, target 2 x 132 = 264 blocks:
//   batch 1, context 4096:  8 units; 264 / 8 = 33 splits, capped by 4096 / 128 = 32 -> 32 chunks of
//                           128 positions: 256 blocks (~2 per SM), each reading 128 x 2 x 256 B = 64 KB.
//   batch 1, context 32768: 33 splits -> chunk ceil(32768 / 33) = 993, rounded up to 1024 -> 32 chunks of
//                           work; 264 blocks, of which the 8 of split 32 are empty and exit; 256 of 512 KB each.
//   batch 8, context 4096:  64 units; 264 / 64 = 4 splits (rounded down: 5 would be 320 blocks, 1.2 waves)
//                           -> chunk 1024 -> 4 chunks: 256 blocks.
//   batch 64, any context:  512 units >= 264 -> 1 split: 512 blocks, each a whole context; the kernel
//                           writes the output directly (no partials, no merge).
// The bound is not the context: a captured decode step's table is max_blocks_per_seq rounded up to a power of two
// (LlamaModel's graph bucket), so tg128 at depth 32768 (up to 32,896 positions, 2,056 blocks) plans for 4,096
// blocks = 65,536 positions: 33 splits, chunks of at most 2,048. Chunks of a fixed 2,048 positions would leave 16
// or 17 of them busy (136 blocks, ~1 per SM, half the bytes in flight: 47 us instead of 36.5 at batch 1 in the
// 2026-11-30 runs of half the splits). So the plan fixes the split count and the largest chunk, and each row cuts
// its own kv_len (plan.fit_chunk, decode_chunk in decode_split.cuh): 32,896 / 33 -> 997, rounded up to 64 -> 1,024
// positions a chunk: 33 busy splits, 264 blocks, as at the exact bound. The chunks depend on kv_len and the split
// count only: a row's bits are the same under any bound that gives the same split count (4096 and 8192 blocks
// both give 33 at batch 1).
// The tensor-core kernel (rows 8 or 16 per block: the GQA group padded to the mma tile) has the same unit
// count for groups up to 8 and keeps 2 blocks per SM (a 96 KB ring per block: 4 warps x 24 KB, 3 tiles of
// 16 positions at head_dim 128, 6 at 64), so the examples above hold for it unchanged. This plan at 2 blocks per
// SM beat 6-tile rings at 1 block per SM (160 KB in flight per SM instead of 128, splits halved) at every shape
// measured (docs/perf-log.md "## 2026-11-30: decode attention on tensor cores").
#pragma once

#include <algorithm>
#include <cstdint>

namespace ferry::cuda_ops {

// kCudaCores: decode_split.cu (fp32 FMAs and shuffles per key, the first version); kTensorCores:
// decode_mma.cu (QK^T and PV on mma.sync m16n8k16 bf16 with the query and P split into bf16 hi + lo parts,
// so the result keeps fp32-grade accuracy).
enum class DecodeKernel : int32_t { kCudaCores = 0, kTensorCores = 1 };

struct DecodeSplitPlan {
  int32_t n_splits;      // chunks per (sequence, KV head, row group)
  int32_t chunk;         // KV positions per chunk (a multiple of kChunkAlign)
  int32_t rows;          // query heads per block: 1, 2, 4 or 8 (CUDA cores); 8 or 16 (tensor cores: mma rows)
  int32_t n_row_groups;  // ceil(group / rows)
  int32_t stages;        // the kernel's cp.async ring depth (CUDA cores: kDeepStages or kWideStages;
                         // tensor cores: 16-position tiles per warp, kMmaStages128 / kMmaStages64 or deeper)
  DecodeKernel kernel = DecodeKernel::kCudaCores;
  // Options of the standalone tensor-core kernel (decode_mma.cu; the CUDA-core kernel and the mixed-step kernel
  // ignore them). Neither changes the arithmetic: the output is the same bit for bit either way (the harness
  // times old against new in one run by turning them off; figures: docs/perf-log.md "## 2026-11-30: decode
  // attention at batch 1").
  bool early_kv = true;        // issue the first ring tiles of positions below kv_len - 1 before griddepcontrol.wait
  bool one_pass_merge = true;  // the last block requests every split's partials and (m, l) at once (else in
                               // dependent batches of 8)
  // Chunks cut from each row's own kv_len (decode_chunk, decode_split.cuh): its positions over the n_splits
  // chunks, so every split has work whatever the context is below the bound; false: chunks of `chunk` positions
  // from the row's start (the batch-invariant plan, and plans made by hand). plan_decode_split sets it.
  bool fit_chunk = false;
};

struct DecodeSplitLimits {
  static constexpr int kTargetBlocksPerSm = 2;
  static constexpr int kMinChunk = 128;
  static constexpr int kMaxSplits = 128;
  static constexpr int kChunkAlign = 64;     // the kernel's positions per block iteration at head_dim 128
  static constexpr int kMaxCounters = 4096;  // arrival counters at the start of the scratch
  static constexpr int kDeepStages = 6;      // 96 KB of ring per block: 2 blocks per SM, 160 KB ahead
  static constexpr int kWideStages = 3;      // 48 KB per block: 4 blocks per SM (16 warps), 128 KB ahead
  // Tensor-core kernel: 4 warps, each a ring of `stages` tiles of 16 positions (K + V: 8 KB at head_dim 128,
  // 4 KB at 64): 3 / 6 tiles = 96 KB per block, 2 blocks per SM, 128 KB in flight per SM.
  static constexpr int kMmaStages128 = 3;
  static constexpr int kMmaStages64 = 6;
};

// Rows (query heads) per block and ring depth of the tensor-core kernel: the GQA group padded to 8 or 16
// mma rows (a group above 16 takes several row groups).
inline int32_t mma_rows(int64_t group) { return group <= 8 ? 8 : 16; }
inline int32_t mma_default_stages(int64_t head_dim) {
  return head_dim == 64 ? DecodeSplitLimits::kMmaStages64 : DecodeSplitLimits::kMmaStages128;
}

// Query heads of one GQA group a block takes: the tensor-core kernel's tile rows (mma_rows), else 1, 2, 4 or 8.
inline int32_t rows_per_block(DecodeKernel kernel, int64_t group) {
  if (kernel == DecodeKernel::kTensorCores) return int32_t(mma_rows(group));
  return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
}

// group = n_heads / n_kv_heads; max_kv = max_blocks_per_seq * block_size; head_dim picks the tensor-core
// kernel's ring depth.
inline DecodeSplitPlan plan_decode_split(int64_t n_seqs, int64_t n_kv_heads, int64_t group, int64_t max_kv,
                                         int n_sms, DecodeKernel kernel = DecodeKernel::kCudaCores,
                                         int64_t head_dim = 128) {
  using L = DecodeSplitLimits;
  DecodeSplitPlan plan{};
  plan.kernel = kernel;
  plan.rows = rows_per_block(kernel, group);
  plan.n_row_groups = int32_t((group + plan.rows - 1) / plan.rows);
  max_kv = std::max<int64_t>(1, max_kv);
  const int64_t units = std::max<int64_t>(1, n_seqs * n_kv_heads * plan.n_row_groups);
  const int64_t target = int64_t(L::kTargetBlocksPerSm) * std::max(1, n_sms);
  int64_t splits = target / units;
  splits = std::min<int64_t>(splits, (max_kv + L::kMinChunk - 1) / L::kMinChunk);
  splits = std::clamp<int64_t>(splits, 1, L::kMaxSplits);
  if (units > L::kMaxCounters) splits = 1;  // the merge needs one counter per unit
  // Enough units for a full grid of the 2-per-SM kernel without splitting: the 4-per-SM kernel (more warps
  // computing) instead. Batch 64 of Llama-3-8B: 512 units >= 264 -> 3 stages, 512 blocks in one wave.
  plan.stages = units >= target ? L::kWideStages : L::kDeepStages;
  if (kernel == DecodeKernel::kTensorCores) plan.stages = mma_default_stages(head_dim);  // always 2 blocks per SM
  int64_t chunk = (max_kv + splits - 1) / splits;
  chunk = (chunk + L::kChunkAlign - 1) / L::kChunkAlign * L::kChunkAlign;
  plan.chunk = int32_t(std::min<int64_t>(chunk, int64_t(1) << 30));
  // Every row cuts its own kv_len into the `splits` chunks (decode_chunk): the grid keeps all of them, even where the
  // bound's chunks would need fewer (at the bound the last ones stay empty and exit at once).
  plan.n_splits = int32_t(splits);
  plan.fit_chunk = true;
  return plan;
}

// Batch-invariant plan (CudaBackendOptions::batch_invariant): chunks of a fixed kFixedChunk positions from 0,
// and always the partials + merge path (at least 2 splits), so a row's arithmetic depends on its own kv_len
// only: chunks past its kv_len are empty and merge in as exact zeros. Example: Llama-3-8B, context bound 4096
// -> 16 chunks of 256 whether the step holds 1 sequence or 64.
inline constexpr int64_t kFixedChunk = 256;
// The kernel is chosen from (head_dim, group) only, never from the batch; the tensor-core kernel's warps take
// the 16 tiles of a chunk in a fixed order whatever the ring depth.
inline DecodeSplitPlan plan_decode_split_fixed(int64_t group, int64_t max_kv,
                                               DecodeKernel kernel = DecodeKernel::kCudaCores, int64_t head_dim = 128) {
  DecodeSplitPlan plan{};
  plan.kernel = kernel;
  plan.rows = rows_per_block(kernel, group);
  plan.n_row_groups = int32_t((group + plan.rows - 1) / plan.rows);
  plan.chunk = int32_t(kFixedChunk);
  plan.stages = kernel == DecodeKernel::kTensorCores ? mma_default_stages(head_dim)
                                                     : DecodeSplitLimits::kWideStages;  // depth: not the arithmetic
  plan.n_splits = int32_t(std::max<int64_t>(2, (std::max<int64_t>(1, max_kv) + kFixedChunk - 1) / kFixedChunk));
  return plan;
}

}  // namespace ferry::cuda_ops
