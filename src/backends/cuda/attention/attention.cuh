// Paged causal attention with grouped-query heads, prefill and decode alike (ops/attention_meta.h): query
// row i of sequence s sits at position kv_len[s] - q_len[s] + i and attends to cached positions 0..that.
// Reads the per-sequence metadata from device memory only (no host mirrors), so a step can be captured.
//
// The KV cache is bf16 (CudaBackend::kv_dtype()); queries are f32; outputs f32, or bf16 (AttentionParams::out_bf16:
// the o-projection's GEMM input, rounded to nearest even from the f32 value each kernel would store: same bits
// as f32 output followed by f32_to_bf16, without that pass).
//
// Dispatch (attention()): head_dim 64 or 128: sequences with q_len >= 2 go to the tensor-core prefill
// kernel (flash_prefill.cuh: bf16 tiles, fp32 softmax and accumulation), sequences with q_len == 1 to the
// split-KV decode kernel (decode_split.cuh: tensor cores at head_dim 64/128 (decode_mma.cuh), CUDA cores
// otherwise; bf16 K/V, fp32 softmax and accumulation) whose last block per (sequence, KV head)
// merges the splits. Both kinds run in ONE launch (mixed_attention.cuh: prefill tiles and decode blocks in one
// grid, so they overlap) where it applies (the tensor-core decode plan); otherwise two launches, each kernel
// skipping the other's sequences on the device. A step the host knows to be prompt-only (min_q_len >= 2) runs the
// wgmma prefill kernel instead (flash_prefill_wgmma.cuh, FlashAttention-3's structure; head_dim 64 and 128); in
// batch-invariant mode, the mma.sync one when its 128-row tiles fill two waves. head_dim 256 (Gemma): the mma.sync
// prefill kernel (64-row tiles) and the CUDA-core split decode kernel, in two launches. Other head dims: prompt rows
// on the simple kernel below, decode rows on the CUDA-core split kernel at head_dim 32 and 96 (Phi-3), on the simple
// kernel at the rest. Every kernel takes AttentionParams::window and ::softcap, except the one-launch
// kernel (mixed_attention_supports says no: such a step runs two launches).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/common/device_errors.h"
#include "backends/cuda/diag/phase_stamps.cuh"

namespace ferry::cuda_ops {

struct AttentionParams {
  float* out;                   // (n, n_heads, head_dim) f32; null when out_bf16 is set
  const float* q;               // (n, n_heads, head_dim) f32
  const __nv_bfloat16* k_cache;  // (n_blocks, block_size, n_kv_heads, head_dim) bf16
  const __nv_bfloat16* v_cache;  // same shape
  const int32_t* q_start;       // (n_seqs) i32, device
  const int32_t* q_len;         // (n_seqs) i32, device
  const int32_t* kv_len;        // (n_seqs) i32, device
  const int32_t* block_tables;  // (n_seqs, max_blocks_per_seq) i32, device; a block id out of range in use
                                // sets kBadBlock and that key is skipped
  int32_t n_seqs, max_blocks_per_seq, block_size, n_blocks;
  int32_t n_tokens, n_heads, n_kv_heads, head_dim;
  float scale;                  // softmax scale (1/sqrt(head_dim) usually)
  // Sliding window (AttentionMeta::window): > 0: the query at position p attends to positions
  // max(0, p - window + 1) .. p only, and reads no K/V row (nor block table entry) before them, so blocks wholly
  // behind every query's window may have been given back (-1 entries); 0: to 0 .. p.
  int32_t window = 0;
  // Soft-capping of the scores (AttentionMeta::softcap): > 0: s = q·k * scale becomes softcap * tanh(s / softcap)
  // before the softmax. In the log2 domain the kernels work in (s * log2e) that is the same map with the cap
  // softcap * log2e (softcap_log2 below).
  float softcap = 0;
  DeviceErrors* errors;
  float* scratch = nullptr;     // >= attention_scratch_bytes(*this) bytes of device memory (split-KV
                                // arrival counters, then partials, then the mixed kernel's key-split partials);
                                // zeroed once when allocated, the kernels leave the counters at zero after
                                // every launch
  size_t scratch_bytes = 0;
  bool batch_invariant = false;  // decode splits cut contexts into fixed-size chunks (not sized to the batch)
  int32_t max_q_len = -1;       // the most query rows of any sequence when the host knows it (-1: unknown);
                                // 0 or 1: a decode-only step
  int32_t min_q_len = -1;       // the fewest query rows of any sequence when the host knows it (-1: unknown);
                                // >= 2: no decode rows (a prompt-only step)
  int32_t prefill_tiles = -1;   // an upper bound the host knows on the prefill tiles of 128 query rows (sum over
                                // sequences with q_len >= 2 of ceil(q_len / 128)); -1: unknown. The wgmma
                                // prefill kernel's grid has that many tile rows (else n_tokens / 128 + n_seqs)

  // The q/k/v epilogue fused into a decode-only step (decode_fused_qkv.cuh; tensor-core decode plan, max_q_len
  // 1, head_dim 64/128, full RoPE): qkv set means q is not read; each block normalizes and rotates its heads
  // from qkv and the step's key/value go to their cache slot (k_cache_out / v_cache_out, the same caches).
  const float* qkv = nullptr;           // (n, n_heads + 2 * n_kv_heads, head_dim) f32, bias included
  const int32_t* positions = nullptr;   // (n) i32
  const float* inv_freq = nullptr;      // (head_dim / 2) f32
  bool rope_interleaved = true;         // pairs (2i, 2i+1); false: (i, i + head_dim / 2)
  const float* q_norm = nullptr;        // (head_dim) f32 per-head RMSNorm weights (Qwen3), or null
  const float* k_norm = nullptr;
  float norm_eps = 0;
  const int64_t* slots = nullptr;       // (n) i64 cache slot of each row's token (block * block_size + offset)
  int64_t n_slots = 0;                  // n_blocks * block_size; a slot outside sets kBadSlot
  __nv_bfloat16* k_cache_out = nullptr;
  __nv_bfloat16* v_cache_out = nullptr;
  uint16_t* out_bf16 = nullptr;  // (n, n_heads, head_dim) bf16 bits instead of out (see the top of the file)
  // The tensor-core decode kernel: stamps at entry (0), the PDL wait's release (1), the fused q/k/v epilogue done
  // (2), the main loop done (3), the output written (4).
  PhaseStamps stamps{};
};

#ifdef __CUDACC__
// The first position the query at position `pos` attends to (window_begin) and the soft-cap of a score in the
// log2 domain (x = s * log2e; the identity when p.softcap == 0). Uniform branches: the same for a whole launch.
__device__ __forceinline__ int window_begin(const AttentionParams& p, int pos) {
  return p.window > 0 ? max(0, pos - p.window + 1) : 0;
}
__device__ __forceinline__ float softcap_log2(const AttentionParams& p, float x) {
  const float c = p.softcap * 1.4426950408889634f;
  return c * tanhf(x / c);
}
// Stores of the attention output at element i of (n, n_heads, head_dim): f32 into p.out, or rounded bf16 into
// p.out_bf16 (a uniform branch: the same for every thread of a launch). i is a multiple of the vector width.
__device__ __forceinline__ void store_attention_out(const AttentionParams& p, int64_t i, float v) {
  if (p.out_bf16 != nullptr) {
    p.out_bf16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
  } else {
    p.out[i] = v;
  }
}
__device__ __forceinline__ void store_attention_out2(const AttentionParams& p, int64_t i, float a, float b) {
  if (p.out_bf16 != nullptr) {
    *reinterpret_cast<__nv_bfloat162*>(p.out_bf16 + i) = __floats2bfloat162_rn(a, b);
  } else {
    *reinterpret_cast<float2*>(p.out + i) = make_float2(a, b);
  }
}
__device__ __forceinline__ void store_attention_out4(const AttentionParams& p, int64_t i, float4 v) {
  if (p.out_bf16 != nullptr) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    *reinterpret_cast<uint2*>(p.out_bf16 + i) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
  } else {
    *reinterpret_cast<float4*>(p.out + i) = v;
  }
}
#endif
// Whether the output (either kind) takes the widest store above: 16 bytes for f32, 8 for bf16.
inline bool attention_out_aligned(const AttentionParams& p) {
  return p.out_bf16 != nullptr ? reinterpret_cast<uintptr_t>(p.out_bf16) % 8 == 0
                               : reinterpret_cast<uintptr_t>(p.out) % 16 == 0;
}

// Device scratch that attention(p) needs (0 when the dispatch needs none); depends only on the host-side
// sizes of p (n_seqs, max_blocks_per_seq, block_size, n_heads, head_dim), not on the device metadata.
size_t attention_scratch_bytes(const AttentionParams& p);

// head_dim <= 256. p.scratch must hold attention_scratch_bytes(p) bytes.
void attention(const AttentionParams& p, cudaStream_t stream);

// The first-version kernel (fp32 math on bf16 K/V, one block per (query row, head), no tensor cores): the rows of
// head dims other than 64/128 (decode_rows false: not the rows of sequences with q_len == 1, which the split decode
// kernel takes), and a reference point for benchmarks.
void attention_simple(const AttentionParams& p, cudaStream_t stream, bool decode_rows = true);

}  // namespace ferry::cuda_ops
