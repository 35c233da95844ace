// Device helpers the wgmma skinny GEMMs (wgmma_skinny.cu, wgmma_skinny_persist.cu) need beyond hopper.cuh: wgmma
// m64n64k16 (hopper.cuh carries n128/n192/n256 only), the wgmma of one m64 tile for any of the four N, and a TMA
// tile load with an L2 cache-policy hint. Device-only; include from .cu files compiled for sm_90a.
#pragma once

#include <cstdint>

#include "backends/cuda/hopper.cuh"

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

// Generated as hopper.cuh's wrappers are (one operand per accumulator register); fragment layout as there:
// d[4j + h + 2v] holds row 16 w + l / 4 + 8 v, column 8 j + 2 (l % 4) + h for lane l of warp w of the warpgroup.
// d (64 x 64 f32 fragment, 32 per thread) (+)= A (64 x 16, smem desc) . B (64 x 16, K-major, smem desc)^T;
// scale_d = 0 overwrites d, 1 accumulates.
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
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
