// `ferry quantize` (model/quantize_model.h) on the tiny fixtures (Hugging Face folders: tiny-llama f32 with Llama-3
// RoPE scaling, tiny-qwen2 f16 with biases, tiny-qwen3 bf16 sharded and tied) and on a random GGUF whose rows are
// whole super-blocks (so the K types are not all fallbacks):
//  - an F32 conversion gives the folder's logits (names, Llama's q/k row order, rope_freqs, ties): rel L2 <= 1e-5;
//  - a Q4_K_M file gives the same logits as its own weights dequantized to F32 (reference kernels: both read the
//    same dequantized rows, rel L2 <= 1e-5; measured 0; fast kernels: within their usual 2e-2 of the reference),
//    and stays near the folder's (the quantization error);
//  - the tensor types are the planner's, the tokenizer encodes like the folder's, a progress report per tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd.h"
#include "core/check.h"
#include "fixtures/batches.h"
#include "fixtures/numeric.h"
#include "fixtures/test_paths.h"
#include "model/file_logits.h"
#include "formats/gguf.h"
#include "model/llama_model.h"
#include "model/model_file.h"
#include "model/quant_mix.h"
#include "model/quantize_model.h"
#include "model/random_model.h"
#include "tokenizer/tokenizer.h"

namespace ferry {
namespace {

using test::logits_of;

std::string fixture(const std::string& name) { return test::source_dir() + "/tests/fixtures/models/" + name; }

QuantizeSummary quantize_to(const std::string& in, const std::string& out, const std::string& type,
                            std::vector<QuantizedTensor>* reports = nullptr) {
  QuantizeModelOptions o{in, out, type, 2, {}};
  if (reports) o.on_tensor = [reports](const QuantizedTensor& t) { reports->push_back(t); };
  return quantize_model(o);
}

class FixtureQuantize : public ::testing::TestWithParam<const char*> {};

TEST_P(FixtureQuantize, F32ConversionMatchesTheFolder) {
  const std::string model = GetParam();
  const std::string out = test::temp_path(model + "-f32.gguf");
  quantize_to(fixture(model), out, "F32");
  const auto ref = logits_of(fixture(model), CpuKernels::Reference);
  const auto got = logits_of(out, CpuKernels::Reference);
  const double err = test::rel_l2(got, ref);
  std::printf("%s: F32 GGUF vs folder rel_l2 %.3g\n", model.c_str(), err);
  EXPECT_LE(err, 1e-5);
  const auto [lo, hi] = std::minmax_element(ref.begin(), ref.end());
  EXPECT_GT(*hi - *lo, 1.0f);  // the logits are not degenerate
}

TEST_P(FixtureQuantize, Q4_K_MMatchesItsDequantizedWeights) {
  const std::string model = GetParam();
  const std::string q = test::temp_path(model + "-q4km.gguf"), f32 = test::temp_path(model + "-q4km-f32.gguf");
  std::vector<QuantizedTensor> reports;
  const QuantizeSummary s = quantize_to(fixture(model), q, "q4_k_m", &reports);
  quantize_to(q, f32, "F32");  // the Q4_K_M weights, dequantized

  // a report per tensor, in order, with the planner's types
  ASSERT_EQ(int(reports.size()), s.n_tensors);
  const GgufFile g = GgufFile::open(q);
  ASSERT_EQ(g.tensors().size(), reports.size());
  const ModelConfig c = config_from_gguf(g);
  std::vector<TensorShapeInfo> infos;
  for (const auto& t : g.tensors()) infos.push_back({t.name, t.n_dims, t.shape[size_t(t.n_dims - 1)]});
  const QuantPlanner planner(parse_quant_target("Q4_K_M"), c.n_layers, infos);
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].index, int(i) + 1);
    EXPECT_EQ(reports[i].name, g.tensors()[i].name);
    EXPECT_EQ(g.tensors()[i].dtype, planner.type_for(infos[i])) << g.tensors()[i].name;
  }
  EXPECT_EQ(g.get_int("general.file_type"), 15);
  EXPECT_LT(s.bytes_out, s.bytes_in);

  const auto quant_ref = logits_of(q, CpuKernels::Reference);
  const auto deq_ref = logits_of(f32, CpuKernels::Reference);
  const double err_ref = test::rel_l2(quant_ref, deq_ref);
  const double err_fast = test::rel_l2(logits_of(q, CpuKernels::Fast), deq_ref);
  const double err_src = test::rel_l2(quant_ref, logits_of(fixture(model), CpuKernels::Reference));
  std::printf("%s Q4_K_M: vs dequantized (reference kernels) %.3g, (fast kernels) %.3g; vs the folder %.3g\n",
              model.c_str(), err_ref, err_fast, err_src);
  EXPECT_LE(err_ref, 1e-5);
  EXPECT_LE(err_fast, 2e-2);
  // The fixtures' 64-wide rows make every K type fall back to Q5_0 / Q8_0 (QuantMix.TinyFixtureShapeFallsBack);
  // measured: tiny-llama 0.12, tiny-qwen2 0.33 (its Q5_0 alone: 0.33, Q8_0 0.02), tiny-qwen3 0.13, tiny-qwen3moe
  // 0.37, tiny-mixtral 0.52 (MoE: a quantized router flips near-tied expert choices, which moves whole rows).
  EXPECT_LE(err_src, model == "tiny-mixtral" ? 0.6 : 0.4);
  EXPECT_GT(err_src, 0.0);  // the weights did change
}

TEST_P(FixtureQuantize, TokenizerEncodesLikeTheFolder) {
  const std::string model = GetParam();
  const std::string out = test::temp_path(model + "-tok.gguf");
  quantize_to(fixture(model), out, "Q8_0");
  const ModelFile folder = open_model(fixture(model)), gguf = open_model(out);
  const Tokenizer a(folder.vocab), b(gguf.vocab);
  const std::string text = "The ferry crossed the river at 12:45, carrying 3 cars; don't miss it!\n  Next one?";
  EXPECT_EQ(b.encode(text, true, true), a.encode(text, true, true));
  EXPECT_EQ(gguf.vocab.chat_template, folder.vocab.chat_template);
  EXPECT_EQ(int(gguf.vocab.tokens.size()), gguf.config.vocab_size);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureQuantize,
                         ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-qwen3moe", "tiny-mixtral"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// Rows of 256 and 512 values: Q4_K and Q6_K for real, from a GGUF input.
TEST(Quantize, KQuantMixOfAGgufMatchesItsDequantizedWeights) {
  ModelConfig c = random_model_config("tiny");
  c.dim = 256, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 64, c.rope_dims = 64, c.hidden_dim = 512;
  c.n_layers = 3;
  const std::string src = test::temp_path("kmix-f32.gguf"), q = test::temp_path("kmix-q4km.gguf"),
                    f32 = test::temp_path("kmix-q4km-f32.gguf");
  write_random_model(src, c, DType::F32, 5, 2, true, RandomInit::Peaked);
  // measured against the f32 source: Q6_K 0.029, Q5_K_M 0.049, Q4_K_M 0.095, Q3_K_M 0.18, Q2_K 0.43
  const std::pair<const char*, double> cases[] = {{"Q4_K_M", 0.15}, {"Q3_K_M", 0.25}, {"Q5_K_M", 0.08}, {"Q6_K", 0.05},
                                                  {"Q2_K", 0.6}};
  for (const auto& [type, bound] : cases) {
    quantize_to(src, q, type);
    quantize_to(q, f32, "F32");
    const GgufFile g = GgufFile::open(q);
    int n_k = 0;
    for (const auto& t : g.tensors()) n_k += t.dtype == DType::Q2_K || t.dtype == DType::Q3_K || t.dtype == DType::Q4_K ||
                                             t.dtype == DType::Q5_K || t.dtype == DType::Q6_K;
    EXPECT_GE(n_k, 3 * 7) << type;  // every matrix of every layer is a K type
    const double err = test::rel_l2(logits_of(q, CpuKernels::Reference), logits_of(f32, CpuKernels::Reference));
    const double err_src = test::rel_l2(logits_of(q, CpuKernels::Reference), logits_of(src, CpuKernels::Reference));
    std::printf("%s: vs dequantized %.3g, vs the f32 source %.3g\n", type, err, err_src);
    EXPECT_LE(err, 1e-5) << type;
    EXPECT_LE(err_src, bound) << type;
    EXPECT_GT(err_src, 0.0) << type;
  }
}

TEST(Quantize, ErrorsNameTheProblem) {
  const std::string out = test::temp_path("bad.gguf");
  try {
    quantize_to(fixture("tiny-llama"), out, "Q4_K_S");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_K_S"), std::string::npos) << e.what();
  }
  EXPECT_THROW(quantize_to(fixture("no-such-model"), out, "Q8_0"), Error);
}

}  // namespace
}  // namespace ferry
