// The streamed matvec (kStreamHalf): out (1, rows) = x (1, cols) . w (rows, cols)^T for BF16/F16 weights at one
// token (batch-1 decode), built to read the weight at the copy bandwidth whatever its shape. Files: stream_half.cu
// (the kernel, both consumers and the SwiGLU form), stream_plan.cuh (the ring plan and helpers it shares with the
// quantized stream, stream_quant.cuh).
//  - Each block (one per SM) owns a contiguous run of whole rows, so its part of the row-major weight is ONE
//    contiguous byte range; a producer warp streams it into a ring of shared-memory stages (whole rows, ~16 KB,
//    up to 112 KB of ring, one block per SM) with cp.async.bulk, completion on mbarriers.
//  - The weight does not depend on earlier kernels, so the producer fills the ring BEFORE griddepcontrol.wait
//    (pdl.cuh): under programmatic dependent launch the first stages of every block arrive while the previous
//    kernel (a norm, the attention) still runs. Only the consumers wait, then read x once.
//  - Consumers: 8 warps; warp w owns the 256-value column segments w, w+8, ... of every row and keeps their
//    activations in registers for the whole kernel (no per-weight activation traffic: a first cut that re-read
//    x through L1 for every stage was slower, most at 14336 columns where x no longer fit the L1 left beside the
//    ring). Per row, a warp reduces its partial (shuffles) into shared memory; the
//    8 partials are added in warp order at the end: deterministic, fp32 throughout.
// Why: the register-load matvecs issue their weight loads from registers and fell well short of the copy
// bandwidth at 4096-6144 rows (docs/perf-log.md "## 2026-11-30: the streamed matvec (v7)").
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace ferry::cuda_ops {

struct MatvecParams;

inline constexpr int kStreamMaxTokens = 1;         // one token: x lives in registers
// Columns: BF16/F16 and Q8_0 a multiple of 256, Q4_0 of 512 (one warp-wide load: 16 bytes of 8 half values,
// 8 bytes of 8 Q8_0 / 16 Q4_0 values per lane), up to 16384 (64 activations per lane in registers).
inline constexpr int64_t kStreamColAlign = 256;
inline constexpr int64_t kStreamMaxCols = 16384;

// How the consumer warps walk a ring stage: kRowByRow is the row-by-row stream; kStageBatched is the stage-batched stream (all of a stage's
// loads first, the slot released before the reductions; BF16/F16 with columns a multiple of 256 whose segments per
// warp and rows per stage have a compiled instance: 1792 and 2048..16384; batched_segs() in
// stream_half.cu).
enum class StreamConsumer { kRowByRow, kStageBatched };

// Whether kStreamHalf takes this weight type, token count and shape on a device with `max_smem` bytes of
// opt-in shared memory per block (the per-row partials grow with rows / SMs).
bool stream_half_supports(DType wtype, int n_tokens, int64_t rows, int64_t cols, int n_sms, size_t max_smem,
                            StreamConsumer consumer = StreamConsumer::kRowByRow);

// stream_half_supports on the current device (batched: the stage-batched consumer, else the row-by-row one).
bool stream_half_applies(DType wtype, int n_tokens, int64_t rows, int64_t cols, bool batched = false);

// One launch on `stream` (capturable). Requires stream_half_supports.
void stream_half(DType wtype, const MatvecParams& p, StreamConsumer consumer, cudaStream_t stream);

// the stage-batched stream with SwiGLU fused into its output (CudaBackend::matmul_swiglu at one token). p.w: (2 hidden, cols)
// BF16/F16, the rows of w_gate then those of w_up (TP shards keep that shape with hidden / world); p.x: (1, cols)
// f32; p.out: (1, hidden) f32 = silu(x . w_gate^T) * (x . w_up^T) (silu.cuh's silu_mul, as swiglu_fused); no bias.
// Each block (one per SM) owns a run of output units and streams gate rows [u0, u1) and up rows
// [hidden + u0, hidden + u1) through the ring, two bulk copies a stage, so the weight needs no repack.
// Columns: a multiple of 256 up to kSwigluMaxCols (instances of 1..4 segments per warp).
inline constexpr int64_t kSwigluMaxCols = 8192;
bool stream_half_swiglu_supports(DType wtype, int n_tokens, int64_t weight_rows, int64_t cols, int n_sms, size_t max_smem);
void stream_half_swiglu(DType wtype, const MatvecParams& p, cudaStream_t stream);
// stream_half_swiglu_supports on the current device.
bool stream_half_swiglu_applies(DType wtype, int n_tokens, int64_t weight_rows, int64_t cols);

}  // namespace ferry::cuda_ops
