#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <tuple>

#include "core/check.h"
#include "formats/gguf.h"
#include "formats/gguf_split.h"

namespace ferry {

std::string arch_name(Arch a) {
  switch (a) {
    case Arch::Llama: return "llama";
    case Arch::Qwen2: return "qwen2";
    case Arch::Qwen3: return "qwen3";
    case Arch::Qwen3Moe: return "qwen3moe";
    case Arch::Gemma2: return "gemma2";
    case Arch::Gemma3: return "gemma3";
    case Arch::Phi3: return "phi3";
  }
  return "?";
}

std::vector<std::pair<std::string, std::string>> config_facts(const ModelConfig& c) {
  std::vector<std::pair<std::string, std::string>> f;
  if (!c.layer_window.empty()) {
    std::string layers;
    int window = 0, n_local = 0;
    for (int l = 0; l < int(c.layer_window.size()); ++l) {
      if (c.layer_window[size_t(l)] == 0) continue;
      window = std::max(window, c.layer_window[size_t(l)]);
      ++n_local;
      if (n_local <= 8) layers += (layers.empty() ? "" : ",") + std::to_string(l);
    }
    if (n_local > 8) layers += ",...";
    if (n_local > 0)
      f.emplace_back("sliding window", fmt::format("{} tokens on {} of {} layers ({})", window, n_local, c.n_layers, layers));
  }
  if (c.rope_theta_local > 0) f.emplace_back("rope base of local layers", fmt::format("{}", c.rope_theta_local));
  if (c.attn_softcap > 0 || c.final_softcap > 0)
    f.emplace_back("soft-caps", fmt::format("attention {}, logits {}", c.attn_softcap, c.final_softcap));
  if (c.query_pre_attn_scalar > 0) f.emplace_back("query_pre_attn_scalar", fmt::format("{}", c.query_pre_attn_scalar));
  if (c.post_norms) f.emplace_back("norms", "pre and post (Gemma), GeGLU FFN, embedding scaled by sqrt(dim)");
  if (c.rope_dims < c.head_dim) f.emplace_back("rotary dims", fmt::format("{} of {}", c.rope_dims, c.head_dim));
  if (c.rope_scaling.kind == RopeScalingKind::LongRope)
    f.emplace_back("rope scaling", fmt::format("longrope (original context {}, attention factor {:.4f})",
                                               c.rope_scaling.original_context, c.rope_scaling.attention_factor));
  if (c.rope_scaling.kind == RopeScalingKind::Yarn)
    f.emplace_back("rope scaling",
                   fmt::format("yarn (factor {}, original context {}, beta fast {}, slow {}{}, attention factor {:.4f})",
                               c.rope_scaling.factor, c.rope_scaling.original_context, c.rope_scaling.beta_fast,
                               c.rope_scaling.beta_slow, c.rope_scaling.truncate ? "" : ", not truncated",
                               c.rope_scaling.attention_factor));
  if (c.rope_scaling.kind == RopeScalingKind::Linear)
    f.emplace_back("rope scaling", fmt::format("linear (factor {})", c.rope_scaling.factor));
  if (c.rope_scaling.kind == RopeScalingKind::Llama3)
    f.emplace_back("rope scaling", fmt::format("llama3 (factor {}, original context {})", c.rope_scaling.factor,
                                               c.rope_scaling.original_context));
  return f;
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
  FERRY_CHECK(layer_window.empty() || int(layer_window.size()) == n_layers,
              "model config: {} sliding-window entries for {} layers", layer_window.size(), n_layers);
  for (int w : layer_window) FERRY_CHECK(w >= 0, "model config: sliding window {} is negative", w);
  for (float v : {attn_softcap, final_softcap, query_pre_attn_scalar, embedding_scale, rope_theta_local})
    FERRY_CHECK(v >= 0 && std::isfinite(v), "model config: {} is not a valid soft-cap, scale or rope base", v);
  if (rope_scaling.kind == RopeScalingKind::LongRope) {
    FERRY_CHECK(int(rope_scaling.short_factor.size()) == rope_dims / 2 && int(rope_scaling.long_factor.size()) == rope_dims / 2,
                "model config: longrope needs {} short and long factors (got {} and {})", rope_dims / 2,
                rope_scaling.short_factor.size(), rope_scaling.long_factor.size());
    for (const auto* fs : {&rope_scaling.short_factor, &rope_scaling.long_factor})
      for (float f : *fs) FERRY_CHECK(f > 0 && std::isfinite(f), "model config: longrope factor {} invalid", f);
    FERRY_CHECK(rope_scaling.original_context > 0, "model config: longrope original context {} invalid",
                rope_scaling.original_context);
    FERRY_CHECK(rope_scaling.attention_factor > 0 && std::isfinite(rope_scaling.attention_factor),
                "model config: longrope attention factor {} invalid", rope_scaling.attention_factor);
  }
  if (rope_scaling.kind == RopeScalingKind::Yarn) {
    FERRY_CHECK(rope_scaling.original_context > 0, "model config: yarn original context {} invalid",
                rope_scaling.original_context);
    FERRY_CHECK(rope_scaling.beta_fast > 0 && rope_scaling.beta_slow > 0 && std::isfinite(rope_scaling.beta_fast) &&
                    std::isfinite(rope_scaling.beta_slow),
                "model config: yarn beta_fast {} and beta_slow {} must be positive", rope_scaling.beta_fast,
                rope_scaling.beta_slow);
    FERRY_CHECK(rope_scaling.attention_factor > 0 && std::isfinite(rope_scaling.attention_factor),
                "model config: yarn attention factor {} invalid", rope_scaling.attention_factor);
  }
  // The attention factor is folded into the one softmax scale of every layer; local layers with their own RoPE
  // base (Gemma 3) run no scaling, so they would take a factor that is not theirs.
  FERRY_CHECK(rope_cos_sin_factor() == 1.0f || rope_theta_local == 0,
              "model config: a rope attention factor with local layers of their own rope base is not supported");
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

float ModelConfig::attention_scale() const {
  float s = 1.0f / std::sqrt(query_pre_attn_scalar > 0 ? query_pre_attn_scalar : float(head_dim));
  // longrope and yarn scale cos and sin by attention_factor: q and k each, so their product by its square when every
  // dim rotates (with partial rotary dims the model scales the rotated dims instead: rope_attention_factor()).
  if (rope_dims == head_dim) s *= rope_cos_sin_factor() * rope_cos_sin_factor();
  return s;
}

float yarn_mscale(float factor, float mscale) {
  return factor <= 1.0f ? 1.0f : float(0.1 * double(mscale) * std::log(double(factor)) + 1.0);
}

namespace {

// transformers' find_correction_range: the rotated-dim indices (of rope_dims) between which yarn ramps from
// interpolation to extrapolation, from the rotations beta_fast and beta_slow a dim makes over the original context.
std::pair<double, double> yarn_correction_range(const RopeScaling& r, int rope_dims, double theta) {
  const auto correction_dim = [&](double rotations) {
    return double(rope_dims) * std::log(double(r.original_context) / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(theta));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  return {std::max(low, 0.0), std::min(high, double(rope_dims - 1))};
}

}  // namespace

int yarn_context(const RopeScaling& r, int max_context) {
  // vLLM's rule (its max_model_len): original_max_position_embeddings × factor; never below the config's own maximum.
  const double scaled = double(r.original_context) * std::max(1.0f, r.factor);
  return int(std::min<double>(std::max<double>(max_context, scaled), 1 << 24));
}

std::vector<float> ModelConfig::rope_inv_freq(int64_t context, bool local) const {
  const int half = rope_dims / 2;
  std::vector<float> f(static_cast<size_t>(half));
  const bool local_base = local && rope_theta_local > 0;
  const double theta = local_base ? rope_theta_local : rope_theta;
  const RopeScalingKind kind = local_base ? RopeScalingKind::None : rope_scaling.kind;
  const bool long_factors = context > rope_scaling.original_context;
  double yarn_low = 0, yarn_high = 1;
  if (kind == RopeScalingKind::Yarn) {
    std::tie(yarn_low, yarn_high) = yarn_correction_range(rope_scaling, rope_dims, theta);
    if (yarn_high == yarn_low) yarn_high += 0.001;  // as transformers' linear_ramp_factor
  }
  for (int i = 0; i < half; ++i) {
    double inv = 1.0 / std::pow(theta, double(2 * i) / double(rope_dims));
    switch (kind) {
      case RopeScalingKind::None: break;
      case RopeScalingKind::LongRope:
        inv /= (long_factors ? rope_scaling.long_factor : rope_scaling.short_factor)[size_t(i)];
        break;
      case RopeScalingKind::Linear: inv /= rope_scaling.factor; break;
      case RopeScalingKind::Yarn: {
        // transformers' _compute_yarn_parameters: pair i blends the interpolated frequency (inv / factor) and the
        // original one by the linear ramp over [low, high]: interpolated above high, original below low.
        const double ramp = std::clamp((double(i) - yarn_low) / (yarn_high - yarn_low), 0.0, 1.0);
        const double extrapolation = 1 - ramp;
        inv = inv / rope_scaling.factor * (1 - extrapolation) + inv * extrapolation;
        break;
      }
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
    total += attn + ffn + (c.post_norms ? 4 : 2) * c.dim + (c.qk_norm ? 2 * c.head_dim : 0);
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

namespace {

using GgufTensorFinder = std::function<const GgufTensorInfo*(const std::string& name)>;

// The sliding window of each layer: attention.sliding_window_pattern when the file has it (one bool per layer, true:
// local; or a period), else llama.cpp's fixed pattern for the architecture: every `period`-th layer (the last of
// each period) global, the others local; period 0: every layer local.
std::vector<int> gguf_windows(const GgufFile& g, const std::string& p, int n_layers, int period, int window) {
  FERRY_CHECK(n_layers > 0 && n_layers <= (1 << 24), "{}: block_count {} is out of range", g.name(), n_layers);
  std::vector<int> w(size_t(n_layers), window);
  if (const GgufValue* v = g.find(p + "attention.sliding_window_pattern")) {
    if (v->type == GgufType::Array) {
      const GgufArray& a = v->as_array();
      FERRY_CHECK(int(a.items.size()) == n_layers, "{}: sliding_window_pattern lists {} layers, the model has {}",
                  g.name(), a.items.size(), n_layers);
      for (int l = 0; l < n_layers; ++l) w[size_t(l)] = a.items[size_t(l)].as_bool() ? window : 0;
      return w;
    }
    period = checked_int(g, p + "attention.sliding_window_pattern", v->as_int());
    FERRY_CHECK(period >= 0, "{}: sliding_window_pattern {} is negative", g.name(), period);
  }
  if (period > 0)
    for (int l = period - 1; l < n_layers; l += period) w[size_t(l)] = 0;
  return w;
}

// Gemma 2 / Gemma 3 from GGUF (llama.cpp's names; convert_hf_to_gguf already added 1 to every norm weight).
void gemma_from_gguf(const GgufFile& g, ModelConfig& c) {
  const std::string p = arch_name(c.arch) + ".";
  c.post_norms = true;
  c.ffn_activation = FfnActivation::GeluTanh;
  c.embedding_scale = std::sqrt(float(c.dim));
  c.tied_embeddings = true;  // Gemma's lm head is the embedding table
  c.attn_softcap = float(g.get_float(p + "attn_logit_softcapping", 0.0));
  c.final_softcap = float(g.get_float(p + "final_logit_softcapping", 0.0));
  // query_pre_attn_scalar: from attention.scale when the file has it (ferry writes it); else llama.cpp's rule,
  // dim / n_heads for the 27B models (46 layers for Gemma 2, 62 for Gemma 3) and head_dim otherwise, as their
  // configs say.
  const double attn_scale = g.get_float(p + "attention.scale", 0.0);
  const bool is_27b = c.n_layers == (c.arch == Arch::Gemma2 ? 46 : 62);
  c.query_pre_attn_scalar = attn_scale > 0 ? float(1.0 / (attn_scale * attn_scale))
                                           : float(is_27b && c.n_heads > 0 ? c.dim / c.n_heads : c.head_dim);
  const int window = meta_int(g, p + "attention.sliding_window", 4096);
  c.layer_window = gguf_windows(g, p, c.n_layers, c.arch == Arch::Gemma2 ? 2 : 6, window);
  if (c.arch == Arch::Gemma3) {
    c.qk_norm = true;
    c.rope_theta_local = float(g.get_float(p + "rope.freq_base_swa", 10000.0));  // llama.cpp's default for gemma3
  }
}

// An f32 vector tensor of the file (rope factors), or empty when the file lacks it.
std::vector<float> gguf_f32_vector(const GgufFile& g, const GgufTensorFinder& find, const std::string& name) {
  const GgufTensorInfo* t = find(name);
  if (t == nullptr) return {};
  FERRY_CHECK(t->dtype == DType::F32 && t->n_dims == 1, "{}: '{}' must be a 1-D f32 tensor", g.name(), name);
  const auto* v = reinterpret_cast<const float*>(t->data);
  return std::vector<float>(v, v + t->shape[0]);
}

// Phi-3 from GGUF: longrope as rope_factors_short/long tensors and the scaling keys.
void phi3_from_gguf(const GgufFile& g, const GgufTensorFinder& find, ModelConfig& c) {
  const std::string p = "phi3.";
  const int window = meta_int(g, p + "attention.sliding_window", 0);
  if (window > 0) c.layer_window = gguf_windows(g, p, c.n_layers, 0, window);
  std::vector<float> short_f = gguf_f32_vector(g, find, "rope_factors_short.weight");
  std::vector<float> long_f = gguf_f32_vector(g, find, "rope_factors_long.weight");
  if (short_f.empty() && long_f.empty()) return;
  FERRY_CHECK(!short_f.empty() && !long_f.empty(), "{}: phi3 needs both rope_factors_short and rope_factors_long",
              g.name());
  c.rope_scaling.kind = RopeScalingKind::LongRope;
  c.rope_scaling.short_factor = std::move(short_f);
  c.rope_scaling.long_factor = std::move(long_f);
  c.rope_scaling.original_context = meta_int(g, p + "rope.scaling.original_context_length", c.max_context);
  c.rope_scaling.attention_factor = float(g.get_float(p + "rope.scaling.attn_factor", 1.0));
}

// YaRN from llama.cpp's keys (convert_hf_to_gguf writes factor, original_context_length and, when the config has
// them, yarn_beta_fast / yarn_beta_slow / yarn_attn_factor = transformers' attention_factor). Without
// yarn_attn_factor the factor is transformers' default: get_mscale(factor), or with yarn_log_multiplier (llama.cpp's
// mscale_all_dim, mscale taken as 1) get_mscale(factor) / get_mscale(factor, log_multiplier).
void yarn_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  RopeScaling& r = c.rope_scaling;
  r.kind = RopeScalingKind::Yarn;
  r.factor = float(g.get_float(p + "rope.scaling.factor", 1.0));
  FERRY_CHECK(r.factor > 0 && std::isfinite(r.factor), "{}: yarn rope.scaling.factor {} invalid", g.name(), r.factor);
  r.original_context = meta_int(g, p + "rope.scaling.original_context_length", c.max_context);
  r.beta_fast = float(g.get_float(p + "rope.scaling.yarn_beta_fast", 32.0));
  r.beta_slow = float(g.get_float(p + "rope.scaling.yarn_beta_slow", 1.0));
  const double log_multiplier = g.get_float(p + "rope.scaling.yarn_log_multiplier", 0.0);
  const float derived = log_multiplier != 0 ? yarn_mscale(r.factor) / yarn_mscale(r.factor, float(log_multiplier))
                                            : yarn_mscale(r.factor);
  r.attention_factor = float(g.get_float(p + "rope.scaling.yarn_attn_factor", derived));
  c.max_context = yarn_context(r, c.max_context);
}

// The config from shard 1's metadata `g` and the tensors of every shard (`find`).
ModelConfig config_from_gguf_parts(const GgufFile& g, const GgufTensorFinder& find) {
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
  } else if (arch == "gemma2" || arch == "gemma3") {
    c.arch = arch == "gemma2" ? Arch::Gemma2 : Arch::Gemma3;
    c.rope_ordering = RopeOrdering::Neox;  // convert_hf_to_gguf does not permute Gemma's q/k
  } else if (arch == "phi3") {
    c.arch = Arch::Phi3;
    c.rope_ordering = RopeOrdering::Neox;
  } else {
    fail("{}: unknown architecture '{}' (ferry runs llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3)", g.name(), arch);
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
  const GgufTensorInfo* embd = find("token_embd.weight");
  FERRY_CHECK(embd != nullptr, "{}: missing tensor 'token_embd.weight'", g.name());
  c.vocab_size = meta_int(g, p + "vocab_size", embd->shape[0]);
  c.tied_embeddings = find("output.weight") == nullptr;
  const std::string scaling = g.get_string(p + "rope.scaling.type", "none");
  if (scaling == "linear") {
    c.rope_scaling.kind = RopeScalingKind::Linear;
    c.rope_scaling.factor = float(g.get_float(p + "rope.scaling.factor", 1.0));
  } else if (scaling == "yarn") {
    yarn_from_gguf(g, p, c);
  } else if (scaling != "none") {
    fail("{}: unsupported rope scaling type '{}'", g.name(), scaling);
  }
  // Llama 3.1+ GGUFs carry the llama3 scaling as a rope_freqs.weight tensor of per-pair divisors.
  if (c.arch == Arch::Gemma2 || c.arch == Arch::Gemma3) gemma_from_gguf(g, c);
  if (c.arch == Arch::Phi3) phi3_from_gguf(g, find, c);
  if (c.arch == Arch::Llama || c.arch == Arch::Qwen2) {  // Mistral v0.1 (every layer), Qwen2 when the file says so
    const int window = meta_int(g, p + "attention.sliding_window", 0);
    if (window > 0) c.layer_window = gguf_windows(g, p, c.n_layers, 0, window);
  }
  // Experts (qwen3moe; llama with expert tensors: Mixtral). A layer without a router (ffn_gate_inp) is dense.
  c.n_experts = meta_int(g, p + "expert_count", 0);
  if (c.n_experts > 0) {
    c.n_experts_used = meta_int(g, p + "expert_used_count", 0);
    c.expert_hidden_dim = meta_int(g, p + "expert_feed_forward_length", c.hidden_dim);
    c.moe_norm = g.get_bool(p + "expert_weights_norm", true) ? MoeNorm::Renormalize : MoeNorm::Softmax;
    FERRY_CHECK(c.n_layers > 0 && c.n_layers <= (1 << 24), "{}: block_count {} is out of range", g.name(), c.n_layers);
    for (int l = 0; l < c.n_layers; ++l)
      if (!find(fmt::format("blk.{}.ffn_gate_inp.weight", l))) c.dense_layers.push_back(l);
  }
  c.validate();
  return c;
}

}  // namespace

ModelConfig config_from_gguf(const GgufFile& g) {
  return config_from_gguf_parts(g, [&g](const std::string& name) { return g.find_tensor(name); });
}

ModelConfig config_from_gguf(const GgufSplitSet& set) {
  return config_from_gguf_parts(set.metadata(), [&set](const std::string& name) { return set.find_tensor(name); });
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

namespace {

// A list of floats of the config (longrope factors).
std::vector<float> json_floats(const nlohmann::json& j, const char* key) {
  FERRY_CHECK(j.contains(key) && j[key].is_array(), "config.json: '{}' must be a list of numbers", key);
  std::vector<float> out;
  for (const auto& v : j[key]) {
    FERRY_CHECK(v.is_number(), "config.json: '{}' holds {}, not a number", key, v.dump());
    out.push_back(v.get<float>());
  }
  return out;
}

// Gemma 2 / Gemma 3 (text) from config.json: the Gemma layer, its scalars and its local/global layer pattern.
void gemma_from_hf(const nlohmann::json& j, ModelConfig& c) {
  c.post_norms = true;
  c.norm_weight_offset = 1.0f;  // Gemma's RMSNorm computes x * (1 + w)
  const std::string act = json_get<std::string>(j, "hidden_activation", json_get<std::string>(j, "hidden_act", "gelu_pytorch_tanh"));
  FERRY_CHECK(act == "gelu_pytorch_tanh" || act == "gelu_tanh", "config.json: Gemma activation '{}' is not supported "
              "(ferry runs gelu_pytorch_tanh)", act);
  c.ffn_activation = FfnActivation::GeluTanh;
  c.embedding_scale = std::sqrt(float(c.dim));
  c.query_pre_attn_scalar = json_get<float>(j, "query_pre_attn_scalar", float(c.head_dim));
  c.attn_softcap = json_get<float>(j, "attn_logit_softcapping", 0.0f);
  c.final_softcap = json_get<float>(j, "final_logit_softcapping", 0.0f);
  if (c.arch == Arch::Gemma3) {
    c.qk_norm = true;
    c.rope_theta_local = json_get<float>(j, "rope_local_base_freq", 10000.0f);
  }
}

// Which layers attend through a sliding window: layer_types when the config lists them (transformers >= 4.53),
// else each family's rule (Gemma 2: every other layer from the first; Gemma 3: all but every sliding_window_pattern-th;
// Qwen2: layers from max_window_layers on, when use_sliding_window; Mistral and Phi-3: every layer).
void hf_sliding_windows(const nlohmann::json& j, const std::string& type, ModelConfig& c) {
  const int window = json_get<int>(j, "sliding_window", 0);
  if (window <= 0) return;  // null or absent: global attention everywhere
  if (type == "qwen2" && !json_get<bool>(j, "use_sliding_window", false)) return;
  FERRY_CHECK(c.n_layers > 0 && c.n_layers <= (1 << 24), "config.json: num_hidden_layers {} is out of range", c.n_layers);
  c.layer_window.assign(size_t(c.n_layers), 0);
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    const auto& types = j["layer_types"];
    FERRY_CHECK(int(types.size()) == c.n_layers, "config.json: layer_types lists {} layers, the model has {}",
                types.size(), c.n_layers);
    for (int l = 0; l < c.n_layers; ++l) {
      const std::string t = types[size_t(l)].is_string() ? types[size_t(l)].get<std::string>() : "";
      FERRY_CHECK(t == "sliding_attention" || t == "full_attention",
                  "config.json: layer_types[{}] is {}, not sliding_attention or full_attention", l, types[size_t(l)].dump());
      if (t == "sliding_attention") c.layer_window[size_t(l)] = window;
    }
    return;
  }
  for (int l = 0; l < c.n_layers; ++l) {
    bool local = true;
    if (type == "gemma2") local = l % 2 == 0;
    if (type == "gemma3_text") local = (l + 1) % std::max(1, json_get<int>(j, "sliding_window_pattern", 6)) != 0;
    if (type == "qwen2") local = l >= json_get<int>(j, "max_window_layers", 0);
    if (local) c.layer_window[size_t(l)] = window;
  }
}

// Phi-3's longrope ("su" in older configs): per-pair factors, and the attention factor transformers derives.
void longrope_from_hf(const nlohmann::json& j, const nlohmann::json& rs, ModelConfig& c) {
  RopeScaling& r = c.rope_scaling;
  r.kind = RopeScalingKind::LongRope;
  r.short_factor = json_floats(rs, "short_factor");
  r.long_factor = json_floats(rs, "long_factor");
  r.original_context = json_get<int>(rs, "original_max_position_embeddings",
                                     json_get<int>(j, "original_max_position_embeddings", c.max_context));
  FERRY_CHECK(r.original_context > 0, "config.json: original_max_position_embeddings {} invalid", r.original_context);
  // transformers' _compute_longrope_parameters: factor = max_position / original, attention_factor =
  // sqrt(1 + ln(factor) / ln(original)) unless the config gives it.
  const float factor = rs.contains("factor") && !rs["factor"].is_null() && !j.contains("original_max_position_embeddings")
                           ? json_get<float>(rs, "factor", 1.0f)
                           : float(c.max_context) / float(r.original_context);
  r.attention_factor = json_get<float>(rs, "attention_factor",
                                       factor <= 1.0f ? 1.0f
                                                      : float(std::sqrt(1.0 + std::log(double(factor)) /
                                                                                  std::log(double(r.original_context)))));
}

// transformers' _compute_yarn_parameters (after standardize_rope_params): original_max_position_embeddings from the
// config's top level when there, else rope_scaling's, else max_position_embeddings; factor, when null, the ratio of
// the two; beta_fast / beta_slow 32 / 1 when missing (or 0: transformers' `or`); attention_factor when given, else
// get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are set, else get_mscale(factor).
void yarn_from_hf(const nlohmann::json& j, const nlohmann::json& rs, ModelConfig& c) {
  RopeScaling& r = c.rope_scaling;
  r.kind = RopeScalingKind::Yarn;
  const auto number = [&](const char* key, float fallback) {
    return rs.contains(key) && !rs[key].is_null() ? json_get<float>(rs, key, fallback) : fallback;
  };
  r.original_context = j.contains("original_max_position_embeddings")
                           ? json_get<int>(j, "original_max_position_embeddings", c.max_context)
                           : json_get<int>(rs, "original_max_position_embeddings", c.max_context);
  FERRY_CHECK(r.original_context > 0, "config.json: yarn original_max_position_embeddings {} invalid",
              r.original_context);
  r.factor = number("factor", float(c.max_context) / float(r.original_context));
  FERRY_CHECK(r.factor > 0 && std::isfinite(r.factor), "config.json: yarn factor {} invalid", r.factor);
  const float beta_fast = number("beta_fast", 0), beta_slow = number("beta_slow", 0);
  r.beta_fast = beta_fast != 0 ? beta_fast : 32.0f;
  r.beta_slow = beta_slow != 0 ? beta_slow : 1.0f;
  r.truncate = rs.contains("truncate") && !rs["truncate"].is_null() ? json_get<bool>(rs, "truncate", true) : true;
  const float mscale = number("mscale", 0), mscale_all_dim = number("mscale_all_dim", 0);
  const float derived = mscale != 0 && mscale_all_dim != 0
                            ? yarn_mscale(r.factor, mscale) / yarn_mscale(r.factor, mscale_all_dim)
                            : yarn_mscale(r.factor);
  r.attention_factor = number("attention_factor", derived);
  c.max_context = yarn_context(r, c.max_context);
}

}  // namespace

ModelConfig config_from_hf(const nlohmann::json& top) {
  FERRY_CHECK(top.is_object(), "config.json is not a JSON object");
  // A Gemma 3 multimodal folder: its text model's config is text_config (the vision tower is not run).
  const bool multimodal = json_get<std::string>(top, "model_type", "") == "gemma3";
  FERRY_CHECK(!multimodal || (top.contains("text_config") && top["text_config"].is_object()),
              "config.json: a gemma3 config needs a 'text_config' object");
  const nlohmann::json& j = multimodal ? top["text_config"] : top;
  ModelConfig c;
  const std::string type = multimodal ? "gemma3_text" : json_get<std::string>(j, "model_type", "");
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
  } else if (type == "gemma2" || type == "gemma3_text") {
    c.arch = type == "gemma2" ? Arch::Gemma2 : Arch::Gemma3;
  } else if (type == "phi3") {
    c.arch = Arch::Phi3;
  } else {
    fail("config.json: unknown model_type '{}' (ferry runs llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, gemma2, "
         "gemma3, gemma3_text, phi3)", type);
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
  if (c.arch == Arch::Phi3) {  // Phi-4-mini rotates 3/4 of each head
    const float partial = json_get<float>(j, "partial_rotary_factor", 1.0f);
    FERRY_CHECK(partial > 0 && partial <= 1, "config.json: partial_rotary_factor {} is out of range (0, 1]", partial);
    c.rope_dims = int(float(c.head_dim) * partial);
  }
  const bool gemma = c.arch == Arch::Gemma2 || c.arch == Arch::Gemma3;
  // Gemma's configs leave tie_word_embeddings to its default, true (a multimodal folder says it at the top).
  c.tied_embeddings = json_get<bool>(j, "tie_word_embeddings", json_get<bool>(top, "tie_word_embeddings", gemma));
  if (gemma) gemma_from_hf(j, c);
  hf_sliding_windows(j, type, c);
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
  // Gemma 3 in transformers 5: one set of parameters per layer type (the local layers' base, the global scaling).
  if (rs && rs->contains("full_attention") && (*rs)["full_attention"].is_object()) {
    if (rs->contains("sliding_attention") && (*rs)["sliding_attention"].is_object())
      c.rope_theta_local = json_get<float>((*rs)["sliding_attention"], "rope_theta", c.rope_theta_local);
    rs = &(*rs)["full_attention"];
  }
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
    } else if (kind == "longrope" || kind == "su") {
      longrope_from_hf(j, *rs, c);
    } else if (kind == "yarn") {
      yarn_from_hf(j, *rs, c);
    } else if (kind != "default") {
      fail("config.json: unsupported rope scaling '{}'", kind);
    }
  }
  c.validate();
  return c;
}

}  // namespace ferry
