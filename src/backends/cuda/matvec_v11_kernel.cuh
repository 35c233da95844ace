// Matvec version 11's kernel and its launch (design: matvec_v11.cuh); instantiated per weight type in
// matvec_v11_q8.cu, matvec_v11_q4.cu and matvec_v11_q4k.cu. The lane math, the segment and stage plan, the
// producer and the row reduction are version 10's (matvec_v10_math.cuh, matvec_v10_plan.cuh,
// matvec_stream_quant.cuh, matvec_v10_kernel.cuh); what differs is who consumes a stage.
#pragma once

#include <cuda_fp16.h>

#include "backends/cuda/matvec_v10_kernel.cuh"

namespace ferry::cuda_ops::v11 {

using v10::kLaneVals;
using v10::kSegVals;
using v10::LaneAct;
using v10::LaneHead;
using v10::LaneQuants;
using v7::BlockRows;
using v7::StreamPlan;

inline constexpr int kGroupWarps = 8;                         // consumer warps of a group: version 10's 8
inline constexpr int kGroups = 2;                             // groups of consumer warps
inline constexpr int kConsumerWarps = kGroups * kGroupWarps;  // 16
inline constexpr int kThreads = (kConsumerWarps + 1) * 32;    // + the producer warp: 544
inline constexpr int kActWords = 12;                          // 32-bit words of a LaneAct

// Bytes of the activation exchange: (kActWords, kGroupWarps, segs_per_warp, 32) words.
inline size_t exchange_bytes(int64_t cols) {
  return size_t(kActWords) * kGroupWarps * size_t(v10::segs_per_warp(cols)) * 32 * sizeof(uint32_t);
}
// Version 10's barriers, ring and row partials (kGroupWarps, max_rows), then the exchange.
inline size_t smem_bytes(const StreamPlan& p, DType w, int64_t cols) {
  const size_t base = (v10::smem_bytes(p, w, cols) + 15) / 16 * 16;
  return base + exchange_bytes(cols);
}

// Named barrier 1 over the 16 consumer warps (the producer warp has returned).
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerWarps * 32) : "memory");
}

// LaneAct word k of (group warp gw, segment j, lane) in the exchange: conflict-free (lanes consecutive).
template <int kSegs>
__device__ __forceinline__ int xch_index(int k, int gw, int j, int lane) {
  return ((k * kGroupWarps + gw) * kSegs + j) * 32 + lane;
}
template <DType W, int kSegs>
__device__ __forceinline__ void store_act(uint32_t* xch, const LaneAct& a, int gw, int j, int lane) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    xch[xch_index<kSegs>(i, gw, j, lane)] = a.hi[i];
    xch[xch_index<kSegs>(4 + i, gw, j, lane)] = a.lo[i];
  }
  xch[xch_index<kSegs>(8, gw, j, lane)] = __float_as_uint(a.scale);
  if constexpr (W != DType::Q8_0) xch[xch_index<kSegs>(9, gw, j, lane)] = uint32_t(a.offset);
  if constexpr (W == DType::Q4_K) {
    xch[xch_index<kSegs>(10, gw, j, lane)] = __float_as_uint(a.scale_b);
    xch[xch_index<kSegs>(11, gw, j, lane)] = uint32_t(a.vsum_b);
  }
}
template <DType W, int kSegs>
__device__ __forceinline__ LaneAct load_act(const uint32_t* xch, int gw, int j, int lane) {
  LaneAct a{};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    a.hi[i] = xch[xch_index<kSegs>(i, gw, j, lane)];
    a.lo[i] = xch[xch_index<kSegs>(4 + i, gw, j, lane)];
  }
  a.scale = __uint_as_float(xch[xch_index<kSegs>(8, gw, j, lane)]);
  if constexpr (W != DType::Q8_0) a.offset = int(xch[xch_index<kSegs>(9, gw, j, lane)]);
  if constexpr (W == DType::Q4_K) {
    a.scale_b = __uint_as_float(xch[xch_index<kSegs>(10, gw, j, lane)]);
    a.vsum_b = int(xch[xch_index<kSegs>(11, gw, j, lane)]);
  }
  return a;
}

// The lane's activations of segment seg (version 10's mapping and quantization; zero when seg is past the row).
template <DType W>
__device__ __forceinline__ LaneAct quantize_segment(const float* x, int seg, int segs_per_row, int lane) {
  constexpr bool kQ4 = W == DType::Q4_0, kQ4K = W == DType::Q4_K;
  float xv[kLaneVals];
  if (seg < segs_per_row) {
    const float* base = x + int64_t(seg) * kSegVals;
    const float4* run0 = reinterpret_cast<const float4*>(kQ4    ? base + (lane / 2) * kQBlock + (lane % 2) * 8
                                                         : kQ4K ? base + v10::q4k_lane_col(lane, 0)
                                                                : base + lane * kLaneVals);
    const float4* run1 = kQ4 ? run0 + 4 : kQ4K ? run0 + 8 : run0 + 2;
    const float4 f[4] = {run0[0], run0[1], run1[0], run1[1]};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      xv[4 * i] = f[i].x, xv[4 * i + 1] = f[i].y, xv[4 * i + 2] = f[i].z, xv[4 * i + 3] = f[i].w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kLaneVals; ++i) xv[i] = 0.0f;
  }
  if constexpr (kQ4K) {
    float am[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < kLaneVals; ++i) am[i / 8] = fmaxf(am[i / 8], fabsf(xv[i]));
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      am[g] = fmaxf(am[g], __shfl_xor_sync(0xFFFFFFFFu, am[g], 1));
      am[g] = fmaxf(am[g], __shfl_xor_sync(0xFFFFFFFFu, am[g], 2));
    }
    return v10::quantize_lane_q4k(xv, am[0], am[1]);
  } else {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kLaneVals; ++i) amax = fmaxf(amax, fabsf(xv[i]));
    amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
    return v10::quantize_lane<kQ4>(xv, amax);
  }
}

// grid blocks (v7::block_rows); kSegs = segs_per_warp(cols), kRows = plan.rows_per_stage = stage_rows(W, cols).
// Weight, x and out as version 10 (matvec_v10_kernel.cuh).
template <DType W, int kSegs, int kRows>
__global__ void __launch_bounds__(kThreads, 1) matvec_v11_kernel(MatvecParams p, StreamPlan plan, int64_t grid) {
  constexpr bool kQ4 = W == DType::Q4_0;
  constexpr bool kQ4K = W == DType::Q4_K;
  constexpr int kLaneBytes = kQ4 || kQ4K ? 8 : 16;
  constexpr int kSegBytes = kQ4K ? v10::kQ4KSegBytes : 32 * kLaneBytes;
  constexpr int kGR = kRows > 1 ? kRows / 2 : 1;                    // rows a group takes of a stage it reads
  constexpr int kReaders = kRows > 1 ? kConsumerWarps : kGroupWarps;  // warps that read each stage
  constexpr int kStep = kRows > 1 ? 1 : 2;                            // stages a group advances by
  pdl_allow_dependents();
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);  // [stages]: a stage's bytes have landed
  uint64_t* empty = full + v7::kMaxStages;             // [stages]: every reader warp is done with it
  const int64_t cols = p.w.cols, nb = cols / kQBlock;
  const v7::SplitRowBytes rb = v7::split_row_bytes(W, cols);
  const int64_t stage_q = kRows * rb.quants;
  const int64_t stage_bytes = kRows * (rb.quants + rb.scales);
  uint8_t* ring = smem + v7::kBarrierBytes;  // (stages, stage_bytes) as version 10
  float* part = reinterpret_cast<float*>(ring + size_t(plan.stages) * size_t(stage_bytes));  // (8, max_rows)
  const size_t xch_off = (size_t(v7::kBarrierBytes) + size_t(plan.stages) * size_t(stage_bytes) +
                          size_t(kGroupWarps) * size_t(plan.max_rows) * sizeof(float) + 15) / 16 * 16;
  uint32_t* xch = reinterpret_cast<uint32_t*>(smem + xch_off);  // (kActWords, 8, kSegs, 32)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / kGroupWarps, gw = warp % kGroupWarps;
  const BlockRows br = v7::block_rows(p.w.rows, grid, blockIdx.x);
  const int64_t n_stage = (br.count + kRows - 1) / kRows;

  if (threadIdx.x == 0) v7::init_ring_barriers(full, empty, plan.stages, kReaders);
  __syncthreads();

  if (warp == kConsumerWarps) {
    if (lane == 0) v7::produce_quant_stages(p.w, plan, br, rb, ring, full, empty);
    return;
  }

  pdl_wait();
  // Group 0 quantizes the activations of its segments (version 10's work, same issue slots) and hands them to
  // group 1's warp of the same segments through shared memory: group 1 would otherwise double the quantization
  // time on the same schedulers.
  LaneAct act[kSegs];
  if (group == 0) {
#pragma unroll
    for (int j = 0; j < kSegs; ++j) {
      act[j] = quantize_segment<W>(p.x, j * kGroupWarps + gw, plan.segs_per_row, lane);
      store_act<W, kSegs>(xch, act[j], gw, j, lane);
    }
  }
  consumers_sync();
  if (group == 1) {
#pragma unroll
    for (int j = 0; j < kSegs; ++j) act[j] = load_act<W, kSegs>(xch, gw, j, lane);
  }
  [[maybe_unused]] const v10::Q4KLaneSel ksel = v10::q4k_lane_sel(lane);

  // kRows > 1: both groups read every stage, group g its rows [g kGR, g kGR + kGR); kRows = 1: group g reads
  // stages g, g + 2, ... (its slot and phase advance by 2 stages).
  const int r0 = kRows > 1 ? group * kGR : 0;
  int s = kRows > 1 ? 0 : group;
  uint32_t phase = 0;
  for (int64_t g = kRows > 1 ? 0 : group; g < n_stage; g += kStep) {
    sm90::mbar_wait(&full[s], phase);
    const int64_t left = br.count - g * kRows;
    const int rows_here = left < kRows ? int(left) : kRows;
    const uint8_t* sq = ring + size_t(s) * size_t(stage_bytes) + gw * kSegBytes +
                        (kQ4K ? (lane / 16) * kQ4KBytes : lane * kLaneBytes);
    const uint16_t* ss = reinterpret_cast<const uint16_t*>(ring + size_t(s) * size_t(stage_bytes) + stage_q) +
                         gw * (kSegVals / kQBlock) + lane / 2;
    LaneQuants<W> q[kGR][kSegs];
    uint16_t d[kGR][kSegs];
    [[maybe_unused]] LaneHead<W> hd[kGR][kSegs];
#pragma unroll
    for (int rr = 0; rr < kGR; ++rr) {
      const int r = r0 + rr;
#pragma unroll
      for (int j = 0; j < kSegs; ++j) {
        if (j * kGroupWarps + gw < plan.segs_per_row) {
          if constexpr (kQ4K) {
            const uint8_t* sb = sq + r * rb.quants + j * kGroupWarps * kSegBytes;
            q[rr][j] = v10::load_quants<W>(sb + 16 + 8 * (lane % 16));
            hd[rr][j] = *reinterpret_cast<const LaneHead<W>*>(sb);
          } else {
            q[rr][j] = v10::load_quants<W>(sq + r * rb.quants + j * kGroupWarps * kSegBytes);
            d[rr][j] = ss[r * nb + j * kGroupWarps * (kSegVals / kQBlock)];
          }
        } else {
#pragma unroll
          for (int i = 0; i < LaneQuants<W>::kWords; ++i) q[rr][j].q[i] = 0;
          d[rr][j] = 0;
          if constexpr (kQ4K) hd[rr][j] = {0u, 0u, 0u, 0u};
        }
      }
    }
    __syncwarp();
    if (lane == 0) sm90::mbar_arrive(&empty[s]);
    float v[kGR];
#pragma unroll
    for (int rr = 0; rr < kGR; ++rr) {
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < kSegs; ++j) {
        if constexpr (kQ4K) {
          const LaneHead<W>& h = hd[rr][j];
          const v10::Q4KSums t = v10::dot_q4k_lane(q[rr][j].q, act[j], v10::q4k_scale_min(h.y, h.z, h.w, ksel));
          const float dd = __half2float(__ushort_as_half(uint16_t(h.x & 0xFFFFu)));
          const float dm = __half2float(__ushort_as_half(uint16_t(h.x >> 16)));
          acc = fmaf(fmaf(-dm, float(t.m_a), dd * float(t.d_a)), act[j].scale, acc);
          acc = fmaf(fmaf(-dm, float(t.m_b), dd * float(t.d_b)), act[j].scale_b, acc);
        } else {
          int si;
          if constexpr (kQ4) {
            si = v10::dot_q4_lane(q[rr][j].q, act[j]);
          } else {
            si = v10::dot_q8_lane(q[rr][j].q, act[j]);
          }
          acc = fmaf(__half2float(__ushort_as_half(d[rr][j])) * act[j].scale, float(si), acc);
        }
      }
      v[rr] = acc;
    }
    const float t = v10::reduce_rows<kGR>(v, lane);
    const int row = r0 + lane / (32 / kGR);
    if (lane % (32 / kGR) == 0 && row < rows_here) part[int64_t(gw) * plan.max_rows + g * kRows + row] = t;
    s += kStep;
    if (s >= plan.stages) {
      s -= plan.stages;
      phase ^= 1u;
    }
  }
  consumers_sync();

  for (int64_t r = threadIdx.x; r < br.count; r += kConsumerWarps * 32) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kGroupWarps; ++w) sum += part[int64_t(w) * plan.max_rows + r];
    p.out[br.first + r] = sum + (p.bias ? p.bias[br.first + r] : 0.0f);
  }
}

template <DType W, int kSegs, int kRows>
void launch_instance(const MatvecParams& p, const StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream) {
  if constexpr (v10::instance_used(W, kSegs, kRows)) {
    const auto kernel = matvec_v11_kernel<W, kSegs, kRows>;
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    launch_pdl(kernel, dim3(unsigned(grid)), dim3(kThreads), smem, stream, p, plan, grid);
    FERRY_CUDA_CHECK_LAUNCH(matvec_v11_kernel);
  } else {
    FERRY_CUDA_REQUIRE(!"no matvec v11 instance for this (type, segments, rows)");
  }
}

template <DType W, int kSegs>
void launch_rows(const MatvecParams& p, const StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream) {
  switch (plan.rows_per_stage) {
    case 1: launch_instance<W, kSegs, 1>(p, plan, grid, smem, stream); break;
    case 2: launch_instance<W, kSegs, 2>(p, plan, grid, smem, stream); break;
    case 4: launch_instance<W, kSegs, 4>(p, plan, grid, smem, stream); break;
    case 8: launch_instance<W, kSegs, 8>(p, plan, grid, smem, stream); break;
    default: FERRY_CUDA_REQUIRE(!"matvec v11: rows per stage must be 1, 2, 4 or 8");
  }
}

template <DType W>
void launch_type(const MatvecParams& p, const StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream) {
  switch (v10::segs_per_warp(p.w.cols)) {
    case 1: launch_rows<W, 1>(p, plan, grid, smem, stream); break;
    case 2: launch_rows<W, 2>(p, plan, grid, smem, stream); break;
    case 3: launch_rows<W, 3>(p, plan, grid, smem, stream); break;
    case 4: launch_rows<W, 4>(p, plan, grid, smem, stream); break;
    default: FERRY_CUDA_REQUIRE(!"matvec v11: 512..16384 columns");
  }
}

void launch_q8(const MatvecParams& p, const StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream);
void launch_q4(const MatvecParams& p, const StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream);
void launch_q4k(const MatvecParams& p, const StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream);

}  // namespace ferry::cuda_ops::v11
