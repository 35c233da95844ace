// ferry inspect: architecture, hyperparameters, tensor types and byte counts of a model.
#include <cstdio>
#include <map>

#include "commands.h"
#include "common_options.h"

namespace ferry::cli {

Runner add_inspect(CLI::App& app) {
  struct Opts {
    std::string model;
    bool tensors = false;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("model", o->model,
                 "a .gguf file (any shard of a split one), a Hugging Face folder or org/repo[:QUANT] (default: the "
                 "default model)");
  app.add_flag("--tensors", o->tensors, "list every tensor");
  return [o](const Env& env) {
    EngineOptions eo;
    eo.model_path = resolve_model(o->model, env);
    eo.env = env;
    eo.context = 16;  // inspect needs no KV cache to speak of
    eo.n_threads = 1;
    Engine engine(eo);
    const ModelInfo& i = engine.info();
    std::printf("model        %s\nformat       %s\narchitecture %s\nname         %s\n", i.path.c_str(), i.format.c_str(),
                i.arch.c_str(), i.name.c_str());
    std::printf("parameters   %.2f M\nlayers       %d\ndim          %d\nheads        %d (kv %d, head_dim %d)\n"
                "ffn hidden   %d\nvocab        %d\ncontext      %d\nweights      %.2f MiB\n",
                double(i.n_params) / 1e6, i.n_layers, i.dim, i.n_heads, i.n_kv_heads, i.head_dim, i.hidden_dim,
                i.vocab_size, i.model_context, double(i.weight_bytes) / (1 << 20));
    if (i.n_experts > 0) {
      std::printf("experts      %d of %d hidden units, %d per token\nactive       %.2f M parameters, %.2f MiB of weights "
                  "per token\n",
                  i.n_experts, i.expert_hidden_dim, i.n_experts_used, double(i.n_active_params) / 1e6,
                  double(i.active_bytes) / (1 << 20));
    }
    std::map<std::string, std::pair<int, size_t>> by_type;
    for (const auto& t : i.tensors) {
      auto& e = by_type[t.dtype];
      e.first++;
      e.second += t.bytes;
    }
    std::printf("\ntensor types:\n");
    for (const auto& [type, e] : by_type)
      std::printf("  %-6s %4d tensors %10.2f MiB\n", type.c_str(), e.first, double(e.second) / (1 << 20));
    std::printf("\nmetadata:\n");
    for (const auto& [k, v] : i.facts) std::printf("  %-40s %s\n", k.c_str(), v.c_str());
    if (o->tensors) {
      std::printf("\ntensors:\n");
      for (const auto& t : i.tensors)
        std::printf("  %-40s %-6s %-20s %12zu bytes\n", t.name.c_str(), t.dtype.c_str(), t.shape.c_str(), t.bytes);
    }
    return 0;
  };
}

}  // namespace ferry::cli
