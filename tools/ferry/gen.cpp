// ferry gen: write a random-weight model of a named shape, for tests and benchmarks.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "core/check.h"
#include "core/progress.h"
#include "ferry/tools.h"

namespace ferry::cli {
namespace {

// gguf-split's --split-max-size: a count with a decimal unit, "500M" (10^6 bytes), "2G" (10^9); also "K" and
// plain bytes.
uint64_t parse_split_size(const std::string& text) {
  size_t used = 0;
  uint64_t n = 0;
  FERRY_CHECK(!text.empty() && text[0] >= '0' && text[0] <= '9', "--split-max-size '{}' is not a size such as 500M or 2G",
              text);  // stoull would take " 5" and wrap "-5" around
  try {
    n = std::stoull(text, &used);
  } catch (const std::exception&) {
    fail("--split-max-size '{}' is not a size such as 500M or 2G", text);
  }
  const std::string unit = text.substr(used);
  uint64_t scale = 0;
  if (unit.empty()) scale = 1;
  if (unit == "K") scale = 1000;
  if (unit == "M") scale = 1000 * 1000;
  if (unit == "G") scale = 1000 * 1000 * 1000;
  FERRY_CHECK(scale > 0 && n > 0, "--split-max-size '{}' is not a size such as 500M or 2G", text);
  FERRY_CHECK(n <= UINT64_MAX / scale, "--split-max-size '{}' is too large", text);
  return n * scale;
}

}  // namespace

Runner add_gen(CLI::App& app) {
  struct Opts {
    std::string shape = "tiny", type = "q4_0", out, split_max_size;
    uint64_t seed = 1;
    int threads = 0, split_max_tensors = 0;
    bool quiet = false;
  };
  auto o = std::make_shared<Opts>();
  std::string shapes;
  for (const auto& s : random_model_shape_names()) shapes += (shapes.empty() ? "" : ", ") + s;
  app.add_option("--shape", o->shape, "model shape: " + shapes);
  std::string types;
  for (const auto& t : quantize_type_names()) types += (types.empty() ? "" : ", ") + t;
  app.add_option("--type", o->type,
                 "weight type or K-quant mix: " + types + "; or fp8, fp8-block, fp8-tensor (a Hugging Face FP8 folder)");
  app.add_option("-o,--output", o->out,
                 "output .gguf path (a folder for the fp8 types; with --split-max-*: OUT-00001-of-0000N.gguf ...)")->required();
  app.add_option("--seed", o->seed, "random seed");
  app.add_option("-t,--threads", o->threads, "threads (0: all)");
  app.add_option("--split-max-size", o->split_max_size,
                 "write a split GGUF (gguf-split's layout: OUT-00001-of-0000N.gguf ...) of at most this much tensor "
                 "data per shard: 500M, 2G");
  app.add_option("--split-max-tensors", o->split_max_tensors, "write a split GGUF of at most this many tensors per shard");
  app.add_flag("-q,--quiet", o->quiet, "no progress line");
  return [o](const Env&) {
    RandomModelSpec spec{o->out, o->shape, o->type, o->seed, o->threads, {}};
    if (!o->split_max_size.empty()) spec.split_max_bytes = parse_split_size(o->split_max_size);
    spec.split_max_tensors = o->split_max_tensors;
    const int64_t n_params = random_model_n_params(spec);  // checks the shape and the weight type
    std::fprintf(stderr, "writing %s: %s shape, %s weights, %.1f M parameters\n", o->out.c_str(), o->shape.c_str(),
                 o->type.c_str(), double(n_params) / 1e6);
    std::unique_ptr<Progress> bar;
    const ProgressMode mode = progress_mode(o->quiet);
    spec.on_tensor = [&](int done, int count) {
      if (!bar) bar = std::make_unique<Progress>("gen " + o->shape, uint64_t(count),
                                                 progress_options(mode, ProgressUnit::kItems, "tensors"));
      bar->set(uint64_t(done));
    };
    const std::vector<std::string> written = gen_random_model(spec);
    if (bar) bar->finish();
    if (written.size() > 1 || written.front() != o->out)
      for (const std::string& path : written) std::fprintf(stderr, "wrote %s\n", path.c_str());
    return 0;
  };
}

}  // namespace ferry::cli
