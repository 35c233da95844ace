// The streamed quantized matvec's kernel and its launch (design: stream_quant.cuh); instantiated per weight type in
// stream_quant_<type>.cu (they compile in parallel).
#pragma once

#include <cuda_fp16.h>

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/common/silu.cuh"
#include "backends/cuda/matmul/matvec.cuh"
#include "backends/cuda/matmul/stream_quant_consume.cuh"
#include "backends/cuda/matmul/stream_quant_plan.cuh"
#include "backends/cuda/matmul/stream_store.cuh"
#include "backends/cuda/sm90/hopper.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops::quant_stream {

using streaming::BlockRows;
using streaming::kConsumerWarps;
using streaming::kThreads;
using streaming::StreamPlan;

// grid blocks (streaming::block_rows); kSegs = segs_per_warp(cols), kRows = plan.rows_per_stage = stage_rows(W, cols).
// p.w: Q8_0/Q4_0 quants [rows, nb x 32|16] then at p.w.scales fp16 [rows, nb]; Q6_K quants [rows, cols / 256 x 192]
// then at p.w.scales records [rows, cols / 256 x 18]; Q4_K / Q5_K [rows, cols / 256] GGUF super-blocks of 144 / 176
// bytes; p.x (1, cols) f32; p.out (1, rows) f32.
// kSwiglu (stream_quant_swiglu): p.w is (2 hidden, cols), w_gate's rows then w_up's; p.out (1, hidden) f32 =
// silu(x . w_gate^T) * (x . w_up^T) (silu.cuh). The block owns output units (plan.max_rows: the most a block has);
// a stage holds kRows / 2 units' gate rows then their up rows (streaming::produce_unit_stages with two runs), so both dot
// products of a unit land in the block and the SwiGLU is applied where it writes: no (1, 2 hidden) intermediate, no
// swiglu_fused launch. Partials: (warps, 2, max_rows), gate then up.
// kOne (MatvecParams::one_level_acts): the activations as one int8 level (stream_quant_math.cuh).
// The body of one block (`block` of `grid`): the kernels below run it for blockIdx.x, the stacked kernel for its
// part's blocks.
template <DType W, int kSegs, int kRows, bool kSwiglu, bool kOne>
__device__ __forceinline__ void stream_quant_block(const MatvecParams& p, const StreamPlan& plan, int64_t grid,
                                                   int64_t block) {
  pdl_allow_dependents();
  stamp(p.stamps, 0);
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);  // [stages]: a stage's bytes have landed
  uint64_t* empty = full + streaming::kMaxStages;             // [stages]: every consumer warp is done with it
  const int64_t cols = p.w.cols;
  const streaming::SplitRowBytes rb = streaming::split_row_bytes(W, cols);
  const int64_t stage_bytes = kRows * (rb.quants + rb.scales);
  // (stages, stage_bytes): per slot [kRows, rb.quants] quant bytes, then [kRows, nb] fp16 scales
  const streaming::Ring ring{smem + streaming::kBarrierBytes, stage_bytes, plan.stages, full, empty};
  // (warps, max_rows) f32; kSwiglu: (warps, 2, max_rows)
  float* part = reinterpret_cast<float*>(ring.base + size_t(plan.stages) * size_t(stage_bytes));
  const int64_t part_stride = kSwiglu ? 2 * plan.max_rows : plan.max_rows;  // floats per warp of `part`

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t hidden = p.w.rows / 2;  // kSwiglu: output units
  const BlockRows br = streaming::block_rows(kSwiglu ? hidden : p.w.rows, grid, block);  // kSwiglu: units

  if (threadIdx.x == 0) streaming::init_ring_barriers(full, empty, plan.stages, kConsumerWarps);
  __syncthreads();

  if (warp == kConsumerWarps) {  // producer: weights only, so it never waits for the previous kernel
    if (lane == 0) {
      streaming::RingCursor cur = streaming::producer_start();
      streaming::produce_unit_stages(p.w, kRows, kSwiglu ? 2 : 1, hidden, br, rb, ring, cur, p.stream);
    }
    return;
  }

  // MatvecParams::in_norm (one segment a warp: stream_quant_in_norm_applies): x = rms_norm(residual + delta) * weight
  // (or rms_norm(residual) * weight without delta) as the lanes load it. The norm's weight is constant, so the
  // lane's values are requested before the wait.
  const bool in_norm = kSegs == 1 && p.in_norm.residual != nullptr;
  const bool in_delta = p.in_norm.delta != nullptr;
  const bool has_seg = warp < plan.segs_per_row;  // kSegs == 1: this warp's one segment, warp-uniform
  float4 norm_w[4];
  if (in_norm && has_seg) load_lane_run_vecs<W>(p.in_norm.weight, warp, lane, false, norm_w);

  pdl_wait();  // x (or the residual and delta) is written by the previous kernels
  stamp(p.stamps, 1);
  LaneAct act[kSegs];
  if (in_norm) {
    // The norm's float4s (norm.cu's thread order, for the scale) and the lane's own columns in one round trip.
    float4 v[streaming::kNormMaxVecs], xr[4], xd[4] = {};
    streaming::load_norm_vecs(p.in_norm.residual, cols, v, p.in_norm.delta);
    if (has_seg) {
      load_lane_run_vecs<W>(p.in_norm.residual, warp, lane, true, xr);
      if (in_delta) load_lane_run_vecs<W>(p.in_norm.delta, warp, lane, true, xd);
    }
    const float scale = streaming::consumer_norm_scale(v, cols, p.in_norm.eps);
    quantize_lane_acts<W, kSegs, kOne>(act, plan.segs_per_row, warp, lane, [&](int, int k, int64_t) {
      const float4 r = xr[k], d = xd[k], w = norm_w[k];  // add_rms_norm's v = residual + delta; y = v * scale * w
      const float4 x = in_delta ? make_float4(r.x + d.x, r.y + d.y, r.z + d.z, r.w + d.w) : r;
      return make_float4(x.x * scale * w.x, x.y * scale * w.y, x.z * scale * w.z, x.w * scale * w.w);
    });
  } else {
    // Every segment's float4s requested before the first is quantized: one round trip to L2 instead of kSegs
    // (the quantization's shuffles kept the compiler from hoisting the loads of segment j + 1 above segment j's).
    // The acts phase stayed as long (docs/perf-log.md, 2026-11-30): each round trip waits behind the queued weight
    // reads, which the ring cap (WeightStream::ring_inflight) shortens.
    float4 xs[kSegs][4];
#pragma unroll
    for (int j = 0; j < kSegs; ++j) {
      const int seg = j * kConsumerWarps + warp;
      if (seg < plan.segs_per_row) load_lane_run_vecs<W>(p.x, seg, lane, false, xs[j]);
    }
    quantize_lane_acts<W, kSegs, kOne>(act, plan.segs_per_row, warp, lane,
                                       [&](int j, int k, int64_t) { return xs[j][k]; });
  }
  stamp(p.stamps, 2);
  streaming::RingCursor cur;
  consume_stages<W, kSegs, kRows, kSwiglu, kOne>(ring, cur, br.count, cols, plan.segs_per_row, act, part,
                                                 part_stride, plan.max_rows, warp, lane);
  stamp(p.stamps, 3);
  streaming::consumers_sync();

  if constexpr (kSwiglu) {
    for (int64_t r = threadIdx.x; r < br.count; r += kConsumerWarps * 32)
      p.out[br.first + r] = silu_mul(warps_sum(part, part_stride, r), warps_sum(part, part_stride, plan.max_rows + r));
  } else {
    for (int64_t r = threadIdx.x; r < br.count; r += kConsumerWarps * 32) {
      const int64_t row = br.first + r;
      const float y = warps_sum(part, plan.max_rows, r) + (p.bias ? p.bias[row] : 0.0f);
      // MatvecParams::residual_add: the deferred add (and with add_out this row's output), before out (which delta
      // may alias) is overwritten. The roundings of add_rms_norm's residual += delta, once or twice in that order.
      if (p.residual_add.residual != nullptr) {
        const float res = p.residual_add.residual[row] + p.residual_add.delta[row];
        p.residual_add.residual[row] = p.residual_add.add_out ? res + y : res;
      }
      streaming::store_row(p, row, y);
    }
  }
  stamp(p.stamps, 4);
}

template <DType W, int kSegs, int kRows, bool kSwiglu = false, bool kOne = false>
__global__ void __launch_bounds__(kThreads, 1) stream_quant_kernel(MatvecParams p, StreamPlan plan, int64_t grid) {
  stream_quant_block<W, kSegs, kRows, kSwiglu, kOne>(p, plan, grid, blockIdx.x);
}

// A stacked weight of two types (stream_quant_stacked): blocks [0, grid_head) stream the head part's rows (type WH,
// head.w (head rows, cols), head.out (1, head rows)), blocks [grid_head, grid_head + grid_tail) the tail part's (WT,
// tail.out = the head's out + head rows), each with its part's plan and the same prologue (x or in_norm). The
// branch is block-uniform; registers are the larger part's, shared memory the larger plan's.
template <DType WH, int kRowsH, DType WT, int kRowsT, int kSegs, bool kOne>
__global__ void __launch_bounds__(kThreads, 1)
    stream_quant_stacked_kernel(MatvecParams head, StreamPlan plan_head, int64_t grid_head, MatvecParams tail,
                                StreamPlan plan_tail, int64_t grid_tail) {
  if (int64_t(blockIdx.x) < grid_head) {
    stream_quant_block<WH, kSegs, kRowsH, false, kOne>(head, plan_head, grid_head, blockIdx.x);
  } else {
    stream_quant_block<WT, kSegs, kRowsT, false, kOne>(tail, plan_tail, grid_tail, int64_t(blockIdx.x) - grid_head);
  }
}

template <DType W, int kSegs, int kRows, bool kSwiglu, bool kOne>
void launch_instance(const MatvecParams& p, const StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream) {
  if constexpr (kSwiglu ? swiglu_instance_used(W, kSegs, kRows) : instance_used(W, kSegs, kRows)) {
    const auto kernel = stream_quant_kernel<W, kSegs, kRows, kSwiglu, kOne>;
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    launch_pdl(kernel, dim3(unsigned(grid)), dim3(kThreads), smem, stream, p, plan, grid);
    FERRY_CUDA_CHECK_LAUNCH(stream_quant_kernel);
  } else {
    FERRY_CUDA_REQUIRE(!"no stream_quant instance for this (type, segments, rows)");
  }
}

template <DType W, int kSegs, bool kSwiglu, bool kOne>
void launch_rows(const MatvecParams& p, const StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream) {
  switch (plan.rows_per_stage) {
    case 1: launch_instance<W, kSegs, 1, kSwiglu, kOne>(p, plan, grid, smem, stream); break;
    case 2: launch_instance<W, kSegs, 2, kSwiglu, kOne>(p, plan, grid, smem, stream); break;
    case 4: launch_instance<W, kSegs, 4, kSwiglu, kOne>(p, plan, grid, smem, stream); break;
    case 8: launch_instance<W, kSegs, 8, kSwiglu, kOne>(p, plan, grid, smem, stream); break;
    default: FERRY_CUDA_REQUIRE(!"stream_quant: rows per stage must be 1, 2, 4 or 8");
  }
}

template <DType W, bool kSwiglu, bool kOne>
void launch_levels(const MatvecParams& p, const StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream) {
  switch (segs_per_warp(p.w.cols)) {
    case 1: launch_rows<W, 1, kSwiglu, kOne>(p, plan, grid, smem, stream); break;
    case 2: launch_rows<W, 2, kSwiglu, kOne>(p, plan, grid, smem, stream); break;
    case 3: launch_rows<W, 3, kSwiglu, kOne>(p, plan, grid, smem, stream); break;
    case 4: launch_rows<W, 4, kSwiglu, kOne>(p, plan, grid, smem, stream); break;
    default: FERRY_CUDA_REQUIRE(!"stream_quant: 512..16384 columns");
  }
}

// MatvecParams::one_level_acts picks the instances.
template <DType W, bool kSwiglu = false>
void launch_type(const MatvecParams& p, const StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream) {
  if (p.one_level_acts) return launch_levels<W, kSwiglu, true>(p, plan, grid, smem, stream);
  launch_levels<W, kSwiglu, false>(p, plan, grid, smem, stream);
}

// The stacked kernel's launch (stream_quant_stacked_<pair>.cu): the rows-per-stage pair of the two plans picks the
// instance; only those some column count runs are compiled (stacked_instance_used).
template <DType WH, int kRowsH, DType WT, int kRowsT, bool kOne>
void launch_stacked_instance(const StackedLaunch& l, cudaStream_t stream) {
  if constexpr (stacked_instance_used(WH, kRowsH, WT, kRowsT)) {
    const auto kernel = stream_quant_stacked_kernel<WH, kRowsH, WT, kRowsT, 1, kOne>;
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(l.smem)));
    launch_pdl(kernel, dim3(unsigned(l.grid_head + l.grid_tail)), dim3(kThreads), l.smem, stream, l.head, l.plan_head,
               l.grid_head, l.tail, l.plan_tail, l.grid_tail);
    FERRY_CUDA_CHECK_LAUNCH(stream_quant_stacked_kernel);
  } else {
    FERRY_CUDA_REQUIRE(!"no stream_quant_stacked instance for these (type, rows) pairs");
  }
}

template <DType WH, int kRowsH, DType WT, bool kOne>
void launch_stacked_tail(const StackedLaunch& l, cudaStream_t stream) {
  switch (l.plan_tail.rows_per_stage) {
    case 4: launch_stacked_instance<WH, kRowsH, WT, 4, kOne>(l, stream); break;
    case 8: launch_stacked_instance<WH, kRowsH, WT, 8, kOne>(l, stream); break;
    default: FERRY_CUDA_REQUIRE(!"stream_quant_stacked: the tail's rows per stage must be 4 or 8");
  }
}

template <DType WH, DType WT>
void launch_stacked_pair(const StackedLaunch& l, cudaStream_t stream) {
  const auto one = [&]<bool kOne>() {
    switch (l.plan_head.rows_per_stage) {
      case 4: launch_stacked_tail<WH, 4, WT, kOne>(l, stream); break;
      case 8: launch_stacked_tail<WH, 8, WT, kOne>(l, stream); break;
      default: FERRY_CUDA_REQUIRE(!"stream_quant_stacked: the head's rows per stage must be 4 or 8");
    }
  };
  if (l.head.one_level_acts) {
    one.template operator()<true>();
  } else {
    one.template operator()<false>();
  }
}

}  // namespace ferry::cuda_ops::quant_stream
