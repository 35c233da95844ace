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

// Lane 0 of the producer warp, for one weight of n_units output units (v7::load_unit_stage's units: runs rows each),
// per = rows_per_stage / runs units a stage: takes stage after stage from *counter (stage c = units [c per, c per +
// per)) while any is left and the block's partials have room (cap units), streams each into the next slot with its
// first unit in hdr[slot], then posts an end stage (hdr = -1, no bytes). The next stage is asked for while the
// current one is issued, so the atomic's round trip overlaps the wait for a free slot.
__device__ __forceinline__ void produce_taken_stages(const WeightView& w, int64_t rows_per_stage, int runs,
                                                     int64_t run_offset, int64_t n_units, int64_t cap,
                                                     unsigned int* counter, v7::SplitRowBytes rb, const v7::Ring& ring,
                                                     v7::RingCursor& cur, int* hdr) {
  const int64_t per = rows_per_stage / runs;
  const unsigned int n_stage = unsigned((n_units + per - 1) / per);
  int64_t taken = 0;
  unsigned int next = atomicAdd(counter, 1u);
  while (next < n_stage) {
    const unsigned int c = next;
    taken += per;
    next = taken + per <= cap ? atomicAdd(counter, 1u) : n_stage;  // never ask for a stage there is no room for
    sm90::mbar_wait(&ring.empty[cur.slot], cur.phase);
    const int64_t first = int64_t(c) * per, left = n_units - first;
    hdr[cur.slot] = int(first);  // published by the arrival in load_unit_stage (release, CTA scope)
    v7::load_unit_stage(w, rows_per_stage, runs, run_offset, first, left < per ? left : per, rb,
                        ring.base + size_t(cur.slot) * size_t(ring.slot_pitch), &ring.full[cur.slot]);
    cur.advance(ring.stages);
  }
  sm90::mbar_wait(&ring.empty[cur.slot], cur.phase);
  hdr[cur.slot] = -1;
  sm90::mbar_arrive(&ring.full[cur.slot]);
  cur.advance(ring.stages);
}

// The consumer warps' side of produce_taken_stages: stages until the end stage. Writes the warp's partial of the
// block's i-th unit (its g-th stage's unit u: i = g per + u) to part[warp * part_stride + i] (kSwiglu: gate's at + i,
// up's at + part_rows + i) and the first unit of its g-th stage to stage_first[g]; returns the number of stages.
template <DType W, int kSegs, int kRows, bool kSwiglu>
__device__ __forceinline__ int consume_taken_stages(const v7::Ring& ring, v7::RingCursor& cur, const int* hdr,
                                                    int* stage_first, int64_t n_units, int64_t cols, int segs_per_row,
                                                    const v10::LaneAct (&act)[kSegs], float* part, int64_t part_stride,
                                                    int64_t part_rows, int warp, int lane) {
  constexpr int kPairs = kSwiglu ? kRows / 2 : kRows;  // units a stage holds
  int g = 0;
  for (;; ++g) {
    const int s = cur.slot;
    sm90::mbar_wait(&ring.full[s], cur.phase);
    const int first = hdr[s];
    if (first < 0) {  // the end stage: nothing to load
      __syncwarp();
      if (lane == 0) sm90::mbar_arrive(&ring.empty[s]);
      cur.advance(ring.stages);
      return g;
    }
    const int64_t left = n_units - first;
    const int units_here = left < kPairs ? int(left) : kPairs;
    const float t = v10::stage_row_sum<W, kSegs, kRows>(ring.base + size_t(s) * size_t(ring.slot_pitch),
                                                        &ring.empty[s], cols, segs_per_row, act, warp, lane);
    const int row = lane / (32 / kRows);  // kSwiglu: gate (row < kPairs) or up of unit row % kPairs
    if (lane % (32 / kRows) == 0 && row % kPairs < units_here)
      part[int64_t(warp) * part_stride + (row / kPairs) * part_rows + int64_t(g) * kPairs + row % kPairs] = t;
    if (warp == 0 && lane == 0) stage_first[g] = first;
    cur.advance(ring.stages);
  }
}

// grid = SM count, one block per SM, all resident (decode_ffn checks the occupancy). The stages of each weight go
// to whichever block's producer asks first (DecodeFfnSync::chunks), so a block whose copies land sooner takes more
// of them and the grid reaches each barrier together. kSegsD / kRowsD: version 10's segments per warp and stage
// rows at dim columns (wo, gate|up); kSegsH / kRowsH at hidden columns (down).
template <DType W, int kSegsD, int kRowsD, int kSegsH, int kRowsH>
__global__ void __launch_bounds__(kThreads, 1) decode_ffn_kernel(DecodeFfnParams p, Plan plan) {
  static_assert(kRowsD >= 2, "gate|up stages hold row pairs");
  pdl_allow_dependents();
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + v7::kMaxStages;
  int* hdr = reinterpret_cast<int*>(smem + v7::kBarrierBytes);  // [kMaxStages]: a slot's first unit, or -1
  int* stage_first = hdr + v7::kMaxStages;                       // [kMaxLocalStages]: the block's stages, in order
  const v7::Ring ring{smem + v7::kBarrierBytes + kHeaderBytes, plan.slot_pitch, plan.stages, full, empty};
  // (warps, 2, part_rows) f32: a warp's partial of each of the block's units (gate, then up) of the current weight
  float* part = reinterpret_cast<float*>(ring.base + size_t(plan.stages) * size_t(plan.slot_pitch));
  const int64_t part_stride = 2 * plan.part_rows;
  const int64_t dim = p.wo.rows, hidden = p.w_down.cols;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x == 0) v7::init_ring_barriers(full, empty, plan.stages, kConsumerWarps);
  __syncthreads();

  if (warp == kConsumerWarps) {  // producer: the three weights back to back, never waiting for activations
    if (lane == 0) {
      v7::RingCursor cur = v7::producer_start();
      const int64_t grid = gridDim.x;
      produce_taken_stages(p.wo, kRowsD, 1, 0, dim, unit_cap(dim, kRowsD, grid), &p.sync->chunks[0],
                           v7::split_row_bytes(W, dim), ring, cur, hdr);
      produce_taken_stages(p.w_gate_up, kRowsD, 2, hidden, hidden, unit_cap(hidden, kRowsD / 2, grid),
                           &p.sync->chunks[1], v7::split_row_bytes(W, dim), ring, cur, hdr);
      produce_taken_stages(p.w_down, kRowsH, 1, 0, dim, unit_cap(dim, kRowsH, grid), &p.sync->chunks[2],
                           v7::split_row_bytes(W, hidden), ring, cur, hdr);
    }
    return;
  }

  pdl_wait();  // attn and residual are written by earlier kernels
  v7::RingCursor cur;
  const int segs_d = int(dim / v10::kSegVals), segs_h = int(hidden / v10::kSegVals);
  // The block's rows of a plain projection (n_stage stages of kPer rows): the warps' partials added in warp order,
  // into the residual (version 10's sum + bias with no bias, then add_rms_norm's residual + delta: the same two
  // roundings). ld.cg: another block may have written the row's cache line in an earlier phase.
  const auto add_rows = [&](int n_stage, int per) {
    v7::consumers_sync();
    for (int i = threadIdx.x; i < n_stage * per; i += kConsumerWarps * 32) {
      const int64_t row = stage_first[i / per] + i % per;
      if (row >= dim) continue;
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kConsumerWarps; ++w) sum += part[int64_t(w) * part_stride + i];
      p.residual[row] = __ldcg(p.residual + row) + (sum + 0.0f);
    }
  };

  {  // residual += attn . wo^T
    v10::LaneAct act[kSegsD];
    v10::quantize_lane_acts<W, kSegsD>(act, segs_d, warp, lane, [&](int, int, int64_t c) {
      return *reinterpret_cast<const float4*>(p.attn + c);
    });
    const int n = consume_taken_stages<W, kSegsD, kRowsD, false>(ring, cur, hdr, stage_first, dim, dim, segs_d, act,
                                                                 part, part_stride, plan.part_rows, warp, lane);
    add_rows(n, kRowsD);
  }
  {  // act = silu(x . w_gate^T) * (x . w_up^T), x = rms_norm(residual) * ffn_norm applied as the lanes load it
    float4 g[kSegsD][4];  // the lane's ffn_norm values, loaded before the barrier
#pragma unroll
    for (int j = 0; j < kSegsD; ++j) {
      const int seg = j * kConsumerWarps + warp;
      if (seg >= segs_d) continue;
      int64_t c0, c1;
      v10::lane_runs<W>(seg, lane, c0, c1);
      const float4* n = reinterpret_cast<const float4*>(p.ffn_norm);
      g[j][0] = n[c0 / 4], g[j][1] = n[c0 / 4 + 1], g[j][2] = n[c1 / 4], g[j][3] = n[c1 / 4 + 1];
    }
    ffn_grid_barrier(&p.sync->barrier);
    // The norm's float4s and the lane's own values in one round trip.
    float4 v[v7::kNormMaxVecs], xr[kSegsD][4];
    v7::load_norm_vecs(p.residual, dim, v);
    const float4* r4 = reinterpret_cast<const float4*>(p.residual);
#pragma unroll
    for (int j = 0; j < kSegsD; ++j) {
      const int seg = j * kConsumerWarps + warp;
      if (seg >= segs_d) continue;
      int64_t c0, c1;
      v10::lane_runs<W>(seg, lane, c0, c1);
      xr[j][0] = __ldcg(r4 + c0 / 4), xr[j][1] = __ldcg(r4 + c0 / 4 + 1);
      xr[j][2] = __ldcg(r4 + c1 / 4), xr[j][3] = __ldcg(r4 + c1 / 4 + 1);
    }
    const float scale = v7::consumer_norm_scale(v, dim, p.eps);
    v10::LaneAct act[kSegsD];
    v10::quantize_lane_acts<W, kSegsD>(act, segs_d, warp, lane, [&](int j, int k, int64_t) {
      const float4 x = xr[j][k], w = g[j][k];  // norm.cu's y = v * scale * w
      return make_float4(x.x * scale * w.x, x.y * scale * w.y, x.z * scale * w.z, x.w * scale * w.w);
    });
    constexpr int kPer = kRowsD / 2;
    const int n = consume_taken_stages<W, kSegsD, kRowsD, true>(ring, cur, hdr, stage_first, hidden, dim, segs_d, act,
                                                                part, part_stride, plan.part_rows, warp, lane);
    v7::consumers_sync();
    for (int i = threadIdx.x; i < n * kPer; i += kConsumerWarps * 32) {
      const int64_t unit = stage_first[i / kPer] + i % kPer;
      if (unit >= hidden) continue;
      float gs = 0.0f, us = 0.0f;
#pragma unroll
      for (int w = 0; w < kConsumerWarps; ++w) {
        gs += part[int64_t(w) * part_stride + i];
        us += part[int64_t(w) * part_stride + plan.part_rows + i];
      }
      p.act[unit] = silu_mul(gs, us);
    }
  }
  ffn_grid_barrier(&p.sync->barrier);

  {  // residual += act . w_down^T
    v10::LaneAct act[kSegsH];
    v10::quantize_lane_acts<W, kSegsH>(act, segs_h, warp, lane, [&](int, int, int64_t c) {
      return __ldcg(reinterpret_cast<const float4*>(p.act + c));
    });
    const int n = consume_taken_stages<W, kSegsH, kRowsH, false>(ring, cur, hdr, stage_first, dim, hidden, segs_h,
                                                                 act, part, part_stride, plan.part_rows, warp, lane);
    add_rows(n, kRowsH);
  }
  {  // out = rms_norm(residual) * next_norm: block b's rows of version 10's split (norm.cu's per-element arithmetic)
    const v7::BlockRows rows = v7::block_rows(dim, gridDim.x, blockIdx.x);
    ffn_grid_barrier(&p.sync->barrier);
    // Every producer has posted its end stages (each block's consumers saw them): the stage counters are free.
    // (An atomic: performed at L2 before the block exits, ahead of the next launch's first atomicAdd.)
    if (blockIdx.x == 0 && threadIdx.x < 3) atomicExch(&p.sync->chunks[threadIdx.x], 0u);
    float4 v[v7::kNormMaxVecs];
    v7::load_norm_vecs(p.residual, dim, v);
    const float scale = v7::consumer_norm_scale(v, dim, p.eps);
    for (int64_t i = rows.first + threadIdx.x; i < rows.first + rows.count; i += kConsumerWarps * 32)
      p.out[i] = __ldcg(p.residual + i) * scale * p.next_norm[i];
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
