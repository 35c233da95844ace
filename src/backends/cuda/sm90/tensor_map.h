// Hopper TMA descriptors for ferry's bf16 GEMMs (gemm_sm90, wgmma_skinny), host code: the driver's
// cuTensorMapEncodeTiled, found through the runtime's driver entry point (no libcuda link), and the one 2-D
// layout both kernels load (row-major bf16, 128-byte swizzle, out-of-range elements as zeros).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace ferry::cuda_ops {

// PFN_cuTensorMapEncodeTiled, or nullptr when the driver does not provide it (the runtime error is cleared).
void* find_tensor_map_encoder();

// What a TMA kernel family needs from a device: its SM count, and the encoder when the device is a Hopper
// (compute capability 9.x) and the driver has it (nullptr otherwise: the family is unavailable there).
struct HopperTma {
  void* encode = nullptr;
  int num_sms = 0;
};
HopperTma find_hopper_tma(int device);

// A 2-D tensor map over a (rows, cols) bf16 row-major matrix at base (row pitch cols x 2 bytes, 16-byte aligned),
// box box_cols x box_rows, 128-byte swizzle, L2 promotion 256 B, out-of-range elements loaded as zeros.
CUtensorMap make_bf16_tmap(void* encode, const uint16_t* base, int64_t rows, int64_t cols, int box_cols, int box_rows);

}  // namespace ferry::cuda_ops
