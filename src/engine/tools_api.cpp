// include/ferry/tools.h: the public face of the random-model writer (model/random_model.h) and the quantizer
// (model/quantize_model.h) for front ends.
// is_valid_utf8 needs no code here: the tokenizer library defines it.
#include "ferry/tools.h"

#include <optional>

#include "core/check.h"
#include "core/dtype.h"
#include "model/quant_mix.h"
#include "model/quantize_model.h"
#include "model/random_fp8_folder.h"
#include "model/random_model.h"

namespace ferry {

std::vector<std::string> random_model_shape_names() { return random_model_shapes(); }

namespace {

// gen's weight types: f32, f16, bf16, q8_0, q4_0, q4_1 keep gen's own layout (embeddings Q8_0 for the quantized
// ones); every other quantize_type_names() entry (q5_0, q5_1, the K types, the K-quant mixes) types the matrices as
// `ferry quantize` would (model/quant_mix.h). Returns the legacy type, or nullopt for a quantize target.
std::optional<DType> checked_weight_type(const RandomModelSpec& spec) {
  FERRY_CHECK(!spec.path.empty(), "no output path for the random model");
  const QuantTarget target = parse_quant_target(spec.weight_type);  // throws for an unknown name
  const DType t = target.base;
  if (target.mix == QuantMix::OneType && (t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 ||
                                          t == DType::Q4_0 || t == DType::Q4_1))
    return t;
  return std::nullopt;
}

}  // namespace

int64_t random_model_n_params(const RandomModelSpec& spec) {
  const ModelConfig config = random_model_config(spec.shape);  // throws for an unknown shape
  if (!fp8_gen_layout(spec.weight_type)) checked_weight_type(spec);
  return config.n_params();
}

std::vector<std::string> gen_random_model(const RandomModelSpec& spec) {
  const ModelConfig config = random_model_config(spec.shape);
  const bool split = spec.split_max_bytes > 0 || spec.split_max_tensors > 0;
  FERRY_CHECK(spec.split_max_tensors >= 0, "--split-max-tensors {} is negative", spec.split_max_tensors);
  if (const std::optional<Fp8Layout> fp8 = fp8_gen_layout(spec.weight_type)) {
    FERRY_CHECK(!spec.path.empty(), "no output folder for the random model");
    FERRY_CHECK(!split, "a split GGUF is not written for --type {} (a Hugging Face folder)", spec.weight_type);
    write_random_fp8_folder(spec.path, config, *fp8, spec.seed, spec.n_threads, spec.on_tensor);
    return {spec.path};
  }
  const std::optional<DType> type = checked_weight_type(spec);
  const GgufWriter w = type ? random_model_gguf(config, *type, spec.seed, spec.n_threads, true, RandomInit::Flat,
                                                spec.on_tensor)
                            : random_model_gguf(config, parse_quant_target(spec.weight_type), spec.seed,
                                                spec.n_threads, RandomInit::Flat, spec.on_tensor);
  if (!split) {
    w.write(spec.path);
    return {spec.path};
  }
  const std::string_view path = spec.path;
  const std::string prefix(path.ends_with(".gguf") ? path.substr(0, path.size() - 5) : path);
  return w.write_split(prefix, {spec.split_max_bytes, spec.split_max_tensors});
}

std::vector<std::string> quantize_type_names() { return quant_target_names(); }

QuantizeTotals quantize(const QuantizeSpec& spec, const std::function<void(const QuantizeProgress&)>& on_tensor) {
  QuantizeModelOptions o{spec.input, spec.output, spec.type, spec.n_threads, {}};
  if (on_tensor) {
    o.on_tensor = [&on_tensor](const QuantizedTensor& t) {
      std::string shape = "(";
      for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape[i]);
      on_tensor({t.index, t.count, t.name, shape + ")", std::string(dtype_name(t.from)), std::string(dtype_name(t.to)),
                 t.bytes_in, t.bytes_out});
    };
  }
  const QuantizeSummary s = quantize_model(o);
  return {s.n_tensors, s.bytes_in, s.bytes_out};
}

}  // namespace ferry
