// YaRN rope scaling (Qwen2.5 / Qwen3 configs):
//  - config.json read by config_from_hf against transformers' own _compute_yarn_parameters on every case of
//    tests/golden/rope/yarn.json (reference/make_yarn_golden.py): inverse frequencies per rotated pair, the
//    attention factor, folded into the softmax scale when every dim rotates, and the context (original × factor);
//  - the GGUF keys llama.cpp's converter writes, and `ferry quantize`'s (set_gguf_config), read back alike;
//  - a tiny Qwen2 folder with yarn loads on a backend without the scale op and runs on the CPU: position 0 (one key:
//    the softmax weight is 1 whatever the scale) gives the unscaled model's logits, later positions do not, and yarn
//    of factor 1 is plain RoPE.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "ferry/engine.h"
#include "fixtures/forwarding_backend.h"
#include "fixtures/test_paths.h"
#include "formats/gguf.h"
#include "model/config.h"
#include "model/gguf_export.h"
#include "model/llama_model.h"
#include "model/model_file.h"

namespace ferry {
namespace {

nlohmann::json golden() {
  return nlohmann::json::parse(test::read_file(test::golden_dir() + "/rope/yarn.json"));
}

nlohmann::json golden_case(const std::string& name) {
  const nlohmann::json g = golden();
  for (const auto& c : g["cases"])
    if (c["name"] == name) return c;
  ADD_FAILURE() << "no golden case " << name;
  return {};
}

void expect_inv_freq(const std::vector<float>& got, const nlohmann::json& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want[i].get<double>();
    // transformers computes in float32 (a pow, a division, the blend): a few ulps from ferry's double, rounded once.
    EXPECT_NEAR(got[i], w, 3e-6 * std::fabs(w)) << what << " pair " << i;
  }
}

TEST(YarnConfig, MatchesTransformersOnEveryGoldenCase) {
  const nlohmann::json g = golden();
  ASSERT_GE(g["cases"].size(), 6u);
  for (const auto& gc : g["cases"]) {
    const std::string name = gc["name"];
    const ModelConfig c = config_from_hf(gc["config"]);
    ASSERT_EQ(c.rope_scaling.kind, RopeScalingKind::Yarn) << name;
    expect_inv_freq(c.rope_inv_freq(), gc["inv_freq"], name);
    const double af = gc["attention_factor"].get<double>();
    EXPECT_NEAR(c.rope_cos_sin_factor(), af, 1e-6 * af) << name;
    // Every dim rotates: q·k scaled by the factor's square in the softmax scale, no op on q and k.
    EXPECT_EQ(c.rope_attention_factor(), 1.0f) << name;
    EXPECT_NEAR(c.attention_scale(), af * af / std::sqrt(double(c.head_dim)), 1e-6) << name;
  }
}

TEST(YarnConfig, QwenCardsServeTheirScaledContext) {
  // Qwen2.5-7B: 4 × 32768 (its card's yarn block; max_position_embeddings stays 32768 in the file).
  const ModelConfig q25 = config_from_hf(golden_case("qwen2.5-7b")["config"]);
  EXPECT_EQ(q25.max_context, 131072);
  EXPECT_EQ(q25.rope_scaling.original_context, 32768);
  EXPECT_FLOAT_EQ(q25.rope_scaling.factor, 4.0f);
  EXPECT_FLOAT_EQ(q25.rope_scaling.beta_fast, 32.0f);
  EXPECT_FLOAT_EQ(q25.rope_scaling.beta_slow, 1.0f);
  // The formula, independently: the fastest pair keeps theta^0 = 1, the slowest is divided by the factor, and the
  // attention factor is 0.1 ln 4 + 1.
  const std::vector<float> inv = q25.rope_inv_freq();
  EXPECT_FLOAT_EQ(inv.front(), 1.0f);
  EXPECT_NEAR(inv.back(), std::pow(1e6, -126.0 / 128) / 4, 1e-6 * inv.back());
  EXPECT_NEAR(q25.rope_scaling.attention_factor, 0.1 * std::log(4.0) + 1, 1e-7);
  // Qwen3-8B's max_position_embeddings (40960) is above 32768 × 1.25 but below × 4.
  EXPECT_EQ(config_from_hf(golden_case("qwen3-8b")["config"]).max_context, 131072);
  // factor null: max_position_embeddings / original.
  EXPECT_FLOAT_EQ(config_from_hf(golden_case("factor-null")["config"]).rope_scaling.factor, 4.0f);
  // What `ferry inspect` shows.
  bool shown = false;
  for (const auto& [k, v] : config_facts(q25))
    if (k == "rope scaling") shown = v == "yarn (factor 4, original context 32768, beta fast 32, slow 1, attention factor 1.1386)";
  EXPECT_TRUE(shown);
  nlohmann::json bad = golden_case("tiny-betas")["config"];
  bad["rope_scaling"]["factor"] = -2.0;
  EXPECT_THROW(config_from_hf(bad), Error);
  bad["rope_scaling"]["factor"] = 2.0;
  bad["rope_scaling"]["original_max_position_embeddings"] = 0;
  EXPECT_THROW(config_from_hf(bad), Error);
}

// A GGUF of metadata only (and the embedding table config_from_gguf looks for): `keys` under the arch's prefix.
ModelConfig config_of_gguf(const std::string& arch, int dim, const std::vector<std::pair<std::string, GgufValue>>& keys) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str(arch));
  for (const auto& [k, v] : keys) w.set(arch + "." + k, v);
  std::vector<float> embd(size_t(512) * size_t(dim), 0.5f);
  w.add_tensor("token_embd.weight", DType::F32, {512, dim}, embd.data());
  const std::string path = test::temp_path("yarn-" + arch + "-" + std::to_string(dim) + ".gguf");
  w.write(path);
  return config_from_gguf(GgufFile::open(path));
}

// The config's GGUF metadata as `ferry quantize` writes it (set_gguf_config), read back.
ModelConfig config_through_gguf(const ModelConfig& c) {
  GgufWriter w;
  set_gguf_config(w, c);
  std::vector<float> embd(size_t(c.vocab_size) * size_t(c.dim), 0.5f);
  w.add_tensor("token_embd.weight", DType::F32, {c.vocab_size, c.dim}, embd.data());
  const std::string path = test::temp_path("yarn-export-" + std::to_string(c.dim) + ".gguf");
  w.write(path);
  return config_from_gguf(GgufFile::open(path));
}

TEST(YarnConfig, GgufKeysReadBackAsTransformersComputes) {
  for (const char* name : {"tiny-betas", "attention-factor", "qwen3-8b"}) {
    const nlohmann::json gc = golden_case(name);
    const ModelConfig hf = config_from_hf(gc["config"]);
    const ModelConfig back = config_through_gguf(hf);
    ASSERT_EQ(back.rope_scaling.kind, RopeScalingKind::Yarn) << name;
    expect_inv_freq(back.rope_inv_freq(), gc["inv_freq"], name);
    EXPECT_FLOAT_EQ(back.rope_cos_sin_factor(), hf.rope_cos_sin_factor()) << name;
    EXPECT_EQ(back.max_context, hf.max_context) << name;
  }
  // llama.cpp's converter on a Qwen3 config of factor 4 writes no betas and no attention factor: the defaults, and
  // the mscale of the factor (the factor-null case's numbers: its factor comes out 4).
  const std::vector<std::pair<std::string, GgufValue>> qwen3 = {
      {"block_count", GgufValue::u32(2)}, {"embedding_length", GgufValue::u32(256)},
      {"feed_forward_length", GgufValue::u32(128)}, {"attention.head_count", GgufValue::u32(4)},
      {"attention.head_count_kv", GgufValue::u32(2)}, {"attention.key_length", GgufValue::u32(64)},
      {"context_length", GgufValue::u32(131072)}, {"rope.freq_base", GgufValue::f32(1e6f)},
      {"rope.scaling.type", GgufValue::str("yarn")}, {"rope.scaling.factor", GgufValue::f32(4)},
      {"rope.scaling.original_context_length", GgufValue::u32(32768)}};
  const ModelConfig cpp = config_of_gguf("qwen3", 256, qwen3);
  const nlohmann::json gc = golden_case("factor-null");
  expect_inv_freq(cpp.rope_inv_freq(), gc["inv_freq"], "llama.cpp's keys");
  EXPECT_NEAR(cpp.rope_cos_sin_factor(), gc["attention_factor"].get<double>(), 1e-6);
  // yarn_log_multiplier: mscale_all_dim (mscale 1): get_mscale(4) / get_mscale(4, 0.5).
  std::vector<std::pair<std::string, GgufValue>> logmul = qwen3;
  logmul.emplace_back("rope.scaling.yarn_log_multiplier", GgufValue::f32(0.5f));
  EXPECT_NEAR(config_of_gguf("qwen3", 256, logmul).rope_cos_sin_factor(),
              (0.1 * std::log(4.0) + 1) / (0.05 * std::log(4.0) + 1), 1e-6);
  // truncate false has no GGUF key: refused rather than written wrong.
  GgufWriter w;
  EXPECT_THROW(set_gguf_config(w, config_from_hf(golden_case("mscale-untruncated")["config"])), Error);
}

// tests/fixtures/models/tiny-qwen2 (transformers' Qwen2, 2 layers, head_dim 16, every dim rotating) with its
// config.json's rope_scaling replaced.
std::string tiny_qwen2_with(const nlohmann::json& rope_scaling, const std::string& tag) {
  namespace fs = std::filesystem;
  const fs::path src = test::source_dir() + "/tests/fixtures/models/tiny-qwen2";
  const fs::path dir = test::temp_path("tiny-qwen2-yarn-" + tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().filename() != "config.json") fs::copy_file(e.path(), dir / e.path().filename());
  nlohmann::json config = nlohmann::json::parse(test::read_file((src / "config.json").string()));
  config.erase("rope_parameters");
  config["rope_scaling"] = rope_scaling;
  std::ofstream(dir / "config.json") << config.dump(1);
  return dir.string();
}

std::vector<float> logits_of(const std::string& model, const std::vector<int32_t>& tokens) {
  EngineOptions eo;
  eo.model_path = model;
  eo.n_threads = 2;
  eo.context = 64;
  Engine engine(eo);
  return engine.score(tokens);
}

class LackingScale : public test::ForwardingCpuBackend {
 public:
  LackingScale() : test::ForwardingCpuBackend({.kernels = CpuKernels::Reference, .n_threads = 1}) {}
  bool supports(ModelFeature f) const override { return f != ModelFeature::Scale && cpu_.supports(f); }
};

TEST(YarnModel, TinyQwen2RunsOnTheCpu) {
  const nlohmann::json yarn = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16}};
  const std::string scaled = tiny_qwen2_with(yarn, "f4");
  const ModelFile m = open_model(scaled);
  ASSERT_EQ(m.config.rope_scaling.kind, RopeScalingKind::Yarn);
  EXPECT_EQ(m.config.max_context, 512);  // the file's 512 is above 16 × 4
  {  // every dim rotates: the attention factor is in the softmax scale, so a backend without the scale op runs it
    LackingScale backend;
    ModelWeights w = load_weights(m.config, *m.weights, m.gguf_names, backend);
    EXPECT_NO_THROW(LlamaModel(m.config, std::move(w), backend, KvCacheShape{8, 16}, 8));
  }
  std::vector<int32_t> tokens(40);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(3 + 11 * i) % 500;
  const std::string plain = test::source_dir() + "/tests/fixtures/models/tiny-qwen2";
  const std::vector<float> a = logits_of(plain, tokens), b = logits_of(scaled, tokens);
  const size_t V = 512;
  ASSERT_EQ(a.size(), tokens.size() * V);
  ASSERT_EQ(b.size(), a.size());
  const auto max_diff = [&](const std::vector<float>& x, const std::vector<float>& y, size_t pos) {
    double d = 0;
    for (size_t v = 0; v < V; ++v) d = std::max(d, double(std::fabs(x[pos * V + v] - y[pos * V + v])));
    return d;
  };
  EXPECT_LT(max_diff(a, b, 0), 1e-5) << "position 0 attends to itself alone";
  for (size_t pos : {8u, 20u, 39u}) EXPECT_GT(max_diff(a, b, pos), 1e-3) << "position " << pos;
  for (float x : b) ASSERT_TRUE(std::isfinite(x));
  // Factor 1: every pair keeps its frequency, the attention factor is 1: plain RoPE.
  const std::vector<float> one = logits_of(tiny_qwen2_with({{"rope_type", "yarn"}, {"factor", 1.0},
                                                            {"original_max_position_embeddings", 16}}, "f1"),
                                           tokens);
  for (size_t pos : {0u, 8u, 20u, 39u}) EXPECT_LT(max_diff(a, one, pos), 1e-4) << "position " << pos;
}

}  // namespace
}  // namespace ferry
