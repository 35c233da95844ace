// Work of one block of decode_split_kernel (kWarps warps): lane l of a warp holds dims [8c, 8c + 8) with
// c = l % kLpr (kLpr = D / 8 lanes per K/V row) of key sub = l / kLpr (kRpw = 32 / kLpr keys per warp load:
// 2 at head_dim 128). A warp iteration covers kRpw * kSteps consecutive positions. K/V reach shared memory
// by cp.async (16 bytes per lane and row) into a per-warp ring of kStages iterations: each lane reads back
// only the chunks it copied itself, so no barrier is needed, and the copies of the next kStages - 1 iterations
// are in flight while one is computed (4 KB per warp per iteration at kSteps 4). Per step: R dot
// products (8 FMAs, then a shuffle sum over the kLpr lanes of the row), an online-softmax update per row
// in the log2 domain, 8 FMAs per row for V. Each key sub-group keeps its own (m, l, acc); they merge by
// shuffles, the warps through shared memory, the splits through scratch (last block to arrive).
#include "backends/cuda/attention/decode_split.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "backends/cuda/attention/attention_mma.cuh"
#include "backends/cuda/attention/decode_merge.cuh"
#include "backends/cuda/attention/decode_mma.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

using Limits = DecodeSplitLimits;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFull = 0xFFFFFFFFu;

__device__ inline void bf16x8_to_float(const uint4& u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

// kStages: warp iterations in flight (this one and the next kStages - 1). Bandwidth follows the bytes in flight
// per SM while enough warps compute: 3 stages fit 4 blocks per SM (48 KB each; 16 warps, 128 KB ahead), 6 stages
// 2 blocks (96 KB each; 8 warps, 160 KB ahead: better at small batches, worse at 64 with half the warps;
// docs/perf-log.md). plan_decode_split picks by the grid.
template <int D, int R, int kSteps, int kStagesT>
struct DecodeShape {
  static constexpr int kLpr = D / 8, kRpw = 32 / kLpr, kKeysPerWarp = kRpw * kSteps;
  static constexpr int kStages = kStagesT;
  // Per warp and stage: K then V, kSteps x 32 lanes x 16 bytes each; lane l's chunk j at (j * 32 + l) * 16.
  static constexpr int kStageBytes = 2 * kSteps * 32 * 16;
  static constexpr size_t kSmemBytes = size_t(kWarps) * kStages * kStageBytes;
};

// Issues warp iteration `it`'s copies (positions p0 + j * kRpw + sub, j < kSteps) into its stage; rows before
// `begin` (the window's first position: their blocks may be given back) or past `end`, and rows in bad blocks
// (reported), are zero-filled, as are the chunks c past the head's kHd dims (kHd < D: a head_dim the layout pads).
template <int D, int R, int kSteps, int kHd>
__device__ inline void issue_stage(const AttentionParams& p, const int32_t* table, int kvh, int p0, int begin,
                                   int end, int sub, int c, bool bs_pow2, int bs_shift, unsigned char* stage) {
  constexpr int kRpw = 32 / (D / 8);  // keys per warp load (DecodeShape::kRpw)
  const int lane = threadIdx.x % 32;
  const int64_t kv_row = int64_t(p.n_kv_heads) * kHd;
  const int bs = p.block_size;
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    const int pos = p0 + j * kRpw + sub;
    int64_t off = 0;
    int bytes = 0;
    if (pos >= begin && pos < end && 8 * c < kHd) {
      const int bi = bs_pow2 ? pos >> bs_shift : pos / bs;
      const int32_t blk = table[bi];
      if (blk >= 0 && blk < p.n_blocks) {
        off = (int64_t(blk) * bs + (pos - bi * bs)) * kv_row + int64_t(kvh) * kHd + 8 * c;
        bytes = 16;
      } else if (c == 0) {
        report_error(p.errors, kBadBlock, blk);
      }
    }
    cp_async_16(stage + (j * 32 + lane) * 16, p.k_cache + off, bytes);
    cp_async_16(stage + (kSteps + j) * 32 * 16 + lane * 16, p.v_cache + off, bytes);
  }
}

// kHd: the head_dim (D, or less where the layout pads it: Phi-3's 96 in the 128 layout, the last 4 lanes of a row
// idle).
template <int D, int R, int kSteps, int kStagesT, int kHd = D>
__global__ void __launch_bounds__(kThreads, (R <= 4 ? 4 : 2)) decode_split_kernel(AttentionParams p, DecodeSplitPlan plan) {
  pdl_allow_dependents();
  pdl_wait();
  using Sh = DecodeShape<D, R, kSteps, kStagesT>;
  constexpr int kLpr = Sh::kLpr, kRpw = Sh::kRpw, kKeysPerWarp = Sh::kKeysPerWarp, kStages = Sh::kStages;
  extern __shared__ __align__(16) unsigned char smem_ring[];  // (kWarps, kStages, kStageBytes)
  __shared__ DecodeEpilogueSmem<R, kWarps> es;
  // After the main loop the ring is free: the warps' accumulators (kWarps, R, D) f32 reuse it.
  float(*s_acc)[R][D] = reinterpret_cast<float(*)[R][D]>(smem_ring);
  static_assert(sizeof(float) * kWarps * R * D <= Sh::kSmemBytes);

  const int split = blockIdx.x, s = blockIdx.y;
  const int kvh = int(blockIdx.z) / plan.n_row_groups, rg = int(blockIdx.z) % plan.n_row_groups;
  if (p.q_len[s] != 1) return;  // uniform over the block
  const int kv = p.kv_len[s];
  // Chunks of the window's positions (all of them without one) from `base`, the window's first position `lo`
  // rounded down to 16 (decode_split_base: the tensor-core kernel's tile alignment, the same chunks here).
  const int lo = window_begin(p, kv - 1), base = decode_split_base(lo);
  const int chunk = decode_chunk(plan, kv - base);
  const int start = base + split * chunk;
  if (start >= kv) return;  // an empty chunk: the merge does not wait for it
  // The last chunk runs to kv_len even past the planned bound (a kv_len beyond max_blocks_per_seq *
  // block_size would be a caller bug; this keeps every position counted).
  const int end = split == plan.n_splits - 1 ? kv : min(kv, start + chunk);
  const int group = p.n_heads / p.n_kv_heads;
  const int r0 = rg * R, n_rows = min(R, group - r0);
  const int row = p.q_start[s];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane / kLpr, c = lane % kLpr;
  const int32_t* table = p.block_tables + int64_t(s) * p.max_blocks_per_seq;
  const int bs = p.block_size;
  const bool bs_pow2 = (bs & (bs - 1)) == 0;
  const int bs_shift = __ffs(bs) - 1;
  const float qscale = p.scale * kLog2e;
  unsigned char* ring = smem_ring + size_t(warp) * kStages * Sh::kStageBytes;

  // Warp iteration `it` covers positions [first + it * stride, + kKeysPerWarp).
  const int first = start + warp * kKeysPerWarp, stride = kWarps * kKeysPerWarp;
  const int n_iters = first < end ? (end - first + stride - 1) / stride : 0;
#pragma unroll
  for (int it = 0; it < kStages - 1; ++it) {
    if (it < n_iters)
      issue_stage<D, R, kSteps, kHd>(p, table, kvh, first + it * stride, lo, end, sub, c, bs_pow2, bs_shift,
                                ring + it * Sh::kStageBytes);
    cp_async_commit();  // empty groups keep the count uniform
  }

  float q[R][8], acc[R][8], m[R], l[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) q[r][i] = acc[r][i] = 0.0f;
    if (r < n_rows && 8 * c < kHd) {
      const float* qp = p.q + (int64_t(row) * p.n_heads + kvh * group + r0 + r) * kHd + 8 * c;
      const float4 a = reinterpret_cast<const float4*>(qp)[0], b = reinterpret_cast<const float4*>(qp)[1];
      const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) q[r][i] = v[i] * qscale;
    }
  }

  for (int it = 0; it < n_iters; ++it) {
    const int ahead = it + kStages - 1;
    if (ahead < n_iters)
      issue_stage<D, R, kSteps, kHd>(p, table, kvh, first + ahead * stride, lo, end, sub, c, bs_pow2, bs_shift,
                                ring + (ahead % kStages) * Sh::kStageBytes);
    cp_async_commit();
    cp_async_wait<kStages - 1>();  // iteration it's copies (this lane's own: no barrier needed) have landed
    const unsigned char* stage = ring + (it % kStages) * Sh::kStageBytes;
    const int p0 = first + it * stride;
    bool ok[kSteps];
    float sc[R][kSteps];
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      const int pos = p0 + j * kRpw + sub;
      ok[j] = false;
      if (pos >= lo && pos < end) {
        const int bi = bs_pow2 ? pos >> bs_shift : pos / bs;
        const int32_t blk = table[bi];
        ok[j] = blk >= 0 && blk < p.n_blocks;
      }
      float kf[8];
      bf16x8_to_float(*reinterpret_cast<const uint4*>(stage + (j * 32 + lane) * 16), kf);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) d = fmaf(q[r][i], kf[i], d);
        sc[r][j] = d;
      }
    }
#pragma unroll
    for (int off = kLpr / 2; off > 0; off /= 2) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int j = 0; j < kSteps; ++j) sc[r][j] += __shfl_xor_sync(kFull, sc[r][j], off);
      }
    }
    if (p.softcap > 0) {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int j = 0; j < kSteps; ++j) sc[r][j] = softcap_log2(p, sc[r][j]);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float m_new = m[r];
#pragma unroll
      for (int j = 0; j < kSteps; ++j) m_new = fmaxf(m_new, ok[j] ? sc[r][j] : -INFINITY);
      if (m_new == -INFINITY) continue;  // no usable position in this step (uniform over the key sub-group)
      const float corr = exp2f(m[r] - m_new);
      l[r] *= corr;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[r][i] *= corr;
      m[r] = m_new;
#pragma unroll
      for (int j = 0; j < kSteps; ++j) {
        const float w = ok[j] ? exp2f(sc[r][j] - m_new) : 0.0f;
        l[r] += w;
        float vf[8];
        bf16x8_to_float(*reinterpret_cast<const uint4*>(stage + ((kSteps + j) * 32 + lane) * 16), vf);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[r][i] = fmaf(w, vf[i], acc[r][i]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with its ring before s_acc overwrites it

  // Merge the key sub-groups of the warp (lanes c, c + kLpr, ...).
#pragma unroll
  for (int off = kLpr; off < 32; off *= 2) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float mo = __shfl_xor_sync(kFull, m[r], off), lo = __shfl_xor_sync(kFull, l[r], off);
      const float mn = fmaxf(m[r], mo);
      const float wa = m[r] == -INFINITY ? 0.0f : exp2f(m[r] - mn);
      const float wb = mo == -INFINITY ? 0.0f : exp2f(mo - mn);
      l[r] = l[r] * wa + lo * wb;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float ao = __shfl_xor_sync(kFull, acc[r][i], off);
        acc[r][i] = acc[r][i] * wa + ao * wb;
      }
      m[r] = mn;
    }
  }
  if (sub == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (c == 0) {
        es.m[warp][r] = m[r];
        es.l[warp][r] = l[r];
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) s_acc[warp][r][8 * c + i] = acc[r][i];
    }
  }
  __syncthreads();

  const DecodeBlockPos where{s, kvh, rg, split, kv - base, row, group, r0, n_rows};
  decode_block_epilogue<D, R, kWarps, false, kHd>(p, plan, where, s_acc, es);
}

template <int D, int R, int kSteps, int kStages, int kHd>
void launch_decode_rows(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream) {
  constexpr size_t kSmem = DecodeShape<D, R, kSteps, kStages>::kSmemBytes;
  FERRY_CUDA_REQUIRE(attention_out_aligned(p));  // the merge stores float4 (bf16: 8 bytes)
  const auto kernel = decode_split_kernel<D, R, kSteps, kStages, kHd>;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  const dim3 grid(unsigned(plan.n_splits), unsigned(p.n_seqs), unsigned(p.n_kv_heads * plan.n_row_groups));
  launch_pdl(kernel, grid, dim3(kThreads), kSmem, stream, p, plan);
  FERRY_CUDA_CHECK_LAUNCH(decode_split_kernel);
}

template <int D, int kStages, int kHd>
void launch_decode_stages(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream) {
  switch (plan.rows) {
    case 1: launch_decode_rows<D, 1, 4, kStages, kHd>(p, plan, stream); break;
    case 2: launch_decode_rows<D, 2, 4, kStages, kHd>(p, plan, stream); break;
    case 4: launch_decode_rows<D, 4, 4, kStages, kHd>(p, plan, stream); break;
    default: launch_decode_rows<D, 8, 4, kStages, kHd>(p, plan, stream); break;
  }
}

template <int D, int kHd = D>
void launch_decode(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream) {
  FERRY_CUDA_REQUIRE(plan.stages == DecodeSplitLimits::kDeepStages || plan.stages == DecodeSplitLimits::kWideStages);
  if (plan.stages == DecodeSplitLimits::kDeepStages) {
    launch_decode_stages<D, DecodeSplitLimits::kDeepStages, kHd>(p, plan, stream);
  } else {
    launch_decode_stages<D, DecodeSplitLimits::kWideStages, kHd>(p, plan, stream);
  }
}

}  // namespace

bool decode_split_supports(int head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 256;
}

DecodeKernel default_decode_kernel(int head_dim, int group) {
  (void)group;
  return decode_mma_supports(head_dim) ? DecodeKernel::kTensorCores : DecodeKernel::kCudaCores;
}

DecodeSplitPlan plan_decode_split(const AttentionParams& p, int n_sms, DecodeKernel kernel) {
  const int64_t group = p.n_heads / std::max(1, p.n_kv_heads);
  if (kernel == DecodeKernel::kTensorCores && !decode_mma_supports(p.head_dim)) kernel = DecodeKernel::kCudaCores;
  // Batch-invariant mode: CudaBackend::attention has checked the plan's limits (sequences, context).
  // The positions a row's chunks cover: the context bound, or with a window its length plus the 15 positions
  // decode_split_base may add in front.
  int64_t bound = int64_t(p.max_blocks_per_seq) * p.block_size;
  if (p.window > 0) bound = std::min<int64_t>(bound, int64_t(p.window) + 15);
  DecodeSplitPlan plan = p.batch_invariant
                             ? plan_decode_split_fixed(group, bound, kernel, p.head_dim)
                             : plan_decode_split(p.n_seqs, p.n_kv_heads, group, bound, n_sms, kernel, p.head_dim);
  return plan;
}

DecodeSplitPlan plan_decode_split(const AttentionParams& p, int n_sms) {
  return plan_decode_split(p, n_sms, default_decode_kernel(p.head_dim, p.n_heads / std::max(1, p.n_kv_heads)));
}

size_t decode_split_scratch_bytes(const AttentionParams& p, const DecodeSplitPlan& plan) {
  size_t bytes = size_t(Limits::kMaxCounters) * sizeof(int32_t);
  if (plan.n_splits > 1)
    bytes += size_t(p.n_seqs) * size_t(p.n_heads) * size_t(plan.n_splits) * size_t(p.head_dim + 2) * sizeof(float);
  return bytes;
}

void decode_split_attention(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream) {
  if (p.n_seqs == 0) return;
  FERRY_CUDA_REQUIRE(decode_split_supports(p.head_dim));
  FERRY_CUDA_REQUIRE(plan.n_splits >= 1 && plan.n_splits <= Limits::kMaxSplits && plan.chunk >= 1);
  FERRY_CUDA_REQUIRE(plan.n_splits == 1 ||
                     int64_t(p.n_seqs) * p.n_kv_heads * plan.n_row_groups <= Limits::kMaxCounters);
  FERRY_CUDA_REQUIRE(p.scratch != nullptr && p.scratch_bytes >= decode_split_scratch_bytes(p, plan));
  FERRY_CUDA_REQUIRE(p.n_seqs <= 65535 && p.n_heads <= 65535 && p.n_kv_heads * plan.n_row_groups <= 65535);
  FERRY_CUDA_REQUIRE(p.qkv == nullptr || plan.kernel == DecodeKernel::kTensorCores);  // the fused epilogue
  if (plan.kernel == DecodeKernel::kTensorCores) {
    decode_mma_attention(p, plan, stream);
    return;
  }
  switch (p.head_dim) {
    case 32: launch_decode<32>(p, plan, stream); break;
    case 64: launch_decode<64>(p, plan, stream); break;
    case 96: launch_decode<128, 96>(p, plan, stream); break;  // Phi-3: the 128 layout, 12 of its 16 lanes a row
    case 128: launch_decode<128>(p, plan, stream); break;
    default: launch_decode<256>(p, plan, stream); break;
  }
}

}  // namespace ferry::cuda_ops
