// The dispatch of attention() (attention.cuh), and the first-version kernel kept as the fallback
// (attention_simple): correct for any head_dim <= 256, no tensor cores, no split-K; bf16 K/V read
// element-wise and widened to fp32.
// Grid (n_tokens, n_heads); block = kWarps warps. The block finds its query's sequence by scanning the
// device-side q_start/q_len, then its warps take the sequence's keys in tiles of kKeys consecutive
// positions, tile t to warp t % kWarps. Within a warp, lane l holds dims l, l + 32, ... of q, of the running
// output and of each key/value row (coalesced 128-byte loads per 32 dims). Per tile: kKeys dot products
// (independent shuffle reductions, so their latencies overlap), one online-softmax update (running max m,
// denominator l, in the log2 domain), kKeys value rows accumulated. At the end the warps' (m, l, acc) are
// merged through shared memory.
#include "backends/cuda/attention/attention.cuh"

#include <cmath>

#include "backends/cuda/attention/decode_split.cuh"
#include "backends/cuda/attention/flash_prefill.cuh"
#include "backends/cuda/attention/flash_prefill_wgmma.cuh"
#include "backends/cuda/attention/mixed_attention.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry::cuda_ops {
namespace {

constexpr int kWarps = 4;
constexpr int kKeys = 4;  // keys per warp per step
constexpr float kLog2e = 1.4426950408889634f;

template <int kPerLane>  // dims per lane: head_dim <= 32 * kPerLane
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(AttentionParams p, bool decode_rows) {
  pdl_allow_dependents();
  pdl_wait();
  __shared__ float s_m[kWarps], s_l[kWarps];
  __shared__ float s_acc[kWarps][32 * kPerLane];
  const int row = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int D = p.head_dim;

  int s = -1, q0 = 0;
  for (int i = 0; i < p.n_seqs; ++i) {
    const int start = p.q_start[i];
    if (row >= start && row < start + p.q_len[i]) {
      s = i;
      q0 = start;
      break;
    }
  }
  if (s < 0) return;  // a row of no sequence: nothing to attend (uniform over the block)
  if (!decode_rows && p.q_len[s] == 1) return;  // the split decode kernel's row
  const int64_t last = int64_t(p.kv_len[s]) - p.q_len[s] + (row - q0);
  const int kvh = h / (p.n_heads / p.n_kv_heads);
  const int32_t* table = p.block_tables + int64_t(s) * p.max_blocks_per_seq;
  const int64_t kv_row = int64_t(p.n_kv_heads) * D;

  float qv[kPerLane], acc[kPerLane];
  const float* qp = p.q + (int64_t(row) * p.n_heads + h) * D;
  const float qscale = p.scale * kLog2e;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < D ? qp[d] * qscale : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;

  const int64_t first = window_begin(p, int(last));  // positions first .. last (the window's, or all)
  for (int64_t p0 = first + int64_t(warp) * kKeys; p0 <= last; p0 += int64_t(kWarps) * kKeys) {
    float sc[kKeys];
    int64_t base[kKeys];
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      const int64_t pos = p0 + j;
      base[j] = -1;
      sc[j] = 0.0f;
      if (pos <= last) {
        const int32_t blk = table[pos / p.block_size];
        if (blk >= 0 && blk < p.n_blocks) {
          base[j] = (int64_t(blk) * p.block_size + pos % p.block_size) * kv_row + int64_t(kvh) * D;
        } else if (lane == 0) {
          report_error(p.errors, kBadBlock, blk);
        }
      }
      if (base[j] >= 0) {
        const __nv_bfloat16* kp = p.k_cache + base[j];
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          const int d = lane + 32 * i;
          if (d < D) sc[j] = fmaf(qv[i], __bfloat162float(kp[d]), sc[j]);
        }
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
#pragma unroll
      for (int j = 0; j < kKeys; ++j) sc[j] += __shfl_xor_sync(0xFFFFFFFFu, sc[j], off);
    }
    if (p.softcap > 0) {
#pragma unroll
      for (int j = 0; j < kKeys; ++j) sc[j] = softcap_log2(p, sc[j]);
    }
    float m_new = m;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      if (base[j] < 0) sc[j] = -INFINITY;
      m_new = fmaxf(m_new, sc[j]);
    }
    if (m_new == -INFINITY) continue;  // no usable key in this tile
    const float corr = exp2f(m - m_new);
    l *= corr;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[i] *= corr;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      if (base[j] < 0) continue;
      const float w = exp2f(sc[j] - m_new);
      l += w;
      const __nv_bfloat16* vp = p.v_cache + base[j];
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int d = lane + 32 * i;
        if (d < D) acc[i] = fmaf(w, __bfloat162float(vp[d]), acc[i]);
      }
    }
    m = m_new;
  }

  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) s_acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  float m_all = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, s_m[w]);
  float wgt[kWarps], l_all = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    wgt[w] = s_m[w] == -INFINITY ? 0.0f : exp2f(s_m[w] - m_all);
    l_all += s_l[w] * wgt[w];
  }
  const int64_t op = (int64_t(row) * p.n_heads + h) * D;
  for (int d = threadIdx.x; d < D; d += kWarps * 32) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o = fmaf(s_acc[w][d], wgt[w], o);
    store_attention_out(p, op + d, o / l_all);
  }
}

}  // namespace

void attention_simple(const AttentionParams& p, cudaStream_t stream, bool decode_rows) {
  if (p.n_tokens == 0) return;
  FERRY_CUDA_REQUIRE(p.qkv == nullptr);  // reads q: the fused epilogue is the decode kernel's
  FERRY_CUDA_REQUIRE(p.head_dim >= 1 && p.head_dim <= 256);
  FERRY_CUDA_REQUIRE(p.n_kv_heads >= 1 && p.n_heads % p.n_kv_heads == 0 && p.block_size >= 1);
  FERRY_CUDA_REQUIRE(p.n_heads <= 65535);
  const dim3 grid(unsigned(p.n_tokens), unsigned(p.n_heads));
  if (p.head_dim <= 32) {
    launch_pdl(attention_kernel<1>, dim3(grid), dim3(kWarps * 32), 0, stream, p, decode_rows);
  } else if (p.head_dim <= 64) {
    launch_pdl(attention_kernel<2>, dim3(grid), dim3(kWarps * 32), 0, stream, p, decode_rows);
  } else if (p.head_dim <= 128) {
    launch_pdl(attention_kernel<4>, dim3(grid), dim3(kWarps * 32), 0, stream, p, decode_rows);
  } else {
    launch_pdl(attention_kernel<8>, dim3(grid), dim3(kWarps * 32), 0, stream, p, decode_rows);
  }
  FERRY_CUDA_CHECK_LAUNCH(attention_kernel);
}

namespace {

bool use_fast_path(const AttentionParams& p) {
  return flash_prefill_supports(p.head_dim) && decode_split_supports(p.head_dim);
}

int sm_count() {
  int dev = 0, n = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&dev));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

// Prefill tiles of the one-launch kernel: 128 rows (twice the K/V reuse per block) once those tiles alone fill
// a wave of 2 blocks per SM (long prompts); else 64 rows (twice the blocks). Prefill slots: 1 per SM while the
// 64-row tiles fit in one wave of 2 per SM (the decode blocks get the other half of the machine from the start),
// else 2. attention_bench mixed, H200, Llama-3-8B heads, us, with the one-lookup-per-key walk (64 rows x 2 slots /
// 64 x 1 / 128 x 2): 460 new + 50 decode rows 55.1 / 50.9 / 50.9, 460 on 512 + 50 70.4 / 70.7 / 70.8, 230 new +
// 230 on 512 + 50 57.4 / 54.8 / 60.4, 512 new alone 25.8 / 25.6 / 37.9, 2048 new alone 168.2 / 241.9 / 142.0
// (docs/perf-log.md "## 2026-11-30: the prefill tile's key walk"; 64 x 1 also won the first case with the old walk, "## 2026-11-30: mixed attention in one launch").
MixedAttentionConfig mixed_config(const AttentionParams& p, int n_sms) {
  MixedAttentionConfig c;
  const int64_t tiles128 = int64_t(p.n_tokens) / 128 * p.n_heads;
  const int64_t tiles64 = int64_t(p.n_tokens) / 64 * p.n_heads;
  c.tile_rows = tiles128 >= int64_t(2) * n_sms ? 128 : 64;
  c.slots_per_sm = c.tile_rows == 64 && tiles64 <= int64_t(2) * n_sms ? 1 : 2;
  c.key_splits = 1;  // not measured: mixed_key_splits(p, plan, c.tile_rows, n_sms) proposes (perf-log "## 2026-11-30: key splits in mixed attention")
  return c;
}

}  // namespace

size_t attention_scratch_bytes(const AttentionParams& p) {
  if (p.n_tokens == 0 || p.n_seqs == 0) return 0;
  const int n_sms = sm_count();
  if (!use_fast_path(p))  // decode rows on the split kernel where it takes the head_dim, else none
    return decode_split_supports(p.head_dim) ? decode_split_scratch_bytes(p, plan_decode_split(p, n_sms)) : 0;
  // The one-launch kernel's (its key splits' partials, if mixed_config splits); a superset of the decode plan's.
  return mixed_attention_scratch_bytes(p, plan_decode_split(p, n_sms), mixed_config(p, n_sms));
}

void attention(const AttentionParams& p, cudaStream_t stream) {
  if (p.n_tokens == 0) return;
  FERRY_CUDA_REQUIRE(p.head_dim >= 1 && p.head_dim <= 256);
  FERRY_CUDA_REQUIRE(p.n_kv_heads >= 1 && p.n_heads % p.n_kv_heads == 0 && p.block_size >= 1);
  if (!use_fast_path(p)) {
    // Head dims without the tensor-core prefill kernel: decode rows on the CUDA-core split kernel where it takes
    // the head_dim (32, 96), everything else on the simple kernel (one block per row and head).
    if (!decode_split_supports(p.head_dim)) {
      attention_simple(p, stream);
      return;
    }
    if (!(p.max_q_len >= 0 && p.max_q_len <= 1)) attention_simple(p, stream, /*decode_rows=*/false);
    if (p.min_q_len < 2) decode_split_attention(p, plan_decode_split(p, sm_count()), stream);
    return;
  }
  // Rows of sequences with q_len >= 2 (prefill) and with q_len == 1 (decode), in one launch whose blocks take
  // either kind (mixed_attention.cuh); else two launches, each skipping the other's sequences on the device.
  // A step the host knows to be decode-only runs the decode kernel alone: the one-launch kernel carries the
  // prefill tile's registers, and its instance for Llama-3's batch-1 shape spills 28 bytes. A graph-replayed
  // decode step knows it too (AttentionMeta::decode_only; docs/perf-log.md "## 2026-11-30: the fused q/k/v
  // epilogue and bf16 matmul inputs"). A step the host knows has no decode rows and whose 128-row tiles fill a wave
  // (long prompts) runs the standalone prefill kernel: its 128-row walk (Q staged in batches, the diagonal's dead
  // sub-tile skipped) beats the mixed kernel's (docs/perf-log.md "## 2026-11-30: 128-row prefill tiles").
  const int n_sms = sm_count();
  if (p.min_q_len >= 2) {
    // The wgmma kernel wherever it applies, short prompt-only steps too (docs/perf-log.md "## 2026-11-30: prefill
    // attention on wgmma (FlashAttention-3 structure)"). Not in batch-invariant mode: its bits differ (~4e-4 relative) from the mixed kernel's, which a prompt
    // sharing a step with decode rows runs.
    if (flash_prefill_wgmma_supports(p.head_dim) && !p.batch_invariant) {
      flash_prefill_wgmma_attention(p, stream);
      return;
    }
    if (int64_t(p.n_tokens) / 128 * p.n_heads >= int64_t(2) * n_sms) {
      flash_prefill_attention(p, stream);
      return;
    }
  }
  const DecodeSplitPlan plan = plan_decode_split(p, n_sms);
  // The fused q/k/v epilogue (p.qkv) exists only in the decode kernel: the caller says the step is decode-only.
  FERRY_CUDA_REQUIRE(p.qkv == nullptr || (p.max_q_len >= 0 && p.max_q_len <= 1));
  if (p.max_q_len >= 0 && p.max_q_len <= 1) {
    decode_split_attention(p, plan, stream);
    return;
  }
  // Prompt rows beside decode rows: the one-launch kernel, which overlaps the prompt tiles with the decode blocks
  // where two launches add them (measured against wgmma prefill + decode: docs/perf-log.md, 2026-11-30).
  if (mixed_attention_supports(p, plan)) {
    mixed_attention(p, plan, stream, mixed_config(p, n_sms));
    return;
  }
  flash_prefill_attention(p, stream);
  decode_split_attention(p, plan, stream);
}

}  // namespace ferry::cuda_ops
