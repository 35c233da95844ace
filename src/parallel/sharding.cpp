#include "parallel/sharding.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "parallel/random_weights.h"

namespace ferry {
namespace {

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Which role a tensor name plays, in GGUF or Hugging Face naming.
enum class Role { Q, K, V, Gate, Up, O, Down, Vocab, Other };

Role role_of(const std::string& name) {
  const auto any = [&](std::initializer_list<const char*> suffixes) {
    return std::any_of(suffixes.begin(), suffixes.end(), [&](const char* s) { return ends_with(name, s); });
  };
  if (any({"attn_q.weight", "attn_q.bias", "q_proj.weight", "q_proj.bias"})) return Role::Q;
  if (any({"attn_k.weight", "attn_k.bias", "k_proj.weight", "k_proj.bias"})) return Role::K;
  if (any({"attn_v.weight", "attn_v.bias", "v_proj.weight", "v_proj.bias"})) return Role::V;
  if (any({"ffn_gate.weight", "gate_proj.weight"})) return Role::Gate;
  if (any({"ffn_up.weight", "up_proj.weight"})) return Role::Up;
  if (any({"attn_output.weight", "o_proj.weight"})) return Role::O;
  if (any({"ffn_down.weight", "down_proj.weight"})) return Role::Down;
  if (name == "token_embd.weight" || name == "output.weight" || name == "model.embed_tokens.weight" ||
      name == "lm_head.weight")
    return Role::Vocab;
  return Role::Other;
}

}  // namespace

ShardPlan make_shard_plan(const ModelConfig& c, int rank, int world) {
  FERRY_CHECK(world >= 1 && world <= 1024, "--tp {} out of range (1..1024)", world);
  FERRY_CHECK(rank >= 0 && rank < world, "tensor-parallel rank {} outside a world of {}", rank, world);
  FERRY_CHECK(world == 1 || c.n_experts == 0,
              "--tp {}: mixture-of-experts models ({} experts) run at --tp 1 only for now (splitting the experts "
              "across ranks is not implemented)", world, c.n_experts);
  // Gemma's extra norms and Phi-3's fused q|k|v and gate|up tensors have no shard rows in the plan yet.
  FERRY_CHECK(world == 1 || (c.arch != Arch::Gemma2 && c.arch != Arch::Gemma3 && c.arch != Arch::Phi3),
              "--tp {}: {} models run at --tp 1 only for now", world, arch_name(c.arch));
  FERRY_CHECK(c.n_heads % world == 0, "--tp {}: the model's {} attention heads do not divide into {} equal parts", world,
              c.n_heads, world);
  FERRY_CHECK(c.n_kv_heads % world == 0,
              "--tp {}: the model's {} key/value heads do not divide into {} equal parts (use a --tp that divides {})",
              world, c.n_kv_heads, world, c.n_kv_heads);
  FERRY_CHECK(c.hidden_dim % world == 0, "--tp {}: the feed-forward size {} does not divide into {} equal parts", world,
              c.hidden_dim, world);
  ShardPlan p;
  p.rank = rank;
  p.world = world;
  p.full = c;
  p.local = c;
  p.local.n_heads = c.n_heads / world;
  p.local.n_kv_heads = c.n_kv_heads / world;
  p.local.hidden_dim = c.hidden_dim / world;
  p.vocab.full = c.vocab_size;
  p.vocab.part = (c.vocab_size + world - 1) / world;
  p.vocab.begin = p.vocab.part * rank;
  p.vocab.local_rows = world == 1 ? c.vocab_size : p.vocab.part + 1;
  p.local.vocab_size = p.vocab.local_rows;
  return p;
}

ShardPlan::Slice ShardPlan::slice_of(const std::string& name) const {
  const int64_t D = full.head_dim;
  switch (role_of(name)) {
    case Role::Q: return {ShardKind::Rows, int64_t(rank) * local.n_heads * D, int64_t(local.n_heads) * D};
    case Role::K:
    case Role::V: return {ShardKind::Rows, int64_t(rank) * local.n_kv_heads * D, int64_t(local.n_kv_heads) * D};
    case Role::Gate:
    case Role::Up: return {ShardKind::Rows, int64_t(rank) * local.hidden_dim, local.hidden_dim};
    case Role::O: return {ShardKind::Cols, int64_t(rank) * local.n_heads * D, int64_t(local.n_heads) * D};
    case Role::Down: return {ShardKind::Cols, int64_t(rank) * local.hidden_dim, local.hidden_dim};
    case Role::Vocab: return {ShardKind::Vocab, vocab.begin, vocab.part};
    case Role::Other: break;
  }
  return {};
}

const Tensor* ShardedWeightSource::find(const std::string& name) const {
  const Tensor* t = base_.find(name);
  if (t == nullptr || plan_.world == 1) return t;
  const ShardPlan::Slice s = plan_.slice_of(name);
  if (s.kind == ShardKind::Replicated) return t;
  if (auto it = entries_.find(name); it != entries_.end()) return &it->second.view;

  const DType dt = t->dtype;
  const int block = dtype_info(dt).block_elems;
  Entry e;
  if (s.kind == ShardKind::Rows) {
    // Rows [begin, begin + count) of a (rows, cols) matrix or a (rows) bias: contiguous, a view.
    FERRY_CHECK(t->shape[0] >= s.begin + s.count, "{}: tensor '{}' has {} rows, fewer than the sharding plan needs ({})",
                describe(), name, t->shape[0], s.begin + s.count);
    if (t->n_dims == 1) {
      FERRY_CHECK(block == 1, "{}: tensor '{}' is a quantized vector", describe(), name);
      e.view = Tensor::make(dt, {s.count}, static_cast<uint8_t*>(t->data) + row_bytes(dt, s.begin), t->device);
    } else {
      FERRY_CHECK(t->n_dims == 2, "{}: tensor '{}' is not a matrix", describe(), name);
      e.view = t->rows_view(s.begin, s.count);
    }
  } else if (s.kind == ShardKind::Cols) {
    // Columns [begin, begin + count) of every row: copied. Quantized rows split only at block boundaries.
    FERRY_CHECK(t->n_dims == 2 && t->shape[1] >= s.begin + s.count, "{}: tensor '{}' of shape {} cannot be split by columns at {}+{}",
                describe(), name, t->shape_str(), s.begin, s.count);
    FERRY_CHECK(s.begin % block == 0 && s.count % block == 0,
                "{}: tensor '{}' ({}, blocks of {} values) cannot be split {} ways: each rank's {} columns do not fall on "
                "block boundaries",
                describe(), name, dtype_name(dt), block, plan_.world, s.count);
    const int64_t rows = t->shape[0];
    const size_t off = row_bytes(dt, s.begin), rb = row_bytes(dt, s.count), src_rb = t->row_bytes();
    e.n_bytes = size_t(rows) * rb;
    e.bytes = std::shared_ptr<uint8_t[]>(new uint8_t[std::max<size_t>(e.n_bytes, 1)]);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(e.bytes.get() + size_t(r) * rb, static_cast<const uint8_t*>(t->data) + size_t(r) * src_rb + off, rb);
    e.view = Tensor::make(dt, {rows, s.count}, e.bytes.get(), Device::Cpu);
  } else {
    // Vocab rows [begin, begin + part) (clipped to the vocabulary), then zero rows up to local_rows.
    FERRY_CHECK(t->n_dims == 2 && t->shape[0] == plan_.vocab.full, "{}: tensor '{}' has shape {}, expected ({}, ...)",
                describe(), name, t->shape_str(), plan_.vocab.full);
    const int64_t held = std::max<int64_t>(0, std::min<int64_t>(plan_.vocab.part, plan_.vocab.full - plan_.vocab.begin));
    const size_t rb = t->row_bytes();
    e.n_bytes = size_t(plan_.vocab.local_rows) * rb;
    e.bytes = std::shared_ptr<uint8_t[]>(new uint8_t[std::max<size_t>(e.n_bytes, 1)]());  // zeros: valid in every type
    if (held > 0) std::memcpy(e.bytes.get(), t->row<uint8_t>(plan_.vocab.begin), size_t(held) * rb);
    e.view = Tensor::make(dt, {plan_.vocab.local_rows, t->shape[1]}, e.bytes.get(), Device::Cpu);
  }
  return &entries_.emplace(name, std::move(e)).first->second.view;
}

void ShardedWeightSource::adopt_copies(ModelWeights& w) {
  std::vector<const Tensor*> used = {&w.tok_embd, &w.output};
  for (const LayerWeights& L : w.layers) {
    for (const Tensor* t : {&L.wq, &L.wk, &L.wv, &L.bq, &L.bk, &L.bv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) used.push_back(t);
  }
  for (auto& [name, e] : entries_) {
    if (!e.bytes) continue;
    const uint8_t* lo = e.bytes.get();
    const bool aliased = std::any_of(used.begin(), used.end(), [&](const Tensor* t) {
      const auto* p = static_cast<const uint8_t*>(t->data);
      return p >= lo && p < lo + e.n_bytes;
    });
    if (aliased) {
      std::shared_ptr<uint8_t[]> keep = e.bytes;
      w.storage.emplace_back(keep.get(), e.n_bytes, Device::Cpu, [keep](void*) mutable { keep.reset(); });
      continue;
    }
    // `named` keeps host views for reports: those into a copy that is freed now lose their data pointer.
    for (auto& [n, t] : w.named) {
      const auto* p = static_cast<const uint8_t*>(t.data);
      if (p >= lo && p < lo + e.n_bytes) t.data = nullptr;
    }
  }
  entries_.clear();
}

ModelWeights load_sharded_weights(const ShardPlan& plan, const WeightSource& source, bool gguf_names, Backend& backend) {
  // A file-less random model generates this rank's slices directly (parallel/random_weights.h).
  if (const auto* random = dynamic_cast<const RandomWeightSource*>(&source))
    return load_random_shard(plan, *random, gguf_names, backend);
  ShardedWeightSource sharded(source, plan);
  ModelWeights w = load_weights(plan.local, sharded, gguf_names, backend);
  sharded.adopt_copies(w);
  return w;
}

}  // namespace ferry
