#include "model/quantize_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include "core/check.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "formats/gguf_split.h"
#include "formats/quant.h"
#include "formats/safetensors.h"
#include "model/config.h"
#include "model/fp8_weights.h"
#include "model/gguf_export.h"
#include "model/moe_names.h"
#include "model/quant_mix.h"
#include "tokenizer/vocab.h"

namespace ferry {
namespace {

// One input tensor under its GGUF name. data: shape's product values of `type`, rows of shape.back() values
// (rows may start unaligned: they are copied before they are read).
struct SourceTensor {
  std::string name;
  std::vector<int64_t> shape;  // outermost first
  DType type = DType::F32;
  const uint8_t* data = nullptr;
  int qk_head_dim = 0;  // > 0: a Llama q/k projection from a Hugging Face folder, rows reordered for GGUF
  float add = 0;        // added to every value (Hugging Face Gemma's norm weights w become GGUF's 1 + w)
};

// The input, with whatever owns the bytes its tensors point into.
struct Source {
  std::optional<GgufSplitSet> gguf;  // one GGUF file or the shards of a split one
  std::optional<SafetensorsModel> folder;
  std::vector<float> rope_divisors;  // rope_freqs.weight of a converted Llama-3 folder
  std::vector<std::vector<float>> rope_factors;  // rope_factors_short/long.weight of a converted Phi-3 folder (longrope)
  std::map<std::string, std::vector<float>> fp8_weights;  // FP8 weights of a folder, dequantized: (rows, cols) f32
  std::map<std::string, std::vector<uint8_t>> stacked;    // a folder's experts stacked as GGUF holds them
  std::vector<SourceTensor> tensors;
  int n_layers = 0;
};

int64_t rows_of(const SourceTensor& t) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < t.shape.size(); ++i) rows *= t.shape[i];
  return rows;
}

void check_readable(const std::string& where, const std::string& name, DType type) {
  FERRY_CHECK(type == DType::F32 || type == DType::F16 || type == DType::BF16 ||
                  (is_quantized(type) && dtype_info(type).ggml_id >= 0 && type != DType::Q8_1 && type != DType::Q8_K),
              "{}: tensor '{}' has type {}, which ferry quantize cannot read", where, name, dtype_name(type));
}

Source open_gguf_source(const std::string& path, GgufWriter& w) {
  Source s;
  s.gguf = GgufSplitSet::open(path);
  const GgufSplitSet& set = *s.gguf;
  s.n_layers = config_from_gguf(set).n_layers;  // also checks that ferry knows the architecture
  for (const auto& [key, value] : set.metadata().metadata()) {
    if (key == "general.file_type" || key == "general.quantization_version" || key == "general.alignment") continue;
    if (key == kGgufSplitNo || key == kGgufSplitCount || key == kGgufSplitTensorsCount) continue;  // OUT is one file
    w.set(key, value);
  }
  for (const GgufTensorInfo* t : set.tensors()) {
    check_readable(path, t->name, t->dtype);
    s.tensors.push_back({t->name, std::vector<int64_t>(t->shape.begin(), t->shape.begin() + t->n_dims), t->dtype, t->data});
  }
  return s;
}

// Sort key of a GGUF name, convert_hf_to_gguf.py's order: token_embd, rope_freqs, the layers in order, output_norm,
// output.
std::pair<int, std::string> order_key(const std::string& name) {
  if (name.rfind("blk.", 0) == 0) return {std::atoi(name.c_str() + 4), name};
  if (name == "token_embd.weight") return {-2, name};
  if (name == "rope_freqs.weight") return {-1, name};
  return {1 << 30, name == "output_norm.weight" ? "0" : name};
}

Source open_folder_source(const std::string& dir, GgufWriter& w) {
  Source s;
  s.folder = SafetensorsModel::open(dir);
  const SafetensorsModel& st = *s.folder;
  const ModelConfig config = config_from_hf(st.config());
  s.n_layers = config.n_layers;
  set_gguf_config(w, config);
  set_gguf_vocab(w, vocab_from_hf(dir), config.vocab_size);
  const std::optional<Fp8Scheme> fp8 = fp8_scheme(st.config());
  // per-expert tensors of each (layer, projection): gathered, then stacked into one (E, rows, cols) tensor
  std::map<std::pair<int, ExpertProj>, std::map<int, std::string>> experts;
  for (const std::string& hf : st.names()) {
    if (fp8 && is_fp8_side_tensor(hf)) continue;  // a scale, read with its weight
    if (const std::optional<HfExpertTensor> ex = parse_hf_expert_name(hf)) {
      experts[{ex->layer, ex->proj}][ex->expert] = hf;
      continue;
    }
    const std::string name = gguf_tensor_name(hf, config.tied_embeddings, config.post_norms);
    if (name.empty()) continue;
    SourceTensor src;
    const SafetensorsTensor* e = st.entry(hf);
    if (e->file_dtype == "F8_E4M3") {  // an FP8 checkpoint's weight: its f32 values (model/fp8_weights.h)
      FERRY_CHECK(fp8.has_value(), "{}: tensor '{}' is F8_E4M3 but config.json declares no quantization_config", dir, hf);
      const std::vector<float>& v = s.fp8_weights[hf] = dequantize_fp8_weight(st, hf, *fp8);
      src = {name, {e->shape[0], e->shape[1]}, DType::F32, reinterpret_cast<const uint8_t*>(v.data())};
    } else {
      const SafetensorsTensor& t = st.get(hf);  // throws for a dtype ferry cannot read
      check_readable(dir, hf, t.dtype);
      src = {name, std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.n_dims), t.dtype, t.data};
    }
    const bool qk = name.find(".attn_q.") != std::string::npos || name.find(".attn_k.") != std::string::npos;
    if (config.arch == Arch::Llama && qk) src.qk_head_dim = config.head_dim;
    const std::string norm_suffix = "norm.weight";
    if (name.size() >= norm_suffix.size() && name.compare(name.size() - norm_suffix.size(), norm_suffix.size(), norm_suffix) == 0)
      src.add = config.norm_weight_offset;
    s.tensors.push_back(std::move(src));
  }
  for (const auto& [key, by_expert] : experts) {
    const std::string name = ExpertNames{true, false, key.first}.stacked(key.second);
    FERRY_CHECK(int(by_expert.size()) == config.n_experts && by_expert.rbegin()->first == config.n_experts - 1,
                "{}: layer {} has {} experts for '{}', the config says {}", dir, key.first, by_expert.size(), name,
                config.n_experts);
    const SafetensorsTensor& first = st.get(by_expert.begin()->second);
    FERRY_CHECK(first.n_dims == 2, "{}: expert tensor '{}' is not a matrix", dir, by_expert.begin()->second);
    check_readable(dir, by_expert.begin()->second, first.dtype);
    const size_t bytes = size_t(first.shape[0]) * row_bytes(first.dtype, first.shape[1]);
    std::vector<uint8_t>& buf = s.stacked[name];
    buf.resize(bytes * by_expert.size());
    for (const auto& [e, hf] : by_expert) {
      const SafetensorsTensor& t = st.get(hf);
      FERRY_CHECK(t.dtype == first.dtype && t.n_dims == 2 && t.shape[0] == first.shape[0] && t.shape[1] == first.shape[1],
                  "{}: expert tensor '{}' differs in type or shape from expert 0's", dir, hf);
      std::memcpy(buf.data() + size_t(e) * bytes, t.data, bytes);
    }
    s.tensors.push_back({name, {int64_t(by_expert.size()), first.shape[0], first.shape[1]}, first.dtype, buf.data()});
  }
  if (config.rope_scaling.kind == RopeScalingKind::LongRope) {  // Phi-3: llama.cpp's rope_factors_short/long tensors
    s.rope_factors = {config.rope_scaling.short_factor, config.rope_scaling.long_factor};
    for (int i = 0; i < 2; ++i)
      s.tensors.push_back({i == 0 ? "rope_factors_short.weight" : "rope_factors_long.weight",
                           {int64_t(s.rope_factors[size_t(i)].size())}, DType::F32,
                           reinterpret_cast<const uint8_t*>(s.rope_factors[size_t(i)].data())});
  }
  s.rope_divisors = rope_freq_divisors(config);
  if (!s.rope_divisors.empty()) {
    s.tensors.push_back({"rope_freqs.weight", {int64_t(s.rope_divisors.size())}, DType::F32,
                         reinterpret_cast<const uint8_t*>(s.rope_divisors.data())});
  }
  std::stable_sort(s.tensors.begin(), s.tensors.end(),
                   [](const SourceTensor& a, const SourceTensor& b) { return order_key(a.name) < order_key(b.name); });
  return s;
}

// Writes rows [begin, end) of t converted to `to` at dst (row-major, row_bytes(to, cols) each).
void convert_rows(const SourceTensor& t, DType to, int64_t begin, int64_t end, uint8_t* dst) {
  const int64_t cols = t.shape.back();
  const size_t in_bytes = row_bytes(t.type, cols), out_bytes = row_bytes(to, cols);
  std::vector<uint8_t> raw(in_bytes);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = begin; r < end; ++r) {
    const int64_t src_row = t.qk_head_dim > 0 ? llama_qk_source_row(r, t.qk_head_dim) : r;
    std::memcpy(raw.data(), t.data + size_t(src_row) * in_bytes, in_bytes);
    uint8_t* out = dst + size_t(r) * out_bytes;
    if (t.type == to && t.add == 0) {
      std::memcpy(out, raw.data(), in_bytes);
      continue;
    }
    dequantize_row(t.type, raw.data(), row.data(), cols);
    for (float& v : row) v += t.add;
    quantize_row(to, row.data(), out, cols);
  }
}

}  // namespace

QuantizeSummary quantize_model(const QuantizeModelOptions& o) {
  const QuantTarget target = parse_quant_target(o.type);
  FERRY_CHECK(!o.output.empty(), "ferry quantize: no output path");
  FERRY_CHECK(std::filesystem::exists(o.input), "model '{}' does not exist", o.input);
  GgufWriter w;
  Source src = std::filesystem::is_directory(o.input) ? open_folder_source(o.input, w) : open_gguf_source(o.input, w);
  w.set("general.quantization_version", GgufValue::u32(2));
  w.set("general.file_type", GgufValue::u32(target.file_type));

  std::vector<TensorShapeInfo> infos;
  for (const SourceTensor& t : src.tensors) infos.push_back({t.name, int(t.shape.size()), t.shape.back()});
  const QuantPlanner planner(target, src.n_layers, infos);

  auto pool = std::make_shared<ThreadPool>(o.n_threads);
  QuantizeSummary summary;
  summary.n_tensors = int(src.tensors.size());
  for (size_t i = 0; i < src.tensors.size(); ++i) {
    const SourceTensor& t = src.tensors[i];
    const DType to = planner.type_for(infos[i]);
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    QuantizedTensor report{int(i) + 1, summary.n_tensors, t.name, t.shape, t.type, to, row_bytes(t.type, numel),
                           row_bytes(to, numel)};
    summary.bytes_in += report.bytes_in;
    summary.bytes_out += report.bytes_out;
    w.add_tensor(t.name, to, t.shape, [&t, to, pool, report, &o](uint8_t* dst, size_t) {
      const int64_t rows = rows_of(t);
      // a grain of rows worth ~64 K values, so small tensors do not pay for the pool
      const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, t.shape.back()));
      pool->parallel_for(rows, grain, [&](int64_t begin, int64_t end) { convert_rows(t, to, begin, end, dst); });
      if (o.on_tensor) o.on_tensor(report);
    });
  }
  w.write(o.output);
  return summary;
}

}  // namespace ferry
