// End-to-end check against Hugging Face transformers (float32, CPU): for each reference model and each of
// its prompts, teacher-forced logits at every position, and the greedy continuation of 32 tokens.
// The reference data comes from reference/make_logits_golden.py (see reference/README.md).
//  - reference kernels (plain float loops): relative L2 error <= 1e-3 at every position, same greedy tokens;
//  - fast kernels (quantized activations, SIMD): mean KL(transformers || ferry) <= 1e-3 and the same argmax
//    at >= 99% of positions.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ferry/engine.h"
#include "fixtures/test_paths.h"

namespace ferry {
namespace {

struct Golden {
  std::string model_path;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> greedy;
  int vocab = 0;
  std::vector<float> logits;  // prompt-major, position-major, vocab contiguous
};

std::optional<Golden> load_golden(const std::string& name) {
  const std::string dir = test::golden_dir() + "/logits/";
  const nlohmann::json j = nlohmann::json::parse(test::read_file(dir + name + ".json"));
  Golden g;
  g.model_path = test::source_dir() + "/" + j.at("source").get<std::string>();
  if (!std::ifstream(g.model_path).good() && name == "smollm2") return std::nullopt;  // model not fetched
  g.prompts = j.at("prompts").get<std::vector<std::vector<int32_t>>>();
  g.greedy = j.at("greedy").get<std::vector<std::vector<int32_t>>>();
  g.vocab = j.at("vocab_size").get<int>();
  const std::string bin = test::read_file(dir + j.at("logits_file").get<std::string>());
  g.logits.resize(bin.size() / 4);
  std::memcpy(g.logits.data(), bin.data(), g.logits.size() * 4);
  return g;
}

struct Agreement {
  double max_rel_l2 = 0, mean_kl = 0;
  int positions = 0, argmax_same = 0;
};

int argmax(const float* x, int n) { return int(std::max_element(x, x + n) - x); }

void compare(const float* ref, const float* got, int V, Agreement& a) {
  double num = 0, den = 0;
  for (int i = 0; i < V; ++i) {
    num += double(got[i] - ref[i]) * (got[i] - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  a.max_rel_l2 = std::max(a.max_rel_l2, std::sqrt(num / den));
  // KL(p_ref || p_got) from log-softmax in double.
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
  a.argmax_same += argmax(ref, V) == argmax(got, V);
}

Agreement run_scores(Engine& engine, const Golden& g) {
  Agreement a;
  size_t offset = 0;
  for (const auto& prompt : g.prompts) {
    const std::vector<float> got = engine.score(prompt);
    EXPECT_EQ(got.size(), prompt.size() * size_t(g.vocab));
    for (size_t p = 0; p < prompt.size(); ++p)
      compare(g.logits.data() + offset + p * size_t(g.vocab), got.data() + p * size_t(g.vocab), g.vocab, a);
    offset += prompt.size() * size_t(g.vocab);
  }
  a.mean_kl /= std::max(1, a.positions);
  return a;
}

void check_greedy(Engine& engine, const Golden& g) {
  SamplingParams greedy;
  greedy.temperature = 0;
  for (size_t i = 0; i < g.prompts.size(); ++i) {
    engine.reset();
    const GenerateResult r = engine.generate(g.prompts[i], greedy, int(g.greedy[i].size()), nullptr, false);
    EXPECT_EQ(r.tokens, g.greedy[i]) << "greedy continuation of prompt " << i;
  }
}

class LogitsVsTransformers : public ::testing::TestWithParam<std::string> {};

TEST_P(LogitsVsTransformers, ReferenceKernelsMatchWithin1e3AndGreedyAgrees) {
  const auto g = load_golden(GetParam());
  if (!g) GTEST_SKIP() << "default model not downloaded";
  EngineOptions o;
  o.model_path = g->model_path;
  o.kernels = KernelSet::Reference;
  o.context = 256;
  Engine engine(o);
  const Agreement a = run_scores(engine, *g);
  std::printf("%s reference: max rel L2 %.3g, mean KL %.3g, argmax %d/%d\n", GetParam().c_str(), a.max_rel_l2, a.mean_kl,
              a.argmax_same, a.positions);
  EXPECT_LE(a.max_rel_l2, 1e-3);
  EXPECT_EQ(a.argmax_same, a.positions);
  check_greedy(engine, *g);
}

TEST_P(LogitsVsTransformers, FastKernelsKeepKlBelow1e3) {
  const auto g = load_golden(GetParam());
  if (!g) GTEST_SKIP() << "default model not downloaded";
  EngineOptions o;
  o.model_path = g->model_path;
  o.kernels = KernelSet::Fast;
  o.context = 256;
  Engine engine(o);
  const Agreement a = run_scores(engine, *g);
  std::printf("%s fast: max rel L2 %.3g, mean KL %.3g, argmax %d/%d\n", GetParam().c_str(), a.max_rel_l2, a.mean_kl,
              a.argmax_same, a.positions);
  EXPECT_LE(a.mean_kl, 1e-3);
  EXPECT_GE(double(a.argmax_same), 0.99 * a.positions);
}

INSTANTIATE_TEST_SUITE_P(Models, LogitsVsTransformers, ::testing::Values("tiny-llama", "tiny-qwen3", "tiny-qwen2", "smollm2"));

}  // namespace
}  // namespace ferry
