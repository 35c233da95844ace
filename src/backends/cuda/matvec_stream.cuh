// Matvec version 7, "streamed": out (n, rows) = x (n, cols) . w (rows, cols)^T for BF16/F16 weights at a few
// tokens, built to read the weight at the copy bandwidth whatever its shape.
//  - Each block (one per SM) owns a contiguous run of whole rows, so its part of the row-major weight is ONE
//    contiguous byte range; a producer warp streams that range into a ring of shared-memory stages with
//    cp.async.bulk (one 16 KB copy per stage, completion on an mbarrier), kStages deep (96 KB in flight per SM).
//  - The weight does not depend on earlier kernels, so the producer fills the ring BEFORE griddepcontrol.wait
//    (pdl.cuh): under programmatic dependent launch the first 96 KB of every block arrive while the previous
//    kernel (a norm, the attention) still runs. Only the consumers wait, then read x (f32, through L1).
//  - Consumers: 8 warps; in every stage warp w takes the 4 consecutive 256-value segments 4w..4w+3 (1024
//    values). cols % 1024 == 0 keeps those inside one row, so a warp keeps one running sum per token and
//    reduces it (warp shuffles) only when its row changes; per-warp row partials go to shared memory and are
//    added in warp order at the end: the result does not depend on timing (deterministic), fp32 throughout.
// Why: v2/v5 issue their weight loads from registers; at 4096-6144 rows they sustained 48-69% of 4.30 TB/s,
// short kernels lost their ramp-up to the launch gap. See docs/perf-log.md ("matvec v7").
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace ferry::cuda_ops {

struct MatvecParams;

inline constexpr int kStreamMaxTokens = 4;    // x reads grow with the tokens; above this v5's tensor cores win
inline constexpr int64_t kStreamColAlign = 1024;  // values a consumer warp takes per stage (one row)

// Whether version 7 takes this weight type, token count and shape on a device with `max_smem` bytes of
// opt-in shared memory per block (the per-row partials grow with rows / SMs).
bool matvec_stream_supports(DType wtype, int n_tokens, int64_t rows, int64_t cols, int n_sms, size_t max_smem);

// One launch on `stream` (capturable). Requires matvec_stream_supports.
void matvec_stream(DType wtype, const MatvecParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
