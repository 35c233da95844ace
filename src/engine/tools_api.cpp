// include/ferry/tools.h: the public face of the random-model writer (model/random_model.h) for front ends.
// is_valid_utf8 needs no code here: the tokenizer library defines it.
#include "ferry/tools.h"

#include "core/check.h"
#include "core/dtype.h"
#include "model/random_model.h"

namespace ferry {

std::vector<std::string> random_model_shape_names() { return random_model_shapes(); }

namespace {

DType checked_weight_type(const RandomModelSpec& spec) {
  const auto type = dtype_from_name(spec.weight_type);
  FERRY_CHECK(type.has_value(), "unknown weight type '{}'", spec.weight_type);
  FERRY_CHECK(!spec.path.empty(), "no output path for the random model");
  return *type;
}

}  // namespace

int64_t random_model_n_params(const RandomModelSpec& spec) {
  const ModelConfig config = random_model_config(spec.shape);  // throws for an unknown shape
  checked_weight_type(spec);
  return config.n_params();
}

void gen_random_model(const RandomModelSpec& spec) {
  const ModelConfig config = random_model_config(spec.shape);
  const DType type = checked_weight_type(spec);
  write_random_model(spec.path, config, type, spec.seed, spec.n_threads);
}

}  // namespace ferry
