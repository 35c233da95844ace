// Work of one block of decode_split_kernel: kWarps warps; warp w takes the block's positions in steps of
// kKeys, step i of the chunk to warp i % kWarps. Lane l holds dims [l*V, l*V + V) of the q rows, of each
// K/V row (one 16-byte load per 4 dims: coalesced, 32*V*4 bytes per row per warp) and of the running
// outputs. The K and V rows of a step are loaded together (2 * kKeys * 512 bytes in flight per warp at
// head_dim 128) before any is used. Per step: kRows * kKeys dot products (shuffle reductions, independent,
// so their latencies overlap), one online-softmax update per row in the log2 domain, kKeys V rows
// accumulated per row. The warps' (m, l, acc) are merged through shared memory into one partial per row.
#include "backends/cuda/decode_split.cuh"

#include <algorithm>
#include <cmath>

#include "backends/cuda/common.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kWarps = 4;
constexpr int kKeys = 4;          // positions per warp per step
constexpr int kMaxSplits = 128;   // chunks per (sequence, KV head) at most
constexpr int kMinChunk = 128;    // positions per chunk at least (a block's fixed costs amortised)
constexpr int kBlocksPerSm = 4;   // aim: this many blocks (of kWarps warps) per SM in a decode launch
constexpr int kCombineThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

template <int V>  // v: V consecutive floats from p (16-byte aligned when V >= 4, 8 when V == 2)
__device__ inline void load_vec(const float* p, float (&v)[V]) {
  if constexpr (V == 1) {
    v[0] = p[0];
  } else if constexpr (V == 2) {
    const float2 t = *reinterpret_cast<const float2*>(p);
    v[0] = t.x;
    v[1] = t.y;
  } else {
#pragma unroll
    for (int i = 0; i < V / 4; ++i) {
      const float4 t = reinterpret_cast<const float4*>(p)[i];
      v[4 * i] = t.x;
      v[4 * i + 1] = t.y;
      v[4 * i + 2] = t.z;
      v[4 * i + 3] = t.w;
    }
  }
}

// partial acc: (n_seqs, n_heads, n_splits, D) f32; partial ml: (n_seqs, n_heads, n_splits, 2) f32.
template <int V, int R>
__global__ void __launch_bounds__(kWarps * 32) decode_split_kernel(AttentionParams p, DecodeSplitPlan plan) {
  constexpr int D = 32 * V;
  __shared__ float s_m[kWarps][R], s_l[kWarps][R];
  __shared__ float s_acc[kWarps][R][D];
  const int split = blockIdx.x, s = blockIdx.y;
  const int kvh = int(blockIdx.z) / plan.n_row_groups, rg = int(blockIdx.z) % plan.n_row_groups;
  if (p.q_len[s] != 1) return;  // uniform over the block
  const int kv = p.kv_len[s];
  const int start = split * plan.chunk;
  if (start >= kv) return;  // the combine step knows this chunk is empty
  // The last chunk runs to kv_len even past the planned bound (a kv_len beyond max_blocks_per_seq *
  // block_size would be a caller bug; this keeps every position counted).
  const int end = split == plan.n_splits - 1 ? kv : min(kv, start + plan.chunk);
  const int group = p.n_heads / p.n_kv_heads;
  const int r0 = rg * R, n_rows = min(R, group - r0);
  const int row = p.q_start[s];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t* table = p.block_tables + int64_t(s) * p.max_blocks_per_seq;
  const int64_t kv_row = int64_t(p.n_kv_heads) * D;
  const float qscale = p.scale * kLog2e;

  float q[R][V], acc[R][V], m[R], l[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      q[r][i] = 0.0f;
      acc[r][i] = 0.0f;
    }
    if (r < n_rows) {
      const int h = kvh * group + r0 + r;
      load_vec<V>(p.q + (int64_t(row) * p.n_heads + h) * D + lane * V, q[r]);
#pragma unroll
      for (int i = 0; i < V; ++i) q[r][i] *= qscale;
    }
  }

  for (int p0 = start + warp * kKeys; p0 < end; p0 += kWarps * kKeys) {
    float k[kKeys][V], v[kKeys][V];
    bool ok[kKeys];
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      const int pos = p0 + j;
      ok[j] = false;
      if (pos < end) {
        const int32_t blk = table[pos / p.block_size];
        if (blk >= 0 && blk < p.n_blocks) {
          ok[j] = true;
        } else if (lane == 0) {
          report_error(p.errors, kBadBlock, blk);
        }
        if (ok[j]) {
          const int64_t base = (int64_t(blk) * p.block_size + pos % p.block_size) * kv_row + int64_t(kvh) * D + lane * V;
          load_vec<V>(p.k_cache + base, k[j]);
          load_vec<V>(p.v_cache + base, v[j]);
        }
      }
      if (!ok[j]) {
#pragma unroll
        for (int i = 0; i < V; ++i) k[j][i] = v[j][i] = 0.0f;
      }
    }
    float sc[R][kKeys];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int j = 0; j < kKeys; ++j) {
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < V; ++i) d = fmaf(q[r][i], k[j][i], d);
        sc[r][j] = d;
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int j = 0; j < kKeys; ++j) sc[r][j] += __shfl_xor_sync(0xFFFFFFFFu, sc[r][j], off);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float m_new = m[r];
#pragma unroll
      for (int j = 0; j < kKeys; ++j) m_new = fmaxf(m_new, ok[j] ? sc[r][j] : -INFINITY);
      if (m_new == -INFINITY) continue;  // no usable position in this step (uniform over the warp)
      const float corr = exp2f(m[r] - m_new);
      l[r] *= corr;
#pragma unroll
      for (int i = 0; i < V; ++i) acc[r][i] *= corr;
#pragma unroll
      for (int j = 0; j < kKeys; ++j) {
        const float w = ok[j] ? exp2f(sc[r][j] - m_new) : 0.0f;
        l[r] += w;
#pragma unroll
        for (int i = 0; i < V; ++i) acc[r][i] = fmaf(w, v[j][i], acc[r][i]);
      }
      m[r] = m_new;
    }
  }

#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (lane == 0) {
      s_m[warp][r] = m[r];
      s_l[warp][r] = l[r];
    }
#pragma unroll
    for (int i = 0; i < V; ++i) s_acc[warp][r][lane * V + i] = acc[r][i];
  }
  __syncthreads();
  const int64_t n_splits = plan.n_splits;
  for (int r = 0; r < n_rows; ++r) {
    const int h = kvh * group + r0 + r;
    const int64_t part = (int64_t(s) * p.n_heads + h) * n_splits + split;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, s_m[w][r]);
    float wgt[kWarps], l_all = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      wgt[w] = s_m[w][r] == -INFINITY ? 0.0f : exp2f(s_m[w][r] - m_all);
      l_all = fmaf(s_l[w][r], wgt[w], l_all);
    }
    float* part_acc = p.scratch + part * D;
    for (int d = threadIdx.x; d < D; d += kWarps * 32) {
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) o = fmaf(s_acc[w][r][d], wgt[w], o);
      part_acc[d] = o;
    }
    if (threadIdx.x == 0) {
      float* ml = p.scratch + int64_t(p.n_seqs) * p.n_heads * n_splits * D + part * 2;
      ml[0] = m_all;
      ml[1] = l_all;
    }
  }
}

// Grid (n_seqs, n_heads): merges the non-empty chunks of one (sequence, head) into its output row.
__global__ void __launch_bounds__(kCombineThreads) decode_combine_kernel(AttentionParams p, DecodeSplitPlan plan) {
  __shared__ float s_w[kMaxSplits];
  __shared__ float s_inv_l;
  const int s = blockIdx.x, h = blockIdx.y;
  if (p.q_len[s] != 1) return;
  const int D = p.head_dim;
  const int n_used = min(plan.n_splits, (p.kv_len[s] + plan.chunk - 1) / plan.chunk);
  const int64_t part0 = (int64_t(s) * p.n_heads + h) * plan.n_splits;
  const float* ml = p.scratch + int64_t(p.n_seqs) * p.n_heads * plan.n_splits * D + part0 * 2;
  if (threadIdx.x < 32) {
    float m_all = -INFINITY;
    for (int i = threadIdx.x; i < n_used; i += 32) m_all = fmaxf(m_all, ml[2 * i]);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) m_all = fmaxf(m_all, __shfl_xor_sync(0xFFFFFFFFu, m_all, off));
    float l_all = 0.0f;
    for (int i = threadIdx.x; i < n_used; i += 32) {
      const float w = ml[2 * i] == -INFINITY ? 0.0f : exp2f(ml[2 * i] - m_all);
      s_w[i] = w;
      l_all = fmaf(ml[2 * i + 1], w, l_all);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) l_all += __shfl_xor_sync(0xFFFFFFFFu, l_all, off);
    if (threadIdx.x == 0) s_inv_l = 1.0f / l_all;
  }
  __syncthreads();
  const float* acc = p.scratch + part0 * D;
  float* out = p.out + (int64_t(p.q_start[s]) * p.n_heads + h) * D;
  for (int d = threadIdx.x; d < D; d += kCombineThreads) {
    float o = 0.0f;
    for (int i = 0; i < n_used; ++i) o = fmaf(acc[int64_t(i) * D + d], s_w[i], o);
    out[d] = o * s_inv_l;
  }
}

template <int V>
void launch_decode(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream) {
  const dim3 grid(unsigned(plan.n_splits), unsigned(p.n_seqs), unsigned(p.n_kv_heads * plan.n_row_groups));
  switch (plan.rows) {
    case 1: decode_split_kernel<V, 1><<<grid, kWarps * 32, 0, stream>>>(p, plan); break;
    case 2: decode_split_kernel<V, 2><<<grid, kWarps * 32, 0, stream>>>(p, plan); break;
    case 4: decode_split_kernel<V, 4><<<grid, kWarps * 32, 0, stream>>>(p, plan); break;
    default: decode_split_kernel<V, 8><<<grid, kWarps * 32, 0, stream>>>(p, plan); break;
  }
  FERRY_CUDA_CHECK_LAUNCH(decode_split_kernel);
}

}  // namespace

bool decode_split_supports(int head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
}

DecodeSplitPlan plan_decode_split(const AttentionParams& p, int n_sms) {
  DecodeSplitPlan plan{};
  const int group = p.n_heads / p.n_kv_heads;
  plan.rows = group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
  plan.n_row_groups = (group + plan.rows - 1) / plan.rows;
  const int64_t max_kv = std::max<int64_t>(1, int64_t(p.max_blocks_per_seq) * p.block_size);
  const int64_t units = std::max<int64_t>(1, int64_t(p.n_seqs) * p.n_kv_heads * plan.n_row_groups);
  int64_t splits = (int64_t(kBlocksPerSm) * std::max(1, n_sms) + units - 1) / units;
  splits = std::min<int64_t>(splits, (max_kv + kMinChunk - 1) / kMinChunk);
  splits = std::clamp<int64_t>(splits, 1, kMaxSplits);
  int64_t chunk = (max_kv + splits - 1) / splits;
  chunk = (chunk + 15) / 16 * 16;
  plan.chunk = int32_t(std::min<int64_t>(chunk, int64_t(1) << 30));
  plan.n_splits = int32_t((max_kv + plan.chunk - 1) / plan.chunk);
  return plan;
}

size_t decode_split_scratch_bytes(const AttentionParams& p, const DecodeSplitPlan& plan) {
  return size_t(p.n_seqs) * size_t(p.n_heads) * size_t(plan.n_splits) * size_t(p.head_dim + 2) * sizeof(float);
}

void decode_split_attention(const AttentionParams& p, const DecodeSplitPlan& plan, cudaStream_t stream) {
  if (p.n_seqs == 0) return;
  FERRY_CUDA_REQUIRE(decode_split_supports(p.head_dim));
  FERRY_CUDA_REQUIRE(plan.n_splits >= 1 && plan.n_splits <= kMaxSplits && plan.chunk >= 1);
  FERRY_CUDA_REQUIRE(p.scratch != nullptr && p.scratch_bytes >= decode_split_scratch_bytes(p, plan));
  FERRY_CUDA_REQUIRE(p.n_seqs <= 65535 && p.n_heads <= 65535 && p.n_kv_heads * plan.n_row_groups <= 65535);
  switch (p.head_dim) {
    case 32: launch_decode<1>(p, plan, stream); break;
    case 64: launch_decode<2>(p, plan, stream); break;
    case 128: launch_decode<4>(p, plan, stream); break;
    default: launch_decode<8>(p, plan, stream); break;
  }
  decode_combine_kernel<<<dim3(unsigned(p.n_seqs), unsigned(p.n_heads)), kCombineThreads, 0, stream>>>(p, plan);
  FERRY_CUDA_CHECK_LAUNCH(decode_combine_kernel);
}

}  // namespace ferry::cuda_ops
