// ferry quantize IN OUT TYPE: rewrite a model as a GGUF file of one weight type or a K-quant mix.
#include <cstdio>

#include "commands.h"
#include "ferry/tools.h"

namespace ferry::cli {

Runner add_quantize(CLI::App& app) {
  auto spec = std::make_shared<QuantizeSpec>();
  std::string types;
  for (const auto& t : quantize_type_names()) types += (types.empty() ? "" : ", ") + t;
  app.add_option("input", spec->input, "a .gguf file or a Hugging Face folder (F32/F16/BF16 safetensors)")->required();
  app.add_option("output", spec->output, "the .gguf file to write")->required();
  app.add_option("type", spec->type, "weight type or mix: " + types)->required();
  app.add_option("-t,--threads", spec->n_threads, "threads (0: all)");
  return [spec](const Env&) {
    const auto mib = [](size_t b) { return double(b) / (1024.0 * 1024.0); };
    const QuantizeTotals totals = quantize(*spec, [&](const QuantizeProgress& p) {
      std::fprintf(stderr, "[%4d/%4d] %-36s %-16s %6s -> %-6s %9.3f MiB -> %9.3f MiB\n", p.index, p.count,
                   p.name.c_str(), p.shape.c_str(), p.from.c_str(), p.to.c_str(), mib(p.bytes_in), mib(p.bytes_out));
    });
    std::fprintf(stderr, "wrote %s: %d tensors, %.2f MiB -> %.2f MiB\n", spec->output.c_str(), totals.n_tensors,
                 mib(totals.bytes_in), mib(totals.bytes_out));
    return 0;
  };
}

}  // namespace ferry::cli
