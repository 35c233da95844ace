// Layout of the work (see flash_prefill.cuh for the contract):
//  - Block: 4 warps, 64 query rows (warp w: rows 16w..16w+15 of the tile), one query head. Q lives in
//    registers as f16 A fragments for the whole kernel (scale·log2e folded in).
//  - Per key tile of kTileK = 64 positions: all 128 threads gather the tile's K and V rows (16-byte f32
//    loads, a warp per row at head_dim 128) through the block table, convert to f16 and store them in
//    shared memory rows padded by 8 halves (row stride (D + 8) * 2 bytes = 4 banks mod 32: the 32-bit
//    B-fragment loads of K and the ldmatrix.trans loads of V are conflict-free).
//  - S = Q·Kᵀ: (D/16) × 8 mma per warp; causal/length mask only on tiles that reach past the warp's first
//    query position; online softmax per row (each thread holds 2 rows × 16 columns; row max over the 4
//    lanes of a quad); P is rounded to f16 in registers and reused directly as the A fragment of P·V
//    (the m16n8k16 C layout of two adjacent n-tiles is the A layout); V B-fragments via ldmatrix.x4.trans.
//  - A warp whose rows all end before the tile skips the math (it still joins the barriers).
//  - Tiles of one sequence run last-first (the longest causal ranges start first).
#include "backends/cuda/flash_prefill.cuh"

#include <cuda_fp16.h>

#include <cmath>

#include "backends/cuda/common.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kTileQ = 64;
constexpr int kTileK = 64;
constexpr int kThreads = 128;
constexpr int kLoadBatch = 4;  // float4 loads in flight per thread per K (and V) batch
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFull = 0xFFFFFFFFu;

__device__ inline uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);  // lo in the low 16 bits
  return *reinterpret_cast<const uint32_t*>(&h);
}

// c += a (16x16, row) · b (16x8, col); f16 inputs, f32 accumulators.
__device__ inline void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const __half* smem_row) {
  const unsigned addr = unsigned(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Block b's (sequence, tile index within it) among the sequences with q_len >= 2, each owning
// ceil(q_len / kTileQ) tiles in sequence order. Each warp computes it (a warp-wide prefix sum over 32
// sequences at a time); false when b is past the last tile.
__device__ inline bool find_tile(const AttentionParams& p, int b, int& s_out, int& tile_out) {
  const int lane = threadIdx.x % 32;
  int base = 0;
  for (int c = 0; c < p.n_seqs; c += 32) {
    const int i = c + lane;
    int t = 0;
    if (i < p.n_seqs) {
      const int ql = p.q_len[i];
      t = ql >= 2 ? (ql + kTileQ - 1) / kTileQ : 0;
    }
    int incl = t;
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const int y = __shfl_up_sync(kFull, incl, off);
      if (lane >= off) incl += y;
    }
    const int total = __shfl_sync(kFull, incl, 31);
    if (b < base + total) {
      const int excl = incl - t;
      const unsigned ball = __ballot_sync(kFull, b >= base + excl && b < base + incl);
      const int src = __ffs(int(ball)) - 1;
      s_out = c + src;
      tile_out = b - base - __shfl_sync(kFull, excl, src);
      return true;
    }
    base += total;
  }
  return false;
}

// K and V rows of positions [k0, k0 + kTileK) of one KV head into ks/vs (kTileK, D + 8) f16; positions
// at or past k_end, and positions whose block table entry is out of range (reported), become zeros.
template <int D>
__device__ inline void load_kv_tile(const AttentionParams& p, const int32_t* table, int kvh, int k0, int k_end,
                                    __half* ks, __half* vs) {
  constexpr int kVecs = D / 4;  // float4 per row
  constexpr int kPerThread = kTileK * kVecs / kThreads;
  constexpr int kStride = D + 8;
  const int64_t kv_row = int64_t(p.n_kv_heads) * D;
#pragma unroll
  for (int i0 = 0; i0 < kPerThread; i0 += kLoadBatch) {
    float4 kr[kLoadBatch], vr[kLoadBatch];
#pragma unroll
    for (int i = 0; i < kLoadBatch; ++i) {
      const int idx = threadIdx.x + kThreads * (i0 + i);
      const int key = idx / kVecs, c = idx % kVecs;
      const int pos = k0 + key;
      kr[i] = vr[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (pos < k_end) {
        const int32_t blk = table[pos / p.block_size];
        if (blk >= 0 && blk < p.n_blocks) {
          const int64_t base = (int64_t(blk) * p.block_size + pos % p.block_size) * kv_row + int64_t(kvh) * D + 4 * c;
          kr[i] = *reinterpret_cast<const float4*>(p.k_cache + base);
          vr[i] = *reinterpret_cast<const float4*>(p.v_cache + base);
        } else if (c == 0) {
          report_error(p.errors, kBadBlock, blk);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kLoadBatch; ++i) {
      const int idx = threadIdx.x + kThreads * (i0 + i);
      const int key = idx / kVecs, c = idx % kVecs;
      *reinterpret_cast<uint2*>(ks + key * kStride + 4 * c) =
          make_uint2(pack_half2(kr[i].x, kr[i].y), pack_half2(kr[i].z, kr[i].w));
      *reinterpret_cast<uint2*>(vs + key * kStride + 4 * c) =
          make_uint2(pack_half2(vr[i].x, vr[i].y), pack_half2(vr[i].z, vr[i].w));
    }
  }
}

// Blocks per SM the register allocation must allow (D = 128: ~226 registers, 2 blocks; D = 64: 3 blocks).
template <int D>
constexpr int kMinBlocks = D == 64 ? 3 : 2;

template <int D>
__global__ void __launch_bounds__(kThreads, kMinBlocks<D>) flash_prefill_kernel(AttentionParams p) {
  constexpr int kStride = D + 8;
  __shared__ __align__(16) __half ks[kTileK * kStride];
  __shared__ __align__(16) __half vs[kTileK * kStride];

  int s = 0, tile = 0;
  if (!find_tile(p, int(blockIdx.x), s, tile)) return;  // same answer in every warp
  const int h = blockIdx.y, kvh = h / (p.n_heads / p.n_kv_heads);
  const int q_len = p.q_len[s], kv_len = p.kv_len[s], q_row0 = p.q_start[s];
  const int n_tiles = (q_len + kTileQ - 1) / kTileQ;
  const int i0 = (n_tiles - 1 - tile) * kTileQ;  // last tile first
  const int pos0 = kv_len - q_len;               // position of query row 0
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wr0 = i0 + warp * 16;
  const int k_end = pos0 + min(i0 + kTileQ, q_len);                    // keys the block needs: [0, k_end)
  const int warp_k_end = wr0 < q_len ? pos0 + min(wr0 + 16, q_len) : 0;  // ... and this warp
  const int warp_pos_first = pos0 + wr0;
  const int32_t* table = p.block_tables + int64_t(s) * p.max_blocks_per_seq;

  // Q fragments: qf[kk] covers dims 16kk..16kk+15; a0 (row g, dims 2t..), a1 (row g+8), a2 (row g, +8), a3.
  uint32_t qf[D / 16][4];
  const float qscale = p.scale * kLog2e;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int row = wr0 + g + 8 * rr;
    const bool valid = row < q_len;
    const float* qp = p.q + (int64_t(q_row0) + (valid ? row : 0)) * p.n_heads * D + int64_t(h) * D;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float2 v = make_float2(0.0f, 0.0f);
        if (valid) v = *reinterpret_cast<const float2*>(qp + kk * 16 + hf * 8 + 2 * t);
        qf[kk][rr + 2 * hf] = pack_half2(v.x * qscale, v.y * qscale);
      }
    }
  }

  float o[D / 8][4];
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int k0 = 0; k0 < k_end; k0 += kTileK) {
    __syncthreads();  // the previous tile is consumed
    load_kv_tile<D>(p, table, kvh, k0, k_end, ks, vs);
    __syncthreads();
    if (k0 >= warp_k_end) continue;  // warp-uniform

    float sc[kTileK / 8][4];
#pragma unroll
    for (int nt = 0; nt < kTileK / 8; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int nt = 0; nt < kTileK / 8; ++nt) {
        const __half* kp = ks + (nt * 8 + g) * kStride + kk * 16 + 2 * t;
        mma_f16(sc[nt], qf[kk], *reinterpret_cast<const uint32_t*>(kp), *reinterpret_cast<const uint32_t*>(kp + 8));
      }
    }
    if (k0 + kTileK - 1 > warp_pos_first) {  // some position in the tile is past some row's own
#pragma unroll
      for (int nt = 0; nt < kTileK / 8; ++nt) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int key = k0 + nt * 8 + 2 * t + (j & 1);
          const int limit = min(warp_pos_first + g + 8 * (j >> 1), k_end - 1);
          if (key > limit) sc[nt][j] = -INFINITY;
        }
      }
    }
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kTileK / 8; ++nt) mx = fmaxf(mx, fmaxf(sc[nt][2 * rr], sc[nt][2 * rr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
      const float m_new = fmaxf(m[rr], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float corr = exp2f(m[rr] - m_use);
      m[rr] = m_new;
      l[rr] *= corr;
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt) {
        o[nt][2 * rr] *= corr;
        o[nt][2 * rr + 1] *= corr;
      }
#pragma unroll
      for (int nt = 0; nt < kTileK / 8; ++nt) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float e = exp2f(sc[nt][2 * rr + j] - m_use);
          sc[nt][2 * rr + j] = e;
          l[rr] += e;
        }
      }
    }
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) {
      const uint32_t a[4] = {pack_half2(sc[2 * kk][0], sc[2 * kk][1]), pack_half2(sc[2 * kk][2], sc[2 * kk][3]),
                             pack_half2(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                             pack_half2(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
      const __half* vrow = vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride + (lane >> 4) * 8;
#pragma unroll
      for (int nt2 = 0; nt2 < D / 16; ++nt2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vrow + nt2 * 16);
        mma_f16(o[2 * nt2], a, b[0], b[1]);
        mma_f16(o[2 * nt2 + 1], a, b[2], b[3]);
      }
    }
  }

#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    float lsum = l[rr];
    lsum += __shfl_xor_sync(kFull, lsum, 1);
    lsum += __shfl_xor_sync(kFull, lsum, 2);
    const int row = wr0 + g + 8 * rr;
    if (row >= q_len) continue;
    const float inv = 1.0f / lsum;
    float* op = p.out + (int64_t(q_row0) + row) * p.n_heads * D + int64_t(h) * D;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<float2*>(op + nt * 8 + 2 * t) = make_float2(o[nt][2 * rr] * inv, o[nt][2 * rr + 1] * inv);
  }
}

}  // namespace

bool flash_prefill_supports(int head_dim) { return head_dim == 64 || head_dim == 128; }

void flash_prefill_attention(const AttentionParams& p, cudaStream_t stream) {
  if (p.n_tokens == 0 || p.n_seqs == 0) return;
  FERRY_CUDA_REQUIRE(flash_prefill_supports(p.head_dim));
  FERRY_CUDA_REQUIRE(p.n_heads <= 65535 && p.n_kv_heads >= 1 && p.n_heads % p.n_kv_heads == 0);
  // Tiles: sum over sequences of ceil(q_len / 64) <= n_tokens / 64 + n_seqs.
  const int64_t max_tiles = (int64_t(p.n_tokens) + kTileQ - 1) / kTileQ + p.n_seqs;
  const dim3 grid(unsigned(max_tiles), unsigned(p.n_heads));
  if (p.head_dim == 64) {
    flash_prefill_kernel<64><<<grid, kThreads, 0, stream>>>(p);
  } else {
    flash_prefill_kernel<128><<<grid, kThreads, 0, stream>>>(p);
  }
  FERRY_CUDA_CHECK_LAUNCH(flash_prefill_kernel);
}

}  // namespace ferry::cuda_ops
