// One projection of the routed experts (gate, up or down), over the grouping moe_group made: for every active
// expert e and every slot s of its group, out[s] = w_e · a[s], where a[s] is row s / a_div of `a` (the token's
// normed input for gate and up, top_k slots per token; the slot's own SwiGLU row for down). Two kernels, one
// params struct:
//  - moe_experts_matvec (decode, a few tokens): one warp per weight row of an active expert, every slot of the
//    group dotted with the row as it streams by (each routed expert's rows read once a step), f32 throughout;
//  - moe_experts_gemm (prefill): a grouped GEMM on tensor cores over the tiles moe_group listed (up to
//    kMoeGemmTileM slots of one expert). A block takes kMoeGemmTileN rows of the tile's expert; per k-step of
//    kMoeGemmTileK columns it decodes the weight chunks into bf16 and rounds the slots' f32 activations to bf16
//    in shared memory, and its 8 warps run mma.sync m16n8k16 (bf16 in, f32 accumulation) with weight rows as M
//    and slots as N; the next k-step's loads (raw chunks and activations into registers, BF16 weights by
//    cp.async) are in flight while the current one multiplies (moe_gemm.cu, index math in moe_gemm_tile.cuh). The
//    bf16 rounding of the activations and of the decoded weights (every type but BF16) is its one departure from
//    the f32 reference: ~1e-3 relative a projection, 3-4e-3 on a layer.
// Epilogue Store writes the dot; SwiGlu writes silu(gate[s][r]) * dot (the up pass, gate the gate pass's output);
// GateUp (matvec only) dots each row of `experts` (gate) and of `up_experts` in one launch and writes
// silu(gate dot) * up dot: both passes of the SwiGLU input in one kernel, h written once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace ferry::cuda_ops {

// Slots per grouped-GEMM tile (moe_group's tile_rows). 64, not 32: at a 512-token step of 128 experts top-8 an
// expert gets ~Binomial(512, 8/128) slots (random routing): mean 32, sd 5.5. With 32-slot tiles about half the
// experts need a second tile, which streams the weight rows again for a few slots; at 64 that is ~6 sd away. The
// kernel skips the n8 tiles past a tile's slot count, so the tensor work follows the real count.
inline constexpr int kMoeGemmTileM = 64;
inline constexpr int kMoeGemmTileN = 128;  // weight rows per block: 8 warps x one m16 tile
inline constexpr int kMoeGemmTileK = 128;  // columns per k-step: every decoder's chunks of a 128-aligned span
                                           // cover exactly that span (moe_gemm_tile.cuh)

enum class MoeEpilogue { Store, SwiGlu, GateUp };

// One expert's prepared weight (matmul/weight_layout.cuh): its data and, for the split layouts, the scales offset.
struct MoeExpertWeight {
  const uint8_t* data;
  size_t scales;
};

struct MoeExpertsParams {
  const MoeExpertWeight* experts;  // (E) device: this projection's experts, all (rows, cols) of one type
  int64_t rows, cols;
  const float* a;                  // (.., cols) f32, rows 16-byte aligned: slot s reads row s / a_div
  int a_div;
  const float* gate;               // SwiGlu: (n_slots, rows) f32, else null; may alias out
  const MoeExpertWeight* up_experts;  // GateUp: (E) the up projection's experts (same type and shape), else null
  float* out;                      // (n_slots, rows) f32, row = slot
  MoeEpilogue epilogue;
  // moe_group's lists (device)
  const int32_t* offsets;          // (E + 1)
  const int32_t* slots;            // (n_slots)
  const int32_t* active;           // (E): matvec's groups
  const int32_t* tile_expert;      // (max_groups): GEMM tiles
  const int32_t* tile_begin;       // (max_groups)
  const int32_t* counts;           // (2): active experts, tiles
  int64_t max_groups;              // grid bound: min(E, n_slots) (matvec) or moe_max_tiles (GEMM)
};
void moe_experts_matvec(DType type, const MoeExpertsParams& p, cudaStream_t stream);
void moe_experts_gemm(DType type, const MoeExpertsParams& p, cudaStream_t stream);

// Up to this many tokens a step's experts run as matvecs (each routed expert's rows streamed once), and its routing
// in one launch (CudaBackend::moe_ffn).
inline constexpr int64_t kMoeDecodeTokens = 16;
// Whether a step of n tokens runs moe_experts_matvec (else moe_experts_gemm):
// the one rule, shared by CudaBackend::moe_ffn, its tests and moe_ffn_bench. The matvec rereads a slot's
// activations from L1 for every weight chunk, so past a few slots per expert the tensor-core GEMM wins even where
// the step reads every expert (Qwen3-30B-A3B at 64 tokens, ~4 slots an expert: matvec 1,113 us, GEMM at 512
// tokens 693 us; docs/perf-log.md, fifth session).
inline bool moe_experts_use_matvec(int64_t n) { return n <= kMoeDecodeTokens; }

// out[t] = sum over j < top_k, in slot order, of weight[t * top_k + j] * y[t * top_k + j]: the deterministic
// combine (no atomics; each output written once).
struct MoeCombineParams {
  float* out;           // (n, dim) f32
  const float* y;       // (n * top_k, dim) f32: each slot's expert output
  const float* weight;  // (n, top_k) f32: the routing weights
  int64_t n, dim;
  int top_k;
};
void moe_combine(const MoeCombineParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
