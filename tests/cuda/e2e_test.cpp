// End to end on the GPU: the reference models' teacher-forced logits with EngineOptions.device = "cuda"
// against transformers' (tests/golden/logits, as tests/e2e/logits_vs_transformers_test.cpp reads them).
// Per position: cosine >= 0.999 and the same argmax; mean KL(transformers || ferry) <= 1e-3. Run with the
// whole prompt in one step (prefill kernels: matvec for <= 16 tokens, cuBLASLt above) and one token per
// step (decode kernels, attention over a growing cache).
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cuda/cuda_backend.h"
#include "ferry/engine.h"
#include "fixtures/test_paths.h"

namespace ferry {
namespace {

struct Golden {
  std::string model_path;
  std::vector<std::vector<int32_t>> prompts;
  int vocab = 0;
  std::vector<float> logits;  // prompt-major, position-major, vocab contiguous
};

std::optional<Golden> load_golden(const std::string& name) {
  const std::string dir = test::golden_dir() + "/logits/";
  const nlohmann::json j = nlohmann::json::parse(test::read_file(dir + name + ".json"));
  Golden g;
  g.model_path = test::source_dir() + "/" + j.at("source").get<std::string>();
  if (!std::ifstream(g.model_path).good() && name == "smollm2") return std::nullopt;
  g.prompts = j.at("prompts").get<std::vector<std::vector<int32_t>>>();
  g.vocab = j.at("vocab_size").get<int>();
  const std::string bin = test::read_file(dir + j.at("logits_file").get<std::string>());
  g.logits.resize(bin.size() / 4);
  std::memcpy(g.logits.data(), bin.data(), g.logits.size() * 4);
  return g;
}

struct Agreement {
  double min_cosine = 1, mean_kl = 0;
  int positions = 0, argmax_same = 0;
};

void compare(const float* ref, const float* got, int V, Agreement& a) {
  double dot = 0, nr = 0, ng = 0;
  for (int i = 0; i < V; ++i) {
    dot += double(ref[i]) * got[i];
    nr += double(ref[i]) * ref[i];
    ng += double(got[i]) * got[i];
  }
  a.min_cosine = std::min(a.min_cosine, dot / std::sqrt(nr * ng));  // NaN in got makes this NaN: the check fails
  const double mr = *std::max_element(ref, ref + V), mg = *std::max_element(got, got + V);
  double zr = 0, zg = 0;
  for (int i = 0; i < V; ++i) {
    zr += std::exp(double(ref[i]) - mr);
    zg += std::exp(double(got[i]) - mg);
  }
  const double lzr = std::log(zr) + mr, lzg = std::log(zg) + mg;
  double kl = 0;
  for (int i = 0; i < V; ++i) {
    const double lp = ref[i] - lzr, lq = got[i] - lzg;
    kl += std::exp(lp) * (lp - lq);
  }
  a.mean_kl += kl;
  a.positions++;
  a.argmax_same += (std::max_element(ref, ref + V) - ref) == (std::max_element(got, got + V) - got);
}

class CudaLogits : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CudaLogits, MatchTransformers) {
  if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const auto& [name, step] = GetParam();
  const auto g = load_golden(name);
  if (!g) GTEST_SKIP() << "default model not downloaded";
  EngineOptions o;
  o.model_path = g->model_path;
  o.device = "cuda";
  o.context = 256;
  o.max_step_tokens = step;
  Engine engine(o);
  EXPECT_EQ(engine.info().backend, "cuda");
  Agreement a;
  size_t offset = 0;
  for (const auto& prompt : g->prompts) {
    const std::vector<float> got = engine.score(prompt);
    ASSERT_EQ(got.size(), prompt.size() * size_t(g->vocab));
    for (size_t p = 0; p < prompt.size(); ++p)
      compare(g->logits.data() + offset + p * size_t(g->vocab), got.data() + p * size_t(g->vocab), g->vocab, a);
    offset += prompt.size() * size_t(g->vocab);
  }
  a.mean_kl /= std::max(1, a.positions);
  std::printf("%s cuda step %d: min cosine %.6f, mean KL %.3g, argmax %d/%d\n", name.c_str(), step, a.min_cosine,
              a.mean_kl, a.argmax_same, a.positions);
  EXPECT_GE(a.min_cosine, 0.999);
  EXPECT_LE(a.mean_kl, 1e-3);
  EXPECT_EQ(a.argmax_same, a.positions);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaLogits,
                         ::testing::Combine(::testing::Values("tiny-llama", "tiny-qwen3", "tiny-qwen2", "smollm2"),
                                            ::testing::Values(256, 1)));

}  // namespace
}  // namespace ferry

#endif  // FERRY_HAS_CUDA
