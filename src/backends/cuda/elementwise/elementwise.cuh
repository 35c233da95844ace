// Small element-wise and copy ops: swiglu, geglu_tanh, softcap, scale_leading, gather_rows, store_kv.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/common/device_errors.h"

namespace ferry::cuda_ops {

// out = silu(gate) * up; all (count) f32; out may alias gate or up.
void swiglu(float* out, const float* gate, const float* up, int64_t count, cudaStream_t stream);

// out = gelu_tanh(gate) * up, gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (Gemma's FFN); all
// (count) f32; out may alias gate or up.
void geglu_tanh(float* out, const float* gate, const float* up, int64_t count, cudaStream_t stream);

// x = cap * tanh(x / cap) in place (cap > 0; Gemma 2's final logits); x: (count) f32.
void softcap(float* x, float cap, int64_t count, cudaStream_t stream);

// x[r, :n_leading] *= s for each of the rows of x (rows, cols) f32, in place (Gemma's embedding scale; longrope's
// attention factor on the rotated dims).
void scale_leading(float* x, float s, int64_t rows, int64_t cols, int64_t n_leading, cudaStream_t stream);

struct GatherRowsParams {
  void* out;             // (m, row_bytes)
  const void* x;         // (x_rows, row_bytes)
  const int32_t* rows;   // (m) i32, device; a row outside [0, x_rows) sets kBadRow and is skipped
  int64_t m, x_rows;
  int64_t row_words;     // row bytes / 4 (rows are whole 4-byte words)
  DeviceErrors* errors;
};
void gather_rows(const GatherRowsParams& p, cudaStream_t stream);

struct StoreKvParams {
  float* k_cache;        // (n_slots, row) f32 = (n_blocks, block_size, n_kv_heads, head_dim)
  float* v_cache;        // same shape
  const float* k;        // (n, row) f32 = (n, n_kv_heads, head_dim)
  const float* v;        // (n, row) f32
  const int64_t* slots;  // (n) i64, device; slot = block * block_size + offset; out of range sets kBadSlot
  int64_t n, row, n_slots;
  DeviceErrors* errors;
};
void store_kv(const StoreKvParams& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
