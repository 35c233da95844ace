#include "parallel/sharding.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "model/moe_names.h"
#include "parallel/random_weights.h"

namespace ferry {
namespace {

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Which role a tensor name plays, in GGUF or Hugging Face naming (a Hugging Face expert's own tensor is found by
// parse_hf_expert_name first: its gate_proj / up_proj / down_proj are not the dense FFN's).
enum class Role { Q, K, V, Gate, Up, O, Down, Vocab, StackedGateUp, StackedDown, Other };

Role role_of(const std::string& name) {
  const auto any = [&](std::initializer_list<const char*> suffixes) {
    return std::any_of(suffixes.begin(), suffixes.end(), [&](const char* s) { return ends_with(name, s); });
  };
  if (any({"attn_q.weight", "attn_q.bias", "q_proj.weight", "q_proj.bias"})) return Role::Q;
  if (any({"attn_k.weight", "attn_k.bias", "k_proj.weight", "k_proj.bias"})) return Role::K;
  if (any({"attn_v.weight", "attn_v.bias", "v_proj.weight", "v_proj.bias"})) return Role::V;
  if (any({"ffn_gate_exps.weight", "ffn_up_exps.weight"})) return Role::StackedGateUp;
  if (any({"ffn_down_exps.weight"})) return Role::StackedDown;
  if (any({"ffn_gate.weight", "gate_proj.weight"})) return Role::Gate;
  if (any({"ffn_up.weight", "up_proj.weight"})) return Role::Up;
  if (any({"attn_output.weight", "o_proj.weight"})) return Role::O;
  if (any({"ffn_down.weight", "down_proj.weight"})) return Role::Down;
  if (name == "token_embd.weight" || name == "output.weight" || name == "model.embed_tokens.weight" ||
      name == "lm_head.weight")
    return Role::Vocab;
  return Role::Other;
}

// The (rows, cols) matrices a tensor holds: one, or E of a stacked (E, rows, cols) expert tensor.
struct Matrices {
  int64_t count = 1, rows = 0, cols = 0;
};
Matrices matrices_of(const Tensor& t) {
  if (t.n_dims == 3) return {t.shape[0], t.shape[1], t.shape[2]};
  return {1, t.shape[0], t.shape[1]};
}

}  // namespace

ShardPlan make_shard_plan(const ModelConfig& c, int rank, int world) { return make_shard_plan(c, rank, {.tp = world}); }

ShardPlan make_shard_plan(const ModelConfig& c, int rank, ParallelLayout layout) {
  const int world = layout.world();
  FERRY_CHECK(layout.tp >= 1 && layout.tp <= 1024, "--tp {} out of range (1..1024)", layout.tp);
  FERRY_CHECK(layout.ep >= 1 && layout.ep <= 1024, "--ep {} out of range (1..1024)", layout.ep);
  FERRY_CHECK(layout.tp == 1 || layout.ep == 1,
              "--tp {} with --ep {}: use one of them (tensor and expert parallelism do not combine yet)", layout.tp,
              layout.ep);
  FERRY_CHECK(rank >= 0 && rank < world, "parallel rank {} outside a world of {}", rank, world);
  ShardPlan p;
  p.rank = rank;
  p.world = world;
  p.layout = layout;
  p.full = c;
  p.local = c;
  if (layout.ep > 1) {
    // Experts placed on ranks, contiguous ranges; everything else whole on every rank.
    FERRY_CHECK(c.n_experts > 0,
                "--ep {}: the model has no experts (expert parallelism places experts on ranks; use --tp to split a "
                "dense model)", layout.ep);
    FERRY_CHECK(c.n_experts % layout.ep == 0,
                "--ep {}: the model's {} experts do not divide into {} equal parts (use an --ep that divides {})",
                layout.ep, c.n_experts, layout.ep, c.n_experts);
    p.local.n_local_experts = c.n_experts / layout.ep;
    p.local.expert_begin = rank * p.local.n_local_experts;
    p.vocab = VocabShard::whole(c.vocab_size);
    return p;
  }
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
  FERRY_CHECK(c.n_experts == 0 || c.expert_hidden_dim % world == 0,
              "--tp {}: an expert's feed-forward size {} does not divide into {} equal parts (use a --tp that divides "
              "{}, or --ep)", world, c.expert_hidden_dim, world, c.expert_hidden_dim);
  p.local.n_heads = c.n_heads / world;
  p.local.n_kv_heads = c.n_kv_heads / world;
  p.local.hidden_dim = c.hidden_dim / world;
  p.local.expert_hidden_dim = c.expert_hidden_dim / world;
  p.vocab.full = c.vocab_size;
  p.vocab.part = (c.vocab_size + world - 1) / world;
  p.vocab.begin = p.vocab.part * rank;
  p.vocab.local_rows = world == 1 ? c.vocab_size : p.vocab.part + 1;
  p.local.vocab_size = p.vocab.local_rows;
  return p;
}

ParallelContext make_parallel_context(const ShardPlan& plan, Communicator* comm) {
  return ParallelContext{.comm = comm, .vocab = plan.vocab, .dense_replicated = plan.layout.ep > 1};
}

ShardPlan::Slice ShardPlan::slice_of(const std::string& name) const {
  if (world == 1) return {};
  const int64_t D = full.head_dim;
  const int64_t He = local.expert_hidden_dim;  // an expert's hidden units on this rank
  if (const std::optional<HfExpertTensor> hf = parse_hf_expert_name(name)) {
    // One expert's own (H, dim) gate / up or (dim, H) down; under --ep the loader asks only for this rank's experts.
    if (layout.tp == 1) return {};
    if (hf->proj == ExpertProj::Down) return {ShardKind::Cols, int64_t(rank) * He, He};
    return {ShardKind::Rows, int64_t(rank) * He, He};
  }
  const Role role = role_of(name);
  if (layout.tp == 1) {  // --ep: the stacked experts by expert, everything else whole
    if (role == Role::StackedGateUp || role == Role::StackedDown)
      return {ShardKind::Experts, local.expert_begin, local.n_local_experts};
    return {};
  }
  switch (role) {
    case Role::Q: return {ShardKind::Rows, int64_t(rank) * local.n_heads * D, int64_t(local.n_heads) * D};
    case Role::K:
    case Role::V: return {ShardKind::Rows, int64_t(rank) * local.n_kv_heads * D, int64_t(local.n_kv_heads) * D};
    case Role::Gate:
    case Role::Up: return {ShardKind::Rows, int64_t(rank) * local.hidden_dim, local.hidden_dim};
    case Role::O: return {ShardKind::Cols, int64_t(rank) * local.n_heads * D, int64_t(local.n_heads) * D};
    case Role::Down: return {ShardKind::Cols, int64_t(rank) * local.hidden_dim, local.hidden_dim};
    case Role::StackedGateUp: return {ShardKind::Rows, int64_t(rank) * He, He};
    case Role::StackedDown: return {ShardKind::Cols, int64_t(rank) * He, He};
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
  // A new host buffer of `bytes` for the entry (a copy).
  const auto own = [&](size_t bytes) {
    e.n_bytes = bytes;
    e.bytes = std::shared_ptr<uint8_t[]>(new uint8_t[std::max<size_t>(e.n_bytes, 1)]);
    return e.bytes.get();
  };
  const auto* src = static_cast<const uint8_t*>(t->data);
  if (s.kind == ShardKind::Experts) {
    // Experts [begin, begin + count) of a stacked (E, rows, cols): contiguous, a view.
    FERRY_CHECK(t->n_dims == 3 && t->shape[0] >= s.begin + s.count,
                "{}: tensor '{}' of shape {} does not hold experts {}..{}", describe(), name, t->shape_str(), s.begin,
                s.begin + s.count - 1);
    const size_t per_expert = size_t(t->shape[1]) * row_bytes(dt, t->shape[2]);
    e.view = Tensor::make(dt, {s.count, t->shape[1], t->shape[2]},
                          const_cast<uint8_t*>(src) + size_t(s.begin) * per_expert, t->device);
  } else if (s.kind == ShardKind::Rows && t->n_dims == 3) {
    // Rows [begin, begin + count) of each expert's (rows, cols) in a stacked (E, rows, cols): copied.
    const Matrices m = matrices_of(*t);
    FERRY_CHECK(m.rows >= s.begin + s.count, "{}: tensor '{}' has {} rows per expert, fewer than the sharding plan "
                "needs ({})", describe(), name, m.rows, s.begin + s.count);
    const size_t rb = row_bytes(dt, m.cols);
    uint8_t* dst = own(size_t(m.count) * size_t(s.count) * rb);
    for (int64_t x = 0; x < m.count; ++x)
      std::memcpy(dst + size_t(x) * size_t(s.count) * rb, src + (size_t(x) * size_t(m.rows) + size_t(s.begin)) * rb,
                  size_t(s.count) * rb);
    e.view = Tensor::make(dt, {m.count, s.count, m.cols}, dst, Device::Cpu);
  } else if (s.kind == ShardKind::Rows) {
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
    // Columns [begin, begin + count) of every row (of every expert's matrix): copied. Quantized rows split only at
    // block boundaries (a K-quant's 256 values: Qwen3-MoE's 768 expert units split 3 ways, not 2 or 4).
    FERRY_CHECK((t->n_dims == 2 || t->n_dims == 3) && t->shape[t->n_dims - 1] >= s.begin + s.count,
                "{}: tensor '{}' of shape {} cannot be split by columns at {}+{}", describe(), name, t->shape_str(),
                s.begin, s.count);
    const Matrices m = matrices_of(*t);
    FERRY_CHECK(s.begin % block == 0 && s.count % block == 0,
                "{}: tensor '{}' ({}, blocks of {} values) cannot be split {} ways: each rank's {} of its {} columns do "
                "not fall on block boundaries",
                describe(), name, dtype_name(dt), block, plan_.world, s.count, m.cols);
    const int64_t rows = m.count * m.rows;
    const size_t off = row_bytes(dt, s.begin), rb = row_bytes(dt, s.count), src_rb = row_bytes(dt, m.cols);
    uint8_t* dst = own(size_t(rows) * rb);
    for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + size_t(r) * rb, src + size_t(r) * src_rb + off, rb);
    e.view = t->n_dims == 3 ? Tensor::make(dt, {m.count, m.rows, s.count}, dst, Device::Cpu)
                            : Tensor::make(dt, {rows, s.count}, dst, Device::Cpu);
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
    for (const std::vector<Tensor>* exps : {&L.ffn_gate_exps, &L.ffn_up_exps, &L.ffn_down_exps})
      for (const Tensor& t : *exps) used.push_back(&t);
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
