// Mixture-of-experts routing on the GPU, with no host synchronisation (a decode step with expert layers can be
// captured in a step graph): the router logits, softmax and top-k per token, and the grouping of the step's
// (token, slot) pairs by expert that the expert kernels (moe_matvec.cuh, moe_gemm.cuh) read. It computes what
// ops/moe_routing.cpp (route_moe, the reference) computes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/common/device_errors.h"
#include "backends/cuda/matmul/weight_layout.cuh"
#include "core/dtype.h"

namespace ferry::cuda_ops {

inline constexpr int kMoeMaxExperts = 1024;  // the routing and grouping kernels keep one word per expert in smem
inline constexpr int kMoeMaxTopK = 32;

// logits (n, E) f32 = x (n, dim) f32 . router (E, dim)ᵀ in f32 (exact decoded weights, f32 activations: the CPU
// reference's arithmetic, so the GPU routes as it does; the router is E rows, a small read).
struct MoeRouterLogitsParams {
  WeightView router;  // (E, dim), a prepared weight of any native type
  const float* x;     // (n, dim) f32, rows 16-byte aligned
  float* logits;      // (n, E) f32
  int64_t n;
};
void moe_router_logits(DType type, const MoeRouterLogitsParams& p, cudaStream_t stream);

// Per token: p = softmax(logits) (max subtracted), the top_k experts by p (ties: the lower index; no sort, k
// arg-max passes), their weights p (Softmax) or p / (sum of the chosen p, in slot order) (Renormalize).
struct MoeRouteParams {
  const float* logits;  // (n, E) f32; a non-finite logit sets kBadRouterLogit (the token routes to expert 0)
  int32_t* expert;      // (n, top_k) i32: the chosen experts, most probable first
  float* weight;        // (n, top_k) f32: their weights
  int64_t n;
  int n_experts, top_k;
  bool renormalize;
  DeviceErrors* errors;
};
void moe_route(const MoeRouteParams& p, cudaStream_t stream);

// Counting sort of the n_slots = n * top_k slots (slot s = token * top_k + j) by expert, in one block, plus the
// work lists of the expert kernels. The order of slots within an expert's group is not fixed (shared-memory
// atomics place them), and nothing depends on it: every slot's result is computed from its own row alone.
struct MoeGroupParams {
  const int32_t* expert;  // (n_slots) i32 from moe_route; an id outside [0, E) sets kBadExpert (slot left out)
  int32_t* offsets;       // (E + 1): expert e's slots are slots[offsets[e] .. offsets[e + 1])
  int32_t* slots;         // (n_slots): slot ids grouped by expert
  int32_t* active;        // (E): the experts with at least one slot, ascending; active[g] for g < counts[0]
  int32_t* tile_expert;   // (max_tiles): tile i of the grouped GEMM covers expert tile_expert[i]'s slots
  int32_t* tile_begin;    // (max_tiles): slots[tile_begin[i] .. min(tile_begin[i] + tile_rows, offsets[e + 1]))
  int32_t* counts;        // (2): counts[0] = active experts, counts[1] = tiles
  int32_t n_slots;
  int n_experts;
  int tile_rows;          // the grouped GEMM's rows per tile (kMoeGemmTileM)
  DeviceErrors* errors;
};
// Tiles a step of n_slots slots over E experts can need: sum over experts of ceil(c_e / tile_rows)
// <= n_slots / tile_rows + (experts with c_e > 0).
inline int64_t moe_max_tiles(int64_t n_slots, int n_experts, int tile_rows) {
  return n_slots / tile_rows + (n_slots < n_experts ? n_slots : n_experts);
}
void moe_group(const MoeGroupParams& p, cudaStream_t stream);

// A decode step's routing in one launch: moe_router_logits, moe_route and moe_group as above, the last block to
// finish its logits doing the route and the grouping. done: one u32 of device memory that is 0 before the first
// launch; the kernel leaves it 0. The three parameter sets must describe the same step (checked).
inline constexpr int64_t kMoeRouteDecodeMaxTokens = 64;  // one block routes every token: a short serial tail
struct MoeRouteDecodeParams {
  MoeRouterLogitsParams logits;
  MoeRouteParams route;
  MoeGroupParams group;
  uint32_t* done;
};
void moe_route_decode(DType type, const MoeRouteDecodeParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
