// Device helpers of the wgmma prefill attention kernel (flash_prefill_wgmma.cu) beyond hopper.cuh: shared-memory
// matrix descriptors built from 32-bit shared addresses (K-major and MN-major, 128-byte swizzle), the 128-byte swizzle
// itself for tiles written by ordinary stores and cp.async, cp.async completion on an mbarrier, named barriers, the
// generic -> async proxy fence, register fences for wgmma A operands, and wgmma with A from registers and a transposed
// (MN-major) B. Device-only; include from .cu files compiled for sm_90a.
#pragma once

#include <cstdint>

#include "backends/cuda/hopper.cuh"

namespace ferry::cuda_ops::sm90 {

// Byte offset of 16-byte chunk c (0 .. D/8 - 1) of row r in a tile of kRows rows of D bf16 laid out for wgmma with the
// 128-byte swizzle: the tile is D/64 column blocks of (kRows x 64) bf16 (128 bytes per row, kRows * 128 bytes per
// block); inside a block, row r sits at r * 128 and its chunk c % 8 at ((c % 8) ^ (r % 8)) * 16 (the swizzle repeats
// every 8 rows = 1024 bytes, so the tile must start 1024-byte aligned). What TMA's SWIZZLE_128B writes.
template <int kRows>
__device__ __forceinline__ uint32_t sw128_offset(int r, int c) {
  return uint32_t((c >> 3) * (kRows * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// Descriptor of a K-major operand tile in that layout, at shared address addr (rows 8 apart by 1024 bytes: SBO; LBO
// unused). Advancing K by 16 elements inside a 64-column block = adding 32 bytes to addr; the next 64-column block
// starts kRows * 128 bytes further. Same bits as smem_desc_sw128 (hopper.cuh) without the address conversion.
__device__ __forceinline__ uint64_t desc_k_sw128(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// Descriptor of an MN-major operand (B of O += P·V: V stored key-major, rows = keys = the K dimension, columns = head
// dims = N) in the same layout: within a 64-column block, 8 rows (keys) form one 1024-byte swizzle atom and the
// next 8 keys are 1024 bytes further (SBO); the next 64 columns (N) are lbo bytes further (LBO = the block's size).
// CUTLASS's canonical MN-major SW128 layout ((8,n),(8,k)):((1,LBO),(8,SBO)) in 16-byte units. Advancing K by 16 keys
// = adding 2048 bytes to addr.
__device__ __forceinline__ uint64_t desc_mn_sw128(uint32_t addr, uint32_t lbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}

// One arrival on bar once every cp.async this thread issued before has landed (.noinc: the arrival counts toward the
// barrier's expected count, so a barrier that n threads feed this way is initialized with count n).
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Named barrier `id` (1..15; 0 is __syncthreads) over kCount threads (a multiple of 32).
template <int kCount>
__device__ __forceinline__ void named_bar_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kCount) : "memory");
}

// Orders this thread's ordinary shared-memory stores before later async-proxy reads (wgmma operands).
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Keeps registers that an in-flight wgmma reads (A fragments) alive and unmoved until this point (after its wait).
template <int kN>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[kN][4]) {
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(r[i][e])::"memory");
}

// ---- generated: wgmma.mma_async m64nNk16 bf16 x bf16 -> f32 with A from registers (the accumulator layout of
// hopper.cuh restricted to 16 columns: a[0] = row g, columns 2t, 2t+1; a[1] = row g + 8; a[2] = row g, columns
// 2t + 8, +9; a[3] = row g + 8, columns 2t + 8, +9 for lane 4g + t of each warp's 16 rows) and B MN-major
// (transpose bit 1).

// d (64 x 64 f32 fragment, 32 per thread) (+)= A (64 x 16 bf16, registers) . B (16 x 64, MN-major in shared
// memory: desc_b, transpose bit set); scale_d = 0 overwrites d, 1 accumulates.
__device__ __forceinline__ void wgmma_m64n64k16_rs_tb(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                       int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

// d (64 x 128 f32 fragment as two halves: d0 = columns 0..63, d1 = 64..127, each in the 64 x 64 layout) (+)=
// A (64 x 16 bf16, registers) . B (16 x 128, MN-major in shared memory: desc_b, transpose bit set);
// scale_d = 0 overwrites d, 1 accumulates.
__device__ __forceinline__ void wgmma_m64n128k16_rs_tb(float (&d0)[32], float (&d1)[32], const uint32_t (&a)[4],
                                                       uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      :
        "+f"(d0[0]), "+f"(d0[1]), "+f"(d0[2]), "+f"(d0[3]), "+f"(d0[4]), "+f"(d0[5]), "+f"(d0[6]), "+f"(d0[7]),
        "+f"(d0[8]), "+f"(d0[9]), "+f"(d0[10]), "+f"(d0[11]), "+f"(d0[12]), "+f"(d0[13]), "+f"(d0[14]), "+f"(d0[15]),
        "+f"(d0[16]), "+f"(d0[17]), "+f"(d0[18]), "+f"(d0[19]), "+f"(d0[20]), "+f"(d0[21]), "+f"(d0[22]), "+f"(d0[23]),
        "+f"(d0[24]), "+f"(d0[25]), "+f"(d0[26]), "+f"(d0[27]), "+f"(d0[28]), "+f"(d0[29]), "+f"(d0[30]), "+f"(d0[31]),
        "+f"(d1[0]), "+f"(d1[1]), "+f"(d1[2]), "+f"(d1[3]), "+f"(d1[4]), "+f"(d1[5]), "+f"(d1[6]), "+f"(d1[7]),
        "+f"(d1[8]), "+f"(d1[9]), "+f"(d1[10]), "+f"(d1[11]), "+f"(d1[12]), "+f"(d1[13]), "+f"(d1[14]), "+f"(d1[15]),
        "+f"(d1[16]), "+f"(d1[17]), "+f"(d1[18]), "+f"(d1[19]), "+f"(d1[20]), "+f"(d1[21]), "+f"(d1[22]), "+f"(d1[23]),
        "+f"(d1[24]), "+f"(d1[25]), "+f"(d1[26]), "+f"(d1[27]), "+f"(d1[28]), "+f"(d1[29]), "+f"(d1[30]), "+f"(d1[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

}  // namespace ferry::cuda_ops::sm90
