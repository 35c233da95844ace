// How split-KV decode attention cuts each sequence's context (decode_split.cuh). Host code only; the plan
// depends only on host-side sizes (the context bound max_blocks_per_seq * block_size, not the kv_len in
// device memory), so one captured graph serves every context up to that bound.
//
// Rule: a block is one (sequence, KV head, row group, chunk); aim for at most kTargetBlocksPerSm blocks per
// SM in one launch (the kernel's shared-memory ring fits two blocks per SM: a third block would start a
// second, mostly empty wave), never a chunk shorter than kMinChunk positions, at most kMaxSplits chunks, and
// no split at all once the (sequence, KV head, row group) units alone fill the target.
//
// Worked example, Llama-3-8B (32 query heads, 8 KV heads: 4 rows per block, 1 row group) on the H200's
// 132 SMs, target 2 x 132 = 264 blocks:
//   batch 1, context 4096:  8 units; 264 / 8 = 33 splits, capped by 4096 / 128 = 32 -> 32 chunks of
//                           128 positions: 256 blocks (~2 per SM), each reading 128 x 2 x 256 B = 64 KB.
//   batch 1, context 32768: 33 splits -> chunk ceil(32768 / 33) = 993, rounded up to 1024 -> 32 chunks;
//                           256 blocks of 512 KB each.
//   batch 8, context 4096:  64 units; 264 / 64 = 4 splits (rounded down: 5 would be 320 blocks, 1.2 waves)
//                           -> chunk 1024 -> 4 chunks: 256 blocks.
//   batch 64, any context:  512 units >= 264 -> 1 split: 512 blocks, each a whole context; the kernel
//                           writes the output directly (no partials, no merge).
#pragma once

#include <algorithm>
#include <cstdint>

namespace ferry::cuda_ops {

struct DecodeSplitPlan {
  int32_t n_splits;      // chunks per (sequence, KV head, row group)
  int32_t chunk;         // KV positions per chunk (a multiple of kChunkAlign)
  int32_t rows;          // query heads per block: 1, 2, 4 or 8
  int32_t n_row_groups;  // ceil(group / rows)
  int32_t stages;        // the kernel's cp.async ring depth: kDeepStages (2 blocks/SM) or kWideStages (4 blocks/SM)
};

struct DecodeSplitLimits {
  static constexpr int kTargetBlocksPerSm = 2;
  static constexpr int kMinChunk = 128;
  static constexpr int kMaxSplits = 128;
  static constexpr int kChunkAlign = 64;     // the kernel's positions per block iteration at head_dim 128
  static constexpr int kMaxCounters = 4096;  // arrival counters at the start of the scratch
  static constexpr int kDeepStages = 6;      // 96 KB of ring per block: 2 blocks per SM, 160 KB ahead
  static constexpr int kWideStages = 3;      // 48 KB per block: 4 blocks per SM (16 warps), 128 KB ahead
};

// group = n_heads / n_kv_heads; max_kv = max_blocks_per_seq * block_size.
inline DecodeSplitPlan plan_decode_split(int64_t n_seqs, int64_t n_kv_heads, int64_t group, int64_t max_kv,
                                         int n_sms) {
  using L = DecodeSplitLimits;
  DecodeSplitPlan plan{};
  plan.rows = group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
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
  int64_t chunk = (max_kv + splits - 1) / splits;
  chunk = (chunk + L::kChunkAlign - 1) / L::kChunkAlign * L::kChunkAlign;
  plan.chunk = int32_t(std::min<int64_t>(chunk, int64_t(1) << 30));
  plan.n_splits = int32_t((max_kv + plan.chunk - 1) / plan.chunk);
  return plan;
}

// Batch-invariant plan (CudaBackendOptions::batch_invariant): chunks of a fixed kFixedChunk positions from 0,
// and always the partials + merge path (at least 2 splits), so a row's arithmetic depends on its own kv_len
// only: chunks past its kv_len are empty and merge in as exact zeros. Example: Llama-3-8B, context bound 4096
// -> 16 chunks of 256 whether the step holds 1 sequence or 64.
inline constexpr int64_t kFixedChunk = 256;
inline DecodeSplitPlan plan_decode_split_fixed(int64_t group, int64_t max_kv) {
  DecodeSplitPlan plan{};
  plan.rows = group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
  plan.n_row_groups = int32_t((group + plan.rows - 1) / plan.rows);
  plan.chunk = int32_t(kFixedChunk);
  plan.stages = DecodeSplitLimits::kWideStages;  // the ring depth does not change the arithmetic
  plan.n_splits = int32_t(std::max<int64_t>(2, (std::max<int64_t>(1, max_kv) + kFixedChunk - 1) / kFixedChunk));
  return plan;
}

}  // namespace ferry::cuda_ops
