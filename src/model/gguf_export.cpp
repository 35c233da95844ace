#include "model/gguf_export.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/check.h"
#include "tokenizer/pre_tokenizer.h"

namespace ferry {
namespace {

struct NameRow {
  const char* hf;    // suffix after model.layers.N.
  const char* gguf;  // suffix after blk.N.
};
constexpr NameRow kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},               // Qwen3-MoE router
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},  // Mixtral router
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"},          // Phi-3
    {"mlp.gate_up_proj.weight", "ffn_up.weight"},              // Phi-3: 2*hidden_dim rows, gate then up
};
// Gemma's layer norms (looked up before kLayerNames: post_attention_layernorm means another norm there).
constexpr NameRow kGemmaNormNames[] = {
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
};

// The llama.cpp names whose pre-tokenizer regexes ferry knows (tokenizer/pre_tokenizer_regexes.cpp), in the
// order a match is looked for.
constexpr const char* kPreNames[] = {"llama-bpe", "qwen2", "smollm", "gpt-2", "falcon",
                                     "deepseek-llm", "deepseek-coder", "deepseek-v3"};

}  // namespace

std::string gguf_tensor_name(const std::string& hf, bool tied_embeddings, bool post_norms) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return tied_embeddings ? "" : "output.weight";
  const std::string prefix = "model.layers.";
  if (hf.rfind(prefix, 0) == 0) {
    char* end = nullptr;
    const long layer = std::strtol(hf.c_str() + prefix.size(), &end, 10);
    if (end != hf.c_str() + prefix.size() && *end == '.') {
      const std::string rest = end + 1;
      if (rest == "self_attn.rotary_emb.inv_freq") return "";
      if (post_norms)
        for (const NameRow& r : kGemmaNormNames)
          if (rest == r.hf) return "blk." + std::to_string(layer) + "." + r.gguf;
      for (const NameRow& r : kLayerNames)
        if (rest == r.hf) return "blk." + std::to_string(layer) + "." + r.gguf;
    }
  }
  fail("tensor '{}' has no GGUF name (ferry converts Llama, Mixtral, Qwen2, Qwen3, Qwen3-MoE, Gemma 2/3 and Phi-3 "
       "weights)", hf);
}

std::string hf_tensor_name(const std::string& g) {
  if (g == "token_embd.weight") return "model.embed_tokens.weight";
  if (g == "output_norm.weight") return "model.norm.weight";
  if (g == "output.weight") return "lm_head.weight";
  if (g.rfind("blk.", 0) == 0) {
    char* end = nullptr;
    const long layer = std::strtol(g.c_str() + 4, &end, 10);
    if (end != g.c_str() + 4 && *end == '.') {
      const std::string rest = end + 1;
      for (const NameRow& r : kLayerNames)
        if (rest == r.gguf) return "model.layers." + std::to_string(layer) + "." + r.hf;
    }
  }
  fail("GGUF tensor '{}' has no Hugging Face name", g);
}

void set_gguf_config(GgufWriter& w, const ModelConfig& c) {
  const std::string arch = arch_name(c.arch);
  const std::string p = arch + ".";
  w.set("general.architecture", GgufValue::str(arch));
  w.set("general.name", GgufValue::str(c.name));
  w.set(p + "block_count", GgufValue::u32(uint32_t(c.n_layers)));
  w.set(p + "context_length", GgufValue::u32(uint32_t(c.max_context)));
  w.set(p + "embedding_length", GgufValue::u32(uint32_t(c.dim)));
  w.set(p + "feed_forward_length", GgufValue::u32(uint32_t(c.hidden_dim)));
  w.set(p + "attention.head_count", GgufValue::u32(uint32_t(c.n_heads)));
  w.set(p + "attention.head_count_kv", GgufValue::u32(uint32_t(c.n_kv_heads)));
  w.set(p + "attention.key_length", GgufValue::u32(uint32_t(c.head_dim)));
  w.set(p + "attention.value_length", GgufValue::u32(uint32_t(c.head_dim)));
  w.set(p + "attention.layer_norm_rms_epsilon", GgufValue::f32(c.rms_eps));
  w.set(p + "rope.freq_base", GgufValue::f32(c.rope_theta));
  w.set(p + "rope.dimension_count", GgufValue::u32(uint32_t(c.rope_dims)));
  w.set(p + "vocab_size", GgufValue::u32(uint32_t(c.vocab_size)));
  if (c.n_experts > 0) {  // a layer without ffn_gate_inp is dense (config_from_gguf)
    w.set(p + "expert_count", GgufValue::u32(uint32_t(c.n_experts)));
    w.set(p + "expert_used_count", GgufValue::u32(uint32_t(c.n_experts_used)));
    w.set(p + "expert_feed_forward_length", GgufValue::u32(uint32_t(c.expert_hidden_dim)));
    w.set(p + "expert_weights_norm", GgufValue::boolean(c.moe_norm == MoeNorm::Renormalize));
  }
  if (c.rope_scaling.kind == RopeScalingKind::Linear) {
    w.set(p + "rope.scaling.type", GgufValue::str("linear"));
    w.set(p + "rope.scaling.factor", GgufValue::f32(c.rope_scaling.factor));
  }
  if (c.rope_scaling.kind == RopeScalingKind::Yarn) {  // llama.cpp's keys, as config_from_gguf reads them
    const RopeScaling& r = c.rope_scaling;
    FERRY_CHECK(r.truncate, "GGUF has no key for yarn without truncation (rope_scaling truncate: false)");
    w.set(p + "rope.scaling.type", GgufValue::str("yarn"));
    w.set(p + "rope.scaling.factor", GgufValue::f32(r.factor));
    w.set(p + "rope.scaling.original_context_length", GgufValue::u32(uint32_t(r.original_context)));
    w.set(p + "rope.scaling.yarn_beta_fast", GgufValue::f32(r.beta_fast));
    w.set(p + "rope.scaling.yarn_beta_slow", GgufValue::f32(r.beta_slow));
    if (r.attention_factor != yarn_mscale(r.factor)) w.set(p + "rope.scaling.yarn_attn_factor", GgufValue::f32(r.attention_factor));
  }
  if (c.rope_scaling.kind == RopeScalingKind::LongRope) {
    w.set(p + "rope.scaling.original_context_length", GgufValue::u32(uint32_t(c.rope_scaling.original_context)));
    w.set(p + "rope.scaling.attn_factor", GgufValue::f32(c.rope_scaling.attention_factor));
  }
  if (!c.layer_window.empty()) {
    const int window = *std::max_element(c.layer_window.begin(), c.layer_window.end());
    std::vector<GgufValue> local;
    for (int lw : c.layer_window) {
      FERRY_CHECK(lw == 0 || lw == window, "GGUF holds one sliding window; this model's layers have {} and {}", lw, window);
      local.push_back(GgufValue::boolean(lw > 0));
    }
    if (window > 0) {
      w.set(p + "attention.sliding_window", GgufValue::u32(uint32_t(window)));
      w.set(p + "attention.sliding_window_pattern", GgufValue::array(GgufType::Bool, std::move(local)));
    }
  }
  if (c.attn_softcap > 0) w.set(p + "attn_logit_softcapping", GgufValue::f32(c.attn_softcap));
  if (c.final_softcap > 0) w.set(p + "final_logit_softcapping", GgufValue::f32(c.final_softcap));
  if (c.query_pre_attn_scalar > 0) w.set(p + "attention.scale", GgufValue::f32(1.0f / std::sqrt(c.query_pre_attn_scalar)));
  if (c.rope_theta_local > 0) w.set(p + "rope.freq_base_swa", GgufValue::f32(c.rope_theta_local));
}

std::vector<float> rope_freq_divisors(const ModelConfig& c) {
  if (c.rope_scaling.kind != RopeScalingKind::Llama3) return {};
  ModelConfig plain = c;
  plain.rope_scaling = RopeScaling{};
  const std::vector<float> base = plain.rope_inv_freq(), scaled = c.rope_inv_freq();
  std::vector<float> div(base.size());
  for (size_t i = 0; i < div.size(); ++i) div[i] = base[i] / scaled[i];
  return div;
}

void set_gguf_vocab(GgufWriter& w, const Vocab& v, int vocab_size) {
  const bool spm = v.kind == TokenizerKind::SentencePiece;
  FERRY_CHECK(int64_t(v.tokens.size()) <= vocab_size, "the tokenizer has {} tokens, more than the model's vocab_size {}",
              v.tokens.size(), vocab_size);
  w.set("tokenizer.ggml.model", GgufValue::str(spm ? "llama" : "gpt2"));
  if (!spm) {
    std::string pre;
    for (const char* name : kPreNames) {
      if (pre_tokenizer_regexes(name) == v.pre_regexes) {
        pre = name;
        break;
      }
    }
    FERRY_CHECK(!pre.empty(), "the tokenizer's pre-tokenizer ({} regexes) matches no pre-tokenizer GGUF readers know",
                v.pre_regexes.size());
    w.set("tokenizer.ggml.pre", GgufValue::str(pre));
  }
  std::vector<std::string> tokens = v.tokens;
  std::vector<int32_t> types = v.token_types;
  while (int64_t(tokens.size()) < vocab_size) {
    tokens.push_back("[PAD" + std::to_string(tokens.size()) + "]");
    types.push_back(int32_t(TokenType::Unused));
  }
  w.set("tokenizer.ggml.tokens", GgufValue::strings(tokens));
  w.set("tokenizer.ggml.token_type", GgufValue::i32s(types));
  if (spm) {
    FERRY_CHECK(!v.scores.empty(), "a SentencePiece tokenizer without scores cannot be written as GGUF");
    std::vector<float> scores = v.scores;
    scores.resize(tokens.size(), -1000.0f);
    w.set("tokenizer.ggml.scores", GgufValue::f32s(scores));
  }
  if (!v.merges.empty()) {
    std::vector<std::string> merges;
    merges.reserve(v.merges.size());
    for (const auto& [a, b] : v.merges) merges.push_back(a + " " + b);
    w.set("tokenizer.ggml.merges", GgufValue::strings(merges));
  }
  const auto id = [&](const char* key, int32_t value) {
    if (value >= 0) w.set(key, GgufValue::u32(uint32_t(value)));
  };
  id("tokenizer.ggml.bos_token_id", v.bos_id);
  id("tokenizer.ggml.eos_token_id", v.eos_id);
  id("tokenizer.ggml.eot_token_id", v.eot_id);
  id("tokenizer.ggml.unknown_token_id", v.unk_id);
  id("tokenizer.ggml.padding_token_id", v.pad_id);
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(v.add_bos));
  w.set("tokenizer.ggml.add_eos_token", GgufValue::boolean(v.add_eos));
  if (spm || v.add_space_prefix) w.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(v.add_space_prefix));
  if (v.chat_template) w.set("tokenizer.chat_template", GgufValue::str(*v.chat_template));
}

int64_t llama_qk_source_row(int64_t gguf_row, int head_dim) {
  const int64_t h = gguf_row / head_dim, r = gguf_row % head_dim;
  const int64_t i = r / 2, j = r % 2;
  return h * head_dim + j * (head_dim / 2) + i;
}

}  // namespace ferry
