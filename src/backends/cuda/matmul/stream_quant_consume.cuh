// The streamed quantized matvec's consumer warps as device functions (design: stream_quant.cuh): the lanes'
// activations quantized from any source, and the stage loop over a ring; stream_quant_kernel.cuh runs them.
#pragma once

#include <cuda_fp16.h>

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/matmul/matvec.cuh"
#include "backends/cuda/matmul/stream_producer.cuh"
#include "backends/cuda/matmul/stream_quant_plan.cuh"
#include "backends/cuda/sm90/hopper.cuh"

namespace ferry::cuda_ops::quant_stream {

using streaming::kConsumerWarps;

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

// A lane's quant words of one row's segment: Q8_0 16 bytes; Q4_0 and Q4_K 8 bytes; Q5_K 8 quant bytes then 8 qh
// bytes; Q6_K 8 ql bytes then 8 qh bytes.
template <DType W>
struct LaneQuants {
  static constexpr int kWords = W == DType::Q8_0 || W == DType::Q5_K || W == DType::Q6_K ? 4 : 2;
  uint32_t q[kWords];
};
// Q4_K / Q5_K: the lane's super-block header words (fp16 d | dmin << 16, then the 12 scale bytes). Q6_K: x = its fp16
// d, y = run A's int8 scale, z = run B's (sign-extended); else unused.
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
// Q5_K / Q6_K: the 8 quant bytes at q and the 8 qh bytes at qh (shared, 8-byte aligned).
template <DType W>
__device__ __forceinline__ LaneQuants<W> load_quants_hi(const uint8_t* q, const uint8_t* qh) {
  LaneQuants<W> r;
  const uint2 u = *reinterpret_cast<const uint2*>(q), h = *reinterpret_cast<const uint2*>(qh);
  r.q[0] = u.x, r.q[1] = u.y, r.q[2] = h.x, r.q[3] = h.y;
  return r;
}

// The columns a lane owns in segment seg (stream_quant_math.cuh's and stream_quant_kquant_math.cuh's order): two runs
// of 8 values, at c0 and c1. Q8_0: 512 seg + 16 lane + [0, 16); Q4_0: block 16 seg + lane / 2, h = lane % 2: values
// 8h + [0, 8) and 16 + 8h + [0, 8) of the block; the K-quants: q4k_lane_col's / q6k_lane_col's runs A and B.
template <DType W>
__device__ __forceinline__ void lane_runs(int seg, int lane, int64_t& c0, int64_t& c1) {
  constexpr bool kQ4 = W == DType::Q4_0;
  const int64_t base = int64_t(seg) * kSegVals;
  if constexpr (is_stream_kquant(W)) {
    c0 = base + (W == DType::Q6_K ? q6k_lane_col(lane, 0) : q4k_lane_col(lane, 0));
    c1 = c0 + kquant_run_gap(W);
  } else {
    c0 = kQ4 ? base + (lane / 2) * kQBlock + (lane % 2) * 8 : base + lane * kLaneVals;
    c1 = c0 + (kQ4 ? 16 : 8);  // Q4_0: 16 values further; Q8_0: the next 8
  }
}

// The lane's four float4s of src in segment seg, in quantize_lane_acts's fetch order (k = 0..3: c0, c0 + 4, c1,
// c1 + 4 of lane_runs); through L2 (ld.cg) when another kernel may have just written src.
template <DType W>
__device__ __forceinline__ void load_lane_run_vecs(const float* src, int seg, int lane, bool through_l2,
                                                   float4 (&out)[4]) {
  int64_t c0, c1;
  lane_runs<W>(seg, lane, c0, c1);
  const float4* r = reinterpret_cast<const float4*>(src);
  const int64_t at[4] = {c0 / 4, c0 / 4 + 1, c1 / 4, c1 / 4 + 1};
#pragma unroll
  for (int k = 0; k < 4; ++k) out[k] = through_l2 ? __ldcg(r + at[k]) : r[at[k]];
}

// The lane's activations of its segments (segment j of this warp: seg = 8 j + warp; warp-uniform whether it
// exists), quantized here. fetch(j, k, col) returns the lane's k-th float4 of segment j, x[col .. col + 4)
// (k = 0, 1: the run at c0; 2, 3: the run at c1; lane_runs), from wherever x lives (global memory; registers
// loaded earlier; a norm applied on the fly).
// kOne: one int8 level (quantize_lane's kOne, quantize_lane_kquant's).
template <DType W, int kSegs, bool kOne = false, class Fetch>
__device__ __forceinline__ void quantize_lane_acts(LaneAct (&act)[kSegs], int segs_per_row, int warp, int lane,
                                                   Fetch&& fetch) {
  constexpr bool kQ4 = W == DType::Q4_0;
#pragma unroll
  for (int j = 0; j < kSegs; ++j) {
    const int seg = j * kConsumerWarps + warp;
    float xv[kLaneVals];
    if (seg < segs_per_row) {
      int64_t c0, c1;
      lane_runs<W>(seg, lane, c0, c1);
      const float4 f[4] = {fetch(j, 0, c0), fetch(j, 1, c0 + 4), fetch(j, 2, c1), fetch(j, 3, c1 + 4)};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        xv[4 * i] = f[i].x, xv[4 * i + 1] = f[i].y, xv[4 * i + 2] = f[i].z, xv[4 * i + 3] = f[i].w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < kLaneVals; ++i) xv[i] = 0.0f;
    }
    if constexpr (is_stream_kquant(W)) {  // each group's 32 values: 8 on each of 4 lanes (lane ^ 1, lane ^ 2)
      float am[2] = {0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < kLaneVals; ++i) am[i / 8] = fmaxf(am[i / 8], fabsf(xv[i]));
#pragma unroll
      for (int g = 0; g < 2; ++g) {
        am[g] = fmaxf(am[g], __shfl_xor_sync(0xFFFFFFFFu, am[g], 1));
        am[g] = fmaxf(am[g], __shfl_xor_sync(0xFFFFFFFFu, am[g], 2));
      }
      act[j] = quantize_lane_kquant<kOne>(xv, am[0], am[1]);
    } else {
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < kLaneVals; ++i) amax = fmaxf(amax, fabsf(xv[i]));
      amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));  // the partner lane holds the block's other half
      act[j] = quantize_lane<kQ4, kOne>(xv, amax);
    }
  }
}

// One ring stage of kRows rows of `cols` columns at `slot`, for a consumer warp: every load first, then the slot
// released (empty_bar), then the dot products and the rows' sums over the warp's lanes (reduce_rows). Returns row
// lane / (32 / kRows)'s sum of the warp's segments. Rows past the stage's last (in a block's last stage) load
// whatever the slot holds: their sums stay in their own row and the caller never stores them. Segments past the
// row's last (warp-uniform) load nothing: zero quants, zero scale. kOne: act holds one level (quantize_lane_acts).
// Slot layout: [kRows, rb.quants] quant bytes, then [kRows, rb.scales] scale bytes (Q8_0/Q4_0: fp16 per 32 values;
// Q6_K: 18-byte records per super-block; Q4_K/Q5_K: none, their headers are in the super-blocks).
template <DType W, int kSegs, int kRows, bool kOne = false>
__device__ __forceinline__ float stage_row_sum(const uint8_t* slot, uint64_t* empty_bar, int64_t cols, int segs_per_row,
                                               const LaneAct (&act)[kSegs], int warp, int lane) {
  constexpr bool kQ4 = W == DType::Q4_0;
  constexpr bool kKQ = is_stream_kquant(W);
  constexpr bool kQ5K = W == DType::Q5_K, kQ6K = W == DType::Q6_K;
  constexpr int kLaneBytes = kQ4 ? 8 : 16;  // Q8_0/Q4_0: quant bytes a lane loads per segment of a row
  // bytes of one segment of a row in the slot's quant region (Q4_K/Q5_K: with their headers)
  constexpr int kSegBytes = W == DType::Q4_K ? kQ4KSegBytes : kQ5K ? kQ5KSegBytes : kQ6K ? kQ6KSegBytes : 32 * kLaneBytes;
  constexpr int kSbBytes = kSegBytes / 2;  // the K-quants: one super-block's bytes in the quant region
  const int64_t nb = cols / kQBlock;
  const streaming::SplitRowBytes rb = streaming::split_row_bytes(W, cols);
  const int64_t stage_q = kRows * rb.quants;  // a slot's quant bytes; its scales follow
  [[maybe_unused]] const Q4KLaneSel ksel = q4k_lane_sel(lane);
  const int k = lane % 16;  // the K-quants: the lane's place in its super-block
  // The lane's bytes of the warp's first segment of row 0 (the K-quants: its super-block's start)
  const uint8_t* sq = slot + warp * kSegBytes + (kKQ ? (lane / 16) * kSbBytes : lane * kLaneBytes);
  const uint16_t* ss = reinterpret_cast<const uint16_t*>(slot + stage_q) + warp * (kSegVals / kQBlock) + lane / 2;
  // Q6_K: the lane's super-block's scale record in the first segment of row 0
  [[maybe_unused]] const uint8_t* srec = slot + stage_q + (2 * warp + lane / 16) * kQ6KRecBytes;
  LaneQuants<W> q[kRows][kSegs];
  uint16_t d[kRows][kSegs];
  [[maybe_unused]] LaneHead<W> hd[kRows][kSegs];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int j = 0; j < kSegs; ++j) {
      if (j * kConsumerWarps + warp < segs_per_row) {
        const uint8_t* sb = sq + r * rb.quants + j * kConsumerWarps * kSegBytes;
        if constexpr (W == DType::Q4_K) {
          q[r][j] = load_quants<W>(sb + 16 + 8 * k);
          hd[r][j] = *reinterpret_cast<const LaneHead<W>*>(sb);  // 16 lanes read the same header: broadcast
        } else if constexpr (kQ5K) {  // header, qh[32] at 16, qs[128] at 48
          q[r][j] = load_quants_hi<W>(sb + 48 + 8 * k, sb + 16 + 8 * (k % 4));
          hd[r][j] = *reinterpret_cast<const LaneHead<W>*>(sb);
        } else if constexpr (kQ6K) {  // ql[128] then qh[64]; the record: scales[16], d
          q[r][j] = load_quants_hi<W>(sb + 8 * k, sb + 128 + 32 * (k / 8) + 8 * (k % 4));
          const uint8_t* rec = srec + r * rb.scales + j * kConsumerWarps * 2 * kQ6KRecBytes;
          const int s0 = 8 * (k / 8) + (k % 8) / 2;
          hd[r][j].x = *reinterpret_cast<const uint16_t*>(rec + 16);
          hd[r][j].y = uint32_t(int32_t(int8_t(rec[s0])));
          hd[r][j].z = uint32_t(int32_t(int8_t(rec[s0 + 4])));
        } else {
          q[r][j] = load_quants<W>(sb);
          d[r][j] = ss[r * nb + j * kConsumerWarps * (kSegVals / kQBlock)];
        }
      } else {
#pragma unroll
        for (int i = 0; i < LaneQuants<W>::kWords; ++i) q[r][j].q[i] = 0;
        d[r][j] = 0;
        if constexpr (kKQ) hd[r][j] = {0u, 0u, 0u, 0u};
      }
    }
  }
  // The slot is free once every lane's loads are performed: __syncwarp orders them before lane 0's arrival,
  // whose release the producer's wait acquires before it refills the slot (as the stage-batched stream).
  __syncwarp();
  if (lane == 0) sm90::mbar_arrive(empty_bar);
  float v[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kSegs; ++j) {
      if constexpr (W == DType::Q4_K || kQ5K) {  // dx2 (d I_D - dmin I_M); a missing segment has d = dmin = 0
        const LaneHead<W>& h = hd[r][j];
        const uint32_t scmn = q4k_scale_min(h.y, h.z, h.w, ksel);
        Q4KSums t;
        if constexpr (kQ5K) {
          const uint32_t qs[2] = {q[r][j].q[0], q[r][j].q[1]}, qh[2] = {q[r][j].q[2], q[r][j].q[3]};
          t = dot_q5k_lane<kOne>(qs, qh, act[j], scmn, k / 4);
        } else {
          t = dot_q4k_lane<kOne>(q[r][j].q, act[j], scmn);
        }
        const float dd = __half2float(__ushort_as_half(uint16_t(h.x & 0xFFFFu)));
        const float dm = __half2float(__ushort_as_half(uint16_t(h.x >> 16)));
        acc = fmaf(fmaf(-dm, float(t.m_a), dd * float(t.d_a)), act[j].scale, acc);
        acc = fmaf(fmaf(-dm, float(t.m_b), dd * float(t.d_b)), act[j].scale_b, acc);
      } else if constexpr (kQ6K) {  // d (sc_A dx_A S_A + sc_B dx_B S_B); a missing segment has d = 0
        const LaneHead<W>& h = hd[r][j];
        const uint32_t ql[2] = {q[r][j].q[0], q[r][j].q[1]}, qh[2] = {q[r][j].q[2], q[r][j].q[3]};
        const Q6KSums t = dot_q6k_lane<kOne>(ql, qh, act[j], k);
        const float dd = __half2float(__ushort_as_half(uint16_t(h.x)));
        const float sa = float(int32_t(h.y)) * act[j].scale, sb = float(int32_t(h.z)) * act[j].scale_b;
        acc = fmaf(dd, fmaf(sa, float(t.s_a), sb * float(t.s_b)), acc);
      } else {
        int si;
        if constexpr (kQ4) {
          si = dot_q4_lane<kOne>(q[r][j].q, act[j]);
        } else {
          si = dot_q8_lane<kOne>(q[r][j].q, act[j]);
        }
        acc = fmaf(__half2float(__ushort_as_half(d[r][j])) * act[j].scale, float(si), acc);
      }
    }
    v[r] = acc;
  }
  return reduce_rows<kRows>(v, lane);
}

// One weight's stages for the consumer warps: `count` output units of `cols` columns (kSwiglu: units of two rows,
// gate then up; else rows), kPairs = kRows / 2 (kSwiglu) or kRows units a stage, read from ring slots starting at
// `cur` (advanced past them). Writes the warp's partial of unit u to part[warp * part_stride + u] (kSwiglu: gate's
// at + u, up's at + part_rows + u) and nothing past count. kOne: as stage_row_sum.
template <DType W, int kSegs, int kRows, bool kSwiglu, bool kOne = false>
__device__ __forceinline__ void consume_stages(const streaming::Ring& ring, streaming::RingCursor& cur, int64_t count, int64_t cols,
                                               int segs_per_row, const LaneAct (&act)[kSegs], float* part,
                                               int64_t part_stride, int64_t part_rows, int warp, int lane) {
  static_assert(!kSwiglu || (kRows >= 2 && kRows % 2 == 0), "SwiGLU stages hold row pairs");
  constexpr int kPairs = kSwiglu ? kRows / 2 : kRows;  // output units a stage completes
  const int64_t n_stage = (count + kPairs - 1) / kPairs;
  for (int64_t g = 0; g < n_stage; ++g) {
    const int s = cur.slot;
    sm90::mbar_wait(&ring.full[s], cur.phase);
    const int64_t left = count - g * kPairs;
    const int rows_here = left < kPairs ? int(left) : kPairs;  // kSwiglu: units (row pairs) of this stage
    const float t = stage_row_sum<W, kSegs, kRows, kOne>(ring.base + size_t(s) * size_t(ring.slot_pitch),
                                                         &ring.empty[s], cols, segs_per_row, act, warp, lane);
    const int row = lane / (32 / kRows);  // kSwiglu: gate (row < kPairs) or up of unit g kPairs + row % kPairs
    if (lane % (32 / kRows) == 0 && row % kPairs < rows_here)
      part[int64_t(warp) * part_stride + (row / kPairs) * part_rows + g * kPairs + row % kPairs] = t;
    cur.advance(ring.stages);
  }
}

// Unit i's partials of the kConsumerWarps warps (part: (warps, part_stride) f32), added in warp order: the
// consumers' fixed order, so a unit's sum does not depend on which block or kernel computes it.
__device__ __forceinline__ float warps_sum(const float* part, int64_t part_stride, int64_t i) {
  float sum = 0.0f;
#pragma unroll
  for (int w = 0; w < kConsumerWarps; ++w) sum += part[int64_t(w) * part_stride + i];
  return sum;
}

}  // namespace ferry::cuda_ops::quant_stream
