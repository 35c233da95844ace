// Split-KV decode attention on tensor cores: the same contract, plan, scratch and merge as the CUDA-core
// kernel (decode_split.cuh), for head_dim 64 and 128. Per block one (chunk, sequence, KV head, row group);
// the GQA group's query heads are the rows of a 16-row mma tile (padded: 8 rows of a GQA-4 group are used
// by 4 heads), so each K/V row loaded feeds every head of the group through mma.sync m16n8k16 bf16 -> f32:
//   S (rows x 16 positions) = Q (rows x D) . K^T,   O (rows x D) += P (rows x 16) . V (16 x D).
// Q and P are split into bf16 hi + lo parts (two mmas each), so the products carry ~16 bits of mantissa:
// the result matches fp32 math on the bf16 K/V to ~1e-5 (plain bf16 Q and P would give ~1e-3).
// Why: with GQA 4 every K/V byte costs ~8 FP32 FLOPs plus shuffles on CUDA cores, which left the CUDA-core
// kernel issue-bound; on tensor cores a 16-position tile is ~64 mma + 16 ldmatrix instructions per warp
// (docs/perf-log.md "## 2026-11-30: decode attention on tensor cores").
// Use plan_decode_split(p, n_sms, DecodeKernel::kTensorCores); decode_split_attention dispatches here.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/attention/attention.cuh"
#include "backends/cuda/attention/attention_split_heuristic.cuh"

namespace ferry::cuda_ops {

bool decode_mma_supports(int head_dim);  // 64 or 128
// Dynamic shared memory per block (the per-warp rings) for a plan of this kernel.
size_t decode_mma_smem_bytes(int head_dim, int stages);
// Preconditions as decode_split_attention (which checks them and calls this); plan.kernel == kTensorCores.
void decode_mma_attention(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream);

}  // namespace ferry::cuda_ops
