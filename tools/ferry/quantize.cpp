// ferry quantize IN OUT TYPE: rewrite a model as a GGUF file of one weight type or a K-quant mix.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "core/progress.h"
#include "ferry/tools.h"

namespace ferry::cli {

Runner add_quantize(CLI::App& app) {
  auto spec = std::make_shared<QuantizeSpec>();
  std::string types;
  for (const auto& t : quantize_type_names()) types += (types.empty() ? "" : ", ") + t;
  app.add_option("input", spec->input,
                 "a .gguf file, a Hugging Face folder (F32/F16/BF16 safetensors) or a model name (org/repo[:QUANT], "
                 "from the Hugging Face cache)")->required();
  app.add_option("output", spec->output, "the .gguf file to write")->required();
  app.add_option("type", spec->type, "weight type or mix: " + types)->required();
  app.add_option("-t,--threads", spec->n_threads, "threads (0: all)");
  auto quiet = std::make_shared<bool>(false);
  app.add_flag("-q,--quiet", *quiet, "no progress (only the summary)");
  return [spec, quiet](const Env& env) {
    spec->input = resolve_model(spec->input, env);  // a name: its folder or file in the cache
    const auto mib = [](size_t b) { return double(b) / (1024.0 * 1024.0); };
    const ProgressMode mode = progress_mode(*quiet);
    std::unique_ptr<Progress> bar;  // a terminal: one line over the tensors
    const QuantizeTotals totals = quantize(*spec, [&](const QuantizeProgress& p) {
      if (mode == ProgressMode::kBar) {
        if (!bar) bar = std::make_unique<Progress>("quantize " + spec->type, uint64_t(p.count),
                                                   progress_options(mode, ProgressUnit::kItems, "tensors"));
        bar->set(uint64_t(p.index));
      } else if (mode == ProgressMode::kLines) {  // a log: one line per tensor
        std::fprintf(stderr, "[%4d/%4d] %-36s %-16s %6s -> %-6s %9.3f MiB -> %9.3f MiB\n", p.index, p.count,
                     p.name.c_str(), p.shape.c_str(), p.from.c_str(), p.to.c_str(), mib(p.bytes_in), mib(p.bytes_out));
      }
    });
    if (bar) bar->finish();
    std::fprintf(stderr, "wrote %s: %d tensors, %.2f MiB -> %.2f MiB\n", spec->output.c_str(), totals.n_tensors,
                 mib(totals.bytes_in), mib(totals.bytes_out));
    return 0;
  };
}

}  // namespace ferry::cli
