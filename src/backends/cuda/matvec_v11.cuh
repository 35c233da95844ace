// Matvec version 11: version 10 (matvec_v10.cuh: Q8_0, Q4_0 and Q4_K at one token, the streamed ring with a dp4a
// consumer) with twice the consumer warps, for latency hiding: 16 consumer warps in two groups of 8 (+ the
// producer warp: 544 threads, at most 120 registers a thread).
//  - Why: version 10's 8 consumer warps are 2 per scheduler. A stage's chain (mbarrier wait, shared loads, the
//    dp4a chains, the 5-level shuffle tree of the row reduction, the partial's store) is a few hundred cycles of
//    latency per warp on top of its issue, and two warps per scheduler hide little of it: version 10 measured 61-70%
//    of 4.30 TB/s on the Q4_0 Llama shapes with the consumers at ~50% of peak issue (docs/perf-log.md "## qv9").
//  - Stages and segments are version 10's (same plan, same ring, same lane mapping and math, so the same
//    numerics: matvec_v10_math.cuh). Group g's warp w plays version 10's warp w: with kRows >= 2 rows a stage
//    both groups read every stage, group g taking its rows [g kRows / 2, (g + 1) kRows / 2) (16 readers release
//    a slot); with one row a stage group g takes stages g, g + 2, ... (8 readers). So a warp has half of version
//    10's work a stage, and each scheduler 4 warps to switch between.
//  - Activations: group 0 quantizes (version 10's per-lane work, so the same issue time) and hands each LaneAct to
//    group 1's warp of the same segments through shared memory ((12 words, 8 warps, segments a warp, 32 lanes):
//    12 KB per segment a warp), one named barrier over the 16 consumer warps.
//  - Row partials: (8 warps, rows of the block) as version 10 (the groups write disjoint rows), added in warp order:
//    deterministic.
// Applies where version 10 applies and the exchange fits the shared memory.
// Measured (H200, matvec_bench, docs/perf-log.md "## qv11"): 0.95-1.01x of version 10 on Q8_0/Q4_0, 0.94-1.03x on
// Q4_K: the latency hypothesis above did not hold (Q4_K's consumer is issue-bound, Q8_0/Q4_0 lose to per-call fixed
// costs that more warps do not shorten). Kept selectable (version 11) for comparisons.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace ferry::cuda_ops {

struct MatvecParams;

bool matvec_v11_supports(DType wtype, int n_tokens, int64_t rows, int64_t cols, int n_sms, size_t max_smem);
bool matvec_v11_applies(DType wtype, int n_tokens, int64_t rows, int64_t cols);
// One launch on `stream` (capturable; no scratch). Requires matvec_v11_applies.
void matvec_v11(DType wtype, const MatvecParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
