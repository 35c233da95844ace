#include "model/fp8_weights.h"

#include <array>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "formats/fp8.h"
#include "formats/quant.h"
#include "formats/safetensors.h"

namespace ferry {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shape_str(const SafetensorsTensor& t) {
  std::string s = "(";
  for (int i = 0; i < t.n_dims; ++i) s += (i ? ", " : "") + std::to_string(t.shape[size_t(i)]);
  return s + ")";
}

// compressed-tensors: the weights' strategy shared by every config group.
Fp8Scheme compressed_tensors_scheme(const nlohmann::json& qc) {
  FERRY_CHECK(qc.contains("config_groups") && qc["config_groups"].is_object() && !qc["config_groups"].empty(),
              "config.json: compressed-tensors quantization_config has no config_groups");
  std::optional<Fp8Scheme> scheme;
  for (const auto& [group, g] : qc["config_groups"].items()) {
    FERRY_CHECK(g.is_object() && g.contains("weights") && g["weights"].is_object(),
                "config.json: quantization config group '{}' has no weights entry", group);
    const nlohmann::json& w = g["weights"];
    const std::string type = w.value("type", "");
    const int bits = w.value("num_bits", 0);
    FERRY_CHECK(type == "float" && bits == 8,
                "config.json: quantization config group '{}' has {}-bit {} weights; ferry reads 8-bit float (FP8) only",
                group, bits, type);
    const std::string strategy = w.value("strategy", "");
    Fp8Scheme s;
    s.scale_suffix = "_scale";
    if (strategy == "channel") {
      s.layout = Fp8Layout::PerChannel;
    } else if (strategy == "tensor") {
      s.layout = Fp8Layout::PerTensor;
    } else if (strategy == "block") {
      s.layout = Fp8Layout::BlockWise;
      const nlohmann::json bs = w.value("block_structure", nlohmann::json());
      FERRY_CHECK(bs.is_array() && bs.size() == 2 && bs[0].is_number_integer() && bs[1].is_number_integer() &&
                      bs[0].get<int>() > 0 && bs[1].get<int>() > 0,
                  "config.json: group '{}' has strategy block without a [rows, cols] block_structure", group);
      s.block_rows = bs[0].get<int>(), s.block_cols = bs[1].get<int>();
    } else {
      fail("config.json: FP8 weight strategy '{}' (group '{}') is not supported: channel, tensor or block", strategy,
           group);
    }
    FERRY_CHECK(!scheme || (scheme->layout == s.layout && scheme->block_rows == s.block_rows &&
                            scheme->block_cols == s.block_cols),
                "config.json: quantization config groups mix weight strategies; ferry reads one");
    scheme = s;
  }
  return *scheme;
}

}  // namespace

const char* fp8_layout_name(Fp8Layout layout) {
  switch (layout) {
    case Fp8Layout::BlockWise: return "block-wise";
    case Fp8Layout::PerChannel: return "per-channel";
    case Fp8Layout::PerTensor: return "per-tensor";
  }
  return "?";
}

std::optional<Fp8Scheme> fp8_scheme(const nlohmann::json& config) {
  const char* key = config.contains("quantization_config") ? "quantization_config"
                    : config.contains("compression_config") ? "compression_config"
                                                            : nullptr;
  if (key == nullptr || config[key].is_null()) return std::nullopt;
  const nlohmann::json& qc = config[key];
  FERRY_CHECK(qc.is_object(), "config.json: {} is not an object", key);
  const std::string method = qc.value("quant_method", "");
  if (method == "fp8") {
    Fp8Scheme s;
    if (qc.contains("weight_block_size") && !qc["weight_block_size"].is_null()) {
      const nlohmann::json& bs = qc["weight_block_size"];
      FERRY_CHECK(bs.is_array() && bs.size() == 2 && bs[0].is_number_integer() && bs[1].is_number_integer() &&
                      bs[0].get<int>() > 0 && bs[1].get<int>() > 0,
                  "config.json: weight_block_size must be [rows, cols], got {}", bs.dump());
      s.layout = Fp8Layout::BlockWise;
      s.block_rows = bs[0].get<int>(), s.block_cols = bs[1].get<int>();
      s.scale_suffix = "_scale_inv";
    } else {
      s.layout = Fp8Layout::PerTensor;
      s.scale_suffix = "_scale";
    }
    return s;
  }
  if (method == "compressed-tensors") return compressed_tensors_scheme(qc);
  fail("config.json: quantization method '{}' is not supported (ferry reads FP8: fp8, compressed-tensors)", method);
}

bool is_fp8_side_tensor(const std::string& name) {
  return ends_with(name, "weight_scale_inv") || ends_with(name, "weight_scale") || ends_with(name, "input_scale");
}

namespace {

// An FP8 weight checked against its scale: the codes (rows, cols) row-major and the scales as f32 in the layout's
// shape (scale_cols columns for block-wise).
struct CheckedFp8 {
  const uint8_t* codes = nullptr;
  int64_t rows = 0, cols = 0;
  std::vector<float> scale;
  int64_t scale_cols = 1;

  // The scale of value (r, c).
  float at(const Fp8Scheme& s, int64_t r, int64_t c) const {
    switch (s.layout) {
      case Fp8Layout::BlockWise: return scale[size_t((r / s.block_rows) * scale_cols + c / s.block_cols)];
      case Fp8Layout::PerChannel: return scale[size_t(r)];
      case Fp8Layout::PerTensor: return scale[0];
    }
    return 1.0f;
  }
};

CheckedFp8 check_fp8_weight(const SafetensorsModel& st, const std::string& name, const Fp8Scheme& s) {
  const SafetensorsTensor* w = st.entry(name);
  FERRY_CHECK(w != nullptr, "model folder '{}' has no tensor '{}'", st.dir(), name);
  FERRY_CHECK(w->file_dtype == "F8_E4M3", "model folder '{}': tensor '{}' is {}, not F8_E4M3", st.dir(), name,
              w->file_dtype);
  FERRY_CHECK(w->n_dims == 2 && w->shape[0] > 0 && w->shape[1] > 0,
              "model folder '{}': FP8 tensor '{}' has shape {}; FP8 weights must be matrices", st.dir(), name, shape_str(*w));
  const int64_t rows = w->shape[0], cols = w->shape[1];
  // an FP8 weight "x.weight" has its scale in "x.weight_scale_inv" / "x.weight_scale"
  const std::string scale_name = name + s.scale_suffix;
  const SafetensorsTensor* sc = st.entry(scale_name);
  FERRY_CHECK(sc != nullptr, "model folder '{}': FP8 weight '{}' has no scale tensor '{}' ({} FP8)", st.dir(), name,
              scale_name, fp8_layout_name(s.layout));
  FERRY_CHECK(sc->supported() && (sc->dtype == DType::F32 || sc->dtype == DType::BF16 || sc->dtype == DType::F16),
              "model folder '{}': scale '{}' is {}; scales must be F32, BF16 or F16", st.dir(), scale_name,
              sc->file_dtype);
  int64_t numel = 1;
  for (int i = 0; i < sc->n_dims; ++i) numel *= sc->shape[size_t(i)];
  int64_t want_rows = 1, want_cols = 1;
  bool shape_ok = false;
  switch (s.layout) {
    case Fp8Layout::BlockWise:
      want_rows = (rows + s.block_rows - 1) / s.block_rows, want_cols = (cols + s.block_cols - 1) / s.block_cols;
      shape_ok = sc->n_dims == 2 && sc->shape[0] == want_rows && sc->shape[1] == want_cols;
      break;
    case Fp8Layout::PerChannel:
      want_rows = rows;
      shape_ok = (sc->n_dims == 2 && sc->shape[0] == rows && sc->shape[1] == 1) || (sc->n_dims == 1 && sc->shape[0] == rows);
      break;
    case Fp8Layout::PerTensor:
      shape_ok = numel == 1;
      break;
  }
  FERRY_CHECK(shape_ok, "model folder '{}': scale '{}' has shape {}, expected {} for the {} FP8 weight ({}, {})", st.dir(),
              scale_name, shape_str(*sc),
              s.layout == Fp8Layout::PerTensor ? std::string("one value")
                                               : "(" + std::to_string(want_rows) + ", " + std::to_string(want_cols) + ")",
              fp8_layout_name(s.layout), rows, cols);
  CheckedFp8 out;
  out.codes = w->data;
  out.rows = rows, out.cols = cols, out.scale_cols = want_cols;
  // scales as f32 (the bytes may be unaligned: dequantize_row reads them through a copy)
  std::vector<uint8_t> raw(sc->nbytes);
  if (!raw.empty()) std::memcpy(raw.data(), sc->data, raw.size());
  out.scale.resize(static_cast<size_t>(numel));
  dequantize_row(sc->dtype, raw.data(), out.scale.data(), numel);
  return out;
}

}  // namespace

std::vector<float> dequantize_fp8_weight(const SafetensorsModel& st, const std::string& name, const Fp8Scheme& s) {
  const CheckedFp8 w = check_fp8_weight(st, name, s);
  const std::array<float, 256> lut = fp8_e4m3_table();
  std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    const uint8_t* q = w.codes + size_t(r) * size_t(w.cols);
    float* y = out.data() + size_t(r) * size_t(w.cols);
    for (int64_t c = 0; c < w.cols; ++c) y[c] = lut[q[c]] * w.at(s, r, c);
  }
  return out;
}

bool fp8_maps_to_blocks(const Fp8Scheme& s, int64_t cols) {
  return cols > 0 && cols % kF8Block == 0 && (s.layout != Fp8Layout::BlockWise || s.block_cols % kF8Block == 0);
}

std::vector<uint8_t> fp8_weight_blocks(const SafetensorsModel& st, const std::string& name, const Fp8Scheme& s) {
  const CheckedFp8 w = check_fp8_weight(st, name, s);
  FERRY_CHECK(fp8_maps_to_blocks(s, w.cols),
              "model folder '{}': FP8 weight '{}' of {} columns ({} FP8) does not split into 128-value blocks of one "
              "scale each", st.dir(), name, w.cols, fp8_layout_name(s.layout));
  const int64_t nb = w.cols / kF8Block;
  std::vector<uint8_t> out(size_t(w.rows) * size_t(nb) * sizeof(BlockF8E4M3B128));
  auto* blocks = reinterpret_cast<BlockF8E4M3B128*>(out.data());
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      BlockF8E4M3B128& blk = blocks[r * nb + b];
      std::memcpy(blk.qs, w.codes + size_t(r) * size_t(w.cols) + size_t(b) * kF8Block, kF8Block);
      blk.d = w.at(s, r, b * kF8Block);  // one scale for the whole block (fp8_maps_to_blocks)
    }
  }
  return out;
}

}  // namespace ferry
