// Warp-level tensor-core and async-copy primitives shared by the attention kernels (sm_80+ PTX, run on
// sm_90a): mma.sync m16n8k16 bf16 -> f32, ldmatrix, cp.async with zero fill, fast exp2, bf16 packing.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace ferry::cuda_ops {

__device__ inline uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // lo in the low 16 bits
  return *reinterpret_cast<const uint32_t*>(&h);
}

// 2^x (MUFU.EX2; flushes denormal results to zero, which softmax weights tolerate).
__device__ inline float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// c (16x8 f32) += a (16x16 bf16, row) · b (16x8 bf16, col).
// Fragments (g = lane / 4, t = lane % 4): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
// a3 = A[g+8][2t+8..]; b0 = B[2t..2t+1][g], b1 = B[2t+8..][g]; c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..].
__device__ inline void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i; r[i] gets matrix i's fragment
// (thread t: row t/4, columns 2(t%4), +1; with .trans: rows 2(t%4), +1 of column t/4).
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
  const unsigned addr = unsigned(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_row) {
  const unsigned addr = unsigned(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16 bytes global -> shared without registers (L2 only); src_bytes 0 writes 16 zero bytes and reads nothing.
__device__ inline void cp_async_16(void* smem_dst, const void* gmem_src, int src_bytes) {
  const unsigned dst = unsigned(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(src_bytes));
}
// 16 bytes global -> shared without registers (L2 only), or 16 zero bytes (reading nothing) when zero_fill.
__device__ inline void cp_async_16_zfill(void* smem_dst, const void* gmem_src, bool zero_fill) {
  const unsigned dst = unsigned(__cvta_generic_to_shared(smem_dst));
  asm volatile(
      "{\n .reg .pred z;\n setp.ne.b32 z, %2, 0;\n cp.async.cg.shared.global [%0], [%1], 16, z;\n}\n" ::"r"(dst),
      "l"(gmem_src), "r"(int(zero_fill)));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>  // waits until at most kPending of this thread's committed groups are in flight
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace ferry::cuda_ops
