// Which GGUF type each tensor gets when a model is quantized (`ferry quantize`): one type for every matrix, or a
// llama.cpp-style mix (Q3_K_M, Q4_K_M, Q5_K_M, Q6_K) whose per-tensor rules follow what llama.cpp's quantizer
// does for that mix (llama_tensor_get_type in its llama-quant.cpp, Llama-family dense models, no importance matrix):
//  - output.weight (token_embd.weight when the embeddings are tied): Q6_K, or Q8_0 when its rows are not a
//    whole number of the mix's super-blocks;
//  - attn_v.weight of layer i: Q4_K_M / Q5_K_M: Q6_K where use_more_bits(i, n_layers) (the first and last eighth
//    of the layers and every third between); Q3_K_M: Q5_K in layers 0-1, else Q4_K; 80-layer models (llama.cpp's
//    70B class, 8 query heads per KV head) lift a Q3_K/Q4_K attn_v to Q5_K;
//  - ffn_down.weight of layer i: Q4_K_M / Q5_K_M: Q6_K where use_more_bits(i, n_layers); Q3_K_M: Q5_K in the
//    first sixteenth of the layers, else Q4_K;
//  - attn_output.weight: Q3_K_M: Q4_K;
//  - everything else: the mix's base type (Q3_K, Q4_K, Q5_K, Q6_K), token_embd.weight included.
// Then, as llama.cpp, a type whose block does not divide the row falls back: Q4_K -> Q5_0, Q5_K -> Q5_1,
// Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0 (llama.cpp now picks IQ4_NL, a type ferry does not have; Q4_0 is what it
// picked before IQ4_NL existed), and to F16 when even that block does not divide the row.
// One-type targets (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K) give every matrix that type (as
// llama-quantize --pure), with the same fallbacks. Vectors (norms, biases, rope_freqs) are always F32.
// llama.cpp counts attn_v / ffn_down tensors in file order; here the layer index comes from the name (blk.N.),
// the same number for every file whose layers are in order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ferry {

enum class QuantMix { OneType, Q3_K_M, Q4_K_M, Q5_K_M, Q6_K };

struct QuantTarget {
  std::string name;              // as the user wrote it, canonical case: "Q4_K_M", "Q8_0", "F16"
  QuantMix mix = QuantMix::OneType;
  DType base = DType::F16;       // the one type, or the mix's base type
  uint32_t file_type = 1;        // llama.cpp's LLAMA_FTYPE number for general.file_type
};

// Names: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k q3_k_m q4_k_m q5_k_m (any case).
// Throws ferry::Error listing them for anything else.
QuantTarget parse_quant_target(const std::string& name);
std::vector<std::string> quant_target_names();

// llama.cpp's use_more_bits: the layers that get more bits in the _M mixes.
bool use_more_bits(int layer, int n_layers);

struct TensorShapeInfo {
  std::string name;   // GGUF name: token_embd.weight, blk.3.attn_v.weight, ...
  int n_dims = 2;
  int64_t cols = 0;   // innermost dimension (the row length)
};

class QuantPlanner {
 public:
  // tensors: the whole model's tensor list (to see whether an output.weight exists); n_layers from the config.
  QuantPlanner(QuantTarget target, int n_layers, const std::vector<TensorShapeInfo>& tensors);
  // The type tensor t is written in.
  DType type_for(const TensorShapeInfo& t) const;
  const QuantTarget& target() const { return target_; }

 private:
  DType mix_type(const std::string& name) const;  // before the row-length fallback

  QuantTarget target_;
  int n_layers_;
  bool has_output_ = false;
};

}  // namespace ferry
