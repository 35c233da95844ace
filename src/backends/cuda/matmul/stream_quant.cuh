// The streamed quantized matvec (kStreamQuant): out (1, rows) = x (1, cols) . w (rows, cols)^T for Q8_0, Q4_0, Q4_K, Q5_K and
// Q6_K weights at one token,
// the stage-batched stream's streamed, stage-batched design (stream_half.cuh, stream_half.cu) with a dp4a consumer.
//  - Stream: one block per SM owns a contiguous run of whole rows; a producer warp streams them through a 112 KB
//    ring of shared-memory stages BEFORE the PDL wait, a stage = two bulk copies (its rows' quants, then their
//    fp16 scales: "quants then scales", weight_layout.cuh) completing one mbarrier (matvec_stream_quant.cuh, shared
//    with the row-by-row stream's quantized kernel). A stage holds kRows = 8, 4, 2 or 1 whole rows, the most whose bytes
//    stay within 20 KB (Q4_0 4096 columns: 8 rows of 2304 bytes; Q8_0 4096: 4 of 4352; Q4_0 14336: 2; Q8_0
//    14336: 1).
//  - Activations: no pre-pass launch. After the PDL wait each consumer lane reads the 16 f32 activations it
//    owns per segment and quantizes them itself to the tiled matvec's two int8 levels per 32-value block (the block's
//    max |x| from the partner lane by one shuffle): x ~= dx2 (256 q1 + q2), relative error ~2e-5
//    (stream_quant_math.cuh). They stay in registers for the whole kernel: 10 registers per segment. With
//    MatvecParams::one_level_acts (the backend's default) one level, x ~= dx q1 (llama.cpp's q8_1
//    precision): half the dp4a per weight byte, for a consumer that is otherwise issue-bound at Q4_0.
//  - Consumers: 8 warps; a "segment" = 512 columns of a row (Q8_0: 16 quant bytes a lane, one LDS.128; Q4_0: 8
//    bytes, one LDS.64), warp w owns segments w, w + 8, ... (kSegs = ceil(cols / 4096) of them). Per stage all
//    kRows x kSegs quant loads and fp16 scale loads are issued first, the slot is released (mbarrier arrive),
//    then the dp4a chains (Q8_0: 8 dp4a per 16 values; Q4_0: 2 masks + 8 dp4a per 16 values, the high nibbles
//    as unsigned bytes 16 q so nothing shifts, the offset 8 folded into a chain's start), one I2F and one FFMA
//    per row and segment, and the kRows rows reduced together: a transposing shuffle tree (each step halves the
//    rows a lane carries: 2 log2(kRows) + 5 - log2(kRows) shuffles for kRows rows instead of 5 kRows).
//  - Per-warp row partials are added in warp order at the end (fixed order: deterministic).
// The K-quants (stream_quant_kquant_math.cuh): Q4_K and Q5_K stream their GGUF super-blocks as stored (one bulk copy
// a stage: 144 = 9 x 16, 176 = 11 x 16 bytes), a lane = 8 quant bytes (two 32-value runs; Q5_K also 8 qh bytes) plus
// the super-block's 16-byte header, scales/mins decoded per lane; Q6_K streams its split layout (ql|qh quants, then
// the int8-scales + d records: two copies a stage), a lane = 8 ql + 8 qh bytes and its two runs' scales. Per-group
// activation levels and exact int32 sums; one level (MatvecParams::one_level_acts) as for Q8_0/Q4_0.
// Columns: a multiple of 512, 512..16384 (Q6_K: of 2048, so its records of a row are whole 16-byte units). Numerics: int32-exact products against the quantized activations,
// fp32 accumulation per row: relative L2 vs the f32 reference ~2e-5 (the tiled matvec's activation error).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace ferry::cuda_ops {

struct MatvecParams;
struct WeightView;

// Whether kStreamQuant takes this weight type, token count and shape on a device with `n_sms` SMs and
// `max_smem` bytes of opt-in shared memory per block (the per-row partials grow with rows / SMs).
bool stream_quant_supports(DType wtype, int n_tokens, int64_t rows, int64_t cols, int n_sms, size_t max_smem);
// The same on the current device.
bool stream_quant_applies(DType wtype, int n_tokens, int64_t rows, int64_t cols);

// One launch on `stream` (capturable; no scratch). Requires stream_quant_applies and p.w.scales % 16 == 0.
void stream_quant(DType wtype, const MatvecParams& p, cudaStream_t stream);

// kStreamQuant with SwiGLU fused into its output (CudaBackend::matmul_swiglu at one token on its types), as
// the stage-batched stream's stream_half_swiglu does for BF16: p.w (2 hidden, cols), the rows of w_gate then those of w_up (a TP
// shard keeps that shape with hidden / world); p.x (1, cols) f32; p.out (1, hidden) f32 = silu(x . w_gate^T) *
// (x . w_up^T); no bias, no add_norm. A stage streams kRows / 2 units' gate rows and the same units' up rows (four
// bulk copies, no repack). Takes columns a multiple of 512 up to 8192 whose stage holds at least 2 rows.
bool stream_quant_swiglu_supports(DType wtype, int n_tokens, int64_t weight_rows, int64_t cols, int n_sms,
                                size_t max_smem);
bool stream_quant_swiglu_applies(DType wtype, int n_tokens, int64_t weight_rows, int64_t cols);
void stream_quant_swiglu(DType wtype, const MatvecParams& p, cudaStream_t stream);

// kStreamQuant over a stacked weight whose row ranges have different types (a q|k|v of a K-quant mix: q|k in Q4_K
// or Q5_K, v in Q6_K): one launch, its blocks split between the parts by their bytes (quant_stream::stacked_grid),
// each part's blocks streaming its rows in its own layout with its own plan; the same prologue (x, or in_norm) in
// every block, so the output rows equal the per-part launches' bit for bit. p: the head part (p.w its (head rows,
// cols) view; p.out (1, head rows + tail rows) f32 and p.bias (head rows + tail rows) or null for the whole stack);
// tail_w: the tail part's (tail rows, cols) view. No residual_add, peer_push or SwiGLU (none follows a q|k|v).
// Takes the pairs quant_stream::stacked_pair names at 2048 or 4096 columns.
bool stream_quant_stacked_supports(DType head, int64_t head_rows, DType tail, int64_t tail_rows, int64_t cols,
                                   int n_sms, size_t max_smem);
void stream_quant_stacked(DType head, DType tail, const MatvecParams& p, const WeightView& tail_w, cudaStream_t stream);

// Whether kStreamQuant (plain or SwiGLU) takes MatvecParams::in_norm for `cols` input columns: one column segment a
// consumer warp (512..4096 columns, a multiple of 512), so each lane's activations sit in registers beside the
// norm's. MatvecParams::residual_add needs only kStreamQuant itself (not with add_norm, not in the SwiGLU form).
bool stream_quant_in_norm_applies(DType wtype, int64_t cols);

}  // namespace ferry::cuda_ops
