// store_kv for the bf16 paged KV cache: the step's f32 K and V rows rounded (round-to-nearest-even) into
// their slots of the caches the attention kernels read.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/common/device_errors.h"

namespace ferry::cuda_ops {

struct StoreKvBf16Params {
  __nv_bfloat16* k_cache;  // (n_slots, row) bf16 = (n_blocks, block_size, n_kv_heads, head_dim)
  __nv_bfloat16* v_cache;  // same shape
  const float* k;          // (n, row) f32 = (n, n_kv_heads, head_dim)
  const float* v;          // (n, row) f32
  const int64_t* slots;    // (n) i64, device; slot = block * block_size + offset; out of range sets kBadSlot
  int64_t n, row, n_slots;  // row: values per token (a multiple of 4)
  DeviceErrors* errors;
};
void store_kv_bf16(const StoreKvBf16Params& p, cudaStream_t stream);

}  // namespace ferry::cuda_ops
