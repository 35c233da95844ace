// The weights of a Llama-family model, one struct per layer, each tensor with its shape and storage.
// Matmul weights keep the type they were stored in (GGUF quantized blocks, F16/BF16/F32) and are used
// through Backend::prepare_weight (CPU: in place from the mmap). Norm weights and biases are converted to
// F32 once at load: they are tiny and every kernel reads them as floats.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "ops/backend.h"

namespace ferry {

struct LayerWeights {
  Tensor attn_norm;  // (dim) f32
  Tensor wq;         // (n_heads*head_dim, dim), stored type
  Tensor wk;         // (n_kv_heads*head_dim, dim)
  Tensor wv;         // (n_kv_heads*head_dim, dim)
  Tensor bq, bk, bv; // (n_heads*head_dim), (n_kv_heads*head_dim) f32: Qwen2 only, else empty
  Tensor q_norm;     // (head_dim) f32: Qwen3 only
  Tensor k_norm;     // (head_dim) f32: Qwen3 only
  Tensor wo;         // (dim, n_heads*head_dim)
  Tensor post_attn_norm;  // (dim) f32: Gemma's norm of the attention output before the residual add, else empty
  Tensor ffn_norm;   // (dim) f32
  Tensor post_ffn_norm;   // (dim) f32: Gemma's norm of the FFN output before the residual add, else empty
  Tensor w_gate;     // (hidden_dim, dim)
  Tensor w_up;       // (hidden_dim, dim)
  Tensor w_down;     // (dim, hidden_dim)
  // Mixture of experts (config.is_moe_layer(l)); w_gate, w_up, w_down are empty then. E = n_experts,
  // H = expert_hidden_dim. Each expert's matrix is prepared on its own (GGUF: a slice of the stacked 3-D tensor
  // (E, H, dim) blk.N.ffn_gate_exps.weight; Hugging Face: the expert's own tensor).
  Tensor ffn_gate_inp;                // (E, dim) router, stored type
  std::vector<Tensor> ffn_gate_exps;  // E x (H, dim), stored type
  std::vector<Tensor> ffn_up_exps;    // E x (H, dim)
  std::vector<Tensor> ffn_down_exps;  // E x (dim, H)
  bool is_moe() const { return !ffn_gate_inp.empty(); }
  // Fused projections (model/fuse_weights.h), made at load when the backend wants_fused_projections() and the
  // parts share a type, or where their types differ and the backend stacks them (DType::Stacked:
  // Backend::prepare_stacked_weight, e.g. a Q4_K_M layer's q|k in Q4_K and v in Q6_K on the CUDA backend); then the
  // separate tensors above are empty (not kept). Phi-3 stores them fused
  // (qkv_proj / attn_qkv, gate_up_proj / ffn_up of 2*hidden_dim rows): kept as these when the backend wants fused
  // projections, else split into row views of the file's tensor (wq, wk, wv; w_gate, w_up), no copy.
  Tensor wqkv;       // ((n_heads + 2*n_kv_heads)*head_dim, dim): rows of wq, then wk, then wv; stored type or Stacked
  Tensor bqkv;       // ((n_heads + 2*n_kv_heads)*head_dim) f32: bq|bk|bv (zeros for a missing one), or empty
  Tensor w_gate_up;  // (2*hidden_dim, dim): rows of w_gate, then w_up; stored type or Stacked
};

struct ModelWeights {
  Tensor tok_embd;     // (vocab_size, dim), stored type (rows dequantized by the embedding op)
  Tensor output_norm;  // (dim) f32
  Tensor output;       // (vocab_size, dim): the lm head, or tok_embd when tied
  Tensor rope_freqs;   // (rope_dims/2) f32 divisors of the base frequencies (Llama 3.1 GGUF), or empty
  std::vector<LayerWeights> layers;
  std::vector<DeviceBuffer> storage;  // what the tensors above point into, when not the model file
  std::vector<std::pair<std::string, Tensor>> named;  // every weight by its file name (inspect, reports)
};

// A source of named host tensors: a GGUF file or a safetensors folder (see model_file.h).
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const Tensor* find(const std::string& name) const = 0;  // host view or nullptr
  virtual std::string describe() const = 0;                       // file name for errors
};

// Loads every tensor the config needs, checking names, shapes and types; ferry::Error names what is missing.
// gguf_names: GGUF naming (blk.N.attn_q.weight) or Hugging Face naming (model.layers.N.self_attn.q_proj.weight).
ModelWeights load_weights(const ModelConfig& config, const WeightSource& source, bool gguf_names, Backend& backend);

}  // namespace ferry
