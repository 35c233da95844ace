// Device helpers of the wgmma prefill attention kernel (flash_prefill_wgmma.cu) beyond hopper.cuh: shared-memory
// matrix descriptors built from 32-bit shared addresses (K-major and MN-major, 128-byte swizzle), the 128-byte swizzle
// itself for tiles written by ordinary stores and cp.async, cp.async completion on an mbarrier, named barriers, the
// generic -> async proxy fence and register fences for wgmma A operands (the wgmma with A from registers and a
// transposed B is generated into sm90/wgmma_ops.cuh). Device-only; include from .cu files compiled for sm_90a.
#pragma once

#include <cstdint>

#include "backends/cuda/sm90/hopper.cuh"

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

}  // namespace ferry::cuda_ops::sm90
