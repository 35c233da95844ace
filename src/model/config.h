// Hyperparameters of a Llama-family model, read from GGUF metadata or a Hugging Face config.json.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "ops/backend.h"

namespace ferry {

class GgufFile;

enum class Arch { Llama, Qwen2, Qwen3, Qwen3Moe };  // Mixtral is Llama with experts (n_experts > 0)

enum class RopeScalingKind { None, Linear, Llama3 };

struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::None;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  int original_context = 8192;    // llama3: original_max_position_embeddings
};

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
  // Mixture of experts (Qwen3-MoE, Mixtral); n_experts = 0: a dense model. An MoE layer's FFN is n_experts SwiGLU
  // experts of expert_hidden_dim units and a router; each token runs the n_experts_used it routes to.
  int n_experts = 0;
  int n_experts_used = 0;      // experts per token (top-k)
  int expert_hidden_dim = 0;   // one expert's feed-forward size (moe_intermediate_size)
  MoeNorm moe_norm = MoeNorm::Renormalize;
  std::vector<int> dense_layers;  // layers of an MoE model whose FFN is dense (hidden_dim): mlp_only_layers, sparse step
  bool is_moe_layer(int layer) const;

  void validate() const;   // ferry::Error naming the bad value
  // RoPE inverse frequencies per rotated pair, scaling applied: (rope_dims/2)
  std::vector<float> rope_inv_freq() const;
  int64_t n_params() const;  // weights, for reports (every expert)
  int64_t n_active_params() const;  // the weights one token runs: n_experts_used of each MoE layer's experts
};

std::string arch_name(Arch a);
ModelConfig config_from_gguf(const GgufFile& gguf);
ModelConfig config_from_hf(const nlohmann::json& config);

}  // namespace ferry
