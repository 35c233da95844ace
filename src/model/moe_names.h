// Tensor names of a mixture-of-experts layer. GGUF (llama.cpp) stacks each projection's experts into one 3-D
// tensor: blk.N.ffn_gate_inp.weight (E, dim) the router, blk.N.ffn_{gate,up}_exps.weight (E, H, dim),
// blk.N.ffn_down_exps.weight (E, dim, H). Hugging Face keeps one tensor per expert:
//   Qwen3-MoE: model.layers.N.mlp.gate.weight, model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight;
//   Mixtral:   model.layers.N.block_sparse_moe.gate.weight, ...block_sparse_moe.experts.E.{w1,w3,w2}.weight
//              (w1 gate, w3 up, w2 down).
#pragma once

#include <optional>
#include <string>

namespace ferry {

enum class ExpertProj { Gate, Up, Down };

struct ExpertNames {
  bool gguf = true;
  bool mixtral = false;  // Hugging Face naming: Mixtral's block_sparse_moe (else Qwen3-MoE's mlp)
  int layer = 0;
  std::string router() const;
  std::string stacked(ExpertProj p) const;                // GGUF: blk.N.ffn_gate_exps.weight ...
  std::string per_expert(int expert, ExpertProj p) const;  // Hugging Face: one expert's tensor
};

// A Hugging Face per-expert tensor name, parsed (either naming); nullopt for any other name.
struct HfExpertTensor {
  int layer = 0, expert = 0;
  ExpertProj proj = ExpertProj::Gate;
  bool mixtral = false;
};
std::optional<HfExpertTensor> parse_hf_expert_name(const std::string& name);

}  // namespace ferry
