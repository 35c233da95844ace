#include "model/weights.h"

#include "core/check.h"
#include "formats/quant.h"

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

  // A matmul or embedding weight: kept in its stored type.
  Tensor matrix(const std::string& name, int64_t rows, int64_t cols) {
    const Tensor& t = require(name, {rows, cols});
    FERRY_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16 || is_quantized(t.dtype),
                "{}: tensor '{}' has type {}, which ferry cannot multiply", source.describe(), name, dtype_name(t.dtype));
    FERRY_CHECK(t.dtype != DType::Q8_1 && t.dtype != DType::Q8_K, "{}: tensor '{}' has type {}, which is not a weight format",
                source.describe(), name, dtype_name(t.dtype));
    Tensor prepared = backend.prepare_weight(t, out.storage);
    out.named.emplace_back(name, t);
    return prepared;
  }

  // A vector (norm weight, bias): converted to f32 in backend memory.
  Tensor vector(const std::string& name, int64_t n) {
    const Tensor& t = require(name, {n});
    FERRY_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16,
                "{}: tensor '{}' has type {}; norms and biases must be f32, f16 or bf16", source.describe(), name,
                dtype_name(t.dtype));
    std::vector<float> host(static_cast<size_t>(n));
    dequantize_row(t.dtype, t.data, host.data(), n);
    DeviceBuffer buf = backend.alloc(size_t(n) * 4);
    Tensor dev = buf.view(DType::F32, {n});
    backend.copy_to_device(dev, host.data(), host.size() * 4);
    out.storage.push_back(std::move(buf));
    out.named.emplace_back(name, t);
    return dev;
  }
  Tensor optional_vector(const std::string& name, int64_t n) {
    return source.find(name) ? vector(name, n) : Tensor{};
  }
};

struct Names {
  bool gguf;
  std::string layer(int l, const char* gguf_name, const char* hf_name) const {
    return gguf ? "blk." + std::to_string(l) + "." + gguf_name : "model.layers." + std::to_string(l) + "." + hf_name;
  }
};

}  // namespace

ModelWeights load_weights(const ModelConfig& c, const WeightSource& source, bool gguf_names, Backend& backend) {
  ModelWeights w;
  Loader ld{c, source, backend, w};
  const Names nm{gguf_names};
  const int64_t q_dim = int64_t(c.n_heads) * c.head_dim, kv_dim = int64_t(c.n_kv_heads) * c.head_dim;

  w.tok_embd = ld.matrix(gguf_names ? "token_embd.weight" : "model.embed_tokens.weight", c.vocab_size, c.dim);
  w.output_norm = ld.vector(gguf_names ? "output_norm.weight" : "model.norm.weight", c.dim);
  const std::string out_name = gguf_names ? "output.weight" : "lm_head.weight";
  w.output = (c.tied_embeddings || !source.find(out_name)) ? w.tok_embd : ld.matrix(out_name, c.vocab_size, c.dim);
  if (gguf_names && source.find("rope_freqs.weight")) w.rope_freqs = ld.vector("rope_freqs.weight", c.rope_dims / 2);

  w.layers.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w.layers[size_t(l)];
    L.attn_norm = ld.vector(nm.layer(l, "attn_norm.weight", "input_layernorm.weight"), c.dim);
    L.wq = ld.matrix(nm.layer(l, "attn_q.weight", "self_attn.q_proj.weight"), q_dim, c.dim);
    L.wk = ld.matrix(nm.layer(l, "attn_k.weight", "self_attn.k_proj.weight"), kv_dim, c.dim);
    L.wv = ld.matrix(nm.layer(l, "attn_v.weight", "self_attn.v_proj.weight"), kv_dim, c.dim);
    if (c.qkv_bias) {
      L.bq = ld.optional_vector(nm.layer(l, "attn_q.bias", "self_attn.q_proj.bias"), q_dim);
      L.bk = ld.optional_vector(nm.layer(l, "attn_k.bias", "self_attn.k_proj.bias"), kv_dim);
      L.bv = ld.optional_vector(nm.layer(l, "attn_v.bias", "self_attn.v_proj.bias"), kv_dim);
    }
    if (c.qk_norm) {
      L.q_norm = ld.vector(nm.layer(l, "attn_q_norm.weight", "self_attn.q_norm.weight"), c.head_dim);
      L.k_norm = ld.vector(nm.layer(l, "attn_k_norm.weight", "self_attn.k_norm.weight"), c.head_dim);
    }
    L.wo = ld.matrix(nm.layer(l, "attn_output.weight", "self_attn.o_proj.weight"), c.dim, q_dim);
    L.ffn_norm = ld.vector(nm.layer(l, "ffn_norm.weight", "post_attention_layernorm.weight"), c.dim);
    L.w_gate = ld.matrix(nm.layer(l, "ffn_gate.weight", "mlp.gate_proj.weight"), c.hidden_dim, c.dim);
    L.w_up = ld.matrix(nm.layer(l, "ffn_up.weight", "mlp.up_proj.weight"), c.hidden_dim, c.dim);
    L.w_down = ld.matrix(nm.layer(l, "ffn_down.weight", "mlp.down_proj.weight"), c.dim, c.hidden_dim);
  }
  return w;
}

}  // namespace ferry
