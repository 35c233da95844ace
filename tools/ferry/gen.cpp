// ferry gen: write a random-weight model of a named shape, for tests and benchmarks.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "core/progress.h"
#include "ferry/tools.h"

namespace ferry::cli {

Runner add_gen(CLI::App& app) {
  struct Opts {
    std::string shape = "tiny", type = "q4_0", out;
    uint64_t seed = 1;
    int threads = 0;
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
  app.add_option("-o,--output", o->out, "output .gguf path (a folder for the fp8 types)")->required();
  app.add_option("--seed", o->seed, "random seed");
  app.add_option("-t,--threads", o->threads, "threads (0: all)");
  app.add_flag("-q,--quiet", o->quiet, "no progress line");
  return [o](const Env&) {
    RandomModelSpec spec{o->out, o->shape, o->type, o->seed, o->threads, {}};
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
    gen_random_model(spec);
    if (bar) bar->finish();
    return 0;
  };
}

}  // namespace ferry::cli
