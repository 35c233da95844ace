// The producer warp of the streamed quantized matvec (stream_quant_kernel.cuh): a block's rows are contiguous in
// both regions of the "quants then scales" layout (weight_layout.cuh), so one ring stage of whole rows is two bulk
// copies completing one mbarrier (one for Q4_K's and Q5_K's super-blocks).
#pragma once

#include <cstdint>

#include "backends/cuda/matmul/matvec.cuh"
#include "backends/cuda/matmul/stream_plan.cuh"
#include "backends/cuda/matmul/weight_layout.cuh"

namespace ferry::cuda_ops::streaming {

// Bytes of one row of a split-layout weight of `cols` columns: Q8_0/Q4_0 quants (nb x 32 | 16) and fp16 scales
// (nb x 2), both multiples of 16 (bulk-copy sizes and ring offsets) with cols % 256 == 0; Q6_K quants (nb_k x 192)
// and scale records (nb_k x 18), the records a multiple of 16 with cols % 2048 == 0 (stream_quant_plan.cuh's
// stream_cols_ok).
struct SplitRowBytes {
  int64_t quants, scales;
};
// Q4_K and Q5_K stream their GGUF super-blocks as stored: quants = nb_k x 144 | 176, scales = 0 (one copy).
__host__ __device__ inline SplitRowBytes split_row_bytes(DType w, int64_t cols) {
  const int64_t nbk = cols / kKBlock;
  if (w == DType::Q4_K) return {nbk * kQ4KBytes, 0};
  if (w == DType::Q5_K) return {nbk * kQ5KBytes, 0};
  if (w == DType::Q6_K) return {nbk * 192, nbk * 18};  // ql[128] qh[64]; int8 scales[16], fp16 d
  const int64_t nb = cols / kQBlock;
  return {nb * (w == DType::Q8_0 ? 32 : 16), nb * 2};
}

// Where a producer and its consumers are in the ring: the next slot and the parity its barrier waits on.
struct RingCursor {
  int slot = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance(int stages) {
    if (++slot == stages) {
      slot = 0;
      phase ^= 1u;
    }
  }
};
// The producer's cursor starts one parity ahead: its first pass waits on fresh `empty` barriers, which parity 1
// completes at once.
__device__ __forceinline__ RingCursor producer_start() { return RingCursor{0, 1u}; }

// The ring's geometry: stages slots of slot_pitch bytes (a slot may hold less than its pitch).
struct Ring {
  uint8_t* base;
  int64_t slot_pitch;
  int stages;
  uint64_t* full;   // [stages]: a stage's bytes have landed
  uint64_t* empty;  // [stages]: every consumer warp is done with it
};

// One stage of a producer warp's lane 0 (into the slot at dst, completing bar): `units` output units from `first`
// on of w. A unit is `runs` weight rows: runs = 1 (a plain matvec: unit u is row u) or 2 (the SwiGLU form: w is
// (2 hidden, cols), w_gate's rows then w_up's, unit u is rows u and run_offset + u with run_offset = hidden). The slot
// holds per = rows_per_stage / runs units: run r's rows in slot rows [r per, (r + 1) per), as [rows_per_stage,
// rb.quants] quant bytes, then [rows_per_stage, rb.scales] scale bytes (the split layout, weight_layout.cuh; Q4_K
// and Q5_K have no scale region). A stage may hold fewer units (same offsets).
__device__ __forceinline__ void load_unit_stage(const WeightView& w, int64_t rows_per_stage, int runs,
                                                int64_t run_offset, int64_t first, int64_t units, SplitRowBytes rb,
                                                uint8_t* dst, uint64_t* bar, CopyPolicy pol) {
  const int64_t per = rows_per_stage / runs;
  const int64_t stage_q = rows_per_stage * rb.quants;  // a slot's quant bytes; its scales follow
  const uint32_t qbytes = uint32_t(units * rb.quants), sbytes = uint32_t(units * rb.scales);
  sm90::mbar_arrive_expect_tx(bar, uint32_t(runs) * (qbytes + sbytes));
  for (int r = 0; r < runs; ++r) {
    const int64_t row = r * run_offset + first;  // the run's first weight row in this stage
    bulk_load(dst + r * per * rb.quants, w.data + row * rb.quants, qbytes, bar, pol);
    if (sbytes > 0)
      bulk_load(dst + stage_q + r * per * rb.scales, w.data + w.scales + row * rb.scales, sbytes, bar, pol);
  }
}

// Lane 0 of the producer warp: streams the block's output units [br.first, br.first + br.count) of w into the
// ring (load_unit_stage's units and layout), one stage per slot once every consumer warp has released it
// (ring.empty); the block's last stage may hold fewer units. Reads only the weight, so it runs before the
// kernel's pdl_wait. ws.ring_inflight = N in [1, ring.stages): stage g is issued only once stage g - N has landed
// (its `full` barrier; waiting on it does not change it), so at most N stages of this block are queued at the memory
// system at once; 0: no such cap. ws.evict_first: the copies carry the L2 evict_first policy.
__device__ __forceinline__ void produce_unit_stages(const WeightView& w, int64_t rows_per_stage, int runs,
                                                    int64_t run_offset, BlockRows br, SplitRowBytes rb,
                                                    const Ring& ring, RingCursor& cur, const WeightStream& ws = {}) {
  const int64_t per = rows_per_stage / runs;  // units a stage holds
  const int64_t n_stage = (br.count + per - 1) / per;
  const int max_inflight = ws.ring_inflight;
  const bool capped = max_inflight > 0 && max_inflight < ring.stages;
  const CopyPolicy pol = copy_policy(ws);
  // The consumers' view of stage g - max_inflight: its slot and the parity its `full` barrier completes with (the
  // producer's `empty` parity flipped: both start a slot's first use).
  RingCursor landed{cur.slot, cur.phase ^ 1u};
  for (int64_t g = 0; g < n_stage; ++g) {
    if (capped && g >= max_inflight) {
      sm90::mbar_wait(&ring.full[landed.slot], landed.phase);
      landed.advance(ring.stages);
    }
    sm90::mbar_wait(&ring.empty[cur.slot], cur.phase);
    const int64_t left = br.count - g * per;
    load_unit_stage(w, rows_per_stage, runs, run_offset, br.first + g * per, left < per ? left : per, rb,
                    ring.base + size_t(cur.slot) * size_t(ring.slot_pitch), &ring.full[cur.slot], pol);
    cur.advance(ring.stages);
  }
}

}  // namespace ferry::cuda_ops::streaming
