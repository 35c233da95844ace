// Errors that kernels find in device-resident inputs (a token id past the vocabulary, a KV slot or block id
// out of range). A kernel cannot throw, and the inputs live on the device (so a decode step can be captured
// in a CUDA graph), so kernels set a bit here and skip the bad item; the backend reads the word back at its
// next synchronisation point (copy_to_host, synchronize) and throws ferry::Error there.
#pragma once

#include <cstdint>

namespace ferry::cuda_ops {

enum DeviceErrorBit : uint32_t {
  kBadTokenId = 1u << 0,  // embedding: id < 0 or >= vocab
  kBadSlot = 1u << 1,     // store_kv: slot < 0 or >= n_blocks * block_size
  kBadRow = 1u << 2,      // gather_rows: row < 0 or >= rows of x
  kBadBlock = 1u << 3,    // attention: block table entry < 0 or >= n_blocks for a position in use
  kBadRouterLogit = 1u << 4,  // moe_route: a router logit is not finite (the token routes to expert 0)
  kBadExpert = 1u << 5,       // moe_group: an expert id outside [0, n_experts) (the slot is left out)
};

struct DeviceErrors {
  uint32_t bits;   // OR of DeviceErrorBit
  int64_t value;   // the offending value of one of the errors (the last one written)
};

#ifdef __CUDACC__
// Plain stores, no atomics: the word lives in mapped host memory, where device atomics depend on PCIe
// atomic support. Racing reporters may lose each other's bits; one error is all the backend reports.
__device__ inline void report_error(DeviceErrors* e, DeviceErrorBit bit, int64_t value) {
  volatile DeviceErrors* v = e;
  v->value = value;
  v->bits = v->bits | uint32_t(bit);
}
#endif

}  // namespace ferry::cuda_ops
