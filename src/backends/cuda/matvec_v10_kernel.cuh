// Matvec version 10's kernel and its launch (design: matvec_v10.cuh); instantiated per weight type in
// matvec_v10_q8.cu and matvec_v10_q4.cu (they compile in parallel).
#pragma once

#include <cuda_fp16.h>

#include "backends/cuda/common.cuh"
#include "backends/cuda/hopper.cuh"
#include "backends/cuda/matvec.cuh"
#include "backends/cuda/matvec_add_norm.cuh"
#include "backends/cuda/matvec_v10_plan.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/silu.cuh"

namespace ferry::cuda_ops::v10 {

using v7::BlockRows;
using v7::kConsumerWarps;
using v7::kThreads;
using v7::StreamPlan;

// Sums kRows per-lane values over the warp's 32 lanes at once. Each step halves the rows a lane carries: at
// offset o, lanes with bit o set keep the upper half and send the lower one, the others the reverse (one
// shuffle per kept row); after log2(kRows) steps a lane carries one row, lane / (32 / kRows), and plain
// butterflies over the remaining offsets finish it. Shuffles: kRows - 1 + 5 - log2(kRows) (8 rows: 10, where
// one tree per row takes 40). Returns row lane / (32 / kRows)'s sum (every lane of its group holds it).
template <int kRows>
__device__ __forceinline__ float reduce_rows(float (&v)[kRows], int lane) {
  static_assert(kRows == 1 || kRows == 2 || kRows == 4 || kRows == 8);
  int off = 16;
#pragma unroll
  for (int n = kRows; n > 1; n /= 2) {
    const bool upper = (lane & off) != 0;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float send = upper ? v[i] : v[i + n / 2];
      const float keep = upper ? v[i + n / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, off);
    }
    off /= 2;
  }
  float t = v[0];
#pragma unroll
  for (int o = 16 / kRows; o > 0; o /= 2) t += __shfl_xor_sync(0xFFFFFFFFu, t, o);
  return t;
}

// A lane's quant words of one row's segment: Q8_0 16 bytes, Q4_0 and Q4_K 8 bytes.
template <DType W>
struct LaneQuants {
  static constexpr int kWords = W == DType::Q8_0 ? 4 : 2;
  uint32_t q[kWords];
};
// Q4_K: the lane's super-block header words (fp16 d | dmin << 16, then the 12 scale bytes); else empty.
template <DType W>
struct alignas(16) LaneHead {
  uint32_t x, y, z, w;
};

template <DType W>
__device__ __forceinline__ LaneQuants<W> load_quants(const uint8_t* p) {  // p: shared, 16 / 8-byte aligned
  LaneQuants<W> r;
  if constexpr (W == DType::Q8_0) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    r.q[0] = u.x, r.q[1] = u.y, r.q[2] = u.z, r.q[3] = u.w;
  } else {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    r.q[0] = u.x, r.q[1] = u.y;
  }
  return r;
}

// grid blocks (v7::block_rows); kSegs = segs_per_warp(cols), kRows = plan.rows_per_stage = stage_rows(W, cols).
// p.w: Q8_0/Q4_0 quants [rows, nb x 32|16] then at p.w.scales fp16 [rows, nb]; Q4_K [rows, cols / 256] GGUF
// super-blocks of 144 bytes; p.x (1, cols) f32; p.out (1, rows) f32.
// kSwiglu (matvec_v10_swiglu): p.w is (2 hidden, cols), w_gate's rows then w_up's; p.out (1, hidden) f32 =
// silu(x . w_gate^T) * (x . w_up^T) (silu.cuh). The block owns output units (plan.max_rows: the most a block has);
// a stage holds kRows / 2 units' gate rows then their up rows (produce_quant_pair_stages), so both dot products
// of a unit land in the block and the SwiGLU is applied where it writes: no (1, 2 hidden) intermediate, no
// swiglu_fused launch. Partials: (warps, 2, max_rows), gate then up.
template <DType W, int kSegs, int kRows, bool kSwiglu = false>
__global__ void __launch_bounds__(kThreads, 1) matvec_v10_kernel(MatvecParams p, StreamPlan plan, int64_t grid) {
  static_assert(!kSwiglu || (kRows >= 2 && kRows % 2 == 0), "SwiGLU stages hold row pairs");
  constexpr int kPairs = kSwiglu ? kRows / 2 : kRows;  // output units a stage completes
  constexpr bool kQ4 = W == DType::Q4_0;
  constexpr bool kQ4K = W == DType::Q4_K;
  constexpr int kLaneBytes = kQ4 || kQ4K ? 8 : 16;             // quant bytes a lane loads per segment of a row
  constexpr int kSegBytes = kQ4K ? kQ4KSegBytes : 32 * kLaneBytes;  // bytes of one segment of a row (Q4_K: + headers)
  pdl_allow_dependents();
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);  // [stages]: a stage's bytes have landed
  uint64_t* empty = full + v7::kMaxStages;             // [stages]: every consumer warp is done with it
  const int64_t cols = p.w.cols, nb = cols / kQBlock;
  const v7::SplitRowBytes rb = v7::split_row_bytes(W, cols);
  const int64_t stage_q = kRows * rb.quants;                   // a slot's quant bytes; its scales follow
  const int64_t stage_bytes = kRows * (rb.quants + rb.scales);
  // (stages, stage_bytes): per slot [kRows, rb.quants] quant bytes, then [kRows, nb] fp16 scales
  uint8_t* ring = smem + v7::kBarrierBytes;
  // (warps, max_rows) f32; kSwiglu: (warps, 2, max_rows)
  float* part = reinterpret_cast<float*>(ring + size_t(plan.stages) * size_t(stage_bytes));
  const int64_t part_stride = kSwiglu ? 2 * plan.max_rows : plan.max_rows;  // floats per warp of `part`

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t hidden = p.w.rows / 2;  // kSwiglu: output units
  const BlockRows br = v7::block_rows(kSwiglu ? hidden : p.w.rows, grid, blockIdx.x);  // kSwiglu: units
  const int64_t n_stage = (br.count + kPairs - 1) / kPairs;

  if (threadIdx.x == 0) v7::init_ring_barriers(full, empty, plan.stages, kConsumerWarps);
  __syncthreads();

  if (warp == kConsumerWarps) {  // producer: weights only, so it never waits for the previous kernel
    if (lane == 0) {
      if constexpr (kSwiglu) {
        v7::produce_quant_pair_stages(p.w, plan, br, rb, hidden, ring, full, empty);
      } else {
        v7::produce_quant_stages(p.w, plan, br, rb, ring, full, empty);
      }
    }
    return;
  }

  pdl_wait();  // x is written by the previous kernel
  // Segment j of this warp (seg = 8 j + warp; warp-uniform whether it exists): the lane's 16 activations
  // (matvec_v10_math.cuh's order), quantized here. Q8_0: x[512 seg + 16 lane + i]; Q4_0: block 16 seg + lane / 2,
  // h = lane % 2: values 8h + [0, 8) and 16 + 8h + [0, 8) of the block.
  LaneAct act[kSegs];
#pragma unroll
  for (int j = 0; j < kSegs; ++j) {
    const int seg = j * kConsumerWarps + warp;
    float xv[kLaneVals];
    if (seg < plan.segs_per_row) {
      const float* base = p.x + int64_t(seg) * kSegVals;
      const float4* run0 = reinterpret_cast<const float4*>(kQ4    ? base + (lane / 2) * kQBlock + (lane % 2) * 8
                                                           : kQ4K ? base + q4k_lane_col(lane, 0)
                                                                  : base + lane * kLaneVals);
      // Q4_0: 16 values further; Q4_K: 32 further (group B); Q8_0: the next 8
      const float4* run1 = kQ4 ? run0 + 4 : kQ4K ? run0 + 8 : run0 + 2;
      const float4 a = run0[0], b = run0[1], c = run1[0], d = run1[1];
      const float4 f[4] = {a, b, c, d};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        xv[4 * i] = f[i].x, xv[4 * i + 1] = f[i].y, xv[4 * i + 2] = f[i].z, xv[4 * i + 3] = f[i].w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < kLaneVals; ++i) xv[i] = 0.0f;
    }
    if constexpr (kQ4K) {  // each group's 32 values: 8 on each of 4 lanes (lane ^ 1, lane ^ 2)
      float am[2] = {0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < kLaneVals; ++i) am[i / 8] = fmaxf(am[i / 8], fabsf(xv[i]));
#pragma unroll
      for (int g = 0; g < 2; ++g) {
        am[g] = fmaxf(am[g], __shfl_xor_sync(0xFFFFFFFFu, am[g], 1));
        am[g] = fmaxf(am[g], __shfl_xor_sync(0xFFFFFFFFu, am[g], 2));
      }
      act[j] = quantize_lane_q4k(xv, am[0], am[1]);
    } else {
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < kLaneVals; ++i) amax = fmaxf(amax, fabsf(xv[i]));
      amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));  // the partner lane holds the block's other half
      act[j] = quantize_lane<kQ4>(xv, amax);
    }
  }
  [[maybe_unused]] const Q4KLaneSel ksel = q4k_lane_sel(lane);

  int s = 0;
  uint32_t phase = 0;
  for (int64_t g = 0; g < n_stage; ++g) {
    sm90::mbar_wait(&full[s], phase);
    const int64_t left = br.count - g * kPairs;
    const int rows_here = left < kPairs ? int(left) : kPairs;  // kSwiglu: units (row pairs) of this stage
    // Q4_K: the lane's super-block of the warp's segment (its header; its quant bytes 16 + 8 (lane % 16) on)
    const uint8_t* sq = ring + size_t(s) * size_t(stage_bytes) + warp * kSegBytes +
                        (kQ4K ? (lane / 16) * kQ4KBytes : lane * kLaneBytes);
    const uint16_t* ss = reinterpret_cast<const uint16_t*>(ring + size_t(s) * size_t(stage_bytes) + stage_q) +
                         warp * (kSegVals / kQBlock) + lane / 2;
    // All of the stage's loads first. Rows past the block's last (in its last stage) load whatever the slot
    // holds: their sums stay in their own row of reduce_rows and are never stored. Segments past the row's last
    // (warp-uniform) load nothing: zero quants, zero scale.
    LaneQuants<W> q[kRows][kSegs];
    uint16_t d[kRows][kSegs];
    [[maybe_unused]] LaneHead<W> hd[kRows][kSegs];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int j = 0; j < kSegs; ++j) {
        if (j * kConsumerWarps + warp < plan.segs_per_row) {
          if constexpr (kQ4K) {
            const uint8_t* sb = sq + r * rb.quants + j * kConsumerWarps * kSegBytes;
            q[r][j] = load_quants<W>(sb + 16 + 8 * (lane % 16));
            hd[r][j] = *reinterpret_cast<const LaneHead<W>*>(sb);  // 16 lanes read the same header: broadcast
          } else {
            q[r][j] = load_quants<W>(sq + r * rb.quants + j * kConsumerWarps * kSegBytes);
            d[r][j] = ss[r * nb + j * kConsumerWarps * (kSegVals / kQBlock)];
          }
        } else {
#pragma unroll
          for (int i = 0; i < LaneQuants<W>::kWords; ++i) q[r][j].q[i] = 0;
          d[r][j] = 0;
          if constexpr (kQ4K) hd[r][j] = {0u, 0u, 0u, 0u};
        }
      }
    }
    // The slot is free once every lane's loads are performed: __syncwarp orders them before lane 0's arrival,
    // whose release the producer's wait acquires before it refills the slot (as version 9).
    __syncwarp();
    if (lane == 0) sm90::mbar_arrive(&empty[s]);
    float v[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < kSegs; ++j) {
        if constexpr (kQ4K) {  // dx2 (d I_D - dmin I_M); a missing segment has d = dmin = 0
          const LaneHead<W>& h = hd[r][j];
          const Q4KSums t = dot_q4k_lane(q[r][j].q, act[j], q4k_scale_min(h.y, h.z, h.w, ksel));
          const float dd = __half2float(__ushort_as_half(uint16_t(h.x & 0xFFFFu)));
          const float dm = __half2float(__ushort_as_half(uint16_t(h.x >> 16)));
          acc = fmaf(fmaf(-dm, float(t.m_a), dd * float(t.d_a)), act[j].scale, acc);
          acc = fmaf(fmaf(-dm, float(t.m_b), dd * float(t.d_b)), act[j].scale_b, acc);
        } else {
          int si;
          if constexpr (kQ4) {
            si = dot_q4_lane(q[r][j].q, act[j]);
          } else {
            si = dot_q8_lane(q[r][j].q, act[j]);
          }
          acc = fmaf(__half2float(__ushort_as_half(d[r][j])) * act[j].scale, float(si), acc);
        }
      }
      v[r] = acc;
    }
    const float t = reduce_rows<kRows>(v, lane);
    const int row = lane / (32 / kRows);  // kSwiglu: gate (row < kPairs) or up of unit g kPairs + row % kPairs
    if (lane % (32 / kRows) == 0 && row % kPairs < rows_here)
      part[int64_t(warp) * part_stride + (row / kPairs) * plan.max_rows + g * kPairs + row % kPairs] = t;
    if (++s == plan.stages) {
      s = 0;
      phase ^= 1u;
    }
  }
  v7::consumers_sync();

  if constexpr (kSwiglu) {
    for (int64_t r = threadIdx.x; r < br.count; r += kConsumerWarps * 32) {
      float gs = 0.0f, us = 0.0f;
#pragma unroll
      for (int w = 0; w < kConsumerWarps; ++w) {
        gs += part[int64_t(w) * part_stride + r];
        us += part[int64_t(w) * part_stride + plan.max_rows + r];
      }
      p.out[br.first + r] = silu_mul(gs, us);
    }
  } else {
    for (int64_t r = threadIdx.x; r < br.count; r += kConsumerWarps * 32) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kConsumerWarps; ++w) sum += part[int64_t(w) * plan.max_rows + r];
      v7::store_row(p, br.first + r, sum + (p.bias ? p.bias[br.first + r] : 0.0f));
    }
    v7::add_norm_tail(p.add_norm, p.w.rows);  // MatvecParams::add_norm: the fused residual add + RMSNorm, if asked
  }
}

template <DType W, int kSegs, int kRows, bool kSwiglu>
void launch_instance(const MatvecParams& p, const StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream) {
  if constexpr (kSwiglu ? swiglu_instance_used(W, kSegs, kRows) : instance_used(W, kSegs, kRows)) {
    const auto kernel = matvec_v10_kernel<W, kSegs, kRows, kSwiglu>;
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    launch_pdl(kernel, dim3(unsigned(grid)), dim3(kThreads), smem, stream, p, plan, grid);
    FERRY_CUDA_CHECK_LAUNCH(matvec_v10_kernel);
  } else {
    FERRY_CUDA_REQUIRE(!"no matvec v10 instance for this (type, segments, rows)");
  }
}

template <DType W, int kSegs, bool kSwiglu>
void launch_rows(const MatvecParams& p, const StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream) {
  switch (plan.rows_per_stage) {
    case 1: launch_instance<W, kSegs, 1, kSwiglu>(p, plan, grid, smem, stream); break;
    case 2: launch_instance<W, kSegs, 2, kSwiglu>(p, plan, grid, smem, stream); break;
    case 4: launch_instance<W, kSegs, 4, kSwiglu>(p, plan, grid, smem, stream); break;
    case 8: launch_instance<W, kSegs, 8, kSwiglu>(p, plan, grid, smem, stream); break;
    default: FERRY_CUDA_REQUIRE(!"matvec v10: rows per stage must be 1, 2, 4 or 8");
  }
}

template <DType W, bool kSwiglu = false>
void launch_type(const MatvecParams& p, const StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream) {
  switch (segs_per_warp(p.w.cols)) {
    case 1: launch_rows<W, 1, kSwiglu>(p, plan, grid, smem, stream); break;
    case 2: launch_rows<W, 2, kSwiglu>(p, plan, grid, smem, stream); break;
    case 3: launch_rows<W, 3, kSwiglu>(p, plan, grid, smem, stream); break;
    case 4: launch_rows<W, 4, kSwiglu>(p, plan, grid, smem, stream); break;
    default: FERRY_CUDA_REQUIRE(!"matvec v10: 512..16384 columns");
  }
}

}  // namespace ferry::cuda_ops::v10
