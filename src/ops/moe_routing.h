// Mixture-of-experts routing, the part every backend computes the same way: softmax over a token's router logits,
// the top k experts, their weights (renormalized to sum 1 or not), and the grouping of the step's (token, slot)
// pairs by expert so that each routed expert's weights are read once for all of its tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry {

// How an MoE layer weighs the experts it routes a token to (softmax over the router logits, then the top k):
// Renormalize divides the chosen probabilities by their sum (Mixtral's softmax over the chosen logits; Qwen3-MoE
// with norm_topk_prob), Softmax keeps them as they are (Qwen3-MoE without it).
enum class MoeNorm { Softmax, Renormalize };
const char* moe_norm_name(MoeNorm n);  // "softmax", "renormalize"

struct MoeRoutes {
  int64_t n_tokens = 0;
  int top_k = 0;
  int n_experts = 0;
  std::vector<int32_t> expert;  // (n_tokens, top_k): the chosen experts, most probable first (ties: lower index)
  std::vector<float> weight;    // (n_tokens, top_k): their weights
  // Grouped by expert: slots[offsets[e] .. offsets[e+1]) are the (token * top_k + slot) indices routed to expert e,
  // in token order. offsets: (n_experts + 1).
  std::vector<int32_t> offsets;
  std::vector<int32_t> slots;
  int64_t count(int e) const { return offsets[size_t(e) + 1] - offsets[size_t(e)]; }
};

// logits: (n_tokens, n_experts) f32 row-major. ferry::Error when top_k is not in 1..n_experts or a logit is not
// finite (a NaN would route nowhere).
MoeRoutes route_moe(const float* logits, int64_t n_tokens, int n_experts, int top_k, MoeNorm norm);

}  // namespace ferry
