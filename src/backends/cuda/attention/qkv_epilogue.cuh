// Epilogues of the fused projections (ops/backend.h, Backend::qkv_epilogue and swiglu_fused):
//  - qkv_epilogue: after the one matmul of wq|wk|wv, per token and head: the optional per-head RMSNorm (Qwen3
//    q_norm/k_norm), RoPE on the q and k heads, q to its contiguous buffer, k and v into the paged cache at
//    the token's slot (rounded to the cache type). Replaces rms_norm x2, rope x2 and store_kv (five launches).
//  - swiglu_fused: silu(gate) * up reading the two halves of each row of the fused w_gate|w_up output.
// Every per-step value (positions, slots) is read from device memory: both kernels can be captured in a graph.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/common/device_errors.h"

namespace ferry::cuda_ops {

enum class KvCacheType { F32, BF16 };

struct QkvEpilogueParams {
  const float* qkv;          // (n, n_heads + 2*n_kv_heads, head_dim) f32: q heads, then k heads, then v heads
  const int32_t* positions;  // (n) i32, device
  const int64_t* slots;      // (n) i64, device; slot = block * block_size + offset; out of range sets kBadSlot
                             // (that token's K/V are not written to the caches)
  const float* inv_freq;     // (half) f32: the first 2*half dims of each q/k head rotate
  const float* q_norm;       // (head_dim) f32 per-head RMSNorm weight of q, or null (then k_norm is null too)
  const float* k_norm;       // (head_dim) f32, or null
  float* q;                  // out (n, n_heads, head_dim) f32
  void* k_cache;             // out (n_slots, n_kv_heads, head_dim) of kv_type = (n_blocks, block_size, KVH, D)
  void* v_cache;             // out, same shape and type
  float* k_out;              // optional out (n, n_kv_heads, head_dim) f32 (debug observer), or null
  float* v_out;              // optional out (n, n_kv_heads, head_dim) f32, or null
  int64_t n, n_heads, n_kv_heads, head_dim, half, n_slots;
  float eps;                 // RMSNorm epsilon
  bool interleaved;          // pairs (2i, 2i+1); else NeoX pairs (i, i + half)
  KvCacheType kv_type;
  DeviceErrors* errors;
  int64_t heads_per_warp = 1;  // set by the launcher (qkv_epilogue.cu)
};
void qkv_epilogue(const QkvEpilogueParams& p, cudaStream_t stream);

struct SwigluFusedParams {
  float* out;            // (n, hidden) f32 = silu(gate_up[:, :hidden]) * gate_up[:, hidden:]; or null with out_bf16
  const float* gate_up;  // (n, 2*hidden) f32; must not overlap out
  int64_t n, hidden;
  uint16_t* out_bf16 = nullptr;  // (n, hidden) bf16 bits instead of out (rounded to nearest even, as f32_to_bf16):
                                 // the input of a bf16 GEMM (the down projection) without a conversion pass
};
void swiglu_fused(const SwigluFusedParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
