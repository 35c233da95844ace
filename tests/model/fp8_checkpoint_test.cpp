// FP8 checkpoints on the CPU (model/fp8_weights.h): the e4m3 decode against ml_dtypes for all 256 codes (NaN and
// subnormals included), the three layouts of tests/fixtures/models/tiny-llama-fp8-* (made by
// reference/make_fp8_models.py) dequantized exactly as numpy does (sampled elements bit for bit, sums), their
// logits against the same model's f32 weights dequantized through `ferry quantize` (rel L2 <= 1e-5) and near the
// original f32 model (the FP8 rounding), and corrupt folders rejected with one line naming the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd.h"
#include "core/check.h"
#include "fixtures/batches.h"
#include "fixtures/numeric.h"
#include "fixtures/test_paths.h"
#include "formats/fp8.h"
#include "formats/quant.h"
#include "formats/safetensors.h"
#include "model/fp8_weights.h"
#include "model/llama_model.h"
#include "model/model_file.h"
#include "model/gguf_export.h"
#include "model/quantize_model.h"
#include "model/random_fp8_folder.h"
#include "model/random_model.h"
#include "tokenizer/tokenizer.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string fixture(const std::string& name) { return test::source_dir() + "/tests/fixtures/models/" + name; }

// The logits of a fixed 24-token prompt, by the reference kernels unless `o` says otherwise.
std::vector<float> logits_of(const std::string& path,
                             CpuBackendOptions o = {.kernels = CpuKernels::Reference, .n_threads = 1,
                                                    .simd = detect_simd()}) {
  const ModelFile f = open_model(path);
  CpuBackend backend(o);
  ModelWeights w = load_weights(f.config, *f.weights, f.gguf_names, backend);
  LlamaModel model(f.config, std::move(w), backend, KvCacheShape{4, 16}, 32);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 24; ++i) prompt.push_back((i * 53 + 7) % f.config.vocab_size);
  std::vector<float> logits;
  model.forward(test::single_sequence_batch(prompt, 0, true, 4), logits);
  return logits;
}

TEST(Fp8, E4m3DecodeMatchesMlDtypesForAllCodes) {
  const json golden = json::parse(test::read_file(test::golden_dir() + "/fp8_e4m3.json"));
  const auto& bits = golden.at("bits");
  ASSERT_EQ(bits.size(), 256u);
  int n_nan = 0, n_sub = 0;
  for (int code = 0; code < 256; ++code) {
    const uint32_t want_bits = bits[size_t(code)].get<uint32_t>();
    float want;
    std::memcpy(&want, &want_bits, 4);
    const float got = fp8_e4m3_to_f32(uint8_t(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << code;
      ++n_nan;
      continue;
    }
    uint32_t got_bits;
    std::memcpy(&got_bits, &got, 4);
    EXPECT_EQ(got_bits, want_bits) << "code " << code;  // bit for bit: -0.0 and subnormals included
    n_sub += (code & 0x78) == 0 && (code & 7) != 0;
  }
  EXPECT_EQ(n_nan, 2);   // 0x7F and 0xFF
  EXPECT_EQ(n_sub, 14);  // 7 subnormal mantissas, both signs
  EXPECT_EQ(fp8_e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
}

TEST(Fp8, E4m3EncodeRoundsToNearestEven) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;  // NaN
    EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(uint8_t(code))), code) << code;  // every value is its own code
  }
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);   // halfway between 1 (0x38, even) and 1.125 (0x39): to even
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3A);   // halfway between 1.125 (odd) and 1.25: to 1.25
  EXPECT_EQ(f32_to_fp8_e4m3(1.07f), 0x39);
  EXPECT_EQ(f32_to_fp8_e4m3(-3e-3f), 0x80 | 0x02);  // subnormal: 3e-3 / 2^-9 = 1.54 -> 2
  EXPECT_EQ(f32_to_fp8_e4m3(1000.0f), 0x7E);   // saturates at 448
  EXPECT_EQ(f32_to_fp8_e4m3(std::nanf("")), 0x7F);
}

class Fp8Folder : public ::testing::TestWithParam<const char*> {};

TEST_P(Fp8Folder, DequantizesAsNumpy) {
  const std::string dir = fixture(std::string("tiny-llama-fp8-") + GetParam());
  const json expected = json::parse(test::read_file(dir + "/fp8_expected.json"));
  const ModelFile f = open_model(dir);
  int n_weights = 0, n_subnormal = 0;
  for (const auto& [name, e] : expected.at("weights").items()) {
    const Tensor* t = f.weights->find(name);
    ASSERT_NE(t, nullptr) << name;
    ASSERT_EQ(t->dtype, DType::F32);
    const int64_t rows = e.at("shape")[0], cols = e.at("shape")[1];
    ASSERT_EQ(t->shape[0], rows);
    ASSERT_EQ(t->shape[1], cols);
    const float* v = static_cast<const float*>(t->data);
    double sum = 0;
    for (int64_t i = 0; i < rows * cols; ++i) sum += v[i];
    EXPECT_NEAR(sum, e.at("sum").get<double>(), 1e-9 * std::max(1.0, std::fabs(e.at("sum").get<double>()))) << name;
    for (const auto& s : e.at("samples")) {
      const int64_t r = s[0], c = s[1];
      uint32_t got;
      std::memcpy(&got, v + r * cols + c, 4);
      EXPECT_EQ(got, s[2].get<uint32_t>()) << name << " [" << r << ", " << c << "]";
    }
    n_subnormal += e.at("n_subnormal_codes").get<int>();
    ++n_weights;
  }
  EXPECT_EQ(n_weights, 2 * 7);  // every Linear of both layers
  EXPECT_GT(n_subnormal, 0);    // the fixture exercises subnormal codes
  // the scales are consumed, not weights
  for (const auto& [name, t] : f.tensors) EXPECT_EQ(name.find("_scale"), std::string::npos) << name;
}

TEST_P(Fp8Folder, LogitsMatchTheDequantizedModel) {
  const std::string layout = GetParam();
  const std::string dir = fixture("tiny-llama-fp8-" + layout);
  const std::string f32 = test::temp_path("fp8-" + layout + "-f32.gguf");
  quantize_model({dir, f32, "F32", 1, {}});  // the FP8 folder's weights, dequantized, as a GGUF file
  const auto got = logits_of(dir);
  const double err = test::rel_l2(got, logits_of(f32));
  const double err_src = test::rel_l2(got, logits_of(fixture("tiny-llama")));
  std::printf("fp8 %s: vs its dequantized GGUF %.3g, vs the f32 original %.3g\n", layout.c_str(), err, err_src);
  EXPECT_LE(err, 1e-5);
  EXPECT_LE(err_src, 0.1);  // e4m3 keeps 3 mantissa bits: a few percent
  EXPECT_GT(err_src, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Fp8Folder, ::testing::Values("block", "channel", "tensor"));

// A copy of an FP8 fixture whose config.json is edited by `edit`.
std::string edited_copy(const std::string& layout, const std::string& name, const std::function<void(json&)>& edit) {
  const std::string src = fixture("tiny-llama-fp8-" + layout);
  const std::string dst = test::temp_path(name);
  fs::remove_all(dst);
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src)) fs::copy(e.path(), dst + "/" + e.path().filename().string());
  json config = json::parse(test::read_file(dst + "/config.json"));
  edit(config);
  std::ofstream(dst + "/config.json") << config.dump(1);
  return dst;
}

std::string error_of(const std::string& dir) {
  try {
    open_model(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Fp8, CorruptFoldersAreErrors) {
  // block size 32: the first FP8 weight, down_proj (64, 160), needs (2, 5) blocks; the file has 48x48's (2, 4)
  const std::string wrong_shape = error_of(edited_copy("block", "fp8-bad-shape", [](json& c) {
    c["quantization_config"]["weight_block_size"] = {32, 32};
  }));
  EXPECT_NE(wrong_shape.find("has shape (2, 4), expected (2, 5)"), std::string::npos) << wrong_shape;
  // per-channel scales looked for in a block-wise file: weight_scale is missing
  const std::string missing = error_of(edited_copy("block", "fp8-missing-scale", [](json& c) {
    c["quantization_config"] = json::parse(R"({"quant_method": "compressed-tensors", "config_groups": {"g":
        {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}})");
  }));
  EXPECT_NE(missing.find("has no scale tensor"), std::string::npos) << missing;
  EXPECT_NE(missing.find("weight_scale'"), std::string::npos) << missing;
  const std::string no_config = error_of(edited_copy("channel", "fp8-no-config", [](json& c) { c.erase("quantization_config"); }));
  EXPECT_NE(no_config.find("declares no quantization_config"), std::string::npos) << no_config;
  const std::string other = error_of(edited_copy("tensor", "fp8-awq", [](json& c) {
    c["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}};
  }));
  EXPECT_NE(other.find("quantization method 'awq' is not supported"), std::string::npos) << other;
  const std::string int8 = error_of(edited_copy("channel", "fp8-int8", [](json& c) {
    c["quantization_config"]["config_groups"]["group_0"]["weights"]["type"] = "int";
  }));
  EXPECT_NE(int8.find("8-bit int weights"), std::string::npos) << int8;
  // per-tensor scales read as the per-channel layout are the wrong shape
  const std::string tensor_as_channel = error_of(edited_copy("tensor", "fp8-tensor-as-channel", [](json& c) {
    c["quantization_config"] = json::parse(R"({"quant_method": "compressed-tensors", "config_groups": {"g":
        {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}})");
  }));
  EXPECT_NE(tensor_as_channel.find("expected (64, 1)"), std::string::npos) << tensor_as_channel;
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// `ferry gen --type fp8*`: a random folder in each layout loads, its weights within e4m3's rounding of the values
// write_random_model draws (a GGUF F32 model of the same shape and seed), and its tokenizer is the random models'.
// Its columns are multiples of 128, so every FP8 weight stays FP8: F8_E4M3_B128 tensors whose values are exactly
// the f32 products of the file (dequantize_fp8_weight), giving the logits of the folder's dequantized GGUF.
TEST(Fp8, GenFoldersLoadInEveryLayout) {
  ModelConfig c = random_model_config("tiny");
  c.dim = 256, c.hidden_dim = 384, c.n_heads = 4, c.head_dim = 64, c.rope_dims = 64;  // two 128-blocks and a partial one
  const std::string gguf = test::temp_path("fp8gen-f32.gguf");
  write_random_model(gguf, c, DType::F32, 9, 1);
  const ModelFile ref = open_model(gguf);
  for (const char* type : {"fp8", "fp8-block", "fp8-tensor"}) {
    const std::string dir = test::temp_path(std::string("fp8gen-") + type);
    fs::remove_all(dir);
    write_random_fp8_folder(dir, c, *fp8_gen_layout(type), 9, 2);
    const ModelFile f = open_model(dir);
    EXPECT_EQ(f.config.n_layers, c.n_layers);
    const SafetensorsModel st = SafetensorsModel::open(dir);
    const Fp8Scheme scheme = *fp8_scheme(st.config());
    for (const char* name : {"blk.1.ffn_down.weight", "blk.0.attn_q.weight", "blk.0.ffn_gate.weight"}) {
      const Tensor* want = ref.weights->find(name);
      const Tensor* got = f.weights->find(hf_tensor_name(name));
      ASSERT_NE(want, nullptr);
      ASSERT_NE(got, nullptr) << type << " " << name;
      ASSERT_EQ(got->dtype, DType::F8_E4M3_B128) << type << " " << name;
      std::vector<float> a(size_t(got->numel()));
      for (int64_t r = 0; r < got->rows(); ++r) dequantize_row(got->dtype, got->row(r), a.data() + r * got->cols(), got->cols());
      const std::vector<float> exact = dequantize_fp8_weight(st, hf_tensor_name(name), scheme);
      ASSERT_EQ(a.size(), exact.size());
      EXPECT_EQ(std::memcmp(a.data(), exact.data(), a.size() * 4), 0) << type << " " << name << ": not the file's values";
      std::vector<float> b(static_cast<const float*>(want->data), static_cast<const float*>(want->data) + want->numel());
      const double err = test::rel_l2(a, b);
      EXPECT_LE(err, 0.05) << type << " " << name;  // e4m3: 3 mantissa bits, rel rms ~2-3%
      EXPECT_GT(err, 0.0) << type << " " << name;
    }
    bool fact = false;
    for (const auto& [key, value] : f.facts)
      if (key == "fp8") fact = value.find(" kept as f8_e4m3_b128, 0 dequantized to f32") != std::string::npos;
    EXPECT_TRUE(fact) << type;
    const Tokenizer ta(ref.vocab), tb(f.vocab);
    const std::string text = "the ferry crossed 42 rivers";
    EXPECT_EQ(tb.encode(text, true, false), ta.encode(text, true, false)) << type;
    const std::string f32 = test::temp_path(std::string("fp8gen-") + type + "-f32.gguf");
    quantize_model({dir, f32, "F32", 1, {}});  // `ferry quantize` still reads the folder (as f32 values)
    const double err = test::rel_l2(logits_of(dir), logits_of(f32));
    EXPECT_LE(err, 1e-5) << type;  // the same values: only the order of float sums differs
  }
}

// The fast CPU kernels run an FP8 model end to end: near the reference kernels' logits (rel L2 <= 1e-2: the fast
// path rounds the activations of the bf16 embedding / output matrices to bf16, as for any bf16 model; the FP8
// matmuls alone are held to 1e-5 in tests/quant/fp8_block_test.cpp).
TEST(Fp8, FastKernelsMatchTheReference) {
  ModelConfig c = random_model_config("tiny");
  c.dim = 256, c.hidden_dim = 384, c.n_heads = 4, c.head_dim = 64, c.rope_dims = 64;
  const std::string dir = test::temp_path("fp8gen-fast");
  fs::remove_all(dir);
  write_random_fp8_folder(dir, c, *fp8_gen_layout("fp8-block"), 11, 2);
  const std::vector<float> ref = logits_of(dir);
  for (SimdLevel level : supported_simd_levels()) {
    const std::vector<float> logits =
        logits_of(dir, {.kernels = CpuKernels::Fast, .n_threads = 2, .simd = level});
    EXPECT_LE(test::rel_l2(logits, ref), 1e-2) << simd_level_name(level);
  }
}

}  // namespace
}  // namespace ferry
