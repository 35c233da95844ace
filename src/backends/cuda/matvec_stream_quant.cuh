// The producer warp of the streamed Q8_0/Q4_0 matvecs (version 7's matvec_stream_quant.cu and version 10's
// matvec_v10_kernel.cuh): a block's rows are contiguous in both regions of the "quants then scales" layout
// (weight_layout.cuh), so one ring stage of whole rows is two bulk copies completing one mbarrier.
#pragma once

#include <cstdint>

#include "backends/cuda/matvec.cuh"
#include "backends/cuda/matvec_stream_plan.cuh"
#include "backends/cuda/weight_layout.cuh"

namespace ferry::cuda_ops::v7 {

// Bytes of one row of a split-layout Q8_0/Q4_0 weight of `cols` columns: quants (nb x 32 | 16), fp16 scales
// (nb x 2). With cols % 256 == 0 both are multiples of 16 (bulk-copy sizes and ring offsets).
struct SplitRowBytes {
  int64_t quants, scales;
};
// Q4_K (version 10 only) streams its GGUF super-blocks as stored: quants = nb_k x 144, scales = 0 (one copy).
__host__ __device__ inline SplitRowBytes split_row_bytes(DType w, int64_t cols) {
  if (w == DType::Q4_K) return {cols / kKBlock * kQ4KBytes, 0};
  const int64_t nb = cols / kQBlock;
  return {nb * (w == DType::Q8_0 ? 32 : 16), nb * 2};
}

// Lane 0 of the producer warp: streams block rows [br.first, br.first + br.count) of p.w into the ring, stage g
// into slot g % plan.stages once every consumer warp has released it (empty[slot]). A slot (stage_bytes =
// rows_per_stage x (rb.quants + rb.scales)) holds [rows_per_stage, rb.quants] quant bytes, then
// [rows_per_stage, nb] fp16 scales; the block's last stage may hold fewer rows (same offsets). Reads only the
// weight, so it runs before the kernel's pdl_wait.
__device__ __forceinline__ void produce_quant_stages(const WeightView& w, const StreamPlan& plan, BlockRows br,
                                                     SplitRowBytes rb, uint8_t* ring, uint64_t* full,
                                                     uint64_t* empty) {
  const int64_t stage_q = plan.rows_per_stage * rb.quants;  // a slot's quant bytes; its scales follow
  const int64_t stage_bytes = plan.rows_per_stage * (rb.quants + rb.scales);
  const int64_t n_stage = (br.count + plan.rows_per_stage - 1) / plan.rows_per_stage;
  const uint8_t* qsrc = w.data + br.first * rb.quants;
  const uint8_t* ssrc = w.data + w.scales + br.first * rb.scales;
  int s = 0;
  uint32_t phase = 1;  // the first pass waits on fresh barriers: parity 1 completes at once
  for (int64_t g = 0; g < n_stage; ++g) {
    sm90::mbar_wait(&empty[s], phase);
    const int64_t left = br.count - g * plan.rows_per_stage;
    const int64_t rows_here = left < plan.rows_per_stage ? left : plan.rows_per_stage;
    const uint32_t qbytes = uint32_t(rows_here * rb.quants), sbytes = uint32_t(rows_here * rb.scales);
    uint8_t* dst = ring + size_t(s) * size_t(stage_bytes);
    sm90::mbar_arrive_expect_tx(&full[s], qbytes + sbytes);
    bulk_load(dst, qsrc + g * stage_q, qbytes, &full[s]);
    if (sbytes > 0) bulk_load(dst + stage_q, ssrc + g * plan.rows_per_stage * rb.scales, sbytes, &full[s]);
    if (++s == plan.stages) {
      s = 0;
      phase ^= 1u;
    }
  }
}

// The SwiGLU form (version 10's kSwiglu): w is (2 hidden, cols), the rows of w_gate then those of w_up, and the
// block owns output units [br.first, br.first + br.count) of hidden. Stage g holds pairs = rows_per_stage / 2
// units: their gate rows in slot rows [0, pairs), their up rows (hidden further down w) in slot rows
// [pairs, 2 pairs), quants then scales as above: four bulk copies (two when the type has no scale region),
// one mbarrier. The block's last stage may hold fewer units (same offsets).
__device__ __forceinline__ void produce_quant_pair_stages(const WeightView& w, const StreamPlan& plan, BlockRows br,
                                                          SplitRowBytes rb, int64_t hidden, uint8_t* ring,
                                                          uint64_t* full, uint64_t* empty) {
  const int64_t pairs = plan.rows_per_stage / 2;
  const int64_t stage_q = plan.rows_per_stage * rb.quants;
  const int64_t stage_bytes = plan.rows_per_stage * (rb.quants + rb.scales);
  const int64_t n_stage = (br.count + pairs - 1) / pairs;
  const uint8_t* gq = w.data + br.first * rb.quants;
  const uint8_t* uq = w.data + (hidden + br.first) * rb.quants;
  const uint8_t* gs = w.data + w.scales + br.first * rb.scales;
  const uint8_t* us = w.data + w.scales + (hidden + br.first) * rb.scales;
  int s = 0;
  uint32_t phase = 1;
  for (int64_t g = 0; g < n_stage; ++g) {
    sm90::mbar_wait(&empty[s], phase);
    const int64_t left = br.count - g * pairs;
    const int64_t units = left < pairs ? left : pairs;
    const uint32_t qbytes = uint32_t(units * rb.quants), sbytes = uint32_t(units * rb.scales);
    uint8_t* dst = ring + size_t(s) * size_t(stage_bytes);
    sm90::mbar_arrive_expect_tx(&full[s], 2 * (qbytes + sbytes));
    bulk_load(dst, gq + g * pairs * rb.quants, qbytes, &full[s]);
    bulk_load(dst + pairs * rb.quants, uq + g * pairs * rb.quants, qbytes, &full[s]);
    if (sbytes > 0) {
      bulk_load(dst + stage_q, gs + g * pairs * rb.scales, sbytes, &full[s]);
      bulk_load(dst + stage_q + pairs * rb.scales, us + g * pairs * rb.scales, sbytes, &full[s]);
    }
    if (++s == plan.stages) {
      s = 0;
      phase ^= 1u;
    }
  }
}

}  // namespace ferry::cuda_ops::v7
