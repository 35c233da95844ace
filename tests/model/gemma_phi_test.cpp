// Gemma 2 / Gemma 3 / Phi-3 support below the end-to-end goldens (tests/e2e/logits_vs_transformers_test.cpp):
//  - config.json of each family read into the right layer windows, scalars and rope frequencies (longrope's short
//    and long factors, Gemma 3's local base), the Hub's layouts (no layer_types, multimodal text_config) included;
//  - the CPU backend's optional ops, fast against reference on random inputs (GeGLU: relative L2 <= 1e-6; soft-cap
//    and scale are one loop for both sets, checked against their formula);
//  - a backend without the ops refuses such a model at load with one line naming what it lacks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd.h"
#include "core/check.h"
#include "fixtures/forwarding_backend.h"
#include "fixtures/numeric.h"
#include "fixtures/test_paths.h"
#include "formats/gguf.h"
#include "model/llama_model.h"
#include "model/model_file.h"
#include "model/random_model.h"
#include "engine/block_manager.h"
#include "engine/serving_test_util.h"
#include "ferry/engine.h"
#include "fixtures/golden_logits.h"

namespace ferry {
namespace {

nlohmann::json gemma2_hub_config() {  // google/gemma-2-2b's shape, cut to 4 layers (no layer_types: the Hub's files)
  return {{"model_type", "gemma2"}, {"hidden_size", 2304}, {"num_hidden_layers", 4}, {"num_attention_heads", 8},
          {"num_key_value_heads", 4}, {"head_dim", 256}, {"intermediate_size", 9216}, {"vocab_size", 256000},
          {"max_position_embeddings", 8192}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
          {"query_pre_attn_scalar", 256}, {"attn_logit_softcapping", 50.0}, {"final_logit_softcapping", 30.0},
          {"sliding_window", 4096}, {"hidden_activation", "gelu_pytorch_tanh"}};
}

TEST(GemmaPhiConfig, Gemma2HubConfigAlternatesLocalAndGlobalLayers) {
  const ModelConfig c = config_from_hf(gemma2_hub_config());
  EXPECT_EQ(c.arch, Arch::Gemma2);
  EXPECT_EQ(c.layer_window, (std::vector<int>{4096, 0, 4096, 0}));
  EXPECT_TRUE(c.post_norms && c.tied_embeddings);
  EXPECT_EQ(c.norm_weight_offset, 1.0f);
  EXPECT_EQ(c.ffn_activation, FfnActivation::GeluTanh);
  EXPECT_FLOAT_EQ(c.embedding_scale, std::sqrt(2304.0f));
  EXPECT_FLOAT_EQ(c.attn_softcap, 50.0f);
  EXPECT_FLOAT_EQ(c.final_softcap, 30.0f);
  EXPECT_FLOAT_EQ(c.attention_scale(), 1.0f / 16.0f);
  const auto facts = config_facts(c);
  ASSERT_FALSE(facts.empty());
  EXPECT_EQ(facts[0], std::make_pair(std::string("sliding window"), std::string("4096 tokens on 2 of 4 layers (0,2)")));
}

TEST(GemmaPhiConfig, Gemma3MultimodalFolderReadsItsTextConfig) {
  // google/gemma-3-4b-it's layout: text_config without layer_types, rope_local_base_freq, linear scaling 8.
  nlohmann::json text = {{"model_type", "gemma3_text"}, {"hidden_size", 2560}, {"num_hidden_layers", 12},
                         {"num_attention_heads", 8}, {"num_key_value_heads", 4}, {"head_dim", 256},
                         {"intermediate_size", 10240}, {"vocab_size", 262208}, {"query_pre_attn_scalar", 256},
                         {"sliding_window", 1024}, {"rope_theta", 1000000.0}, {"rope_local_base_freq", 10000.0},
                         {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}};
  const ModelConfig c = config_from_hf({{"model_type", "gemma3"}, {"text_config", text}});
  EXPECT_EQ(c.arch, Arch::Gemma3);
  EXPECT_TRUE(c.qk_norm && c.post_norms);
  std::vector<int> want(12, 1024);
  want[5] = want[11] = 0;  // every 6th layer is global
  EXPECT_EQ(c.layer_window, want);
  const std::vector<float> global = c.rope_inv_freq(4096), local = c.rope_inv_freq(4096, true);
  // pair 1 of 128: global 1e6^(-2/256) / 8 (linear scaling), local 1e4^(-2/256) unscaled
  EXPECT_NEAR(global[1], std::pow(1e6, -2.0 / 256) / 8, 1e-7);
  EXPECT_NEAR(local[1], std::pow(1e4, -2.0 / 256), 1e-7);
  EXPECT_THROW(config_from_hf({{"model_type", "gemma3"}}), Error);
}

TEST(GemmaPhiConfig, Phi3LongRopePicksFactorsByContext) {
  const ModelFile m = open_model(test::source_dir() + "/tests/fixtures/models/tiny-phi3");
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.arch, Arch::Phi3);
  EXPECT_EQ(c.rope_dims, 8);  // partial_rotary_factor 0.5 of head_dim 16
  EXPECT_EQ(c.layer_window, (std::vector<int>{8, 8}));
  ASSERT_EQ(c.rope_scaling.kind, RopeScalingKind::LongRope);
  EXPECT_EQ(c.rope_scaling.original_context, 256);
  EXPECT_NEAR(c.rope_scaling.attention_factor, std::sqrt(1 + std::log(4.0) / std::log(256.0)), 1e-6);
  const std::vector<float> short_f = c.rope_inv_freq(256), long_f = c.rope_inv_freq(1024);
  // pair 3: base 1e4^(-6/8) divided by the short factor 4 or the long factor 11
  EXPECT_NEAR(short_f[3], std::pow(1e4, -6.0 / 8) / 4.0, 1e-8);
  EXPECT_NEAR(long_f[3], std::pow(1e4, -6.0 / 8) / 11.0, 1e-8);
  // partial rotary dims: the attention factor scales the rotated dims of q and k, not the whole score
  EXPECT_FLOAT_EQ(c.attention_scale(), 0.25f);
  EXPECT_FLOAT_EQ(c.rope_attention_factor(), c.rope_scaling.attention_factor);
}

TEST(GemmaPhiConfig, SlidingWindowsOfMistralAndQwen2) {
  nlohmann::json mistral = {{"model_type", "mistral"}, {"hidden_size", 64}, {"num_hidden_layers", 3},
                            {"num_attention_heads", 4}, {"intermediate_size", 128}, {"vocab_size", 100},
                            {"sliding_window", 4096}};
  EXPECT_EQ(config_from_hf(mistral).layer_window, (std::vector<int>{4096, 4096, 4096}));
  mistral["sliding_window"] = nullptr;  // Mistral v0.2 on
  EXPECT_TRUE(config_from_hf(mistral).layer_window.empty());
  nlohmann::json qwen2 = mistral;
  qwen2["model_type"] = "qwen2";
  qwen2["sliding_window"] = 32;
  qwen2["max_window_layers"] = 1;
  EXPECT_TRUE(config_from_hf(qwen2).layer_window.empty());  // use_sliding_window false: the Hub's Qwen2.5
  qwen2["use_sliding_window"] = true;
  EXPECT_EQ(config_from_hf(qwen2).layer_window, (std::vector<int>{0, 32, 32}));
  qwen2["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_THROW(config_from_hf(qwen2), Error);  // 2 types for 3 layers
}

// A GGUF of metadata only (and the embedding table config_from_gguf looks for), as llama.cpp's converter writes the
// keys: no sliding_window_pattern, attention.scale or rope.freq_base_swa, so llama.cpp's fixed rules apply.
ModelConfig config_of_llama_cpp_gguf(const std::string& arch, int n_layers, const std::vector<std::pair<std::string, GgufValue>>& extra) {
  GgufWriter w;
  const std::string p = arch + ".";
  w.set("general.architecture", GgufValue::str(arch));
  w.set(p + "block_count", GgufValue::u32(uint32_t(n_layers)));
  w.set(p + "embedding_length", GgufValue::u32(64));
  w.set(p + "feed_forward_length", GgufValue::u32(128));
  w.set(p + "attention.head_count", GgufValue::u32(4));
  w.set(p + "attention.head_count_kv", GgufValue::u32(2));
  w.set(p + "attention.key_length", GgufValue::u32(32));
  w.set(p + "attention.sliding_window", GgufValue::u32(512));
  for (const auto& [k, v] : extra) w.set(p + k, v);
  std::vector<float> embd(size_t(100) * 64, 0.5f);
  w.add_tensor("token_embd.weight", DType::F32, {100, 64}, embd.data());
  const std::string path = test::temp_path("gemma-phi-" + arch + ".gguf");
  w.write(path);
  return config_from_gguf(GgufFile::open(path));
}

TEST(GemmaPhiConfig, LlamaCppGgufKeysFollowItsFixedPatterns) {
  const ModelConfig g2 = config_of_llama_cpp_gguf("gemma2", 4, {{"attn_logit_softcapping", GgufValue::f32(50)},
                                                                {"final_logit_softcapping", GgufValue::f32(30)}});
  EXPECT_EQ(g2.layer_window, (std::vector<int>{512, 0, 512, 0}));
  EXPECT_FLOAT_EQ(g2.query_pre_attn_scalar, 32.0f);  // head_dim (not a 27B's 46 layers)
  EXPECT_FLOAT_EQ(g2.attn_softcap, 50.0f);
  EXPECT_FLOAT_EQ(g2.final_softcap, 30.0f);
  EXPECT_EQ(g2.norm_weight_offset, 0.0f);  // the converter stored 1 + w
  EXPECT_TRUE(g2.tied_embeddings && g2.post_norms && !g2.qk_norm);
  const ModelConfig g3 = config_of_llama_cpp_gguf("gemma3", 7, {{"rope.freq_base", GgufValue::f32(1e6f)}});
  EXPECT_EQ(g3.layer_window, (std::vector<int>{512, 512, 512, 512, 512, 0, 512}));
  EXPECT_FLOAT_EQ(g3.rope_theta_local, 10000.0f);
  EXPECT_TRUE(g3.qk_norm);
  // ferry's own keys (as `ferry quantize` writes them) override the fixed rules
  const ModelConfig mine = config_of_llama_cpp_gguf(
      "gemma3", 3, {{"attention.scale", GgufValue::f32(0.25f)}, {"rope.freq_base_swa", GgufValue::f32(5000)},
                    {"attention.sliding_window_pattern",
                     GgufValue::array(GgufType::Bool, {GgufValue::boolean(false), GgufValue::boolean(true),
                                                       GgufValue::boolean(false)})}});
  EXPECT_EQ(mine.layer_window, (std::vector<int>{0, 512, 0}));
  EXPECT_FLOAT_EQ(mine.query_pre_attn_scalar, 16.0f);
  EXPECT_FLOAT_EQ(mine.rope_theta_local, 5000.0f);
  EXPECT_THROW(config_of_llama_cpp_gguf("gemma3", 4, {{"attention.sliding_window_pattern",
                                                       GgufValue::array(GgufType::Bool, {GgufValue::boolean(true)})}}),
               Error);
  const ModelConfig phi = config_of_llama_cpp_gguf("phi3", 2, {});
  EXPECT_EQ(phi.layer_window, (std::vector<int>{512, 512}));
  EXPECT_EQ(phi.rope_scaling.kind, RopeScalingKind::None);  // no rope_factors tensors: plain RoPE
}

Tensor host(std::vector<float>& v) { return Tensor::make(DType::F32, {int64_t(v.size())}, v.data()); }

TEST(GemmaPhiOps, FastGegluMatchesReference) {
  CpuBackend ref({.kernels = CpuKernels::Reference, .n_threads = 2});
  CpuBackend fast({.kernels = CpuKernels::Fast, .n_threads = 2, .simd = detect_simd()});
  const size_t n = 5000;  // not a multiple of the fast kernel's chunk
  std::vector<float> gate = test::random_floats(n, 11, 3.0f), up = test::random_floats(n, 12, 1.0f);
  gate[0] = 60.0f, gate[1] = -60.0f;  // tanh saturated: exp(2u) overflows and underflows
  std::vector<float> want(n, std::nanf("")), got(n, std::nanf(""));
  ref.geglu_tanh(host(want), host(gate), host(up));
  fast.geglu_tanh(host(got), host(gate), host(up));
  EXPECT_LE(test::rel_l2(got, want), 1e-6);
  EXPECT_FLOAT_EQ(want[0], 60.0f * up[0]);
  EXPECT_NEAR(want[1], 0.0f, 1e-6f);
  const float g = gate[7];
  EXPECT_NEAR(want[7], 0.5f * g * (1 + std::tanh(0.7978845608f * (g + 0.044715f * g * g * g))) * up[7], 1e-5f);
}

TEST(GemmaPhiOps, SoftCapAndScale) {
  CpuBackend fast({.kernels = CpuKernels::Fast, .n_threads = 2, .simd = detect_simd()});
  std::vector<float> x = test::random_floats(300, 13, 20.0f), y = x;
  fast.softcap(host(y), 5.0f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(y[i], 5.0f * std::tanh(x[i] / 5.0f));
  fast.scale(host(y), 0.5f, 300);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(y[i], 2.5f * std::tanh(x[i] / 5.0f));
  std::vector<float> heads = x;  // (3 rows, 100): the first 30 of each row scaled
  fast.scale(Tensor::make(DType::F32, {3, 100}, heads.data()), 2.0f, 30);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(heads[i], i % 100 < 30 ? 2 * x[i] : x[i]);
}

// The CPU backend with some optional ops hidden, as a backend that lacks them (CUDA today).
class LackingBackend final : public test::ForwardingCpuBackend {
 public:
  explicit LackingBackend(std::vector<ModelFeature> lacking)
      : test::ForwardingCpuBackend({.kernels = CpuKernels::Reference, .n_threads = 1}), lacking_(std::move(lacking)) {}
  bool supports(ModelFeature f) const override {
    return std::find(lacking_.begin(), lacking_.end(), f) == lacking_.end() && cpu_.supports(f);
  }

 private:
  std::vector<ModelFeature> lacking_;
};

// The error of loading fixture `name` on a backend without `lacking` into a cache of kv (empty: it loaded).
std::string load_error(const std::string& name, std::vector<ModelFeature> lacking, KvCacheShape kv) {
  LackingBackend backend(std::move(lacking));
  const ModelFile m = open_model(test::source_dir() + "/tests/fixtures/models/" + name);
  ModelWeights w = load_weights(m.config, *m.weights, m.gguf_names, backend);
  try {
    LlamaModel model(m.config, std::move(w), backend, kv, 8);
    return "";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
}

TEST(GemmaPhiModel, ABackendWithoutTheOpsRefusesInOneLine) {
  const std::vector<ModelFeature> all = {ModelFeature::GeluTanhGlu, ModelFeature::SoftCap, ModelFeature::SlidingWindow,
                                         ModelFeature::Scale};
  EXPECT_NE(load_error("tiny-gemma2", all, {8, 16}).find("gemma2 model: it has no GeGLU"), std::string::npos);
  EXPECT_NE(load_error("tiny-gemma2", {ModelFeature::SoftCap}, {8, 16}).find("soft-capping"), std::string::npos);
  EXPECT_NE(load_error("tiny-gemma3", {ModelFeature::Scale}, {8, 16}).find("scale op"), std::string::npos);
  EXPECT_EQ(load_error("tiny-gemma3", {ModelFeature::SoftCap}, {8, 16}), "");  // Gemma 3 has no soft-caps
  // Phi-3: the window matters only when the cache can outgrow it (8 tokens here); its partial-rotary longrope needs scale.
  EXPECT_NE(load_error("tiny-phi3", {ModelFeature::SlidingWindow}, {8, 16}).find("sliding-window"), std::string::npos);
  EXPECT_EQ(load_error("tiny-phi3", {ModelFeature::SlidingWindow}, {1, 8}), "");
  EXPECT_NE(load_error("tiny-phi3", {ModelFeature::Scale}, {1, 8}).find("scale op"), std::string::npos);
}

// The windowed fixtures through chunked prefill over small blocks (prefill chunks after cached tokens, each chunk's
// queries spanning several windows) and through the serving engine's mixed steps (the three golden prompts at once:
// prefill chunks beside decode rows): transformers' logits and greedy continuations.
TEST(GemmaPhiModel, ChunkedPrefillAndMixedStepsMatchTransformers) {
  for (const char* name : {"tiny-gemma2", "tiny-gemma3", "tiny-phi3"}) {
    const test::GoldenLogits g = *test::load_golden_logits(name);
    for (int step : {1, 3, 5}) {
      for (int block : {1, 4, 16}) {
        EngineOptions o;
        o.model_path = g.model_path;
        o.kernels = KernelSet::Reference;
        o.context = 64;
        o.max_step_tokens = step;
        o.block_size = block;
        Engine engine(o);
        const test::LogitAgreement a = test::compare_scores(g, [&](const auto& p) { return engine.score(p); });
        EXPECT_LE(a.max_rel_l2, 1e-4) << name << " step " << step << " block " << block;
      }
    }
    EngineOptions eo;
    eo.model_path = g.model_path;
    eo.kernels = KernelSet::Reference;
    eo.context = 128;
    eo.block_size = 4;
    eo.n_threads = 2;
    ServingEngine serving(eo, {.max_running = 4, .max_step_tokens = 6, .prefix_caching = false});
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (const auto& prompt : g.prompts) {
      GenerationRequest r;
      r.prompt = prompt;
      r.sampling.temperature = 0;
      r.max_tokens = int32_t(g.greedy[0].size());
      r.ignore_eos = true;
      handles.push_back(serving.submit(r));
    }
    for (size_t i = 0; i < handles.size(); ++i)
      EXPECT_EQ(test::collect(*handles[i]).ids(), g.greedy[i]) << name << " prompt " << i << " in a mixed batch";
  }
}

// Blocks behind every layer's window go back to the pool as a sequence decodes, and only those: never one that an
// in-flight step's queries still read.
TEST(GemmaPhiModel, BlocksBehindTheWindowGoBackToThePool) {
  BlockManager bm(16, 4, /*prefix_caching=*/true, /*window=*/8);
  Sequence seq;
  seq.tokens.assign(10, 7);
  ASSERT_TRUE(bm.allocate(seq));
  EXPECT_EQ(bm.pool().n_used(), 3);
  seq.table.n_tokens = 10;  // the prompt computed: the next query (position 10) reads 3..10: no block is behind
  seq.tokens.push_back(8);
  bm.append(seq);
  EXPECT_EQ(bm.pool().n_used(), 3);
  for (int t = 11; t < 21; ++t) {  // decode to 21 tokens: the next query reads 13..20, blocks 0-2 (positions 0..11) go
    seq.table.n_tokens = t;
    seq.tokens.push_back(9);
    bm.commit(seq);
    bm.append(seq);
  }
  EXPECT_EQ(seq.table.blocks[0], -1);
  EXPECT_EQ(seq.table.blocks[1], -1);
  EXPECT_EQ(seq.table.blocks[2], -1);
  EXPECT_GE(seq.table.blocks[3], 0);
  EXPECT_EQ(bm.pool().n_used(), 3);  // blocks 3, 4, 5 (positions 12..23) of 6 in the table
  EXPECT_THROW(seq.table.slot(5, 4), Error);
  seq.n_inflight = 4;  // a step still writing 4 tokens: its first query (position 16) reads from 9 on
  seq.table.n_tokens = 24;
  seq.tokens.push_back(9);
  EXPECT_EQ(bm.release_behind_window(seq), 0);  // block 3 (12..15) is still read
  seq.n_inflight = 0;
  EXPECT_EQ(bm.release_behind_window(seq), 1);  // the next query (24) reads 17..24: block 3 goes
  bm.free(seq);
  EXPECT_EQ(bm.pool().n_used(), 0);
  bm.pool().check_invariants();
}

// In the serving engine: four Phi-3 requests of a whole context each share a pool of one context. Giving back the
// blocks behind the window, they all decode side by side without a preemption, and give transformers' tokens.
TEST(GemmaPhiModel, WindowedRequestsShareAPoolOfOneContext) {
  const test::GoldenLogits g = *test::load_golden_logits("tiny-phi3");
  EngineOptions eo;
  eo.model_path = g.model_path;
  eo.kernels = KernelSet::Reference;
  eo.context = 48;  // the longest golden prompt (16) and its 32 greedy tokens
  eo.block_size = 4;
  eo.n_threads = 2;
  ServingEngine serving(eo, {.max_running = 4, .max_step_tokens = 64, .kv_tokens = 64, .prefix_caching = false});
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int copy = 0; copy < 2; ++copy) {
    for (size_t i = 1; i < g.prompts.size(); ++i) {
      GenerationRequest r;
      r.prompt = g.prompts[i];
      r.sampling.temperature = 0;
      r.max_tokens = int32_t(48 - g.prompts[i].size());
      r.ignore_eos = true;
      handles.push_back(serving.submit(r));
    }
  }
  for (size_t h = 0; h < handles.size(); ++h) {
    const std::vector<int32_t> got = test::collect(*handles[h]).ids();
    const std::vector<int32_t>& want = g.greedy[1 + h % 2];
    ASSERT_GE(got.size(), want.size());
    EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + ptrdiff_t(want.size())), want) << "request " << h;
  }
  EXPECT_EQ(serving.stats().preemptions, 0);
}

// `ferry gen` / random: shapes of the families: written, read back through GGUF (the family's keys and norms) and run.
TEST(GemmaPhiModel, RandomShapesLoadAndRunOnBothKernelSets) {
  for (const char* shape : {"gemma3-micro", "gemma2-2b", "phi3-mini"}) {
    const ModelConfig c = random_model_config(shape);
    const std::string path = test::temp_path(std::string("gemma-phi-") + shape + ".gguf");
    write_random_model(path, c, DType::F32, 7, 2, /*with_weights=*/std::string(shape) == "gemma3-micro");
    const ModelConfig back = config_from_gguf(GgufFile::open(path));
    EXPECT_EQ(back.layer_window, c.layer_window) << shape;
    EXPECT_EQ(back.post_norms, c.post_norms) << shape;
    EXPECT_FLOAT_EQ(back.attention_scale(), c.attention_scale()) << shape;
    EXPECT_FLOAT_EQ(back.final_softcap, c.final_softcap) << shape;
    EXPECT_FLOAT_EQ(back.rope_theta_local, c.rope_theta_local) << shape;
    if (std::string(shape) != "gemma3-micro") continue;
    std::vector<std::vector<float>> logits;
    for (KernelSet kernels : {KernelSet::Reference, KernelSet::Fast}) {
      EngineOptions o;
      o.model_path = path;
      o.kernels = kernels;
      o.context = 64;
      Engine engine(o);
      std::vector<int32_t> prompt;
      for (int i = 0; i < 40; ++i) prompt.push_back(3 + (i * 37) % 4000);
      logits.push_back(engine.score(prompt));
    }
    EXPECT_LE(test::rel_l2(logits[1], logits[0]), 1e-2);
  }
}

}  // namespace
}  // namespace ferry
