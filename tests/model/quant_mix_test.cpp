// The per-tensor types of the K-quant mixes (model/quant_mix.h) on a model's tensor list: a 32-layer Llama shape
// whose rows are whole super-blocks (the rules themselves), the tiny fixtures' shape (every K type falls back),
// a tied-embedding model (token_embd takes the output's type) and an 80-layer one (llama.cpp's 70B rule).
#include <gtest/gtest.h>

#include <map>

#include "core/check.h"
#include "model/quant_mix.h"

namespace ferry {
namespace {

// GGUF tensor list of a Llama model: (name, n_dims, row length).
std::vector<TensorShapeInfo> llama_tensors(int n_layers, int64_t dim, int64_t hidden, bool tied) {
  std::vector<TensorShapeInfo> t = {{"token_embd.weight", 2, dim}, {"output_norm.weight", 1, dim}};
  if (!tied) t.push_back({"output.weight", 2, dim});
  for (int l = 0; l < n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    for (const char* n : {"attn_norm.weight", "ffn_norm.weight"}) t.push_back({b + n, 1, dim});
    for (const char* n : {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "ffn_gate.weight",
                          "ffn_up.weight"})
      t.push_back({b + n, 2, dim});
    t.push_back({b + "ffn_down.weight", 2, hidden});
  }
  return t;
}

std::map<std::string, DType> plan(const std::string& type, int n_layers, const std::vector<TensorShapeInfo>& tensors) {
  const QuantPlanner p(parse_quant_target(type), n_layers, tensors);
  std::map<std::string, DType> out;
  for (const TensorShapeInfo& t : tensors) out[t.name] = p.type_for(t);
  return out;
}

std::string blk(int l, const char* name) { return "blk." + std::to_string(l) + "." + name; }

TEST(QuantMix, UseMoreBitsLayersOf32) {
  // first eighth (0-3), last eighth (28-31), and every third layer from n/8 + 2 = 6
  std::vector<int> more;
  for (int l = 0; l < 32; ++l)
    if (use_more_bits(l, 32)) more.push_back(l);
  EXPECT_EQ(more, (std::vector<int>{0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}));
}

TEST(QuantMix, Q4_K_MOnA32LayerLlama) {
  const auto types = plan("Q4_K_M", 32, llama_tensors(32, 4096, 14336, false));
  EXPECT_EQ(types.at("output.weight"), DType::Q6_K);
  EXPECT_EQ(types.at("token_embd.weight"), DType::Q4_K);
  EXPECT_EQ(types.at("output_norm.weight"), DType::F32);
  int n_q6 = 0;
  for (int l = 0; l < 32; ++l) {
    const DType more = use_more_bits(l, 32) ? DType::Q6_K : DType::Q4_K;
    EXPECT_EQ(types.at(blk(l, "attn_v.weight")), more) << l;
    EXPECT_EQ(types.at(blk(l, "ffn_down.weight")), more) << l;
    n_q6 += more == DType::Q6_K;
    for (const char* n : {"attn_q.weight", "attn_k.weight", "attn_output.weight", "ffn_gate.weight", "ffn_up.weight"})
      EXPECT_EQ(types.at(blk(l, n)), DType::Q4_K) << blk(l, n);
    EXPECT_EQ(types.at(blk(l, "attn_norm.weight")), DType::F32);
  }
  EXPECT_EQ(n_q6, 16);  // "attn_v / ffn_down in about half the layers"
}

TEST(QuantMix, Q5_K_MAndQ6_KAndQ3_K_M) {
  const auto tensors = llama_tensors(32, 4096, 14336, false);
  const auto q5 = plan("q5_k_m", 32, tensors);
  EXPECT_EQ(q5.at(blk(0, "attn_v.weight")), DType::Q6_K);
  EXPECT_EQ(q5.at(blk(4, "attn_v.weight")), DType::Q5_K);
  EXPECT_EQ(q5.at(blk(4, "attn_q.weight")), DType::Q5_K);
  EXPECT_EQ(q5.at("output.weight"), DType::Q6_K);
  const auto q6 = plan("Q6_K", 32, tensors);
  for (const auto& [name, type] : q6) EXPECT_EQ(type, name.find("norm") != std::string::npos ? DType::F32 : DType::Q6_K) << name;
  const auto q3 = plan("Q3_K_M", 32, tensors);
  EXPECT_EQ(q3.at(blk(0, "attn_v.weight")), DType::Q5_K);
  EXPECT_EQ(q3.at(blk(1, "attn_v.weight")), DType::Q5_K);
  EXPECT_EQ(q3.at(blk(2, "attn_v.weight")), DType::Q4_K);
  EXPECT_EQ(q3.at(blk(1, "ffn_down.weight")), DType::Q5_K);  // layers < 32/16 = 2
  EXPECT_EQ(q3.at(blk(2, "ffn_down.weight")), DType::Q4_K);
  EXPECT_EQ(q3.at(blk(5, "attn_output.weight")), DType::Q4_K);
  EXPECT_EQ(q3.at(blk(5, "attn_q.weight")), DType::Q3_K);
  EXPECT_EQ(q3.at("token_embd.weight"), DType::Q3_K);
  EXPECT_EQ(q3.at("output.weight"), DType::Q6_K);
}

TEST(QuantMix, EightyLayersLiftAttnV) {
  const auto types = plan("Q4_K_M", 80, llama_tensors(80, 8192, 28672, false));
  EXPECT_EQ(types.at(blk(11, "attn_v.weight")), DType::Q5_K);  // not use_more_bits(11, 80): Q4_K -> Q5_K
  EXPECT_EQ(types.at(blk(12, "attn_v.weight")), DType::Q6_K);  // (12 - 10) % 3 == 2
  EXPECT_EQ(types.at(blk(11, "ffn_down.weight")), DType::Q4_K);
}

TEST(QuantMix, TiedEmbeddingsTakeTheOutputType) {
  const auto types = plan("Q4_K_M", 30, llama_tensors(30, 576, 1536, true));  // SmolLM2-135M: rows of 576
  EXPECT_EQ(types.at("token_embd.weight"), DType::Q8_0);  // 576 is not a multiple of 256: Q8_0, as llama.cpp
  EXPECT_EQ(types.at(blk(5, "attn_q.weight")), DType::Q5_0);   // Q4_K falls back to Q5_0
  EXPECT_EQ(types.at(blk(0, "attn_v.weight")), DType::Q8_0);   // Q6_K falls back to Q8_0
  EXPECT_EQ(types.at(blk(4, "ffn_down.weight")), DType::Q4_K);  // rows of 1536 = 6 super-blocks
  EXPECT_EQ(types.at(blk(0, "ffn_down.weight")), DType::Q6_K);
}

TEST(QuantMix, TinyFixtureShapeFallsBack) {
  // tests/fixtures/models/tiny-llama: dim 64, ffn 160, 2 layers (both use_more_bits)
  const auto types = plan("Q4_K_M", 2, llama_tensors(2, 64, 160, false));
  EXPECT_EQ(types.at("output.weight"), DType::Q8_0);
  EXPECT_EQ(types.at("token_embd.weight"), DType::Q5_0);
  EXPECT_EQ(types.at(blk(0, "attn_q.weight")), DType::Q5_0);
  EXPECT_EQ(types.at(blk(1, "attn_v.weight")), DType::Q8_0);
  EXPECT_EQ(types.at(blk(1, "ffn_down.weight")), DType::Q8_0);
  const auto q2 = plan("Q2_K", 2, llama_tensors(2, 64, 160, false));
  EXPECT_EQ(q2.at(blk(0, "attn_q.weight")), DType::Q4_0);
  const auto odd = plan("Q4_0", 1, {{"blk.0.attn_q.weight", 2, 48}});  // 48 is not whole Q4_0 blocks
  EXPECT_EQ(odd.at("blk.0.attn_q.weight"), DType::F16);
}

TEST(QuantMix, OneTypeTargetsAndNames) {
  const auto types = plan("bf16", 2, llama_tensors(2, 256, 512, false));
  for (const auto& [name, type] : types) EXPECT_EQ(type, name.find("norm") != std::string::npos ? DType::F32 : DType::BF16);
  const auto q4k = plan("Q4_K", 32, llama_tensors(32, 4096, 14336, false));
  EXPECT_EQ(q4k.at("output.weight"), DType::Q4_K);  // one type: no mix rules
  EXPECT_EQ(q4k.at(blk(0, "attn_v.weight")), DType::Q4_K);
  EXPECT_EQ(parse_quant_target("q4_k_m").name, "Q4_K_M");
  EXPECT_EQ(parse_quant_target("Q4_K_M").file_type, 15u);
  EXPECT_THROW(parse_quant_target("Q4_K_S"), Error);
  EXPECT_THROW(parse_quant_target("iq4_nl"), Error);
}

}  // namespace
}  // namespace ferry
