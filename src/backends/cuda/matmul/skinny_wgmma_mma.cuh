// Device helpers the wgmma skinny GEMMs (skinny_wgmma.cu) need beyond hopper.cuh: wgmma
// m64n64k16 (hopper.cuh carries n128/n192/n256 only), the wgmma of one m64 tile for any of the four N, and a TMA
// tile load with an L2 cache-policy hint. Device-only; include from .cu files compiled for sm_90a.
#pragma once

#include <cstdint>

#include "backends/cuda/sm90/hopper.cuh"

namespace ferry::cuda_ops::sm90 {

// tma_load_2d (hopper.cuh) with an L2 cache policy (`policy` from createpolicy) for the lines it reads.
__device__ __forceinline__ void tma_load_2d_hint(void* dst, const void* tmap, uint64_t* bar, int32_t c0, int32_t c1,
                                                 uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}

// The wgmma of one m64 tile for N = kNt tokens (64, 128, 192 or 256): d (64 x kNt f32 fragment) (+)= A . B^T.
template <int kNt>
__device__ __forceinline__ void wgmma_tile(float (&d)[kNt / 2], uint64_t da, uint64_t db, int scale_d) {
  if constexpr (kNt == 64) {
    wgmma_m64n64k16(d, da, db, scale_d);
  } else if constexpr (kNt == 128) {
    wgmma_m64n128k16(d, da, db, scale_d);
  } else if constexpr (kNt == 192) {
    wgmma_m64n192k16(d, da, db, scale_d);
  } else {
    static_assert(kNt == 256);
    wgmma_m64n256k16(d, da, db, scale_d);
  }
}

}  // namespace ferry::cuda_ops::sm90
