// Hyperparameters of a Llama-family model, read from GGUF metadata or a Hugging Face config.json.
#pragma once

#include <algorithm>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ops/backend.h"

namespace ferry {

class GgufFile;
class GgufSplitSet;

// Mixtral and Mistral are Llama (Mixtral with experts: n_experts > 0). Gemma2/Gemma3: the Gemma layer (post norms,
// GeGLU, scaled embedding); Phi3 (Phi-3, Phi-3.5, Phi-4): Llama's layer with fused q|k|v and gate|up tensors in the file.
enum class Arch { Llama, Qwen2, Qwen3, Qwen3Moe, Gemma2, Gemma3, Phi3 };

// The gated FFN's activation: down(act(gate(x)) * up(x)).
enum class FfnActivation {
  Silu,      // SwiGLU (Llama, Qwen, Phi-3)
  GeluTanh,  // GeGLU with the tanh approximation of GELU (Gemma's gelu_pytorch_tanh)
};

enum class RopeScalingKind { None, Linear, Llama3, LongRope, Yarn };

struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::None;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  int original_context = 8192;    // llama3, longrope, yarn: original_max_position_embeddings
  // longrope (Phi-3 "longrope" / "su"): per rotated pair, the divisor of the base frequency: (rope_dims/2) each. The
  // long factors serve a context longer than original_context, the short ones the rest (rope_inv_freq's context).
  std::vector<float> short_factor, long_factor;
  // yarn (Qwen2.5, Qwen3; transformers' _compute_yarn_parameters): the rotated pairs whose wavelength fits the
  // original context fewer than beta_slow times are interpolated (frequency / factor), those fitting more than
  // beta_fast times kept, a linear ramp between; truncate rounds the ramp's ends outward to whole pairs.
  float beta_fast = 32.0f, beta_slow = 1.0f;
  bool truncate = true;
  float attention_factor = 1.0f;  // longrope, yarn: cos and sin are scaled by it, so q·k by its square
};
// yarn's default attention factor (transformers' get_mscale): 0.1 · mscale · ln(factor) + 1, 1 for factor <= 1.
float yarn_mscale(float factor, float mscale = 1.0f);
// The context a yarn-scaled model serves: original_context × factor (vLLM's max_model_len), at least max_context.
int yarn_context(const RopeScaling& r, int max_context);

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string name;
  int n_layers = 0;
  int dim = 0;          // hidden size
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;     // may differ from dim / n_heads (Qwen3)
  int hidden_dim = 0;   // feed-forward size
  int vocab_size = 0;
  int max_context = 0;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int rope_dims = 0;    // rotated dims per head (= head_dim unless the model says otherwise)
  RopeOrdering rope_ordering = RopeOrdering::Neox;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;
  bool qk_norm = false;    // Qwen3: RMSNorm over each head of q and k before RoPE
  bool qkv_bias = false;   // Qwen2: biases on the q, k, v projections
  // Gemma. post_norms: a layer normalizes its attention output (post_attention_norm) and its FFN output
  // (post_ffw_norm) before adding them to the residual. norm_weight_offset: added to every RMSNorm weight at load
  // (Hugging Face Gemma stores w - 1 and computes x * (1 + w); GGUF stores 1 + w already).
  bool post_norms = false;
  float norm_weight_offset = 0.0f;
  FfnActivation ffn_activation = FfnActivation::Silu;
  float embedding_scale = 0.0f;     // token embeddings multiplied by it (Gemma: sqrt(dim)); 0: not scaled
  float attn_softcap = 0.0f;        // attention scores s -> c * tanh(s / c) (Gemma 2); 0: off
  float final_softcap = 0.0f;       // logits likewise (Gemma 2); 0: off
  float query_pre_attn_scalar = 0;  // attention scale 1/sqrt(this) (Gemma); 0: 1/sqrt(head_dim)
  // Sliding-window attention: (n_layers) entries, or empty (every layer global). Entry l = W > 0: a query at
  // position p attends to positions p - W + 1 .. p (transformers' q - k < sliding_window); 0: every position.
  std::vector<int> layer_window;
  // Gemma 3: the local (sliding-window) layers' RoPE base, without rope scaling; 0: every layer uses rope_theta.
  float rope_theta_local = 0.0f;
  int window(int layer) const { return layer_window.empty() ? 0 : layer_window[size_t(layer)]; }
  // The positions behind which no layer reads the KV cache again: the largest window when every layer has one
  // (Mistral v0.1, Phi-3), else 0 (a global layer reads everything).
  int kv_release_window() const {
    int w = 0;
    for (int lw : layer_window) {
      if (lw == 0) return 0;
      w = std::max(w, lw);
    }
    return w;
  }
  float attention_scale() const;  // the softmax scale of q·k
  // The factor RoPE's scaling puts on cos and sin (longrope's and yarn's attention factor), so on the rotated dims
  // of q and of k; 1: none.
  float rope_cos_sin_factor() const {
    const bool scaled = rope_scaling.kind == RopeScalingKind::LongRope || rope_scaling.kind == RopeScalingKind::Yarn;
    return scaled ? rope_scaling.attention_factor : 1.0f;
  }
  // The part of it attention_scale() cannot hold: the factor on the rotated dims of q and k after RoPE when only
  // rope_dims < head_dim dims rotate (Phi-4-mini's longrope); 1: none. When every dim rotates (Qwen's yarn, Phi-3's
  // longrope), scaling q and k by f is scaling q·k by f², which attention_scale() holds: no extra op, and a backend
  // without the scale op (ModelFeature::Scale) runs the model.
  float rope_attention_factor() const { return rope_dims < head_dim ? rope_cos_sin_factor() : 1.0f; }
  // Mixture of experts (Qwen3-MoE, Mixtral); n_experts = 0: a dense model. An MoE layer's FFN is n_experts SwiGLU
  // experts of expert_hidden_dim units and a router; each token runs the n_experts_used it routes to.
  int n_experts = 0;
  int n_experts_used = 0;      // experts per token (top-k)
  int expert_hidden_dim = 0;   // one expert's feed-forward size (moe_intermediate_size)
  MoeNorm moe_norm = MoeNorm::Renormalize;
  // Expert parallelism (parallel/sharding.h, --ep N): the experts of every MoE layer this rank holds and computes,
  // [expert_begin, expert_begin + local_experts()); the router still scores all n_experts. A config read from a
  // file holds every expert (n_local_experts 0); a shard plan sets both.
  int expert_begin = 0;
  int n_local_experts = 0;
  int local_experts() const { return n_local_experts > 0 ? n_local_experts : n_experts; }
  std::vector<int> dense_layers;  // layers of an MoE model whose FFN is dense (hidden_dim): mlp_only_layers, sparse step
  bool is_moe_layer(int layer) const;

  void validate() const;   // ferry::Error naming the bad value
  // RoPE inverse frequencies per rotated pair, scaling applied: (rope_dims/2). context: the longest sequence the
  // caller runs (longrope takes its long factors above original_context, as llama.cpp does by its context size).
  // local: a Gemma 3 local layer's frequencies (rope_theta_local, no scaling).
  std::vector<float> rope_inv_freq(int64_t context = 0, bool local = false) const;
  int64_t n_params() const;  // weights, for reports (every expert)
  int64_t n_active_params() const;  // the weights one token runs: n_experts_used of each MoE layer's experts
};

std::string arch_name(Arch a);
// What `ferry inspect` shows of a config beyond its sizes: sliding windows, soft-caps, the attention scale, Gemma's
// norms and embedding scale, RoPE scaling, partial rotary dims (key, value); nothing for a plain Llama config.
std::vector<std::pair<std::string, std::string>> config_facts(const ModelConfig& c);
ModelConfig config_from_gguf(const GgufFile& gguf);
ModelConfig config_from_gguf(const GgufSplitSet& gguf);  // shard 1's metadata, every shard's tensors
ModelConfig config_from_hf(const nlohmann::json& config);

}  // namespace ferry
