#include "model/random_fp8_folder.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/check.h"
#include "core/fp16.h"
#include "formats/fp8.h"
#include "model/gguf_export.h"
#include "model/random_model.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr float kE4m3Max = 448.0f;
constexpr int kBlock = 128;  // fp8-block: 128 x 128 scale blocks

// One tensor of the folder: its safetensors entry and how its bytes are made.
struct Entry {
  std::string name;             // Hugging Face name
  std::string dtype;            // "F8_E4M3", "BF16", "F32"
  std::vector<int64_t> shape;   // outermost first
  size_t nbytes = 0;
  std::function<void(uint8_t*)> fill;
};

// Runs fn(begin, end) over [0, n) split into n_threads contiguous ranges.
void split(int64_t n, int n_threads, const std::function<void(int64_t, int64_t)>& fn) {
  const int nt = int(std::max<int64_t>(1, std::min<int64_t>(n_threads, n)));
  std::vector<std::thread> threads;
  for (int w = 0; w < nt; ++w) threads.emplace_back([=, &fn] { fn(n * w / nt, n * (w + 1) / nt); });
  for (auto& t : threads) t.join();
}

// x: (rows, cols) f32 -> q (rows, cols) e4m3 codes with scale (the layout's shape) = amax / 448 (1 for zeros).
void to_fp8(const std::vector<float>& x, int64_t rows, int64_t cols, Fp8Layout layout, uint8_t* q, float* scale,
            int n_threads) {
  const auto amax_scale = [](float amax) { return amax > 0 ? amax / kE4m3Max : 1.0f; };
  const auto encode = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, float s) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) q[r * cols + c] = f32_to_fp8_e4m3(x[size_t(r * cols + c)] / s);
  };
  const auto amax_of = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    float a = 0;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) a = std::max(a, std::fabs(x[size_t(r * cols + c)]));
    return a;
  };
  switch (layout) {
    case Fp8Layout::PerChannel:
      split(rows, n_threads, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          scale[r] = amax_scale(amax_of(r, r + 1, 0, cols));
          encode(r, r + 1, 0, cols, scale[r]);
        }
      });
      return;
    case Fp8Layout::BlockWise: {
      const int64_t row_blocks = (rows + kBlock - 1) / kBlock, col_blocks = (cols + kBlock - 1) / kBlock;
      split(row_blocks, n_threads, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const int64_t r0 = i * kBlock, r1 = std::min(rows, r0 + kBlock);
          for (int64_t j = 0; j < col_blocks; ++j) {
            const int64_t c0 = j * kBlock, c1 = std::min(cols, c0 + kBlock);
            const float s = amax_scale(amax_of(r0, r1, c0, c1));
            scale[i * col_blocks + j] = s;
            encode(r0, r1, c0, c1, s);
          }
        }
      });
      return;
    }
    case Fp8Layout::PerTensor:
      scale[0] = amax_scale(amax_of(0, rows, 0, cols));
      split(rows, n_threads, [&](int64_t b, int64_t e) { encode(b, e, 0, cols, scale[0]); });
      return;
  }
}

json config_json(const ModelConfig& c, Fp8Layout layout) {
  json j;
  const bool qwen3 = c.arch == Arch::Qwen3;
  FERRY_CHECK(c.arch == Arch::Llama || qwen3, "ferry gen writes FP8 folders of llama and qwen3 shapes");
  j["architectures"] = {qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = qwen3 ? "qwen3" : "llama";
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.hidden_dim;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_context;
  j["rms_norm_eps"] = c.rms_eps;
  j["rope_theta"] = c.rope_theta;
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["attention_bias"] = false;
  j["hidden_act"] = "silu";
  j["bos_token_id"] = 0;
  j["eos_token_id"] = 1;
  j["torch_dtype"] = "bfloat16";
  if (layout == Fp8Layout::PerChannel) {
    j["quantization_config"] = {
        {"quant_method", "compressed-tensors"}, {"format", "float-quantized"}, {"quantization_status", "compressed"},
        {"ignore", {"lm_head"}},
        {"config_groups",
         {{"group_0",
           {{"targets", {"Linear"}},
            {"weights", {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}, {"symmetric", true}, {"dynamic", false}}},
            {"input_activations",
             {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"symmetric", true}, {"dynamic", true}}}}}}}};
  } else if (layout == Fp8Layout::BlockWise) {
    j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                {"weight_block_size", {kBlock, kBlock}}};
  } else {
    j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}};
  }
  return j;
}

// tokenizer.json / tokenizer_config.json of the synthetic vocabulary: byte-level BPE, GPT-2 pre-tokenizer.
void write_tokenizer(const std::string& dir, int vocab_size) {
  const SyntheticVocab v = synthetic_vocab(vocab_size);
  json vocab = json::object(), added = json::array();
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    vocab[v.tokens[id]] = id;
    if (v.types[id] == 3)
      added.push_back({{"id", id}, {"content", v.tokens[id]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  const json tok = {{"version", "1.0"},       {"truncation", nullptr}, {"padding", nullptr},
                    {"added_tokens", added},  {"normalizer", nullptr}, {"pre_tokenizer", byte_level},
                    {"post_processor", nullptr}, {"decoder", byte_level},
                    {"model", {{"type", "BPE"}, {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", vocab},
                               {"merges", v.merges}}}};
  std::ofstream(dir + "/tokenizer.json") << tok.dump();
  const json cfg = {{"bos_token", v.tokens[0]}, {"eos_token", v.tokens[1]}, {"add_bos_token", true},
                    {"chat_template", v.chat_template}};
  std::ofstream(dir + "/tokenizer_config.json") << cfg.dump(1);
}

// model.safetensors, streamed: the header, then each tensor's bytes in turn.
void write_safetensors(const std::string& path, const std::vector<Entry>& entries, const TensorDoneFn& on_tensor) {
  json header = json::object();
  size_t offset = 0;
  for (const Entry& e : entries) {
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.nbytes}}};
    offset += e.nbytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8) text += ' ';
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), std::fclose);
  FERRY_CHECK(f != nullptr, "cannot create '{}': {}", path, std::strerror(errno));
  const auto put = [&](const void* p, size_t n) {
    FERRY_CHECK(std::fwrite(p, 1, n, f.get()) == n, "cannot write '{}': {}", path, std::strerror(errno));
  };
  const uint64_t n = text.size();
  put(&n, 8);
  put(text.data(), text.size());
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    buf.assign(e.nbytes, 0);
    e.fill(buf.data());
    put(buf.data(), buf.size());
    if (on_tensor) on_tensor(int(i + 1), int(entries.size()));
  }
  FERRY_CHECK(std::fflush(f.get()) == 0, "cannot write '{}': {}", path, std::strerror(errno));
}

}  // namespace

std::optional<Fp8Layout> fp8_gen_layout(const std::string& type) {
  if (type == "fp8" || type == "FP8") return Fp8Layout::PerChannel;
  if (type == "fp8-block" || type == "FP8-BLOCK") return Fp8Layout::BlockWise;
  if (type == "fp8-tensor" || type == "FP8-TENSOR") return Fp8Layout::PerTensor;
  return std::nullopt;
}

void write_random_fp8_folder(const std::string& dir, const ModelConfig& c, Fp8Layout layout, uint64_t seed,
                             int n_threads, const TensorDoneFn& on_tensor) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  std::error_code ec;
  FERRY_CHECK(!fs::exists(dir + "/config.json", ec), "'{}' already holds a model (config.json); not overwriting", dir);
  fs::create_directories(dir, ec);
  FERRY_CHECK(!ec && fs::is_directory(dir), "cannot create the folder '{}': {}", dir, ec.message());

  std::vector<Entry> entries;
  for (const RandomTensor& t : random_model_tensors(c, DType::F32, seed)) {
    const std::string name = hf_tensor_name(t.name);
    const auto draw = [t, n_threads] {
      std::vector<float> x(static_cast<size_t>(t.rows * t.cols));
      fill_random_part(t, 0, t.rows, 0, t.cols, reinterpret_cast<uint8_t*>(x.data()), n_threads);
      return x;
    };
    const std::vector<int64_t> shape = t.n_dims == 1 ? std::vector<int64_t>{t.cols} : std::vector<int64_t>{t.rows, t.cols};
    const bool fp8 = t.n_dims == 2 && t.name.rfind("blk.", 0) == 0;
    if (!fp8) {  // embeddings, lm_head, norms: BF16
      entries.push_back({name, "BF16", shape, size_t(t.rows * t.cols) * 2, [draw](uint8_t* dst) {
                           const std::vector<float> x = draw();
                           for (size_t i = 0; i < x.size(); ++i) {
                             const uint16_t b = f32_to_bf16(x[i]);
                             std::memcpy(dst + 2 * i, &b, 2);
                           }
                         }});
      continue;
    }
    // weight codes, then the scale entry; the scales are computed with the codes, so the weight's fill keeps them
    auto scales = std::make_shared<std::vector<float>>();
    std::vector<int64_t> scale_shape;
    switch (layout) {
      case Fp8Layout::PerChannel: scale_shape = {t.rows, 1}; break;
      case Fp8Layout::BlockWise: scale_shape = {(t.rows + kBlock - 1) / kBlock, (t.cols + kBlock - 1) / kBlock}; break;
      case Fp8Layout::PerTensor: scale_shape = {}; break;
    }
    int64_t n_scales = 1;
    for (int64_t d : scale_shape) n_scales *= d;
    entries.push_back({name, "F8_E4M3", shape, size_t(t.rows * t.cols), [=](uint8_t* dst) {
                         const std::vector<float> x = draw();
                         scales->assign(size_t(n_scales), 1.0f);
                         to_fp8(x, t.rows, t.cols, layout, dst, scales->data(), n_threads);
                       }});
    entries.push_back({name + (layout == Fp8Layout::BlockWise ? "_scale_inv" : "_scale"), "F32", scale_shape,
                       size_t(n_scales) * 4, [scales](uint8_t* dst) {
                         std::memcpy(dst, scales->data(), scales->size() * 4);
                         scales->clear();
                         scales->shrink_to_fit();
                       }});
  }
  write_safetensors(dir + "/model.safetensors", entries, on_tensor);
  std::ofstream(dir + "/config.json") << config_json(c, layout).dump(2);
  write_tokenizer(dir, c.vocab_size);
}

}  // namespace ferry
