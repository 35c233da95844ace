#include "model/llama_model.h"

#include <cmath>

#include "core/check.h"

namespace ferry {

LlamaModel::LlamaModel(ModelConfig config, ModelWeights weights, Backend& backend, KvCacheShape kv,
                       int32_t max_step_tokens)
    : config_(std::move(config)), weights_(std::move(weights)), backend_(backend), kv_(kv),
      max_step_tokens_(max_step_tokens) {
  const ModelConfig& c = config_;
  FERRY_CHECK(kv.n_blocks > 0 && kv.block_size > 0, "KV cache needs at least one block");
  FERRY_CHECK(max_step_tokens > 0, "max tokens per step must be positive");
  const int64_t per_layer = int64_t(kv.n_blocks) * kv.block_size * c.n_kv_heads * c.head_dim * 4;
  for (int l = 0; l < c.n_layers; ++l) {
    k_cache_.push_back(backend.alloc(size_t(per_layer)));
    v_cache_.push_back(backend.alloc(size_t(per_layer)));
  }
  const size_t T = size_t(max_step_tokens);
  const size_t q_dim = size_t(c.n_heads) * c.head_dim, kv_dim = size_t(c.n_kv_heads) * c.head_dim;
  x_ = backend.alloc(T * c.dim * 4);
  xb_ = backend.alloc(T * std::max<size_t>(c.dim, q_dim) * 4);
  q_ = backend.alloc(T * q_dim * 4);
  k_ = backend.alloc(T * kv_dim * 4);
  v_ = backend.alloc(T * kv_dim * 4);
  attn_ = backend.alloc(T * std::max<size_t>(q_dim, c.dim) * 4);
  out_ = backend.alloc(T * c.dim * 4);
  gate_ = backend.alloc(T * c.hidden_dim * 4);
  up_ = backend.alloc(T * c.hidden_dim * 4);
  logits_hidden_ = backend.alloc(T * c.dim * 4);

  std::vector<float> inv = c.rope_inv_freq();
  if (!weights_.rope_freqs.empty()) {  // Llama 3.1 GGUF: per-pair divisors stored as a tensor
    std::vector<float> div(inv.size());
    backend.copy_to_host(div.data(), weights_.rope_freqs, div.size() * 4);
    for (size_t i = 0; i < inv.size(); ++i) inv[i] /= div[i];
  }
  inv_freq_buf_ = backend.alloc(inv.size() * 4);
  inv_freq_ = inv_freq_buf_.view(DType::F32, {int64_t(inv.size())});
  backend.copy_to_device(inv_freq_, inv.data(), inv.size() * 4);
}

size_t LlamaModel::kv_bytes() const {
  size_t total = 0;
  for (const auto& b : k_cache_) total += b.bytes();
  for (const auto& b : v_cache_) total += b.bytes();
  return total;
}

Tensor LlamaModel::upload_i32(const std::vector<int32_t>& v, DeviceBuffer& buf) {
  const size_t bytes = std::max<size_t>(1, v.size()) * 4;
  if (buf.bytes() < bytes) buf = backend_.alloc(bytes * 2);
  Tensor t = buf.view(DType::I32, {int64_t(v.size())});
  if (!v.empty()) backend_.copy_to_device(t, v.data(), v.size() * 4);
  return t;
}

Tensor LlamaModel::upload_i64(const std::vector<int64_t>& v, DeviceBuffer& buf) {
  const size_t bytes = std::max<size_t>(1, v.size()) * 8;
  if (buf.bytes() < bytes) buf = backend_.alloc(bytes * 2);
  Tensor t = buf.view(DType::I64, {int64_t(v.size())});
  if (!v.empty()) backend_.copy_to_device(t, v.data(), v.size() * 8);
  return t;
}

void LlamaModel::forward(const Batch& batch, std::vector<float>& logits) {
  const ModelConfig& c = config_;
  const int64_t n = batch.n_tokens();
  FERRY_CHECK(n > 0 && n <= max_step_tokens_, "step of {} tokens (1..{} allowed)", n, max_step_tokens_);
  FERRY_ASSERT(batch.positions.size() == size_t(n) && batch.slots.size() == size_t(n));
  FERRY_ASSERT(batch.block_tables.size() == size_t(batch.n_seqs()) * size_t(batch.max_blocks_per_seq));
  const int64_t H = c.n_heads, KVH = c.n_kv_heads, D = c.head_dim;

  // Step inputs into backend memory.
  const Tensor ids = upload_i32(batch.tokens, ids_buf_);
  const Tensor pos = upload_i32(batch.positions, pos_buf_);
  const Tensor slots = upload_i64(batch.slots, slots_buf_);
  AttentionMeta meta;
  meta.n_seqs = batch.n_seqs();
  meta.block_size = kv_.block_size;
  meta.max_blocks_per_seq = batch.max_blocks_per_seq;
  meta.q_start = upload_i32(batch.q_start, qstart_buf_);
  meta.q_len = upload_i32(batch.q_len, qlen_buf_);
  meta.kv_len = upload_i32(batch.kv_len, kvlen_buf_);
  meta.block_tables = upload_i32(batch.block_tables, tables_buf_);
  meta.host_q_start = batch.q_start.data();
  meta.host_q_len = batch.q_len.data();
  meta.host_kv_len = batch.kv_len.data();
  meta.host_block_tables = batch.block_tables.data();

  // Activation views for this step: (n, ...) f32.
  const Tensor x = x_.view(DType::F32, {n, c.dim});          // residual stream
  const Tensor xb = xb_.view(DType::F32, {n, c.dim});        // normed input of a sublayer
  const Tensor q = q_.view(DType::F32, {n, H, D});
  const Tensor k = k_.view(DType::F32, {n, KVH, D});
  const Tensor v = v_.view(DType::F32, {n, KVH, D});
  const Tensor attn = attn_.view(DType::F32, {n, H, D});     // attention output per head
  const Tensor delta = out_.view(DType::F32, {n, c.dim});    // a sublayer's output (o-proj or ffn down)
  const Tensor gate = gate_.view(DType::F32, {n, c.hidden_dim});
  const Tensor up = up_.view(DType::F32, {n, c.hidden_dim});
  const auto flat = [](const Tensor& t) { return Tensor::make(t.dtype, {t.shape[0], t.shape[1] * t.shape[2]}, t.data, t.device); };
  const auto per_head = [](const Tensor& t) { return Tensor::make(t.dtype, {t.shape[0] * t.shape[1], t.shape[2]}, t.data, t.device); };
  const float scale = 1.0f / std::sqrt(float(D));

  backend_.embedding(x, weights_.tok_embd, ids);
  observe("tok_embd", -1, x);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = weights_.layers[size_t(l)];
    const Tensor k_cache = k_cache_[size_t(l)].view(DType::F32, {kv_.n_blocks, kv_.block_size, KVH, D});
    const Tensor v_cache = v_cache_[size_t(l)].view(DType::F32, {kv_.n_blocks, kv_.block_size, KVH, D});

    if (l == 0) {
      backend_.rms_norm(xb, x, L.attn_norm, c.rms_eps);
    } else {  // x += previous layer's ffn output, then norm
      backend_.add_rms_norm(xb, x, delta, L.attn_norm, c.rms_eps);
    }
    observe("attn_norm", l, xb);
    backend_.matmul(flat(q), xb, L.wq, L.bq);
    backend_.matmul(flat(k), xb, L.wk, L.bk);
    backend_.matmul(flat(v), xb, L.wv, L.bv);
    if (c.qk_norm) {
      backend_.rms_norm(per_head(q), per_head(q), L.q_norm, c.rms_eps);
      backend_.rms_norm(per_head(k), per_head(k), L.k_norm, c.rms_eps);
    }
    backend_.rope(q, pos, inv_freq_, c.rope_ordering);
    backend_.rope(k, pos, inv_freq_, c.rope_ordering);
    observe("q", l, q);
    observe("k", l, k);
    observe("v", l, v);
    backend_.store_kv(k_cache, v_cache, k, v, slots);
    backend_.attention(attn, q, k_cache, v_cache, meta, scale);
    observe("attn", l, attn);
    backend_.matmul(delta, flat(attn), L.wo, Tensor{});
    observe("attn_out", l, delta);
    backend_.add_rms_norm(xb, x, delta, L.ffn_norm, c.rms_eps);
    observe("ffn_norm", l, xb);
    backend_.matmul(gate, xb, L.w_gate, Tensor{});
    backend_.matmul(up, xb, L.w_up, Tensor{});
    backend_.swiglu(gate, gate, up);
    backend_.matmul(delta, gate, L.w_down, Tensor{});
    observe("ffn_out", l, delta);
  }

  // Final residual add + norm, only on the rows whose logits are wanted.
  const int64_t m = int64_t(batch.logit_rows.size());
  logits.assign(size_t(m) * size_t(c.vocab_size), 0.0f);
  if (m == 0) return;
  const Tensor rows = upload_i32(batch.logit_rows, rows_buf_);
  const Tensor hx = logits_hidden_.view(DType::F32, {m, c.dim});
  const Tensor hd = xb_.view(DType::F32, {m, c.dim});
  backend_.gather_rows(hx, x, rows);
  backend_.gather_rows(hd, delta, rows);
  const Tensor hn = attn_.view(DType::F32, {m, c.dim});
  backend_.add_rms_norm(hn, hx, hd, weights_.output_norm, c.rms_eps);
  observe("output_norm", -1, hn);
  const size_t need = size_t(m) * size_t(c.vocab_size) * 4;
  if (logits_.bytes() < need) logits_ = backend_.alloc(need);
  const Tensor out = logits_.view(DType::F32, {m, c.vocab_size});
  backend_.matmul(out, hn, weights_.output, Tensor{});
  backend_.copy_to_host(logits.data(), out, need);
}

}  // namespace ferry
