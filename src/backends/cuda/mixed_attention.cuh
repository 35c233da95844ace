// Attention of a whole step in ONE launch: the prefill tiles (sequences with q_len >= 2) and the split-KV
// decode units (q_len == 1) of attention.cuh's contract run as blocks of one grid, so the compute-bound prefill
// part and the bandwidth-bound decode part overlap instead of running one launch after the other (a mixed
// serving step: ~460 prompt tokens of one or two sequences beside ~50 decode rows).
//
// Grid (1-D): n_slots prefill slots and the decode blocks (plan.n_splits x n_seqs x n_kv_heads * n_row_groups,
// the decode kernel's grid flattened, split fastest). A decode block runs decode_mma_block (bit for bit what
// decode_mma_kernel computes for that block). A prefill slot loops: it draws a ticket from a counter in the
// scratch (atomicAdd), ticket i = query tile i / n_heads (find_tile order: sequence by sequence, each
// sequence's last rows first) of head i % n_heads, and runs flash_prefill_tile (bit for bit the flash prefill
// kernel's tile of that size); the slot that draws the last ticket of the launch (n_items + n_slots - 1: every
// slot draws exactly one past the end) resets the counter to zero. So the grid needs no worst-case count of
// tiles (the device-side q_len decides; surplus slots draw once and exit) and no host mirror: capturable.
//
// Block order: when the step has more tokens than sequences (some prompt rows), the slots come first, so the
// longest prefill tiles start first and the decode blocks fill the SMs beside them; otherwise (a decode step)
// the decode blocks come first and the slots only confirm there is nothing to do.
//
// Scratch: the decode plan's (decode_split_scratch_bytes), whose arrival counters leave the last one,
// counters[kMaxCounters - 1], free when mixed_attention_supports() holds: that is the ticket counter.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/attention.cuh"
#include "backends/cuda/attention_split_heuristic.cuh"

namespace ferry::cuda_ops {

struct MixedAttentionConfig {
  int tile_rows = 64;         // query rows of a prefill tile: 64 or 128 (flash_prefill's kRows64 / kRows128)
  int slots_per_sm = 2;       // prefill slots per SM (1 or 2; the kernel fits 2 blocks per SM)
};

// head_dim 64 or 128, the tensor-core decode plan with its default ring depth, q and out 16-byte aligned, and
// the ticket counter free (one split, or fewer than kMaxCounters decode units).
bool mixed_attention_supports(const AttentionParams& p, const DecodeSplitPlan& plan);
// Writes every row of out (prefill and decode rows). p.scratch as decode_split_attention needs it.
void mixed_attention(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream,
                     const MixedAttentionConfig& config = {});

}  // namespace ferry::cuda_ops
