// The streamed quantized matvec's plan (design: stream_quant.cuh): rows per ring stage, segments per warp, the shared-memory
// budget, and which (type, segments, rows) kernel instances exist. Host and device agree.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cuda/matmul/matvec.cuh"
#include "backends/cuda/matmul/stream_plan.cuh"
#include "backends/cuda/matmul/stream_producer.cuh"
#include "backends/cuda/matmul/stream_quant_kquant_math.cuh"

namespace ferry::cuda_ops::quant_stream {

inline constexpr int64_t kStageMaxBytes = 20 * 1024;  // a stage's quants + scales at most (unless one row is more)
inline constexpr int64_t kMaxCols = 16384;             // kSegs <= 4: 40 activation registers a lane

// The weight types kStreamQuant reads.
constexpr bool stream_type(DType w) {
  return w == DType::Q8_0 || w == DType::Q4_0 || w == DType::Q4_K || w == DType::Q5_K || w == DType::Q6_K;
}
// Column counts it takes for a type: a multiple of 512 (one segment), 512..kMaxCols; Q6_K a multiple of 2048 (its
// 18-byte scale records of a row then fill whole 16-byte bulk-copy units: stream_producer.cuh).
constexpr bool stream_cols_ok(DType w, int64_t cols) {
  return cols >= kSegVals && cols <= kMaxCols && cols % (w == DType::Q6_K ? 4 * kSegVals : kSegVals) == 0;
}

constexpr int64_t quant_row_bytes(DType w, int64_t cols) {
  if (w == DType::Q4_K) return cols / kKBlock * kQ4KBytes;  // GGUF super-blocks as stored (one region)
  if (w == DType::Q5_K) return cols / kKBlock * kQ5KBytes;
  if (w == DType::Q6_K) return cols / kKBlock * (kQ6KQuantBytes + kQ6KRecBytes);  // quants + scale records
  return cols / kQBlock * ((w == DType::Q8_0 ? 32 : 16) + 2);
}

// Rows per stage: the largest of 8, 4, 2 whose bytes fit kStageMaxBytes, else 1. E.g. Q4_0 4096 columns: 8 x
// 2304 = 18 KB; Q8_0 4096: 4 x 4352 = 17 KB; Q4_0 14336: 2 x 8064; Q8_0 14336: 1 x 15232.
constexpr int stage_rows(DType w, int64_t cols) {
  for (int r = 8; r > 1; r /= 2)
    if (r * quant_row_bytes(w, cols) <= kStageMaxBytes) return r;
  return 1;
}

// Segments (512 columns) per consumer warp per row, rounded up: 4096 columns 1, 14336 columns 4 (28 segments:
// warps 0-3 take 4, warps 4-7 take 3).
constexpr int segs_per_warp(int64_t cols) {
  return int((cols / kSegVals + streaming::kConsumerWarps - 1) / streaming::kConsumerWarps);
}

// Whether some column count up to max_cols runs instance (w, segs, rows) (the SwiGLU form: min_rows 2, its
// stages hold row pairs): only those are compiled.
constexpr bool instance_used_up_to(DType w, int segs, int rows, int64_t max_cols, int min_rows) {
  for (int64_t cols = kSegVals; cols <= max_cols; cols += kSegVals)
    if (stream_cols_ok(w, cols) && segs_per_warp(cols) == segs && stage_rows(w, cols) == rows && rows >= min_rows)
      return true;
  return false;
}
constexpr bool instance_used(DType w, int segs, int rows) { return instance_used_up_to(w, segs, rows, kMaxCols, 1); }

// The SwiGLU form's instances (stream_quant_swiglu): stages of row pairs (rows >= 2), up to kSwigluMaxCols columns.
inline constexpr int64_t kSwigluMaxCols = 8192;
constexpr bool swiglu_instance_used(DType w, int segs, int rows) {
  return instance_used_up_to(w, segs, rows, kSwigluMaxCols, 2);
}

// rows: the weight's rows (the SwiGLU form: its output units, hidden; max_rows is then units per block).
inline streaming::StreamPlan make_plan(DType w, int64_t rows, int64_t cols, int64_t grid) {
  streaming::StreamPlan p{};
  p.rows_per_stage = stage_rows(w, cols);
  const int64_t fit = streaming::kRingBytes / (p.rows_per_stage * quant_row_bytes(w, cols));
  p.stages = int(fit < streaming::kMaxStages ? fit : streaming::kMaxStages);
  p.segs_per_row = int(cols / kSegVals);
  p.max_rows = rows / grid + (rows % grid > 0 ? 1 : 0);
  return p;
}

// Barriers, ring, per-warp row partials (kConsumerWarps, max_rows) f32; the SwiGLU form two per unit.
inline size_t smem_bytes(const streaming::StreamPlan& p, DType w, int64_t cols, bool swiglu = false) {
  return size_t(streaming::kBarrierBytes) + size_t(p.stages) * size_t(p.rows_per_stage * quant_row_bytes(w, cols)) +
         size_t(streaming::kConsumerWarps) * size_t(p.max_rows) * (swiglu ? 2 : 1) * sizeof(float);
}

// The stacked form (stream_quant_stacked): the (head type, tail type) pairs real files put in one q|k|v, llama.cpp's
// Q4_K_M and Q5_K_M mixes (attn_q / attn_k in Q4_K or Q5_K, attn_v in Q6_K in about half the layers:
// model/quant_mix.cpp); one column segment a warp (512..4096 columns, with Q6_K's multiple of 2048: 2048 or 4096),
// the widths whose norm the prologue takes (stream_quant_in_norm_applies).
constexpr bool stacked_pair(DType head, DType tail) {
  return (head == DType::Q4_K || head == DType::Q5_K) && tail == DType::Q6_K;
}
constexpr bool stacked_cols_ok(DType head, DType tail, int64_t cols) {
  return stacked_pair(head, tail) && stream_cols_ok(head, cols) && stream_cols_ok(tail, cols) &&
         segs_per_warp(cols) == 1;
}
// Whether some column count runs the stacked instance (head, rows_head, tail, rows_tail): Q4_K + Q6_K at 2048
// columns (8, 8) and 4096 (8, 4); Q5_K + Q6_K at 2048 (8, 8) and 4096 (4, 4).
constexpr bool stacked_instance_used(DType head, int rows_head, DType tail, int rows_tail) {
  for (int64_t cols = kSegVals; cols <= streaming::kConsumerWarps * kSegVals; cols += kSegVals)
    if (stacked_cols_ok(head, tail, cols) && stage_rows(head, cols) == rows_head && stage_rows(tail, cols) == rows_tail)
      return true;
  return false;
}

// The SMs split between the parts by their bytes, so every block streams about the same: rounded, at least one
// block a part and no more blocks than rows. E.g. the 8B q|k|v at 132 SMs: head 5120 Q4_K rows of 2304 bytes (11.8
// MB), tail 1024 Q6_K rows of 3360 (3.4 MB): 102 + 30 blocks, 116 / 115 KB each.
struct StackedGrid {
  int64_t head, tail;
};
inline StackedGrid stacked_grid(DType head, int64_t head_rows, DType tail, int64_t tail_rows, int64_t cols, int n_sms) {
  const double hb = double(head_rows) * double(quant_row_bytes(head, cols));
  const double tb = double(tail_rows) * double(quant_row_bytes(tail, cols));
  int64_t gh = int64_t(double(n_sms) * hb / (hb + tb) + 0.5);
  gh = gh < 1 ? 1 : (gh > n_sms - 1 ? n_sms - 1 : gh);
  int64_t gt = n_sms - gh;
  return {gh < head_rows ? gh : head_rows, gt < tail_rows ? gt : tail_rows};
}

// One stacked launch: each part's params (w its rows, out and bias at its rows), plan and blocks; smem the larger
// part's bytes (one block per SM).
struct StackedLaunch {
  MatvecParams head, tail;
  streaming::StreamPlan plan_head, plan_tail;
  int64_t grid_head, grid_tail;
  size_t smem;
};
void launch_stacked_q4k_q6k(const StackedLaunch& l, cudaStream_t stream);
void launch_stacked_q5k_q6k(const StackedLaunch& l, cudaStream_t stream);

// One launch of the instance for plan (stream_quant_<type>.cu).
void launch_q8(const MatvecParams& p, const streaming::StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream);
void launch_q4(const MatvecParams& p, const streaming::StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream);
void launch_q4k(const MatvecParams& p, const streaming::StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream);
void launch_q5k(const MatvecParams& p, const streaming::StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream);
void launch_q6k(const MatvecParams& p, const streaming::StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream);
// The SwiGLU form's launches (same files).
void launch_q8_swiglu(const MatvecParams& p, const streaming::StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream);
void launch_q4_swiglu(const MatvecParams& p, const streaming::StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream);
void launch_q4k_swiglu(const MatvecParams& p, const streaming::StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream);
void launch_q5k_swiglu(const MatvecParams& p, const streaming::StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream);
void launch_q6k_swiglu(const MatvecParams& p, const streaming::StreamPlan& plan, int64_t grid, size_t smem, cudaStream_t stream);

}  // namespace ferry::cuda_ops::quant_stream
