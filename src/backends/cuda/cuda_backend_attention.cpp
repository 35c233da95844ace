// CudaBackend's position and attention ops: RoPE, the K/V cache writes, attention (prefill, decode and mixed steps,
// with the split-KV plan), the q/k/v epilogue and its fusion into the decode kernel.
#include <fmt/format.h>

#include "backends/cuda/attention/attention.cuh"
#include "backends/cuda/attention/attention_split_heuristic.cuh"
#include "backends/cuda/attention/attention_store.cuh"
#include "backends/cuda/attention/decode_mma.cuh"
#include "backends/cuda/attention/decode_split.cuh"
#include "backends/cuda/attention/qkv_epilogue.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_backend_views.h"
#include "backends/cuda/diag/op_profiler.h"
#include "backends/cuda/diag/stamp_table.h"
#include "backends/cuda/elementwise/rope.cuh"
#include "core/check.h"

namespace ferry {

using namespace cuda_ops;

void CudaBackend::rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, RopeOrdering ordering) {
  const OpProfiler::Scope prof(profiler_.get(), "rope", 2.0 * double(x.nbytes()));
  require_cuda(x, "rope input");
  require_cuda(positions, "rope positions");
  require_cuda(inv_freq, "rope frequencies");
  FERRY_ASSERT(x.n_dims == 3 && x.dtype == DType::F32 && positions.dtype == DType::I32);
  const int64_t n = x.shape[0], half = inv_freq.numel();
  FERRY_ASSERT(positions.numel() == n && 2 * half <= x.shape[2]);
  cuda_ops::rope({.x = x.ptr<float>(), .positions = positions.ptr<int32_t>(), .inv_freq = inv_freq.ptr<float>(),
                  .n = n, .n_heads = x.shape[1], .head_dim = x.shape[2], .half = half,
                  .interleaved = ordering == RopeOrdering::Interleaved},
                 stream_);
}

void CudaBackend::store_kv(const Tensor& k_cache, const Tensor& v_cache, const Tensor& k, const Tensor& v,
                           const Tensor& slots) {
  const OpProfiler::Scope prof(profiler_.get(), "store_kv", 3.0 * double(k.nbytes()));
  require_cuda(k_cache, "K cache");
  require_cuda(v_cache, "V cache");
  require_cuda(k, "keys");
  require_cuda(v, "values");
  require_cuda(slots, "KV slots");
  const int64_t n = k.shape[0];
  if (n == 0) return;
  const int64_t row = k.numel() / n;
  FERRY_ASSERT(k_cache.n_dims == 4 && k_cache.dtype == kv_dtype() && v_cache.dtype == kv_dtype());
  FERRY_ASSERT(row == k_cache.shape[2] * k_cache.shape[3] && v.numel() == k.numel() && slots.numel() == n);
  FERRY_ASSERT(slots.dtype == DType::I64 && k.dtype == DType::F32 && v.dtype == DType::F32);
  cuda_ops::store_kv_bf16({.k_cache = k_cache.ptr<__nv_bfloat16>(), .v_cache = v_cache.ptr<__nv_bfloat16>(),
                           .k = k.ptr<float>(), .v = v.ptr<float>(), .slots = slots.ptr<int64_t>(), .n = n,
                           .row = row, .n_slots = k_cache.shape[0] * k_cache.shape[1], .errors = errors_},
                          stream_);
}

void CudaBackend::attention(const Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                            const AttentionMeta& meta, float scale) {
  const bool decode_step = q.n_dims == 3 && q.shape[0] == meta.n_seqs;
  const OpProfiler::Scope prof(profiler_.get(),
                               profiler_ ? fmt::format("attention {} seqs={}", decode_step ? "decode" : "mixed",
                                                       token_bucket(meta.n_seqs))
                                         : std::string(),
                               0.0);
  cuda_ops::AttentionParams ap = attention_params(out, q, k_cache, v_cache, meta, scale);
  launch_attention(ap);
}

void CudaBackend::qkv_attention(const QkvEpilogueArgs& e, const Tensor& out, const AttentionMeta& meta, float scale) {
  const int64_t D = e.q.n_dims == 3 ? e.q.shape[2] : 0, H = e.q.n_dims == 3 ? e.q.shape[1] : 0;
  const int64_t KVH = e.k_cache.n_dims == 4 ? e.k_cache.shape[2] : 0;
  // Not when entries share K/V (a verify step's one-row entries): the fused store would race the other entries' reads.
  const bool fusable = meta.decode_only && !meta.rows_share_kv && e.k_out.empty() && e.v_out.empty() &&
                       cuda_ops::decode_mma_supports(int(D)) && KVH > 0 && H % KVH == 0 &&
                       cuda_ops::default_decode_kernel(int(D), int(H / KVH)) == cuda_ops::DecodeKernel::kTensorCores &&
                       2 * e.inv_freq.numel() == D && e.qkv.dtype == DType::F32 && e.qkv.n_dims == 3 &&
                       e.qkv.shape[1] == H + 2 * KVH && e.qkv.shape[2] == D;
  if (!fusable) {
    Backend::qkv_attention(e, out, meta, scale);
    return;
  }
  const OpProfiler::Scope prof(
      profiler_.get(), profiler_ ? fmt::format("attention decode+qkv seqs={}", token_bucket(meta.n_seqs)) : std::string(),
      0.0);
  require_cuda(e.qkv, "qkv_attention input");
  require_cuda(e.positions, "qkv_attention positions");
  require_cuda(e.slots, "qkv_attention slots");
  require_cuda(e.inv_freq, "qkv_attention frequencies");
  const int64_t n = e.qkv.shape[0];
  FERRY_ASSERT(e.q.shape[0] == n && n == meta.n_seqs);
  FERRY_ASSERT(e.positions.dtype == DType::I32 && e.positions.numel() == n);
  FERRY_ASSERT(e.slots.dtype == DType::I64 && e.slots.numel() == n);
  FERRY_ASSERT(e.q_norm.empty() == e.k_norm.empty() && (e.q_norm.empty() || e.q_norm.numel() == D));
  cuda_ops::AttentionParams ap = attention_params(out, e.q, e.k_cache, e.v_cache, meta, scale);
  ap.qkv = e.qkv.ptr<float>();
  ap.positions = e.positions.ptr<int32_t>();
  ap.inv_freq = e.inv_freq.ptr<float>();
  ap.rope_interleaved = e.ordering == RopeOrdering::Interleaved;
  ap.q_norm = f32_or_null(e.q_norm);
  ap.k_norm = f32_or_null(e.k_norm);
  ap.norm_eps = e.eps;
  ap.slots = e.slots.ptr<int64_t>();
  ap.n_slots = e.k_cache.shape[0] * e.k_cache.shape[1];
  ap.k_cache_out = e.k_cache.ptr<__nv_bfloat16>();
  ap.v_cache_out = e.v_cache.ptr<__nv_bfloat16>();
  launch_attention(ap);
}

cuda_ops::AttentionParams CudaBackend::attention_params(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                                                        const Tensor& v_cache, const AttentionMeta& meta, float scale) {
  require_cuda(out, "attention output");
  require_cuda(q, "queries");
  require_cuda(k_cache, "K cache");
  require_cuda(v_cache, "V cache");
  require_cuda(meta.q_start, "attention q_start");
  require_cuda(meta.q_len, "attention q_len");
  require_cuda(meta.kv_len, "attention kv_len");
  require_cuda(meta.block_tables, "attention block tables");
  FERRY_ASSERT(q.n_dims == 3 && k_cache.n_dims == 4 && out.numel() == q.numel());
  const int64_t n = q.shape[0], n_heads = q.shape[1], head_dim = q.shape[2];
  const int64_t n_kv_heads = k_cache.shape[2];
  FERRY_ASSERT(k_cache.shape[3] == head_dim && n_kv_heads > 0 && n_heads % n_kv_heads == 0);
  FERRY_ASSERT(k_cache.shape[1] == meta.block_size && meta.n_seqs >= 0);
  FERRY_ASSERT(k_cache.dtype == kv_dtype() && v_cache.dtype == kv_dtype() && q.dtype == DType::F32);
  FERRY_CHECK(head_dim <= 256, "CUDA attention supports head_dim up to 256, not {}", head_dim);
  // out: f32, or bf16 (matmul_input_dtype: the o-projection's GEMM input, written without a conversion pass).
  FERRY_ASSERT(out.dtype == DType::F32 || out.dtype == DType::BF16);
  const bool out_bf16 = out.dtype == DType::BF16;
  AttentionParams ap{.out = out_bf16 ? nullptr : out.ptr<float>(), .q = q.ptr<float>(),
                     .k_cache = k_cache.ptr<__nv_bfloat16>(),
                     .v_cache = v_cache.ptr<__nv_bfloat16>(), .q_start = meta.q_start.ptr<int32_t>(),
                     .q_len = meta.q_len.ptr<int32_t>(), .kv_len = meta.kv_len.ptr<int32_t>(),
                     .block_tables = meta.block_tables.ptr<int32_t>(), .n_seqs = meta.n_seqs,
                     .max_blocks_per_seq = meta.max_blocks_per_seq, .block_size = meta.block_size,
                     .n_blocks = int32_t(k_cache.shape[0]), .n_tokens = int32_t(n), .n_heads = int32_t(n_heads),
                     .n_kv_heads = int32_t(n_kv_heads), .head_dim = int32_t(head_dim), .scale = scale,
                     .window = meta.window, .softcap = meta.softcap, .errors = errors_,
                     .batch_invariant = options_.batch_invariant};
  if (out_bf16) ap.out_bf16 = static_cast<uint16_t*>(out.data);
  if (meta.decode_only) {
    ap.max_q_len = 1;  // a captured decode step too: the decode kernel alone (attention.cu)
  } else if (meta.host_q_len != nullptr) {
    ap.max_q_len = 0;
    ap.min_q_len = meta.n_seqs > 0 ? meta.host_q_len[0] : 0;
    ap.prefill_tiles = 0;  // 128-row tiles of the sequences with q_len >= 2 (the wgmma prefill grid)
    for (int32_t s = 0; s < meta.n_seqs; ++s) {
      ap.max_q_len = std::max(ap.max_q_len, meta.host_q_len[s]);
      ap.min_q_len = std::min(ap.min_q_len, meta.host_q_len[s]);
      if (meta.host_q_len[s] >= 2) ap.prefill_tiles += (meta.host_q_len[s] + 127) / 128;
    }
  }
  if (options_.batch_invariant) {
    using cuda_ops::DecodeSplitLimits;
    const int64_t max_kv = int64_t(meta.max_blocks_per_seq) * meta.block_size;
    FERRY_CHECK(max_kv <= int64_t(DecodeSplitLimits::kMaxSplits) * cuda_ops::kFixedChunk,
                "batch-invariant decode attention takes contexts up to {} tokens, not {}",
                int64_t(DecodeSplitLimits::kMaxSplits) * cuda_ops::kFixedChunk, max_kv);
    FERRY_CHECK(int64_t(meta.n_seqs) * n_kv_heads * 8 <= DecodeSplitLimits::kMaxCounters,
                "batch-invariant decode attention takes at most {} sequences here, not {}",
                DecodeSplitLimits::kMaxCounters / (n_kv_heads * 8), meta.n_seqs);
  }
  return ap;
}

void CudaBackend::launch_attention(cuda_ops::AttentionParams& ap) {
  ap.scratch_bytes = attention_scratch_bytes(ap);
  if (ap.scratch_bytes > 0) {
    const uint64_t epoch = scratch_epoch_;
    ensure(attn_scratch_, ap.scratch_bytes);
    // Fresh scratch: the split-KV arrival counters in it must start at zero (kernels leave them at zero).
    if (scratch_epoch_ != epoch) FERRY_CUDA_CHECK(cudaMemsetAsync(attn_scratch_.data(), 0, attn_scratch_.bytes(), stream_));
  }
  ap.scratch = static_cast<float*>(attn_scratch_.data());
  ap.scratch_bytes = attn_scratch_.bytes();
  if (stamps_ && ap.max_q_len >= 0 && ap.max_q_len <= 1)  // decode-only steps: the tensor-core decode kernel
    ap.stamps = stamps_->slots(ap.qkv ? "attention decode (fused q/k/v)" : "attention decode",
                               {"waited", "prepared", "looped", "written", "tile0 landed", "tile0 done"});
  cuda_ops::attention(ap, stream_);
}

void CudaBackend::qkv_epilogue(const QkvEpilogueArgs& a) {
  const OpProfiler::Scope prof(profiler_.get(), "qkv_epilogue", 2.0 * double(a.qkv.nbytes()));
  require_cuda(a.qkv, "qkv_epilogue input");
  require_cuda(a.positions, "qkv_epilogue positions");
  require_cuda(a.slots, "qkv_epilogue slots");
  require_cuda(a.q, "qkv_epilogue q");
  require_cuda(a.k_cache, "K cache");
  require_cuda(a.v_cache, "V cache");
  FERRY_ASSERT(a.qkv.n_dims == 3 && a.qkv.dtype == DType::F32 && a.q.n_dims == 3 && a.q.dtype == DType::F32);
  const int64_t n = a.qkv.shape[0], n_all = a.qkv.shape[1], D = a.qkv.shape[2], H = a.q.shape[1];
  const int64_t KVH = (n_all - H) / 2;
  FERRY_ASSERT(a.q.shape[0] == n && a.q.shape[2] == D && H + 2 * KVH == n_all && KVH > 0);
  FERRY_ASSERT(a.positions.dtype == DType::I32 && a.positions.numel() == n);
  FERRY_ASSERT(a.slots.dtype == DType::I64 && a.slots.numel() == n);
  FERRY_ASSERT(a.k_cache.n_dims == 4 && a.k_cache.dtype == kv_dtype() && a.v_cache.dtype == kv_dtype());
  FERRY_ASSERT(a.k_cache.shape[2] == KVH && a.k_cache.shape[3] == D && a.v_cache.numel() == a.k_cache.numel());
  FERRY_ASSERT(a.q_norm.empty() == a.k_norm.empty() && (a.q_norm.empty() || a.q_norm.numel() == D));
  FERRY_ASSERT(a.k_out.empty() || a.k_out.numel() == n * KVH * D);
  FERRY_ASSERT(a.v_out.empty() || a.v_out.numel() == n * KVH * D);
  const int64_t half = a.inv_freq.numel();
  FERRY_ASSERT(2 * half <= D);
  cuda_ops::qkv_epilogue({.qkv = a.qkv.ptr<float>(), .positions = a.positions.ptr<int32_t>(),
                          .slots = a.slots.ptr<int64_t>(), .inv_freq = f32_or_null(a.inv_freq),
                          .q_norm = f32_or_null(a.q_norm), .k_norm = f32_or_null(a.k_norm), .q = a.q.ptr<float>(),
                          .k_cache = a.k_cache.data, .v_cache = a.v_cache.data, .k_out = f32_or_null(a.k_out),
                          .v_out = f32_or_null(a.v_out), .n = n, .n_heads = H, .n_kv_heads = KVH, .head_dim = D,
                          .half = half, .n_slots = a.k_cache.shape[0] * a.k_cache.shape[1], .eps = a.eps,
                          .interleaved = a.ordering == RopeOrdering::Interleaved,
                          .kv_type = cuda_ops::KvCacheType::BF16, .errors = errors_},
                         stream_);
}

}  // namespace ferry
