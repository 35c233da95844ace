#include "model/weights.h"

#include "core/check.h"
#include "formats/quant.h"
#include "model/fuse_weights.h"
#include "model/moe_names.h"

namespace ferry {
namespace {

struct Loader {
  const ModelConfig& config;
  const WeightSource& source;
  Backend& backend;
  ModelWeights& out;

  const Tensor& require(const std::string& name, std::initializer_list<int64_t> shape) const {
    const Tensor* t = source.find(name);
    FERRY_CHECK(t != nullptr, "{}: missing tensor '{}'", source.describe(), name);
    bool ok = t->n_dims == int(shape.size());
    int i = 0;
    for (int64_t d : shape) ok = ok && t->shape[i++] == d;
    if (!ok) {
      std::string want = "(";
      for (int64_t d : shape) want += (want.size() > 1 ? ", " : "") + std::to_string(d);
      fail("{}: tensor '{}' has shape {}, expected {})", source.describe(), name, t->shape_str(), want);
    }
    return *t;
  }

  // The host tensor of a matmul or embedding weight, checked (shape, a type ferry multiplies).
  const Tensor& host_matrix(const std::string& name, int64_t rows, int64_t cols) const {
    const Tensor& t = require(name, {rows, cols});
    FERRY_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16 || is_quantized(t.dtype),
                "{}: tensor '{}' has type {}, which ferry cannot multiply", source.describe(), name, dtype_name(t.dtype));
    FERRY_CHECK(t.dtype != DType::Q8_1 && t.dtype != DType::Q8_K, "{}: tensor '{}' has type {}, which is not a weight format",
                source.describe(), name, dtype_name(t.dtype));
    return t;
  }

  // A matmul or embedding weight: kept in its stored type.
  Tensor matrix(const std::string& name, int64_t rows, int64_t cols) {
    const Tensor& t = host_matrix(name, rows, cols);
    Tensor prepared = backend.prepare_weight(t, out.storage);
    out.named.emplace_back(name, t);
    return prepared;
  }

  // Matmul weights stacked by rows into one (model/fuse_weights.h): one type, or row ranges of different types where
  // the backend stacks them (prepare_stacked_rows); else an empty tensor (nothing prepared). `named` lists the
  // file's tensors either way.
  Tensor fused_matrix(std::initializer_list<std::pair<std::string, int64_t>> parts, int64_t cols) {
    std::vector<const Tensor*> hosts;
    for (const auto& [name, rows] : parts) hosts.push_back(&host_matrix(name, rows, cols));
    Tensor prepared;
    if (can_fuse_rows(hosts)) {
      prepared = prepare_fused_rows(backend, hosts, out.storage);
    } else if (can_stack_rows(hosts)) {
      prepared = prepare_stacked_rows(backend, hosts, out.storage);
    }
    if (prepared.empty()) return Tensor{};
    size_t i = 0;
    for (const auto& part : parts) out.named.emplace_back(part.first, *hosts[i++]);
    return prepared;
  }

  // A mixture-of-experts projection: the config's local experts (all E, or expert parallelism's
  // [expert_begin, expert_begin + El)), matrices of (rows, cols), each prepared on its own. GGUF: slices of the
  // stacked (El, rows, cols) tensor `stacked` (a shard source gives this rank's experts); Hugging Face: the tensors
  // per_expert(e), e the global index.
  std::vector<Tensor> experts(const ExpertNames& names, ExpertProj proj, int64_t rows, int64_t cols) {
    const int E = config.local_experts(), e0 = config.expert_begin;
    std::vector<Tensor> out_experts;
    if (names.gguf) {
      const std::string name = names.stacked(proj);
      const Tensor& t = require(name, {E, rows, cols});
      FERRY_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16 ||
                      (is_quantized(t.dtype) && t.dtype != DType::Q8_1 && t.dtype != DType::Q8_K),
                  "{}: tensor '{}' has type {}, which ferry cannot multiply", source.describe(), name, dtype_name(t.dtype));
      out.named.emplace_back(name, t);
      for (int e = 0; e < E; ++e) {
        const Tensor slice = Tensor::make(t.dtype, {rows, cols}, static_cast<char*>(t.data) + size_t(e) * size_t(rows) *
                                                                                                 row_bytes(t.dtype, cols));
        out_experts.push_back(backend.prepare_weight(slice, out.storage));
      }
    } else {
      for (int e = e0; e < e0 + E; ++e) out_experts.push_back(matrix(names.per_expert(e, proj), rows, cols));
    }
    return out_experts;
  }

  // A vector (norm weight, bias) as host f32; listed in `named`.
  std::vector<float> host_vector(const std::string& name, int64_t n) {
    const Tensor& t = require(name, {n});
    FERRY_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16,
                "{}: tensor '{}' has type {}; norms and biases must be f32, f16 or bf16", source.describe(), name,
                dtype_name(t.dtype));
    std::vector<float> host(static_cast<size_t>(n));
    dequantize_row(t.dtype, t.data, host.data(), n);
    out.named.emplace_back(name, t);
    return host;
  }
  std::vector<float> optional_host_vector(const std::string& name, int64_t n) {
    return source.find(name) ? host_vector(name, n) : std::vector<float>{};
  }
  // f32 values in backend memory: (len(host)) f32.
  Tensor upload(const std::vector<float>& host) {
    const int64_t n = int64_t(host.size());
    DeviceBuffer buf = backend.alloc(size_t(n) * 4);
    Tensor dev = buf.view(DType::F32, {n});
    backend.copy_to_device(dev, host.data(), host.size() * 4);
    out.storage.push_back(std::move(buf));
    return dev;
  }
  // A vector (norm weight, bias): converted to f32 in backend memory.
  Tensor vector(const std::string& name, int64_t n) { return upload(host_vector(name, n)); }
  // An RMSNorm weight: as vector, plus the config's norm_weight_offset (Hugging Face Gemma's 1 + w).
  Tensor norm(const std::string& name, int64_t n) {
    std::vector<float> host = host_vector(name, n);
    for (float& v : host) v += config.norm_weight_offset;
    return upload(host);
  }
  // A matmul weight stored with several projections stacked by rows (Phi-3's qkv_proj, gate_up_proj): (sum of
  // rows, cols). keep_fused: the whole tensor prepared as one; else each part a row view of it, prepared on its own.
  std::vector<Tensor> stacked_matrix(const std::string& name, std::initializer_list<int64_t> rows, int64_t cols,
                                     bool keep_fused) {
    int64_t total = 0;
    for (int64_t r : rows) total += r;
    const Tensor& t = host_matrix(name, total, cols);
    out.named.emplace_back(name, t);
    if (keep_fused) return {backend.prepare_weight(t, out.storage)};
    std::vector<Tensor> parts;
    int64_t row0 = 0;
    for (int64_t r : rows) {
      const Tensor part = Tensor::make(t.dtype, {r, cols}, static_cast<char*>(t.data) + size_t(row0) * row_bytes(t.dtype, cols));
      parts.push_back(backend.prepare_weight(part, out.storage));
      row0 += r;
    }
    return parts;
  }
  Tensor optional_vector(const std::string& name, int64_t n) {
    return source.find(name) ? vector(name, n) : Tensor{};
  }
};

struct Names {
  bool gguf;
  std::string hf_prefix = "model.";  // "language_model.model." or "model.language_model." in a Gemma 3 multimodal folder
  std::string layer(int l, const char* gguf_name, const char* hf_name) const {
    return gguf ? "blk." + std::to_string(l) + "." + gguf_name : hf_prefix + "layers." + std::to_string(l) + "." + hf_name;
  }
  std::string global(const char* gguf_name, const char* hf_name) const {
    return gguf ? std::string(gguf_name) : hf_prefix + hf_name;
  }
};

// The prefix of a Hugging Face folder's text-model tensors: model. (a causal LM), or a multimodal Gemma 3's text model.
std::string hf_prefix_of(const WeightSource& source) {
  for (const char* p : {"model.", "language_model.model.", "model.language_model."})
    if (source.find(std::string(p) + "embed_tokens.weight")) return p;
  return "model.";  // the missing tensor is reported under its usual name
}

}  // namespace

ModelWeights load_weights(const ModelConfig& c, const WeightSource& source, bool gguf_names, Backend& backend) {
  ModelWeights w;
  Loader ld{c, source, backend, w};
  const Names nm{gguf_names, gguf_names ? "" : hf_prefix_of(source)};
  const int64_t q_dim = int64_t(c.n_heads) * c.head_dim, kv_dim = int64_t(c.n_kv_heads) * c.head_dim;
  const bool gemma = c.post_norms;

  w.tok_embd = ld.matrix(nm.global("token_embd.weight", "embed_tokens.weight"), c.vocab_size, c.dim);
  w.output_norm = ld.norm(nm.global("output_norm.weight", "norm.weight"), c.dim);
  const std::string out_name = gguf_names ? "output.weight" : "lm_head.weight";
  w.output = (c.tied_embeddings || !source.find(out_name)) ? w.tok_embd : ld.matrix(out_name, c.vocab_size, c.dim);
  if (gguf_names && source.find("rope_freqs.weight")) w.rope_freqs = ld.vector("rope_freqs.weight", c.rope_dims / 2);

  w.layers.resize(size_t(c.n_layers));
  // The fused q|k|v epilogue has no place for longrope's factor on the rotated dims (Phi-3.5 / -128k with partial
  // rotary dims): such a model keeps its projections apart on every backend.
  const bool fuse = backend.wants_fused_projections() && c.rope_attention_factor() == 1.0f;
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w.layers[size_t(l)];
    L.attn_norm = ld.norm(nm.layer(l, "attn_norm.weight", "input_layernorm.weight"), c.dim);
    const std::string q_name = nm.layer(l, "attn_q.weight", "self_attn.q_proj.weight");
    const std::string k_name = nm.layer(l, "attn_k.weight", "self_attn.k_proj.weight");
    const std::string v_name = nm.layer(l, "attn_v.weight", "self_attn.v_proj.weight");
    const std::string bq_name = nm.layer(l, "attn_q.bias", "self_attn.q_proj.bias");
    const std::string bk_name = nm.layer(l, "attn_k.bias", "self_attn.k_proj.bias");
    const std::string bv_name = nm.layer(l, "attn_v.bias", "self_attn.v_proj.bias");
    const std::string qkv_name = nm.layer(l, "attn_qkv.weight", "self_attn.qkv_proj.weight");
    if (c.arch == Arch::Phi3 && source.find(qkv_name)) {  // stored fused
      std::vector<Tensor> parts = ld.stacked_matrix(qkv_name, {q_dim, kv_dim, kv_dim}, c.dim, fuse);
      if (fuse) {
        L.wqkv = parts[0];
      } else {
        L.wq = parts[0], L.wk = parts[1], L.wv = parts[2];
      }
    } else if (fuse) {
      L.wqkv = ld.fused_matrix({{q_name, q_dim}, {k_name, kv_dim}, {v_name, kv_dim}}, c.dim);
    }
    if (!L.wq.empty()) {
      // split from a stored q|k|v (no biases in Phi-3)
    } else if (!L.wqkv.empty()) {
      if (c.qkv_bias) {
        const std::vector<float> bq = ld.optional_host_vector(bq_name, q_dim);
        const std::vector<float> bk = ld.optional_host_vector(bk_name, kv_dim);
        const std::vector<float> bv = ld.optional_host_vector(bv_name, kv_dim);
        const std::vector<float>* biases[] = {&bq, &bk, &bv};
        const int64_t lengths[] = {q_dim, kv_dim, kv_dim};
        if (!bq.empty() || !bk.empty() || !bv.empty()) L.bqkv = ld.upload(concat_f32(biases, lengths));
      }
    } else {
      L.wq = ld.matrix(q_name, q_dim, c.dim);
      L.wk = ld.matrix(k_name, kv_dim, c.dim);
      L.wv = ld.matrix(v_name, kv_dim, c.dim);
      if (c.qkv_bias) {
        L.bq = ld.optional_vector(bq_name, q_dim);
        L.bk = ld.optional_vector(bk_name, kv_dim);
        L.bv = ld.optional_vector(bv_name, kv_dim);
      }
    }
    if (c.qk_norm) {
      L.q_norm = ld.norm(nm.layer(l, "attn_q_norm.weight", "self_attn.q_norm.weight"), c.head_dim);
      L.k_norm = ld.norm(nm.layer(l, "attn_k_norm.weight", "self_attn.k_norm.weight"), c.head_dim);
    }
    L.wo = ld.matrix(nm.layer(l, "attn_output.weight", "self_attn.o_proj.weight"), c.dim, q_dim);
    if (gemma) {  // Gemma's four norms: its post_attention_layernorm follows the attention, pre_feedforward leads the FFN
      L.post_attn_norm = ld.norm(nm.layer(l, "post_attention_norm.weight", "post_attention_layernorm.weight"), c.dim);
      L.ffn_norm = ld.norm(nm.layer(l, "ffn_norm.weight", "pre_feedforward_layernorm.weight"), c.dim);
      L.post_ffn_norm = ld.norm(nm.layer(l, "post_ffw_norm.weight", "post_feedforward_layernorm.weight"), c.dim);
    } else {
      L.ffn_norm = ld.norm(nm.layer(l, "ffn_norm.weight", "post_attention_layernorm.weight"), c.dim);
    }
    if (c.is_moe_layer(l)) {
      const ExpertNames en{gguf_names, c.arch == Arch::Llama, l};
      L.ffn_gate_inp = ld.matrix(en.router(), c.n_experts, c.dim);
      L.ffn_gate_exps = ld.experts(en, ExpertProj::Gate, c.expert_hidden_dim, c.dim);
      L.ffn_up_exps = ld.experts(en, ExpertProj::Up, c.expert_hidden_dim, c.dim);
      L.ffn_down_exps = ld.experts(en, ExpertProj::Down, c.dim, c.expert_hidden_dim);
      continue;
    }
    const std::string gate_name = nm.layer(l, "ffn_gate.weight", "mlp.gate_proj.weight");
    const std::string up_name = nm.layer(l, "ffn_up.weight", "mlp.up_proj.weight");
    // Phi-3: gate|up stored as one tensor (GGUF: ffn_up of 2*hidden_dim rows, no ffn_gate). The fused op is SwiGLU's:
    // a GeGLU model (Gemma) keeps its gate and up apart.
    const std::string gate_up_name = gguf_names ? up_name : nm.layer(l, "", "mlp.gate_up_proj.weight");
    const bool fuse_ffn = fuse && c.ffn_activation == FfnActivation::Silu;
    if (c.arch == Arch::Phi3 && !source.find(gate_name) && source.find(gate_up_name)) {
      std::vector<Tensor> parts = ld.stacked_matrix(gate_up_name, {c.hidden_dim, c.hidden_dim}, c.dim, fuse_ffn);
      if (fuse_ffn) {
        L.w_gate_up = parts[0];
      } else {
        L.w_gate = parts[0], L.w_up = parts[1];
      }
    } else if (fuse_ffn) {
      L.w_gate_up = ld.fused_matrix({{gate_name, c.hidden_dim}, {up_name, c.hidden_dim}}, c.dim);
    }
    if (L.w_gate_up.empty() && L.w_gate.empty()) {
      L.w_gate = ld.matrix(gate_name, c.hidden_dim, c.dim);
      L.w_up = ld.matrix(up_name, c.hidden_dim, c.dim);
    }
    L.w_down = ld.matrix(nm.layer(l, "ffn_down.weight", "mlp.down_proj.weight"), c.dim, c.hidden_dim);
  }
  return w;
}

}  // namespace ferry
