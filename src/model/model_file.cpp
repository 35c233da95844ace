#include "model/model_file.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "formats/gguf.h"
#include "formats/gguf_split.h"
#include "formats/safetensors.h"
#include "model/fp8_weights.h"
#include "model/moe_names.h"

namespace ferry {
namespace {

// Named host views over the file(s) the source owns: GgufSplitSet (one GGUF file or its shards) or SafetensorsModel.
template <typename Owner>
class FileWeights final : public WeightSource {
 public:
  FileWeights(Owner owner, std::string name) : owner_(std::move(owner)), name_(std::move(name)) {}
  void add(const std::string& tensor, const Tensor& view) { views_[tensor] = view; }
  // A (rows, cols) tensor of type `dtype` the source owns (an FP8 weight converted at load): `bytes` holds
  // row_bytes(dtype, cols) per row.
  void add_owned(const std::string& tensor, DType dtype, std::vector<uint8_t> bytes, int64_t rows, int64_t cols) {
    FERRY_ASSERT(bytes.size() == size_t(rows) * row_bytes(dtype, cols));
    std::vector<uint8_t>& v = owned_[tensor] = std::move(bytes);
    Tensor t;
    t.dtype = dtype;
    t.n_dims = 2;
    t.shape = {rows, cols};
    t.data = v.data();
    views_[tensor] = t;
  }
  const Tensor* find(const std::string& tensor) const override {
    auto it = views_.find(tensor);
    return it == views_.end() ? nullptr : &it->second;
  }
  std::string describe() const override { return name_; }
  const Owner& owner() const { return owner_; }

 private:
  Owner owner_;
  std::string name_;
  std::map<std::string, Tensor> views_;
  std::map<std::string, std::vector<uint8_t>> owned_;  // (rows, cols) of the view's type each, behind views_ entries
};

std::string value_summary(const GgufValue& v) {
  switch (v.type) {
    case GgufType::String: {
      const std::string& s = v.as_string();
      return s.size() > 60 ? "\"" + s.substr(0, 57) + "...\"" : "\"" + s + "\"";
    }
    case GgufType::Array: return "[" + std::to_string(v.as_array().items.size()) + " items]";
    case GgufType::Bool: return v.as_bool() ? "true" : "false";
    case GgufType::F32:
    case GgufType::F64: return fmt::format("{:g}", v.as_float());
    default: return std::to_string(v.as_int());
  }
}

ModelFile open_gguf(const std::string& path) {
  ModelFile m;
  m.path = path;
  m.format = ModelFormat::Gguf;
  auto weights = std::make_unique<FileWeights<GgufSplitSet>>(GgufSplitSet::open(path), path);
  const GgufSplitSet& set = weights->owner();
  const GgufFile& g = set.metadata();
  for (const GgufTensorInfo* t : set.tensors()) weights->add(t->name, t->view());
  m.config = config_from_gguf(set);
  m.vocab = vocab_from_gguf(g);
  m.gguf_names = true;
  for (const GgufTensorInfo* t : set.tensors()) m.tensors.emplace_back(t->name, t->view());
  m.facts.emplace_back("gguf.version", std::to_string(g.version()));
  if (set.is_split()) {
    const GgufFile& last = set.shards().back();
    m.facts.emplace_back("gguf.split", fmt::format("{} shards, {} tensors, {} bytes: {} .. {}", set.shards().size(),
                                                   set.tensors().size(), set.file_bytes(), g.name(), last.name()));
  }
  for (const auto& [key, value] : g.metadata())
    if (key.rfind("tokenizer.", 0) != 0 || value.type != GgufType::Array) m.facts.emplace_back(key, value_summary(value));
  m.weights = std::move(weights);
  return m;
}

ModelFile open_hf_folder(const std::string& dir) {
  ModelFile m;
  m.path = dir;
  m.format = ModelFormat::Safetensors;
  auto weights = std::make_unique<FileWeights<SafetensorsModel>>(SafetensorsModel::open(dir), dir);
  const SafetensorsModel& st = weights->owner();
  // FP8 checkpoints: F8_E4M3 weights become F8_E4M3_B128 blocks with their scales folded in, or f32 where the
  // columns do not split into 128-value blocks of one scale (model/fp8_weights.h); the scales are consumed.
  const std::optional<Fp8Scheme> fp8 = fp8_scheme(st.config());
  std::vector<std::string> names;
  int n_fp8_blocks = 0, n_fp8_f32 = 0;
  for (const std::string& name : st.names()) {
    const SafetensorsTensor* e = st.entry(name);
    if (e->file_dtype == "F8_E4M3") {
      FERRY_CHECK(fp8.has_value(), "model folder '{}': tensor '{}' is F8_E4M3 but config.json declares no "
                  "quantization_config", dir, name);
      if (e->n_dims == 2 && fp8_maps_to_blocks(*fp8, e->shape[1])) {
        weights->add_owned(name, DType::F8_E4M3_B128, fp8_weight_blocks(st, name, *fp8), e->shape[0], e->shape[1]);
        ++n_fp8_blocks;
      } else {
        std::vector<float> values = dequantize_fp8_weight(st, name, *fp8);  // checks the shape
        std::vector<uint8_t> bytes(values.size() * sizeof(float));
        std::memcpy(bytes.data(), values.data(), bytes.size());
        weights->add_owned(name, DType::F32, std::move(bytes), e->shape[0], e->shape[1]);
        ++n_fp8_f32;
      }
    } else if (fp8 && is_fp8_side_tensor(name)) {
      continue;  // a scale, read with its weight
    } else {
      weights->add(name, st.find(name)->view());  // throws for another unsupported type (F8_E5M2, ...)
    }
    names.push_back(name);
  }
  m.config = config_from_hf(st.config());
  m.vocab = vocab_from_hf(dir);
  m.gguf_names = false;
  for (const std::string& name : names) m.tensors.emplace_back(name, *weights->find(name));
  m.facts.emplace_back("model_type", st.config().value("model_type", ""));
  if (fp8) {
    const std::string blocks =
        fp8->layout == Fp8Layout::BlockWise ? fmt::format(" {}x{}", fp8->block_rows, fp8->block_cols) : "";
    m.facts.emplace_back("fp8", fmt::format("{}{} e4m3 weights: {} kept as f8_e4m3_b128, {} dequantized to f32 "
                                            "(columns not in 128-value blocks of one scale)",
                                            fp8_layout_name(fp8->layout), blocks, n_fp8_blocks, n_fp8_f32));
  }
  m.weights = std::move(weights);
  return m;
}

}  // namespace

// Sizes from config.json or GGUF metadata must agree with the tensors before anything is sized from them: a
// hostile file could otherwise ask for 16M layers (memory allocated per layer before a tensor is found
// missing) or a vocabulary of billions.
void check_config_against_tensors(const ModelFile& m) {
  const ModelConfig& c = m.config;
  const bool g = m.gguf_names;
  // Shapes from the tensor list (views; a random: model's tensors are not generated for this).
  const auto find = [&](const std::string& name) -> const Tensor* {
    for (const auto& [n, t] : m.tensors)
      if (n == name) return &t;
    return nullptr;
  };
  const int64_t per_layer = c.arch == Arch::Phi3 ? 6 : 7;  // Phi-3's fused q|k|v and gate|up: 6 tensors a layer
  FERRY_CHECK(int64_t(c.n_layers) * per_layer <= int64_t(m.tensors.size()),
              "{}: the config says {} layers, but the file holds only {} tensors (at least {} per layer)", m.path,
              c.n_layers, m.tensors.size(), per_layer);
  // Hugging Face text-model tensors: model.*, or a multimodal Gemma 3's language model.
  std::string hf = "model.";
  for (const char* p : {"language_model.model.", "model.language_model."})
    if (!g && find(std::string(p) + "embed_tokens.weight")) hf = p;
  const std::string embd = g ? "token_embd.weight" : hf + "embed_tokens.weight";
  const Tensor* e = find(embd);
  FERRY_CHECK(e != nullptr, "{}: missing tensor '{}'", m.path, embd);
  FERRY_CHECK(e->n_dims == 2 && e->shape[0] == c.vocab_size && e->shape[1] == c.dim,
              "{}: tensor '{}' is {}, but the config says vocab_size {} and hidden size {}", m.path, embd,
              e->shape_str(), c.vocab_size, c.dim);
  const std::string last = g ? fmt::format("blk.{}.attn_q.weight", c.n_layers - 1)
                             : fmt::format("{}layers.{}.self_attn.q_proj.weight", hf, c.n_layers - 1);
  const std::string last_qkv = g ? fmt::format("blk.{}.attn_qkv.weight", c.n_layers - 1)
                                 : fmt::format("{}layers.{}.self_attn.qkv_proj.weight", hf, c.n_layers - 1);
  FERRY_CHECK(find(last) != nullptr || (c.arch == Arch::Phi3 && find(last_qkv) != nullptr),
              "{}: the config says {} layers, but tensor '{}' is missing", m.path, c.n_layers, last);
  const std::string k = g ? "blk.0.attn_k.weight" : hf + "layers.0.self_attn.k_proj.weight";
  if (const Tensor* t = find(k))
    FERRY_CHECK(t->n_dims == 2 && t->shape[0] == int64_t(c.n_kv_heads) * c.head_dim,
                "{}: tensor '{}' is {}, but the config says {} KV heads of {}", m.path, k, t->shape_str(), c.n_kv_heads, c.head_dim);
  const std::string up = g ? "blk.0.ffn_up.weight" : hf + "layers.0.mlp.up_proj.weight";
  const bool up_is_gate_up = g && c.arch == Arch::Phi3 && find("blk.0.ffn_gate.weight") == nullptr;  // 2*hidden rows
  if (const Tensor* t = find(up))
    FERRY_CHECK(t->n_dims == 2 && t->shape[0] == (up_is_gate_up ? 2 : 1) * int64_t(c.hidden_dim),
                "{}: tensor '{}' is {}, but the config says intermediate size {}", m.path, up, t->shape_str(), c.hidden_dim);
  // Experts: the first MoE layer's router and up projection(s) against the expert count and size.
  for (int l = 0; l < c.n_layers && c.n_experts > 0; ++l) {
    if (!c.is_moe_layer(l)) continue;
    const ExpertNames en{g, c.arch == Arch::Llama, l};
    const Tensor* r = find(en.router());
    FERRY_CHECK(r != nullptr, "{}: the config says {} experts, but the router '{}' is missing", m.path, c.n_experts,
                en.router());
    FERRY_CHECK(r->n_dims == 2 && r->shape[0] == c.n_experts && r->shape[1] == c.dim,
                "{}: router '{}' is {}, but the config says {} experts of hidden size {}", m.path, en.router(),
                r->shape_str(), c.n_experts, c.dim);
    const std::string up_name = g ? en.stacked(ExpertProj::Up) : en.per_expert(c.n_experts - 1, ExpertProj::Up);
    const Tensor* u = find(up_name);
    FERRY_CHECK(u != nullptr, "{}: the config says {} experts, but tensor '{}' is missing", m.path, c.n_experts, up_name);
    const bool ok = g ? u->n_dims == 3 && u->shape[0] == c.n_experts && u->shape[1] == c.expert_hidden_dim &&
                            u->shape[2] == c.dim
                      : u->n_dims == 2 && u->shape[0] == c.expert_hidden_dim && u->shape[1] == c.dim;
    FERRY_CHECK(ok, "{}: tensor '{}' is {}, but the config says {} experts of {} hidden units over dim {}", m.path,
                up_name, u->shape_str(), c.n_experts, c.expert_hidden_dim, c.dim);
    break;
  }
}

ModelFile open_model_metadata(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  FERRY_CHECK(fs::exists(path, ec), "model '{}' does not exist", path);
  return fs::is_directory(path, ec) ? open_hf_folder(path) : open_gguf(path);
}

ModelFile open_model(const std::string& path) {
  ModelFile m = open_model_metadata(path);
  check_config_against_tensors(m);
  return m;
}

}  // namespace ferry
