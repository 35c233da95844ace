// One projection of the routed experts (gate, up or down), over the grouping moe_group made: for every active
// expert e and every slot s of its group, out[s] = w_e · a[s], where a[s] is row s / a_div of `a` (the token's
// normed input for gate and up, top_k slots per token; the slot's own SwiGLU row for down). Two kernels, one
// params struct:
//  - moe_experts_matvec (decode, a few tokens): one warp per weight row of an active expert, every slot of the
//    group dotted with the row as it streams by (each routed expert's rows read once a step);
//  - moe_experts_gemm (prefill): a grouped GEMM over the tiles moe_group listed (kMoeGemmTileM slots of one
//    expert), weight tiles decoded to f32 in shared memory (SIMT FMA: a correct first landing, not wgmma).
// Epilogue Store writes the dot; SwiGlu writes silu(gate[s][r]) * dot (the up pass, gate the gate pass's output);
// GateUp (matvec only) dots each row of `experts` (gate) and of `up_experts` in one launch and writes
// silu(gate dot) * up dot: both passes of the SwiGLU input in one kernel, h written once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace ferry::cuda_ops {

inline constexpr int kMoeGemmTileM = 32;   // slots per grouped-GEMM tile (moe_group's tile_rows)
inline constexpr int kMoeGemmTileN = 32;   // weight rows per tile
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
