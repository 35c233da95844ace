#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <nlohmann/json.hpp>
#include <numbers>

#include "core/check.h"
#include "formats/gguf.h"

namespace ferry {

std::string arch_name(Arch a) {
  switch (a) {
    case Arch::Llama: return "llama";
    case Arch::Qwen2: return "qwen2";
    case Arch::Qwen3: return "qwen3";
    case Arch::Qwen3Moe: return "qwen3moe";
  }
  return "?";
}

bool ModelConfig::is_moe_layer(int layer) const {
  return n_experts > 0 && std::find(dense_layers.begin(), dense_layers.end(), layer) == dense_layers.end();
}

void ModelConfig::validate() const {
  const auto positive = [](int v, const char* what) {
    FERRY_CHECK(v > 0 && v <= (1 << 24), "model config: {} = {} is out of range", what, v);
  };
  positive(n_layers, "n_layers");
  positive(dim, "dim");
  positive(n_heads, "n_heads");
  positive(n_kv_heads, "n_kv_heads");
  positive(head_dim, "head_dim");
  positive(hidden_dim, "hidden_dim");
  positive(vocab_size, "vocab_size");
  positive(max_context, "max_context");
  FERRY_CHECK(n_heads % n_kv_heads == 0, "model config: n_heads {} is not a multiple of n_kv_heads {}", n_heads,
              n_kv_heads);
  FERRY_CHECK(rope_dims > 0 && rope_dims <= head_dim && rope_dims % 2 == 0,
              "model config: rope dimension {} invalid for head_dim {}", rope_dims, head_dim);
  FERRY_CHECK(rms_eps > 0 && rms_eps < 1, "model config: rms eps {} out of range", rms_eps);
  FERRY_CHECK(rope_theta > 0 && std::isfinite(rope_theta), "model config: rope theta {} invalid", rope_theta);
  FERRY_CHECK(rope_scaling.factor > 0 && std::isfinite(rope_scaling.factor), "model config: rope scaling factor {} invalid",
              rope_scaling.factor);
  FERRY_CHECK(n_experts >= 0 && n_experts <= 4096, "model config: {} experts is out of range (0..4096)", n_experts);
  FERRY_CHECK(n_experts > 0 || arch != Arch::Qwen3Moe, "model config: a qwen3moe model needs experts (expert count 0)");
  if (n_experts > 0) {
    FERRY_CHECK(n_experts_used >= 1 && n_experts_used <= n_experts,
                "model config: {} experts per token with {} experts (need 1..{})", n_experts_used, n_experts, n_experts);
    positive(expert_hidden_dim, "expert_hidden_dim");
    for (int l : dense_layers)
      FERRY_CHECK(l >= 0 && l < n_layers, "model config: dense layer {} outside the {} layers", l, n_layers);
  }
}

std::vector<float> ModelConfig::rope_inv_freq() const {
  const int half = rope_dims / 2;
  std::vector<float> f(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    double inv = 1.0 / std::pow(double(rope_theta), double(2 * i) / double(rope_dims));
    switch (rope_scaling.kind) {
      case RopeScalingKind::None: break;
      case RopeScalingKind::Linear: inv /= rope_scaling.factor; break;
      case RopeScalingKind::Llama3: {
        // As transformers' _compute_llama3_parameters: long wavelengths are divided by factor, short ones
        // kept, and the band between interpolated smoothly.
        const double old_ctx = rope_scaling.original_context;
        const double low_wavelen = old_ctx / rope_scaling.low_freq_factor;
        const double high_wavelen = old_ctx / rope_scaling.high_freq_factor;
        const double wavelen = 2 * std::numbers::pi / inv;
        if (wavelen > low_wavelen) {
          inv /= rope_scaling.factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth = (old_ctx / wavelen - rope_scaling.low_freq_factor) /
                                (rope_scaling.high_freq_factor - rope_scaling.low_freq_factor);
          inv = (1 - smooth) * inv / rope_scaling.factor + smooth * inv;
        }
        break;
      }
    }
    f[size_t(i)] = float(inv);
  }
  return f;
}

namespace {

// The parameters of the model with `experts` of each MoE layer's experts counted (all of them, or those one token runs).
int64_t params_with_experts(const ModelConfig& c, int experts) {
  const int64_t attn = int64_t(c.dim) * c.head_dim * (2 * c.n_heads + 2 * c.n_kv_heads);
  int64_t total = int64_t(c.vocab_size) * c.dim * (c.tied_embeddings ? 1 : 2) + c.dim;
  for (int l = 0; l < c.n_layers; ++l) {
    const int64_t ffn = c.is_moe_layer(l) ? int64_t(experts) * 3 * c.dim * c.expert_hidden_dim + int64_t(c.n_experts) * c.dim
                                          : 3 * int64_t(c.dim) * c.hidden_dim;
    total += attn + ffn + 2 * c.dim;
  }
  return total;
}

}  // namespace

int64_t ModelConfig::n_params() const { return params_with_experts(*this, n_experts); }
int64_t ModelConfig::n_active_params() const { return params_with_experts(*this, n_experts_used); }

namespace {

// An integer from GGUF metadata as an int: a u64 of 2^32 + 2 is an error, not 2.
int checked_int(const GgufFile& g, const std::string& key, int64_t v) {
  FERRY_CHECK(v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max(),
              "{}: '{}' = {} is out of range", g.name(), key, v);
  return int(v);
}
int meta_int(const GgufFile& g, const std::string& key) { return checked_int(g, key, g.get_int(key)); }
int meta_int(const GgufFile& g, const std::string& key, int64_t def) { return checked_int(g, key, g.get_int(key, def)); }

}  // namespace

ModelConfig config_from_gguf(const GgufFile& g) {
  ModelConfig c;
  const std::string arch = g.get_string("general.architecture");
  if (arch == "llama") {
    c.arch = Arch::Llama;
    c.rope_ordering = RopeOrdering::Interleaved;  // convert_hf_to_gguf permutes q/k for llama
  } else if (arch == "qwen2") {
    c.arch = Arch::Qwen2;
    c.rope_ordering = RopeOrdering::Neox;
    c.qkv_bias = true;
  } else if (arch == "qwen3" || arch == "qwen3moe") {
    c.arch = arch == "qwen3" ? Arch::Qwen3 : Arch::Qwen3Moe;
    c.rope_ordering = RopeOrdering::Neox;
    c.qk_norm = true;
  } else {
    fail("{}: unknown architecture '{}' (ferry runs llama, qwen2, qwen3, qwen3moe)", g.name(), arch);
  }
  const std::string p = arch + ".";
  c.name = g.get_string("general.name", arch);
  c.n_layers = meta_int(g, p + "block_count");
  c.dim = meta_int(g, p + "embedding_length");
  c.n_heads = meta_int(g, p + "attention.head_count");
  c.n_kv_heads = meta_int(g, p + "attention.head_count_kv", c.n_heads);
  c.hidden_dim = meta_int(g, p + "feed_forward_length");
  c.max_context = meta_int(g, p + "context_length", 4096);
  c.rms_eps = float(g.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_theta = float(g.get_float(p + "rope.freq_base", 10000.0));
  FERRY_CHECK(c.n_heads > 0, "{}: attention.head_count must be positive", g.name());
  c.head_dim = meta_int(g, p + "attention.key_length", c.dim / c.n_heads);
  c.rope_dims = meta_int(g, p + "rope.dimension_count", c.head_dim);
  const GgufTensorInfo* embd = g.find_tensor("token_embd.weight");
  FERRY_CHECK(embd != nullptr, "{}: missing tensor 'token_embd.weight'", g.name());
  c.vocab_size = meta_int(g, p + "vocab_size", embd->shape[0]);
  c.tied_embeddings = g.find_tensor("output.weight") == nullptr;
  const std::string scaling = g.get_string(p + "rope.scaling.type", "none");
  if (scaling == "linear") {
    c.rope_scaling.kind = RopeScalingKind::Linear;
    c.rope_scaling.factor = float(g.get_float(p + "rope.scaling.factor", 1.0));
  } else if (scaling != "none") {
    fail("{}: unsupported rope scaling type '{}'", g.name(), scaling);
  }
  // Llama 3.1+ GGUFs carry the llama3 scaling as a rope_freqs.weight tensor of per-pair divisors.
  // Experts (qwen3moe; llama with expert tensors: Mixtral). A layer without a router (ffn_gate_inp) is dense.
  c.n_experts = meta_int(g, p + "expert_count", 0);
  if (c.n_experts > 0) {
    c.n_experts_used = meta_int(g, p + "expert_used_count", 0);
    c.expert_hidden_dim = meta_int(g, p + "expert_feed_forward_length", c.hidden_dim);
    c.moe_norm = g.get_bool(p + "expert_weights_norm", true) ? MoeNorm::Renormalize : MoeNorm::Softmax;
    FERRY_CHECK(c.n_layers > 0 && c.n_layers <= (1 << 24), "{}: block_count {} is out of range", g.name(), c.n_layers);
    for (int l = 0; l < c.n_layers; ++l)
      if (!g.find_tensor(fmt::format("blk.{}.ffn_gate_inp.weight", l))) c.dense_layers.push_back(l);
  }
  c.validate();
  return c;
}

namespace {

template <typename T>
T json_get(const nlohmann::json& j, const char* key, T def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // Never narrowed silently: 2^32 + 512 is not 512, and 64.5 is not 64.
    const nlohmann::json& v = j[key];
    FERRY_CHECK(v.is_number_integer(), "config.json: '{}' must be an integer, got {}", key, v.dump());
    FERRY_CHECK(v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
                                       : v.get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
                                             v.get<int64_t>() <= int64_t(std::numeric_limits<T>::max()),
                "config.json: '{}' = {} is out of range", key, v.dump());
  }
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("config.json: '{}' has the wrong type", key);
  }
}

template <typename T>
T json_require(const nlohmann::json& j, const char* key) {
  FERRY_CHECK(j.contains(key) && !j[key].is_null(), "config.json: missing '{}'", key);
  return json_get<T>(j, key, T{});
}

}  // namespace

ModelConfig config_from_hf(const nlohmann::json& j) {
  FERRY_CHECK(j.is_object(), "config.json is not a JSON object");
  ModelConfig c;
  const std::string type = json_get<std::string>(j, "model_type", "");
  if (type == "llama" || type == "mistral") {
    c.arch = Arch::Llama;
  } else if (type == "qwen2") {
    c.arch = Arch::Qwen2;
    c.qkv_bias = true;
  } else if (type == "qwen3" || type == "qwen3_moe") {
    c.arch = type == "qwen3" ? Arch::Qwen3 : Arch::Qwen3Moe;
    c.qk_norm = true;
  } else if (type == "mixtral") {
    c.arch = Arch::Llama;
  } else {
    fail("config.json: unknown model_type '{}' (ferry runs llama, mistral, mixtral, qwen2, qwen3, qwen3_moe)", type);
  }
  c.rope_ordering = RopeOrdering::Neox;  // Hugging Face weights use rotate_half
  c.name = type;
  c.n_layers = json_require<int>(j, "num_hidden_layers");
  c.dim = json_require<int>(j, "hidden_size");
  c.n_heads = json_require<int>(j, "num_attention_heads");
  FERRY_CHECK(c.n_heads > 0, "config.json: num_attention_heads must be positive");
  c.n_kv_heads = json_get<int>(j, "num_key_value_heads", c.n_heads);
  c.head_dim = json_get<int>(j, "head_dim", c.dim / c.n_heads);
  c.hidden_dim = json_require<int>(j, "intermediate_size");
  c.vocab_size = json_require<int>(j, "vocab_size");
  c.max_context = json_get<int>(j, "max_position_embeddings", 4096);
  c.rms_eps = json_get<float>(j, "rms_norm_eps", 1e-6f);
  c.rope_theta = json_get<float>(j, "rope_theta", 10000.0f);
  c.rope_dims = c.head_dim;
  c.tied_embeddings = json_get<bool>(j, "tie_word_embeddings", false);
  if (c.arch == Arch::Qwen2) c.qkv_bias = json_get<bool>(j, "attention_bias", true);
  if (c.arch == Arch::Llama) c.qkv_bias = json_get<bool>(j, "attention_bias", false);
  if (type == "mixtral") {  // top-k of the router, softmax over the chosen logits
    c.n_experts = json_require<int>(j, "num_local_experts");
    c.n_experts_used = json_require<int>(j, "num_experts_per_tok");
    c.expert_hidden_dim = c.hidden_dim;
    c.moe_norm = MoeNorm::Renormalize;
  } else if (c.arch == Arch::Qwen3Moe) {  // softmax, top-k, renormalized with norm_topk_prob
    // the Hub's checkpoints say num_experts; transformers 5 writes its alias num_local_experts
    c.n_experts = j.contains("num_experts") ? json_require<int>(j, "num_experts") : json_require<int>(j, "num_local_experts");
    c.n_experts_used = json_require<int>(j, "num_experts_per_tok");
    c.expert_hidden_dim = json_require<int>(j, "moe_intermediate_size");
    c.moe_norm = json_get<bool>(j, "norm_topk_prob", false) ? MoeNorm::Renormalize : MoeNorm::Softmax;
    // transformers: layer l is sparse unless listed in mlp_only_layers, and only when (l + 1) % decoder_sparse_step == 0
    const int step = json_get<int>(j, "decoder_sparse_step", 1);
    FERRY_CHECK(step >= 1 && step <= c.n_layers + 1, "config.json: decoder_sparse_step {} is out of range", step);
    std::vector<int> only;
    if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
      FERRY_CHECK(j["mlp_only_layers"].is_array(), "config.json: 'mlp_only_layers' must be a list of layer indices");
      for (const auto& v : j["mlp_only_layers"]) {
        FERRY_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < c.n_layers,
                    "config.json: mlp_only_layers entry {} is not a layer of the {}", v.dump(), c.n_layers);
        only.push_back(v.get<int>());
      }
    }
    for (int l = 0; l < c.n_layers; ++l)
      if (std::find(only.begin(), only.end(), l) != only.end() || (l + 1) % step != 0) c.dense_layers.push_back(l);
  }
  // rope_scaling (transformers <5) or rope_parameters (transformers 5) describe the scaling.
  const nlohmann::json* rs = nullptr;
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) rs = &j["rope_scaling"];
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rs = &j["rope_parameters"];
  if (rs) {
    if (rs->contains("rope_theta")) c.rope_theta = json_get<float>(*rs, "rope_theta", c.rope_theta);
    std::string kind = json_get<std::string>(*rs, "rope_type", json_get<std::string>(*rs, "type", "default"));
    if (kind == "llama3") {
      c.rope_scaling.kind = RopeScalingKind::Llama3;
      c.rope_scaling.factor = json_require<float>(*rs, "factor");
      c.rope_scaling.low_freq_factor = json_get<float>(*rs, "low_freq_factor", 1.0f);
      c.rope_scaling.high_freq_factor = json_get<float>(*rs, "high_freq_factor", 4.0f);
      c.rope_scaling.original_context = json_get<int>(*rs, "original_max_position_embeddings", 8192);
    } else if (kind == "linear") {
      c.rope_scaling.kind = RopeScalingKind::Linear;
      c.rope_scaling.factor = json_require<float>(*rs, "factor");
    } else if (kind != "default") {
      fail("config.json: unsupported rope scaling '{}'", kind);
    }
  }
  c.validate();
  return c;
}

}  // namespace ferry
