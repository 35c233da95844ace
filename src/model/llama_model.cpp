#include "model/llama_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "model/batch_codec.h"
#include "model/moe_ffn.h"

namespace ferry {

LlamaModel::LlamaModel(ModelConfig config, ModelWeights weights, Backend& backend, KvCacheShape kv,
                       int32_t max_step_tokens, ParallelContext parallel)
    : config_(std::move(config)), weights_(std::move(weights)), backend_(backend), kv_(kv),
      max_step_tokens_(max_step_tokens) {
  const ModelConfig& c = config_;
  if (parallel.comm) comm_ = parallel.comm;
  dense_comm_ = parallel.dense_replicated ? &identity_ : comm_;
  vocab_ = parallel.vocab.full > 0 ? parallel.vocab : VocabShard::whole(c.vocab_size);
  FERRY_CHECK(vocab_.local_rows == c.vocab_size, "vocabulary shard of {} rows for a config of {}", vocab_.local_rows,
              c.vocab_size);
  const int split = dense_comm_->world();  // the ranks over which heads and hidden units are split
  full_config_ = c;
  full_config_.n_heads = c.n_heads * split;
  full_config_.n_kv_heads = c.n_kv_heads * split;
  full_config_.hidden_dim = c.hidden_dim * split;
  full_config_.expert_hidden_dim = c.expert_hidden_dim * split;
  full_config_.expert_begin = 0;
  full_config_.n_local_experts = 0;
  full_config_.vocab_size = vocab_.full;
  FERRY_CHECK(kv.n_blocks > 0 && kv.block_size > 0, "KV cache needs at least one block");
  FERRY_CHECK(max_step_tokens > 0, "max tokens per step must be positive");
  const int64_t per_layer =
      int64_t(kv.n_blocks) * kv.block_size * c.n_kv_heads * c.head_dim * int64_t(row_bytes(backend.kv_dtype(), 1));
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
  const auto any_layer = [&](auto pred) { return std::any_of(weights_.layers.begin(), weights_.layers.end(), pred); };
  if (any_layer([](const LayerWeights& L) { return L.w_gate_up.empty(); })) up_ = backend.alloc(T * c.hidden_dim * 4);
  if (any_layer([](const LayerWeights& L) { return !L.w_gate_up.empty(); }))
    gate_up_ = backend.alloc(T * 2 * size_t(c.hidden_dim) * 4);
  if (any_layer([](const LayerWeights& L) { return !L.wqkv.empty(); }))
    qkv_ = backend.alloc(T * (q_dim + 2 * kv_dim) * 4);
  logits_hidden_ = backend.alloc(T * c.dim * 4);
  if (any_layer([](const LayerWeights& L) { return L.is_moe(); })) moe_in_ = backend.alloc(T * c.dim * 4);

  // The features beyond the Llama op set this config uses, each checked against the backend (one-line refusal).
  // A sliding window counts only where a sequence can outgrow it (the cache holds more tokens than the window).
  const int64_t cache_tokens = int64_t(kv.n_blocks) * kv.block_size;
  std::vector<ModelFeature> needs;
  if (c.ffn_activation == FfnActivation::GeluTanh) needs.push_back(ModelFeature::GeluTanhGlu);
  if (c.attn_softcap > 0 || c.final_softcap > 0) needs.push_back(ModelFeature::SoftCap);
  if (c.embedding_scale > 0 || c.rope_attention_factor() != 1.0f) needs.push_back(ModelFeature::Scale);
  // The fused q|k|v epilogue has no place for the rotated dims' factor: such a model keeps the projections apart.
  FERRY_CHECK(c.rope_attention_factor() == 1.0f ||
                  std::none_of(weights_.layers.begin(), weights_.layers.end(), [](const LayerWeights& L) { return !L.wqkv.empty(); }),
              "backend {} fuses q|k|v, which a rope attention factor on partial rotary dims cannot run", backend.name());
  if (std::any_of(c.layer_window.begin(), c.layer_window.end(), [&](int w) { return w > 0 && w < cache_tokens; }))
    needs.push_back(ModelFeature::SlidingWindow);
  for (ModelFeature f : needs)
    FERRY_CHECK(backend.supports(f), "backend {} cannot run this {} model: it has no {}", backend.name(),
                arch_name(c.arch), feature_name(f));

  // RoPE frequencies: longrope picks its factors by the longest sequence the engine runs (as llama.cpp by n_ctx).
  const auto upload_freqs = [&](std::vector<float> inv, DeviceBuffer& buf) {
    if (!weights_.rope_freqs.empty()) {  // Llama 3.1 GGUF: per-pair divisors stored as a tensor
      std::vector<float> div(inv.size());
      backend.copy_to_host(div.data(), weights_.rope_freqs, div.size() * 4);
      for (size_t i = 0; i < inv.size(); ++i) inv[i] /= div[i];
    }
    buf = backend.alloc(inv.size() * 4);
    const Tensor t = buf.view(DType::F32, {int64_t(inv.size())});
    backend.copy_to_device(t, inv.data(), inv.size() * 4);
    return t;
  };
  const int64_t rope_context =
      std::min<int64_t>({kv.max_seq_tokens > 0 ? kv.max_seq_tokens : cache_tokens, cache_tokens, c.max_context});
  inv_freq_ = upload_freqs(c.rope_inv_freq(rope_context), inv_freq_buf_);
  // Gemma 3's local layers: their own base, no scaling.
  if (c.rope_theta_local > 0) inv_freq_local_ = upload_freqs(c.rope_inv_freq(rope_context, true), inv_freq_local_buf_);
}

size_t LlamaModel::kv_bytes() const {
  size_t total = 0;
  for (const auto& b : k_cache_) total += b.bytes();
  for (const auto& b : v_cache_) total += b.bytes();
  return total;
}

namespace {

size_t align8(size_t x) { return (x + 7) / 8 * 8; }

// The smallest power of two >= x (x >= 1).
int32_t pow2_at_least(int32_t x) {
  int32_t p = 1;
  while (p < x) p *= 2;
  return p;
}

}  // namespace

LlamaModel::StepLayout LlamaModel::layout_for(const Batch& batch, int32_t mb) {
  StepLayout L;
  L.n = batch.n_tokens();
  L.n_seqs = batch.n_seqs();
  L.mb = mb;
  L.m = int32_t(batch.logit_rows.size());
  L.decode_only = std::all_of(batch.q_len.begin(), batch.q_len.end(), [](int32_t q) { return q == 1; });
  L.rows_share_kv = batch.rows_share_kv;
  size_t off = 0;
  const auto take = [&](size_t bytes) {
    const size_t at = off;
    off = align8(off + bytes);
    return at;
  };
  L.slots = take(size_t(L.n) * 8);
  L.tokens = take(size_t(L.n) * 4);
  L.positions = take(size_t(L.n) * 4);
  L.q_start = take(size_t(L.n_seqs) * 4);
  L.q_len = take(size_t(L.n_seqs) * 4);
  L.kv_len = take(size_t(L.n_seqs) * 4);
  L.rows = take(size_t(L.m) * 4);
  L.tables = take(size_t(L.n_seqs) * size_t(mb) * 4);
  L.bytes = std::max<size_t>(off, 8);
  return L;
}

void LlamaModel::stage_inputs(const Batch& batch, const StepLayout& L) {
  if (inputs_staging_.bytes() < L.bytes) {
    // New addresses: graphs recorded with the old buffers must not run again.
    drop_graphs();
    inputs_staging_ = DeviceBuffer();
    inputs_ = DeviceBuffer();
    inputs_staging_ = backend_.alloc_host(L.bytes * 2);
    inputs_ = backend_.alloc(L.bytes * 2);
  }
  // The previous step's copy of the staging buffer may still be queued behind its predecessor's kernels (eager
  // prompt chunks do not wait for the device between steps): overwriting it now would hand that step this one's
  // inputs (seen as a garbage KV slot on the GPU).
  backend_.wait_for_copies();
  auto* base = static_cast<uint8_t*>(inputs_staging_.data());
  const auto put = [&](size_t off, const auto& v) {
    if (!v.empty()) std::memcpy(base + off, v.data(), v.size() * sizeof(v[0]));
  };
  put(L.slots, batch.slots);
  auto* ids = reinterpret_cast<int32_t*>(base + L.tokens);  // rows of this rank's vocabulary shard
  for (size_t i = 0; i < batch.tokens.size(); ++i)  // placeholders (< 0, token feedback: checked) pass as they are
    ids[i] = batch.tokens[i] < 0 && token_feedback_ ? batch.tokens[i] : local_vocab_row(vocab_, batch.tokens[i]);
  put(L.positions, batch.positions);
  put(L.q_start, batch.q_start);
  put(L.q_len, batch.q_len);
  put(L.kv_len, batch.kv_len);
  put(L.rows, batch.logit_rows);
  auto* tables = reinterpret_cast<int32_t*>(base + L.tables);
  const int32_t src_mb = batch.max_blocks_per_seq;
  for (int32_t s = 0; s < L.n_seqs; ++s) {  // the table stride may be a padded bucket: unused entries -1
    for (int32_t b = 0; b < L.mb; ++b)
      tables[size_t(s) * size_t(L.mb) + size_t(b)] = b < src_mb ? batch.block_tables[size_t(s) * size_t(src_mb) + size_t(b)] : -1;
  }
}

void LlamaModel::ensure_logits(size_t rows, bool staging) {
  const size_t bytes = size_t(dense_comm_->world()) * rows * size_t(config_.vocab_size) * 4;  // (world, rows, vocab rows)
  if (logits_capacity_rows_ < rows) {
    drop_graphs();
    logits_ = DeviceBuffer();
    logits_ = backend_.alloc(bytes);
    logits_capacity_rows_ = rows;
  }
  if (staging && logits_staging_.bytes() < bytes) {
    drop_graphs();
    logits_staging_ = DeviceBuffer();
    logits_staging_ = backend_.alloc_host(logits_.bytes());
  }
}

void LlamaModel::forward(const Batch& batch, std::vector<float>& logits) {
  FERRY_CHECK(batch.n_tokens() > 0 && batch.n_tokens() <= max_step_tokens_, "step of {} tokens (1..{} allowed)",
              batch.n_tokens(), max_step_tokens_);
  for (int32_t t : batch.tokens) local_vocab_row(vocab_, t);  // a bad id fails here, before the followers start
  last_modes_.clear();  // no step may name this one's rows (it samples nothing on the device)
  // Tensor parallel: the followers run the same step (a no-op at world 1). From here on a failure must end
  // every rank: they wait in this step's collectives.
  encode_batch(batch, step_bytes_);
  try {
    comm_->broadcast(step_bytes_);
    run_step(batch, logits);
    comm_->step_done();
  } catch (const std::exception& e) {
    comm_->abort(e.what());
    throw;
  }
}

bool LlamaModel::follow() {
  comm_->broadcast(step_bytes_);  // waits for rank 0's next step
  if (step_bytes_.empty()) return false;
  try {
    run_step(decode_batch(step_bytes_), follower_logits_);
    comm_->step_done();
  } catch (const std::exception& e) {
    comm_->abort(e.what());
    throw;
  }
  return true;
}

void LlamaModel::end_followers() {
  step_bytes_.clear();
  comm_->broadcast(step_bytes_);
}

void LlamaModel::run_step(const Batch& batch, std::vector<float>& logits) {
  const int64_t m = int64_t(batch.logit_rows.size());
  logits.assign(size_t(m) * size_t(vocab_.full), 0.0f);
  const float* gathered = execute_step(batch, true);
  if (m > 0) assemble_logits(vocab_, dense_comm_->world(), m, gathered, logits.data());
}

const float* LlamaModel::execute_step(const Batch& batch, bool host_logits) {
  const int64_t n = batch.n_tokens();
  FERRY_CHECK(n > 0 && n <= max_step_tokens_, "step of {} tokens (1..{} allowed)", n, max_step_tokens_);
  FERRY_ASSERT(batch.positions.size() == size_t(n) && batch.slots.size() == size_t(n));
  FERRY_ASSERT(batch.block_tables.size() == size_t(batch.n_seqs()) * size_t(batch.max_blocks_per_seq));
  FERRY_ASSERT(batch.q_start.size() == batch.q_len.size() && batch.kv_len.size() == batch.q_len.size());
  const int64_t m = int64_t(batch.logit_rows.size());
  const int64_t gathered_bytes = int64_t(dense_comm_->world()) * m * config_.vocab_size * 4;  // (world, m, local rows) f32

  // A decode step (one new token per sequence) on a backend with graphs: one graph launch per step. The graph
  // copies the logits to the page-locked staging buffer only when they go to the host (a key of its own). With
  // prompt graphs on, every other step too (the caller padded it to a few shapes: set_prompt_graphs).
  const bool decode = n == batch.n_seqs() &&
                      std::all_of(batch.q_len.begin(), batch.q_len.end(), [](int32_t q) { return q == 1; });
  // Expert layers only where the backend's moe_ffn needs no host synchronisation (Backend::moe_ffn's default
  // composition reads the routing on the host, which a graph cannot hold; the CUDA backend's does not).
  const bool has_experts = std::any_of(weights_.layers.begin(), weights_.layers.end(),
                                       [](const LayerWeights& w) { return w.is_moe(); });
  if (graphs_on_ && (decode || prompt_graphs_) && m > 0 && !observer_ &&
      (!has_experts || backend_.captures_moe_ffn()) &&
      backend_.supports_step_graphs()) {
    const StepLayout L = layout_for(batch, pow2_at_least(std::max(1, batch.max_blocks_per_seq)));
    ensure_logits(size_t(m), true);
    stage_inputs(batch, L);
    // Token feedback: the copy goes ahead of the graph, where the backend can fence the staging buffer for the
    // next step's inputs (wait_for_copies) while this step still runs.
    if (token_feedback_) copy_inputs(L);
    const GraphKey key{L.n, L.n_seqs, L.mb, L.m, host_logits, L.decode_only, L.rows_share_kv};
    const auto it = graphs_.find(key);
    ++graph_clock_;
    if (it != graphs_.end() && backend_.replay(*it->second.graph)) {
      it->second.last_use = graph_clock_;
      ++graph_stats_.replays;
    } else {
      // First step of this shape (or the graph went stale): run it op by op (this sizes every scratch
      // buffer), then record it for the next steps.
      if (it != graphs_.end()) graphs_.erase(it);
      enqueue_step(L, nullptr, host_logits);
      backend_.synchronize();
      ++graph_stats_.eager;
      if (graphs_.size() >= kMaxGraphs) {  // evict the least recently used graph
        graphs_.erase(std::min_element(graphs_.begin(), graphs_.end(), [](const auto& a, const auto& b) {
          return a.second.last_use < b.second.last_use;
        }));
      }
      backend_.begin_capture();
      try {
        enqueue_step(L, nullptr, host_logits);
        graphs_[key] = GraphEntry{.graph = backend_.end_capture(), .last_use = graph_clock_};
      } catch (...) {
        backend_.cancel_capture();
        throw;
      }
      ++graph_stats_.captures;
    }
    if (!host_logits) return nullptr;
    backend_.synchronize();
    traffic_.host_bytes += gathered_bytes;
    return static_cast<const float*>(logits_staging_.data());
  }

  ++graph_stats_.eager;
  const StepLayout L = layout_for(batch, batch.max_blocks_per_seq);
  if (m > 0) ensure_logits(size_t(m), !host_logits);  // device sampling copies host rows through the staging
  stage_inputs(batch, L);
  const Tensor out = enqueue_step(L, &batch, false);
  if (m == 0 || !host_logits) return nullptr;
  gathered_host_.resize(size_t(out.numel()));
  backend_.copy_to_host(gathered_host_.data(), out, gathered_host_.size() * 4);
  traffic_.host_bytes += gathered_bytes;
  return gathered_host_.data();
}

void LlamaModel::forward_sampled(const Batch& batch, std::span<const RowSampling> rows, SampledStep& out) {
  FERRY_CHECK(in_flight_.empty(), "forward_sampled: {} launched steps are not collected", in_flight_.size());
  FERRY_CHECK(std::none_of(rows.begin(), rows.end(), [](const RowSampling& r) { return r.masked; }),
              "forward_sampled: masked rows need launch_sampled + seal_sampled");
  launch_sampled(batch, rows);
  collect_sampled(out);
}

void LlamaModel::set_token_feedback(bool on) {
  FERRY_CHECK(!on || supports_device_sampling(), "token feedback needs device sampling (backend {}, world {})",
              backend_.name(), comm_->world());
  FERRY_CHECK(in_flight_.empty(), "set_token_feedback: {} launched steps are not collected", in_flight_.size());
  if (on == token_feedback_) return;
  drop_graphs();  // the recorded steps copy their inputs inside and resolve nothing
  token_feedback_ = on;
  last_modes_.clear();
  // Fixed size from here on: captured steps read it. Rows of a step: at most the padded sequence count.
  if (on) sample_ids_ = backend_.alloc(size_t(2 * max_step_tokens_ + 2) * 4);
}

void LlamaModel::check_step_tokens(const Batch& batch) const {
  for (const int32_t t : batch.tokens) {
    if (t >= 0 || !token_feedback_) {
      local_vocab_row(vocab_, t);  // throws for an id outside the vocabulary
      continue;
    }
    const int64_t row = -int64_t(t) - 1;
    FERRY_CHECK(row < int64_t(last_modes_.size()) && last_modes_[size_t(row)] == RowMode::Device,
                "step input {} names logit row {} of the previous step, which was not drawn on the device", t, row);
  }
}

void LlamaModel::launch_sampled(const Batch& batch, std::span<const RowSampling> rows) {
  FERRY_CHECK(supports_device_sampling(), "device sampling needs a backend that samples ({} does not) at tensor-"
              "parallel world 1 (world {})", backend_.name(), comm_->world());
  FERRY_CHECK(batch.n_tokens() > 0 && batch.n_tokens() <= max_step_tokens_, "step of {} tokens (1..{} allowed)",
              batch.n_tokens(), max_step_tokens_);
  FERRY_CHECK(rows.size() == batch.logit_rows.size(), "forward_sampled: {} row settings for {} logit rows",
              rows.size(), batch.logit_rows.size());
  FERRY_CHECK(int(in_flight_.size()) < kMaxInFlight, "launch_sampled: {} steps are in flight already",
              in_flight_.size());
  FERRY_CHECK(in_flight_.empty() || in_flight_.back().n_host == 0,
              "launch_sampled: the step in flight copies logits to the host; collect it first");
  FERRY_CHECK(!newest_unsealed(), "launch_sampled: the step in flight waits for its token masks (seal_sampled)");
  check_step_tokens(batch);
  const int64_t m = int64_t(rows.size());
  InFlightStep step;
  step.started = std::chrono::steady_clock::now();
  step.m = m;
  step.modes.resize(size_t(m));
  // Device rows are sampled as one prefix [0, n_dev) of the rows (other rows inside it: greedy, ignored).
  for (int64_t i = 0; i < m; ++i) {
    step.modes[size_t(i)] = rows[size_t(i)].mode;
    if (rows[size_t(i)].mode == RowMode::Device) step.n_dev = i + 1;
    if (rows[size_t(i)].mode == RowMode::Host) ++step.n_host;
    step.masked = step.masked || (rows[size_t(i)].mode == RowMode::Device && rows[size_t(i)].masked);
  }
  for (int64_t i = 0; i < step.n_dev; ++i) {
    const RowSampling& r = rows[size_t(i)];
    SamplingParams p;
    if (r.mode == RowMode::Device) {
      p = r.params;
    } else {
      p.temperature = 0.0f;  // a placeholder draw (argmax, one pass), never read
      p.repetition_penalty = 1.0f, p.presence_penalty = 0.0f, p.frequency_penalty = 0.0f;
    }
    step.params.push_back(p);
    step.positions.push_back(r.position);
  }
  encode_batch(batch, step_bytes_);
  try {
    comm_->broadcast(step_bytes_);  // world 1: a no-op (kept so that the step is framed like forward's)
    execute_step(batch, false);
    if (!step.masked) seal(step, {});
  } catch (const std::exception& e) {
    comm_->abort(e.what());
    throw;
  }
  last_modes_ = step.modes;
  in_flight_.push_back(std::move(step));
}

void LlamaModel::seal_sampled(std::span<const std::span<const uint64_t>> masks) {
  FERRY_CHECK(newest_unsealed(), "seal_sampled: the newest launched step is not waiting for masks");
  InFlightStep& step = in_flight_.back();
  FERRY_CHECK(masks.size() == size_t(step.m), "seal_sampled: {} masks for {} logit rows", masks.size(), step.m);
  const auto words = size_t((vocab_.full + 63) / 64);
  sample_masks_.assign(size_t(step.n_dev) * words, ~uint64_t(0));  // rows without a mask: every token allowed
  for (int64_t i = 0; i < step.n_dev; ++i) {
    const std::span<const uint64_t> mask = masks[size_t(i)];
    if (mask.empty()) continue;
    FERRY_CHECK(step.modes[size_t(i)] == RowMode::Device && mask.size() >= words,
                "seal_sampled: row {} has a mask of {} words ({} needed) or is not drawn on the device", i, mask.size(),
                words);
    std::copy_n(mask.begin(), words, sample_masks_.begin() + ptrdiff_t(size_t(i) * words));
  }
  try {
    seal(step, sample_masks_);
  } catch (const std::exception& e) {
    comm_->abort(e.what());
    throw;
  }
}

void LlamaModel::seal(InFlightStep& step, std::span<const uint64_t> masks) {
  const int64_t m = step.m;
  const int64_t V = vocab_.full;                                 // world 1: the gathered logits are (m, V) rows
  const Tensor logits = logits_.view(DType::F32, {m, V});  // (m, V) f32 device
  if (step.n_dev > 0) {
    if (sample_ids_.bytes() < size_t(m) * 4) {
      FERRY_CHECK(!token_feedback_, "launch_sampled: {} logit rows exceed the sampled-id buffer", m);
      sample_ids_ = backend_.alloc(size_t(m) * 8);
    }
    step.staging = next_staging_;
    next_staging_ = (next_staging_ + 1) % kMaxInFlight;
    DeviceBuffer& staging = sample_ids_staging_[size_t(step.staging)];
    if (staging.bytes() < size_t(m) * 4) {
      staging = DeviceBuffer();
      staging = backend_.alloc_host(size_t(m) * 8);
    }
    const Tensor ids = sample_ids_.view(DType::I32, {step.n_dev});  // (n_dev) i32 device
    const Tensor head = Tensor::make(DType::F32, {step.n_dev, V}, logits.data, logits.device);
    backend_.sample(ids, head, step.params, step.positions, masks);
    backend_.copy_to_host_async(staging.data(), ids, size_t(step.n_dev) * 4);
  }
  // Host rows: consecutive runs, each one copy into the staging buffer at the same row.
  auto* staging = static_cast<float*>(logits_staging_.data());
  for (int64_t i = 0; i < m;) {
    if (step.modes[size_t(i)] != RowMode::Host) {
      ++i;
      continue;
    }
    int64_t j = i;
    while (j < m && step.modes[size_t(j)] == RowMode::Host) ++j;
    const Tensor run = Tensor::make(DType::F32, {j - i, V}, static_cast<float*>(logits.data) + i * V, logits.device);
    backend_.copy_to_host_async(staging + i * V, run, size_t(run.nbytes()));
    traffic_.host_bytes += int64_t(run.nbytes());
    i = j;
  }
  step.mark = backend_.mark();
  step.enqueued = std::chrono::steady_clock::now();
  step.sealed = true;
}

void LlamaModel::collect_sampled(SampledStep& out) {
  FERRY_CHECK(!in_flight_.empty(), "collect_sampled: no step was launched");
  const InFlightStep step = std::move(in_flight_.front());
  in_flight_.pop_front();
  FERRY_CHECK(step.sealed, "collect_sampled: the step was never sealed (seal_sampled: its token masks)");
  const int64_t V = vocab_.full;
  try {
    // wait_s: the time this call blocks (with a step launched after this one, the host's work in between is not
    // waiting: asynchronous scheduling shows up here as a short wait).
    const auto wait_from = std::max(step.enqueued, std::chrono::steady_clock::now());
    backend_.wait_mark(step.mark);
    const auto now = std::chrono::steady_clock::now();
    step_host_time_ = {.enqueue_s = std::chrono::duration<double>(step.enqueued - step.started).count(),
                       .wait_s = std::chrono::duration<double>(now - wait_from).count()};
    comm_->step_done();
  } catch (const std::exception& e) {
    comm_->abort(e.what());
    throw;
  }
  out.tokens.assign(size_t(step.m), -1);
  if (step.n_dev > 0)
    std::memcpy(out.tokens.data(), sample_ids_staging_[size_t(step.staging)].data(), size_t(step.n_dev) * 4);
  out.host_logits.resize(size_t(step.n_host) * size_t(V));
  size_t h = 0;
  for (int64_t i = 0; i < step.m; ++i) {
    if (step.modes[size_t(i)] != RowMode::Host) continue;
    std::memcpy(out.host_logits.data() + h * size_t(V), static_cast<const float*>(logits_staging_.data()) + i * V,
                size_t(V) * 4);
    ++h;
  }
  traffic_.device_rows += std::count(step.modes.begin(), step.modes.end(), RowMode::Device);
  traffic_.host_rows += step.n_host;
}

void LlamaModel::copy_inputs(const StepLayout& L) {
  const Tensor all_inputs = Tensor::make(DType::I8, {int64_t(L.bytes)}, inputs_.data(), inputs_.device());
  backend_.copy_to_device(all_inputs, inputs_staging_.data(), L.bytes);
}

Tensor LlamaModel::enqueue_step(const StepLayout& L, const Batch* host_meta, bool async_logits) {
  const ModelConfig& c = config_;
  const int64_t n = L.n;
  const int64_t H = c.n_heads, KVH = c.n_kv_heads, D = c.head_dim;

  // Step inputs into backend memory: one copy of the packed staging bytes (with token feedback a graph step's
  // copy is enqueued by execute_step, ahead of the graph).
  if (!token_feedback_ || host_meta != nullptr) copy_inputs(L);
  auto* base = static_cast<uint8_t*>(inputs_.data());
  const auto i32 = [&](size_t off, int64_t count) {
    return Tensor::make(DType::I32, {count}, base + off, inputs_.device());
  };
  const Tensor ids = i32(L.tokens, n);
  // Placeholders -> the previous step's drawn ids, on the device ((rows) i32: sample_ids_, fixed with feedback on).
  if (token_feedback_)
    backend_.resolve_placeholders(ids, sample_ids_.view(DType::I32, {int64_t(sample_ids_.bytes() / 4)}));
  const Tensor pos = i32(L.positions, n);
  const Tensor slots = Tensor::make(DType::I64, {n}, base + L.slots, inputs_.device());
  AttentionMeta meta;
  meta.n_seqs = L.n_seqs;
  meta.block_size = kv_.block_size;
  meta.max_blocks_per_seq = L.mb;
  meta.q_start = i32(L.q_start, L.n_seqs);
  meta.q_len = i32(L.q_len, L.n_seqs);
  meta.kv_len = i32(L.kv_len, L.n_seqs);
  meta.block_tables = i32(L.tables, int64_t(L.n_seqs) * L.mb);
  meta.decode_only = L.decode_only;  // not n == n_seqs: a padded prompt step's empty dummy sequences hold no token
  meta.rows_share_kv = L.rows_share_kv;  // a verify step's one-row entries (model/batch.h): no store fused into attention
  if (host_meta) {
    FERRY_ASSERT(host_meta->max_blocks_per_seq == L.mb);
    meta.host_q_start = host_meta->q_start.data();
    meta.host_q_len = host_meta->q_len.data();
    meta.host_kv_len = host_meta->kv_len.data();
    meta.host_block_tables = host_meta->block_tables.data();
  }

  // Activation views for this step: (n, ...) f32, but for xb: the backend's matmul input dtype (bf16 where every
  // matmul of n tokens reads bf16; f32 while a debug observer reads the step).
  const Tensor x = x_.view(DType::F32, {n, c.dim});          // residual stream
  const DType xb_dtype = observer_ ? DType::F32 : backend_.matmul_input_dtype(n);
  const Tensor xb = xb_.view(xb_dtype, {n, c.dim});          // normed input of a sublayer
  const Tensor q = q_.view(DType::F32, {n, H, D});
  const Tensor k = k_.view(DType::F32, {n, KVH, D});
  const Tensor v = v_.view(DType::F32, {n, KVH, D});
  // Attention output per head: the o-projection's input, in the backend's matmul input dtype (bf16 on a GPU at
  // most sizes: no conversion pass before the wo GEMM; f32 while a debug observer reads the step).
  const Tensor attn = attn_.view(xb_dtype, {n, H, D});
  const Tensor delta = out_.view(DType::F32, {n, c.dim});    // a sublayer's output (o-proj or ffn down)
  const Tensor gate = gate_.view(DType::F32, {n, c.hidden_dim});
  const Tensor up = up_.data() ? up_.view(DType::F32, {n, c.hidden_dim}) : Tensor{};
  // Fused projections' outputs: q|k|v heads of each token, gate|up units of each token.
  const Tensor qkv = qkv_.data() ? qkv_.view(DType::F32, {n, H + 2 * KVH, D}) : Tensor{};
  const Tensor gate_up = gate_up_.data() ? gate_up_.view(DType::F32, {n, 2 * c.hidden_dim}) : Tensor{};
  const auto flat = [](const Tensor& t) { return Tensor::make(t.dtype, {t.shape[0], t.shape[1] * t.shape[2]}, t.data, t.device); };
  const auto per_head = [](const Tensor& t) { return Tensor::make(t.dtype, {t.shape[0] * t.shape[1], t.shape[2]}, t.data, t.device); };
  const float scale = c.attention_scale();

  backend_.embedding(x, weights_.tok_embd, ids);
  dense_comm_->all_reduce_sum(x);  // vocab-parallel: each rank filled its own ids' rows, zeros elsewhere
  if (c.embedding_scale > 0) backend_.scale(x, c.embedding_scale, c.dim);  // Gemma: sqrt(dim)
  observe("tok_embd", -1, x);
  AttentionMeta layer_meta = meta;  // the step's layout with this layer's window and soft-cap
  layer_meta.softcap = c.attn_softcap;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = weights_.layers[size_t(l)];
    layer_meta.window = c.window(l);
    // Gemma 3's local (sliding-window) layers rotate with their own base.
    const Tensor& inv_freq = layer_meta.window > 0 && !inv_freq_local_.empty() ? inv_freq_local_ : inv_freq_;
    const Tensor k_cache = k_cache_[size_t(l)].view(backend_.kv_dtype(), {kv_.n_blocks, kv_.block_size, KVH, D});
    const Tensor v_cache = v_cache_[size_t(l)].view(backend_.kv_dtype(), {kv_.n_blocks, kv_.block_size, KVH, D});

    // x is the complete residual stream here. Layers after the first: the previous layer's end computed this norm
    // into xb, or (next_w below) left it to this layer's q|k|v projection, as the backend chose. With a debug
    // observer every intermediate is written (it reads attn_norm).
    if (l == 0 && (L.wqkv.empty() || observer_ != nullptr)) backend_.rms_norm(xb, x, L.attn_norm, c.rms_eps);
    observe("attn_norm", l, xb);
    if (!L.wqkv.empty()) {
      // Fused: one matmul for q|k|v, then one op for q/k norm, RoPE, q out and the K/V cache writes. With a
      // debug observer the op also leaves f32 copies of k and v, so q, k, v are observable as in the unfused path.
      // With the attention in one op: a backend may fuse the two at a decode step (q is then not written).
      backend_.rms_norm_matmul(flat(qkv), xb, x, L.attn_norm, c.rms_eps, L.wqkv, L.bqkv);
      backend_.qkv_attention({.qkv = qkv, .positions = pos, .slots = slots, .inv_freq = inv_freq,
                              .q_norm = c.qk_norm ? L.q_norm : Tensor{}, .k_norm = c.qk_norm ? L.k_norm : Tensor{},
                              .eps = c.rms_eps, .ordering = c.rope_ordering, .q = q, .k_cache = k_cache,
                              .v_cache = v_cache, .k_out = observer_ ? k : Tensor{}, .v_out = observer_ ? v : Tensor{}},
                             attn, layer_meta, scale);
    } else {
      backend_.matmul(flat(q), xb, L.wq, L.bq);
      backend_.matmul(flat(k), xb, L.wk, L.bk);
      backend_.matmul(flat(v), xb, L.wv, L.bv);
      if (c.qk_norm) {
        backend_.rms_norm(per_head(q), per_head(q), L.q_norm, c.rms_eps);
        backend_.rms_norm(per_head(k), per_head(k), L.k_norm, c.rms_eps);
      }
      backend_.rope(q, pos, inv_freq, c.rope_ordering);
      backend_.rope(k, pos, inv_freq, c.rope_ordering);
      if (const float f = c.rope_attention_factor(); f != 1.0f) {  // longrope's / yarn's factor on the rotated dims only
        backend_.scale(q, f, c.rope_dims);
        backend_.scale(k, f, c.rope_dims);
      }
      backend_.store_kv(k_cache, v_cache, k, v, slots);
      backend_.attention(attn, q, k_cache, v_cache, layer_meta, scale);
    }
    observe("q", l, q);
    observe("k", l, k);
    observe("v", l, v);
    observe("attn", l, attn);
    if (c.post_norms) {  // Gemma's layer tail: each sublayer's output normed before the residual add
      gemma_layer_tail(l, L, l + 1 < c.n_layers ? &weights_.layers[size_t(l) + 1] : nullptr, flat(attn), x, xb, delta,
                       gate, up);
      continue;
    }
    // act: (n, hidden) silu(gate) * up, the down projection's input: in the backend's matmul input dtype where
    // the fused op writes it (bf16 on a GPU: no conversion pass before the down GEMM), else f32 in place of gate.
    const Tensor act = L.w_gate_up.empty() ? gate : gate_.view(xb_dtype, {n, c.hidden_dim});
    // The next layer's attention norm and the weight that projects it (a backend may fold the norm into that
    // projection); none with a debug observer, which reads each norm.
    const LayerWeights* next = l + 1 < c.n_layers ? &weights_.layers[size_t(l) + 1] : nullptr;
    const Tensor next_w = next != nullptr && observer_ == nullptr ? next->wqkv : Tensor{};
    if (next != nullptr && !L.w_gate_up.empty() && observer_ == nullptr) {
      // The rest of the layer as one op, which a backend may run in fewer launches (CUDA at a one-token step); the
      // path below is the same ops one by one, so that a debug observer can read each intermediate.
      backend_.attn_out_ffn({.out = xb, .residual = x, .delta = delta, .attn = flat(attn), .wo = L.wo,
                             .ffn_norm = L.ffn_norm, .ffn_in = xb, .w_gate_up = L.w_gate_up, .gate_up = gate_up,
                             .act = act, .w_down = L.w_down, .next_norm = next->attn_norm, .next_w = next_w,
                             .eps = c.rms_eps, .group = dense_comm_});
      continue;
    }
    // Row-parallel: partial sums over this rank's heads, summed over the ranks; then x += delta and the ffn norm
    // (f32 for an expert layer: Backend::moe_ffn reads f32 activations).
    const Tensor ffn_in = L.is_moe() ? moe_in_.view(DType::F32, {n, c.dim}) : xb;
    backend_.sublayer_end({.out = ffn_in, .residual = x, .delta = delta, .x = flat(attn), .w = L.wo,
                           .norm = L.ffn_norm, .eps = c.rms_eps, .group = dense_comm_});
    observe("attn_out", l, delta);
    observe("ffn_norm", l, ffn_in);
    if (L.is_moe()) {  // the experts' FFN as one op, then x += delta and the next norm (model/moe_ffn.h)
      run_moe_ffn(backend_, *comm_, c, L, ffn_in, xb, x, delta, next != nullptr ? next->attn_norm : Tensor{});
      observe("ffn_out", l, delta);
      continue;
    }
    if (!L.w_gate_up.empty()) {
      backend_.matmul_swiglu(act, gate_up, xb, L.w_gate_up);  // SwiGLU in the matmul where the backend can
    } else {
      backend_.matmul(gate, xb, L.w_gate, Tensor{});
      backend_.matmul(up, xb, L.w_up, Tensor{});
      backend_.swiglu(gate, gate, up);
    }
    // Row-parallel: partial sums over this rank's hidden units; then x += delta and the next layer's attention
    // norm (the last layer's sum goes to the output norm below, on the rows that need logits).
    if (next != nullptr) {
      backend_.sublayer_end({.out = xb, .residual = x, .delta = delta, .x = act, .w = L.w_down,
                             .norm = next->attn_norm, .next_w = next_w, .eps = c.rms_eps, .group = dense_comm_});
    } else {
      backend_.matmul(delta, act, L.w_down, Tensor{});
      dense_comm_->all_reduce_sum(delta);
    }
    observe("ffn_out", l, delta);
  }

  // Final residual add + norm, only on the rows whose logits are wanted.
  const int64_t m = L.m;
  if (m == 0) return Tensor{};
  const Tensor rows = i32(L.rows, m);
  const Tensor hx = logits_hidden_.view(DType::F32, {m, c.dim});
  const Tensor hd = xb_.view(DType::F32, {m, c.dim});
  backend_.gather_rows(hx, x, rows);
  backend_.gather_rows(hd, delta, rows);
  const Tensor hn = attn_.view(DType::F32, {m, c.dim});
  backend_.add_rms_norm(hn, hx, hd, weights_.output_norm, c.rms_eps);
  observe("output_norm", -1, hn);
  // Vocab-parallel logits: this rank's (m, vocab rows) part of gathered (world, m, vocab rows), then all-gather.
  const int64_t world = dense_comm_->world();
  const Tensor gathered = logits_.view(DType::F32, {world, m, c.vocab_size});
  const Tensor out = Tensor::make(DType::F32, {m, c.vocab_size},
                                  static_cast<float*>(gathered.data) + dense_comm_->rank() * m * c.vocab_size,
                                  gathered.device);
  backend_.matmul(out, hn, weights_.output, Tensor{});
  if (c.final_softcap > 0) backend_.softcap(out, c.final_softcap);  // Gemma 2
  dense_comm_->all_gather_inplace(gathered);
  if (async_logits) backend_.copy_to_host_async(logits_staging_.data(), gathered, size_t(gathered.nbytes()));
  return gathered;
}

void LlamaModel::gemma_layer_tail(int layer, const LayerWeights& L, const LayerWeights* next, const Tensor& attn, const Tensor& x,
                                  const Tensor& xb, const Tensor& delta, const Tensor& gate, const Tensor& up) {
  const ModelConfig& c = config_;
  // x += post_attn_norm(attn · woᵀ) (row-parallel: summed over the ranks first); xb = ffn_norm(x)
  backend_.matmul(delta, attn, L.wo, Tensor{});
  dense_comm_->all_reduce_sum(delta);
  backend_.rms_norm(delta, delta, L.post_attn_norm, c.rms_eps);
  observe("attn_out", layer, delta);
  backend_.add_rms_norm(xb, x, delta, L.ffn_norm, c.rms_eps);
  observe("ffn_norm", layer, xb);
  // delta = post_ffn_norm(down(act(gate(xb)) * up(xb)))
  backend_.matmul(gate, xb, L.w_gate, Tensor{});
  backend_.matmul(up, xb, L.w_up, Tensor{});
  if (c.ffn_activation == FfnActivation::GeluTanh) {
    backend_.geglu_tanh(gate, gate, up);
  } else {
    backend_.swiglu(gate, gate, up);
  }
  backend_.matmul(delta, gate, L.w_down, Tensor{});
  dense_comm_->all_reduce_sum(delta);
  backend_.rms_norm(delta, delta, L.post_ffn_norm, c.rms_eps);
  observe("ffn_out", layer, delta);
  // x += delta and the next layer's attention norm into xb; the last layer's delta goes to the output norm.
  if (next != nullptr) backend_.add_rms_norm(xb, x, delta, next->attn_norm, c.rms_eps);
}

}  // namespace ferry
