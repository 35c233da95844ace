// End-to-end check against Hugging Face transformers (float32, CPU): for each reference model and each of
// its prompts, teacher-forced logits at every position, and the greedy continuation of 32 tokens.
// The reference data comes from reference/make_logits_golden.py (see reference/README.md).
//  - reference kernels (plain float loops): relative L2 error <= 1e-3 at every position, same greedy tokens;
//  - fast kernels (quantized activations, SIMD): mean KL(transformers || ferry) <= 1e-3 and the same argmax
//    at >= 99% of positions.
#include <gtest/gtest.h>

#include "ferry/engine.h"
#include "fixtures/golden_logits.h"
#include "fixtures/test_paths.h"
#include "model/quantize_model.h"

namespace ferry {
namespace {

Engine make_engine(const test::GoldenLogits& g, KernelSet kernels) {
  EngineOptions o;
  o.model_path = g.model_path;
  o.kernels = kernels;
  o.context = 256;
  return Engine(o);
}

class LogitsVsTransformers : public ::testing::TestWithParam<std::string> {};

TEST_P(LogitsVsTransformers, ReferenceKernelsMatchWithin1e3AndGreedyAgrees) {
  const auto g = test::load_golden_logits(GetParam());
  if (!g) GTEST_SKIP() << "default model not downloaded";
  Engine engine = make_engine(*g, KernelSet::Reference);
  const test::LogitAgreement a = test::compare_scores(*g, [&](const auto& p) { return engine.score(p); });
  std::printf("%s reference: %s\n", GetParam().c_str(), a.summary().c_str());
  EXPECT_LE(a.max_rel_l2, 1e-3);
  EXPECT_EQ(a.argmax_same, a.positions);
  SamplingParams greedy;
  greedy.temperature = 0;
  for (size_t i = 0; i < g->prompts.size(); ++i) {
    engine.reset();
    const GenerateResult r = engine.generate(g->prompts[i], greedy, int(g->greedy[i].size()), nullptr, false);
    EXPECT_EQ(r.tokens, g->greedy[i]) << "greedy continuation of prompt " << i;
  }
}

TEST_P(LogitsVsTransformers, FastKernelsKeepKlBelow1e3) {
  const auto g = test::load_golden_logits(GetParam());
  if (!g) GTEST_SKIP() << "default model not downloaded";
  Engine engine = make_engine(*g, KernelSet::Fast);
  const test::LogitAgreement a = test::compare_scores(*g, [&](const auto& p) { return engine.score(p); });
  std::printf("%s fast: %s\n", GetParam().c_str(), a.summary().c_str());
  EXPECT_LE(a.mean_kl, 1e-3);
  EXPECT_GE(double(a.argmax_same), 0.99 * a.positions);
}

INSTANTIATE_TEST_SUITE_P(Models, LogitsVsTransformers,
                         ::testing::Values("tiny-llama", "tiny-qwen3", "tiny-qwen2", "tiny-qwen3moe", "tiny-mixtral",
                                           "tiny-gemma2", "tiny-gemma3", "tiny-phi3", "smollm2"));

// A fixture as the GGUF file `ferry quantize ... F32` writes, against the same golden logits at the same tolerances.
void check_f32_gguf(const std::string& name) {
  auto g = test::load_golden_logits(name);
  ASSERT_TRUE(g.has_value());
  const std::string gguf = test::temp_path(name + "-golden-f32.gguf");
  quantize_model({g->model_path, gguf, "F32", 2, {}});
  g->model_path = gguf;
  for (KernelSet kernels : {KernelSet::Reference, KernelSet::Fast}) {
    Engine engine = make_engine(*g, kernels);
    const test::LogitAgreement a = test::compare_scores(*g, [&](const auto& p) { return engine.score(p); });
    std::printf("%s gguf %s: %s\n", name.c_str(), kernels == KernelSet::Reference ? "reference" : "fast",
                a.summary().c_str());
    EXPECT_LE(a.max_rel_l2, 1e-3);
    EXPECT_EQ(a.argmax_same, a.positions);
    SamplingParams greedy;
    greedy.temperature = 0;
    for (size_t i = 0; i < g->prompts.size(); ++i) {
      engine.reset();
      const GenerateResult r = engine.generate(g->prompts[i], greedy, int(g->greedy[i].size()), nullptr, false);
      EXPECT_EQ(r.tokens, g->greedy[i]) << "greedy continuation of prompt " << i;
    }
  }
}

// The MoE fixtures (experts stacked into 3-D ffn_*_exps tensors, Mixtral's q/k rows permuted for interleaved RoPE).
class MoeGgufVsTransformers : public ::testing::TestWithParam<std::string> {};
TEST_P(MoeGgufVsTransformers, F32GgufMatchesWithin1e3AndGreedyAgrees) { check_f32_gguf(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Models, MoeGgufVsTransformers, ::testing::Values("tiny-qwen3moe", "tiny-mixtral"));

// Gemma 2 / 3 and Phi-3 as llama.cpp names them: Gemma's norms as 1 + w and its four norm names, the local layers in
// attention.sliding_window_pattern, Phi-3's fused attn_qkv and ffn_up and its rope_factors_short/long tensors.
class DenseGgufVsTransformers : public ::testing::TestWithParam<std::string> {};
TEST_P(DenseGgufVsTransformers, F32GgufMatchesWithin1e3AndGreedyAgrees) { check_f32_gguf(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Models, DenseGgufVsTransformers, ::testing::Values("tiny-gemma2", "tiny-gemma3", "tiny-phi3"));

}  // namespace
}  // namespace ferry
