// The decode FFN kernel (design: decode_ffn.cuh) and its launch; instantiated per weight type in decode_ffn_q8.cu
// and decode_ffn_q4.cu (they compile in parallel).
#pragma once

#include <iterator>

#include "backends/cuda/common.cuh"
#include "backends/cuda/decode_ffn.cuh"
#include "backends/cuda/decode_ffn_plan.cuh"
#include "backends/cuda/grid_barrier.cuh"
#include "backends/cuda/matvec_add_norm.cuh"
#include "backends/cuda/matvec_v10_consume.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/silu.cuh"

namespace ferry::cuda_ops::ffn {

using v7::kConsumerWarps;
using v7::kThreads;

// Consumer threads only: named barrier 1 (the producer warp keeps streaming).
__device__ __forceinline__ void ffn_grid_barrier(unsigned long long* counter) {
  grid_barrier<1, kConsumerWarps * 32>(counter);
}

// grid = SM count, one block per SM, all resident (decode_ffn checks the occupancy). Block b owns rows
// block_rows(dim, grid, b) of wo and w_down and units block_rows(hidden, grid, b) of w_gate|w_up, as version 10
// assigns them. kSegsD / kRowsD: version 10's segments per warp and stage rows at dim columns (wo, gate|up);
// kSegsH / kRowsH at hidden columns (down).
template <DType W, int kSegsD, int kRowsD, int kSegsH, int kRowsH>
__global__ void __launch_bounds__(kThreads, 1) decode_ffn_kernel(DecodeFfnParams p, Plan plan) {
  static_assert(kRowsD >= 2, "gate|up stages hold row pairs");
  pdl_allow_dependents();
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + v7::kMaxStages;
  const v7::Ring ring{smem + v7::kBarrierBytes, plan.slot_pitch, plan.stages, full, empty};
  // (warps, 2, part_rows) f32: a warp's partial of each row (unit: gate, then up) of the current weight
  float* part = reinterpret_cast<float*>(ring.base + size_t(plan.stages) * size_t(plan.slot_pitch));
  const int64_t part_stride = 2 * plan.part_rows;
  const int64_t dim = p.wo.rows, hidden = p.w_down.cols;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const v7::BlockRows rows = v7::block_rows(dim, gridDim.x, blockIdx.x);     // of wo and w_down
  const v7::BlockRows units = v7::block_rows(hidden, gridDim.x, blockIdx.x);  // of w_gate|w_up

  if (threadIdx.x == 0) v7::init_ring_barriers(full, empty, plan.stages, kConsumerWarps);
  __syncthreads();

  if (warp == kConsumerWarps) {  // producer: the three weights back to back, never waiting for activations
    if (lane == 0) {
      v7::RingCursor cur = v7::producer_start();
      v7::produce_unit_stages(p.wo, kRowsD, 1, 0, rows, v7::split_row_bytes(W, dim), ring, cur, p.stream);
      v7::produce_unit_stages(p.w_gate_up, kRowsD, 2, hidden, units, v7::split_row_bytes(W, dim), ring, cur, p.stream);
      v7::produce_unit_stages(p.w_down, kRowsH, 1, 0, rows, v7::split_row_bytes(W, hidden), ring, cur, p.stream);
    }
    return;
  }

  pdl_wait();  // attn and residual are written by earlier kernels
  v7::RingCursor cur;
  const int segs_d = int(dim / v10::kSegVals), segs_h = int(hidden / v10::kSegVals);
  // Thread t < rows.count keeps residual row rows.first + t in a register from phase to phase (only this block
  // writes it), so adding a projection's rows waits on no load.
  const bool owns_row = threadIdx.x < rows.count;
  float res_row = owns_row ? p.residual[rows.first + threadIdx.x] : 0.0f;
  // The warps' partials of the block's rows added in warp order, into the residual (version 10's sum + bias with no
  // bias, then add_rms_norm's residual + delta: the same two roundings).
  const auto add_rows = [&] {
    v7::consumers_sync();
    if (owns_row) {
      res_row += v10::warps_sum(part, part_stride, threadIdx.x) + 0.0f;
      p.residual[rows.first + threadIdx.x] = res_row;
    }
  };
  // The lane's float4s of src at its dim-column segments (lane_runs; quantize_lane_acts's (j, k) order), through
  // L2 where another block of this grid wrote src.
  const auto load_lane_runs = [&](const float* src, bool through_l2, float4 (&out)[kSegsD][4]) {
#pragma unroll
    for (int j = 0; j < kSegsD; ++j) {
      const int seg = j * kConsumerWarps + warp;
      if (seg < segs_d) v10::load_lane_run_vecs<W>(src, seg, lane, through_l2, out[j]);
    }
  };

  {  // residual += attn . wo^T
    v10::LaneAct act[kSegsD];
    v10::quantize_lane_acts<W, kSegsD>(act, segs_d, warp, lane, [&](int, int, int64_t c) {
      return *reinterpret_cast<const float4*>(p.attn + c);
    });
    v10::consume_stages<W, kSegsD, kRowsD, false>(ring, cur, rows.count, dim, segs_d, act, part, part_stride,
                                                  plan.part_rows, warp, lane);
    add_rows();
  }
  {  // act = silu(x . w_gate^T) * (x . w_up^T), x = rms_norm(residual) * ffn_norm applied as the lanes load it
    float4 g[kSegsD][4];  // the lane's ffn_norm values, loaded before the barrier
    load_lane_runs(p.ffn_norm, false, g);
    ffn_grid_barrier(p.barrier);
    // The norm's float4s and the lane's own residual values in one round trip.
    float4 v[v7::kNormMaxVecs], xr[kSegsD][4];
    v7::load_norm_vecs(p.residual, dim, v);
    load_lane_runs(p.residual, true, xr);
    const float scale = v7::consumer_norm_scale(v, dim, p.eps);
    v10::LaneAct act[kSegsD];
    v10::quantize_lane_acts<W, kSegsD>(act, segs_d, warp, lane, [&](int j, int k, int64_t) {
      const float4 x = xr[j][k], w = g[j][k];  // norm.cu's y = v * scale * w
      return make_float4(x.x * scale * w.x, x.y * scale * w.y, x.z * scale * w.z, x.w * scale * w.w);
    });
    v10::consume_stages<W, kSegsD, kRowsD, true>(ring, cur, units.count, dim, segs_d, act, part, part_stride,
                                                 plan.part_rows, warp, lane);
    v7::consumers_sync();
    for (int64_t u = threadIdx.x; u < units.count; u += kConsumerWarps * 32)
      p.act[units.first + u] = silu_mul(v10::warps_sum(part, part_stride, u),
                                        v10::warps_sum(part, part_stride, plan.part_rows + u));
  }
  ffn_grid_barrier(p.barrier);

  {  // residual += act . w_down^T
    v10::LaneAct act[kSegsH];
    v10::quantize_lane_acts<W, kSegsH>(act, segs_h, warp, lane, [&](int, int, int64_t c) {
      return __ldcg(reinterpret_cast<const float4*>(p.act + c));
    });
    v10::consume_stages<W, kSegsH, kRowsH, false>(ring, cur, rows.count, hidden, segs_h, act, part, part_stride,
                                                  plan.part_rows, warp, lane);
    add_rows();
  }
  {  // out = rms_norm(residual) * next_norm: the block's rows (norm.cu's per-element arithmetic)
    const float w = owns_row ? p.next_norm[rows.first + threadIdx.x] : 0.0f;
    ffn_grid_barrier(p.barrier);
    float4 v[v7::kNormMaxVecs];
    v7::load_norm_vecs(p.residual, dim, v);
    const float scale = v7::consumer_norm_scale(v, dim, p.eps);
    if (owns_row) p.out[rows.first + threadIdx.x] = res_row * scale * w;
  }
}

template <DType W, int64_t kDim, int64_t kHidden>
void launch_shape(const DecodeFfnParams& p, const Plan& plan, int grid, size_t smem, cudaStream_t stream) {
  const auto kernel = decode_ffn_kernel<W, v10::segs_per_warp(kDim), v10::stage_rows(W, kDim),
                                        v10::segs_per_warp(kHidden), v10::stage_rows(W, kHidden)>;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  // Every block must be resident at once (the grid barriers): one block per SM, grid = SM count.
  int per_sm = 0;
  FERRY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  FERRY_CUDA_REQUIRE(per_sm >= 1);
  launch_pdl(kernel, dim3(unsigned(grid)), dim3(kThreads), smem, stream, p, plan);
  FERRY_CUDA_CHECK_LAUNCH(decode_ffn_kernel);
}

// One launch for p's shape (one of kShapes; decode_ffn_supports checked it).
template <DType W, size_t kI = 0>
void launch_type(const DecodeFfnParams& p, const Plan& plan, int grid, size_t smem, cudaStream_t stream) {
  if constexpr (kI < std::size(kShapes)) {
    constexpr Shape s = kShapes[kI];
    if (p.wo.rows == s.dim && p.w_down.cols == s.hidden) {
      launch_shape<W, s.dim, s.hidden>(p, plan, grid, smem, stream);
    } else {
      launch_type<W, kI + 1>(p, plan, grid, smem, stream);
    }
  } else {
    FERRY_CUDA_REQUIRE(!"decode_ffn: no instance for this (dim, hidden)");
  }
}

}  // namespace ferry::cuda_ops::ffn
