// Attention of a whole step in ONE launch: the prefill tiles (sequences with q_len >= 2) and the split-KV
// decode units (q_len == 1) of attention.cuh's contract run as blocks of one grid, so the compute-bound prefill
// part and the bandwidth-bound decode part overlap instead of running one launch after the other (a mixed
// serving step: ~460 prompt tokens of one or two sequences beside ~50 decode rows).
//
// Grid (1-D): n_slots prefill slots and the decode blocks (plan.n_splits x n_seqs x n_kv_heads * n_row_groups,
// the decode kernel's grid flattened, split fastest). A decode block runs decode_mma_block (bit for bit what
// decode_mma_kernel computes for that block). A prefill slot loops: it draws a ticket from a counter in the
// scratch (atomicAdd), ticket i = split i % K of item i / K, item = query tile item / n_heads (find_tile order:
// sequence by sequence, each sequence's last rows first) of head item % n_heads, K = config.key_splits; the slot
// that draws the last ticket of the launch (n_items x K + n_slots - 1: every slot draws exactly one past the end)
// resets the counter to zero. So the grid needs no worst-case count of tiles (the device-side q_len decides;
// surplus slots draw once and exit) and no host mirror: capturable.
//
// Key splits (flash-decoding for prompt tiles; K = 1, the default, is the unsplit kernel): a tile whose keys span
// n_k key tiles of 64 positions is cut into u = key_split_count(n_k, K, min_split_key_tiles) consecutive ranges
// (u = 1: short tiles stay whole; tickets of splits u .. K - 1 are drawn and skipped). u = 1: the slot runs the
// tile as flash_prefill_tile does (bit for bit the flash prefill kernel's tile of that size). u >= 2: the slot
// walks its range, writes the rows' partial state (o unnormalised, m, l) to scratch and counts itself on the
// item's arrival counter; the last of the u to arrive merges the u partials in ascending split order
// (finish_key_split: the same bits whoever arrives last). The longest item's walk, the critical path of a step
// with few long prompt tiles, shrinks u-fold; the cost is the partials' write + read (~33 KB per split of a
// 64-row tile at head_dim 128, about one K/V tile's worth) and one merge per split item.
//
// Block order: when the step has more tokens than sequences (some prompt rows), the slots come first, so the
// longest prefill tiles start first and the decode blocks fill the SMs beside them; otherwise (a decode step)
// the decode blocks come first and the slots only confirm there is nothing to do.
//
// Scratch: the decode plan's (decode_split_scratch_bytes), whose arrival counters leave the last one,
// counters[kMaxCounters - 1], free when mixed_attention_supports() holds: that is the ticket counter. Key splits
// take the counters below it, counters[kMaxCounters - 2 - item] (mixed_key_splits_fit: none of them is a decode
// unit's; a fixed place, zero since the scratch was allocated, whatever the step's sizes), and put their partials
// after the decode plan's region (rounded up to 256 bytes): (n_tokens, n_heads, K, head_dim) f32 o, then
// (n_tokens, n_heads, K, 2) f32 (m, l), indexed by query row.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/attention/attention.cuh"
#include "backends/cuda/attention/attention_split_heuristic.cuh"

namespace ferry::cuda_ops {

// Most blocks one prompt tile's keys may be split over (MixedAttentionConfig::key_splits).
inline constexpr int kMaxKeySplits = 4;

struct MixedAttentionConfig {
  int tile_rows = 64;            // query rows of a prefill tile: 64 or 128 (flash_prefill's kRows64 / kRows128)
  int slots_per_sm = 2;          // prefill slots per SM (1 or 2; the kernel fits 2 blocks per SM)
  int key_splits = 1;            // 1 .. kMaxKeySplits: most blocks one (tile, head) item's keys are split over
  int min_split_key_tiles = 2;   // >= 1: a split walks at least this many 64-position key tiles
};

// Splits of a tile whose keys span n_k key tiles of 64 positions: as many as key_splits allows with at least
// min_tiles key tiles each (1 below 2 x min_tiles). Split j walks key tiles [key_split_begin(n_k, u, j),
// key_split_begin(n_k, u, j + 1)): consecutive ranges covering [0, n_k), sizes differing by at most one.
__host__ __device__ inline int key_split_count(int n_k, int key_splits, int min_tiles) {
  const int by_len = n_k / min_tiles;
  const int u = key_splits < by_len ? key_splits : by_len;
  return u > 1 ? u : 1;
}
__host__ __device__ inline int key_split_begin(int n_k, int n_used, int j) {
  return int(int64_t(n_k) * j / n_used);
}

// head_dim 64 or 128, the tensor-core decode plan with its default ring depth, q and out 16-byte aligned, and
// the ticket counter free (one split, or fewer than kMaxCounters decode units), no window and no soft-cap.
bool mixed_attention_supports(const AttentionParams& p, const DecodeSplitPlan& plan);
// Whether config's key splits fit the arrival counters beside the decode plan's (every possible (tile, head) item
// needs one when key_splits > 1); always true at key_splits == 1.
bool mixed_key_splits_fit(const AttentionParams& p, const DecodeSplitPlan& plan, const MixedAttentionConfig& config);
// Scratch mixed_attention(p, plan, config) needs: the decode plan's, plus the key splits' partials when
// config.key_splits > 1 (n_tokens x n_heads x key_splits x (head_dim + 2) f32, so ~34 MB at 512 tokens, 32 heads,
// 4 splits, head_dim 128). Host sizes only.
size_t mixed_attention_scratch_bytes(const AttentionParams& p, const DecodeSplitPlan& plan,
                                     const MixedAttentionConfig& config);
// The key split proposed for a step of p's host-known sizes (n_tokens, n_heads, max_blocks_per_seq x block_size)
// with prefill tiles of tile_rows: the step's (tile, head) items, at most ceil(n_tokens / tile_rows) x n_heads,
// split into the most (a power of 2, <= kMaxKeySplits) that keeps them within 8 per SM, so that every SM gets
// several items of bounded length; 1 when the items alone fill a wave of 2 slots per SM, when no tile can be long
// enough to split, when the counters do not fit or the partials would pass 64 MB. Example, Llama-3-8B on the H200
// (132 SMs): 460 prompt + 50 decode rows, 64-row tiles: 8 x 32 = 256 items -> K 4. Not yet used by attention()
// (not measured: docs/perf-log.md "## 2026-11-30: key splits in mixed attention").
int mixed_key_splits(const AttentionParams& p, const DecodeSplitPlan& plan, int tile_rows, int n_sms);
// Writes every row of out (prefill and decode rows). p.scratch: mixed_attention_scratch_bytes(p, plan, config)
// bytes, zero when first allocated (the kernel leaves its counters at zero).
void mixed_attention(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream,
                     const MixedAttentionConfig& config = {});

}  // namespace ferry::cuda_ops
