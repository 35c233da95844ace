// `ferry quantize` of the default model (SmolLM2-135M-Instruct Q4_1, 30 layers, rows of 576 and 1536) to Q4_K_M:
// the per-tensor types llama.cpp's rules give a tied 576-wide model, and the logits equal those of its own weights
// dequantized to F32 (reference kernels: the same dequantized rows, rel L2 <= 1e-5, measured 0; fast kernels within
// 3e-2 of the reference). Skips when the default model is not downloaded.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd.h"
#include "fixtures/batches.h"
#include "fixtures/numeric.h"
#include "fixtures/test_paths.h"
#include "formats/gguf.h"
#include "model/llama_model.h"
#include "model/model_file.h"
#include "model/quantize_model.h"

namespace ferry {
namespace {

std::vector<float> logits_of(const std::string& path, CpuKernels kernels) {
  const ModelFile f = open_model(path);
  CpuBackendOptions o;
  o.kernels = kernels;
  o.n_threads = 0;
  o.simd = detect_simd();
  CpuBackend backend(o);
  ModelWeights w = load_weights(f.config, *f.weights, f.gguf_names, backend);
  LlamaModel model(f.config, std::move(w), backend, KvCacheShape{2, 16}, 16);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 16; ++i) prompt.push_back((i * 3001 + 17) % f.config.vocab_size);
  std::vector<float> logits;
  model.forward(test::single_sequence_batch(prompt, 0, true, 2), logits);
  return logits;
}

TEST(QuantizeDefaultModel, Q4_K_MMatchesItsDequantizedWeights) {
  const auto model = test::default_model();
  if (!model) GTEST_SKIP() << "default model not downloaded";
  const std::string q = test::temp_path("smollm2-q4km.gguf"), f32 = test::temp_path("smollm2-q4km-f32.gguf");
  quantize_model({*model, q, "Q4_K_M", 0, {}});
  quantize_model({q, f32, "F32", 0, {}});
  const GgufFile g = GgufFile::open(q);
  std::map<DType, int> counts;
  for (const auto& t : g.tensors()) ++counts[t.dtype];
  // tied 576-wide embeddings: Q8_0; 576-wide rows: Q4_K -> Q5_0, Q6_K -> Q8_0; ffn_down (rows of 1536) is a real
  // K type: Q6_K in the use_more_bits layers (14 of 30: 0-2, 5, 8, ..., 23, 26-29), Q4_K in the others
  EXPECT_EQ(g.find_tensor("token_embd.weight")->dtype, DType::Q8_0);
  EXPECT_EQ(counts[DType::Q6_K], 14);
  EXPECT_EQ(counts[DType::Q4_K], 16);
  EXPECT_EQ(counts[DType::Q8_0], 1 + 14);  // token_embd, attn_v in the use_more_bits layers
  EXPECT_EQ(counts[DType::Q5_0], 30 * 5 + 16);  // q, k, o, gate, up; attn_v elsewhere
  const auto ref = logits_of(f32, CpuKernels::Reference);
  const double err_ref = test::rel_l2(logits_of(q, CpuKernels::Reference), ref);
  const double err_fast = test::rel_l2(logits_of(q, CpuKernels::Fast), ref);
  std::printf("SmolLM2 Q4_K_M vs its dequantized F32: reference kernels %.3g, fast kernels %.3g\n", err_ref, err_fast);
  EXPECT_LE(err_ref, 1e-5);
  EXPECT_LE(err_fast, 3e-2);  // measured 0.018: the K types' Q8_K activations (one scale per 256) meet SmolLM2's
                              // outlier channels
}

}  // namespace
}  // namespace ferry
