// The ferry command-line tool: one file per subcommand. Each registers its options on a CLI11 app and
// returns the function that runs it, given the environment's settings (main reads them once: core/env.h).
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/env.h"

namespace ferry::cli {

using Runner = std::function<int(const Env& env)>;

Runner add_run(CLI::App& app);
Runner add_chat(CLI::App& app);
Runner add_inspect(CLI::App& app);
Runner add_gen(CLI::App& app);
Runner add_quantize(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_score(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_pull(CLI::App& app);
Runner add_models(CLI::App& app);
Runner add_batch(CLI::App& app);

// The model path to use: `path` when it exists (a file or folder) or is not shaped like a repo name; a name
// `org/repo[@revision][:QUANT]` resolved in the Hugging Face cache (hub/hub_cache.h; an error saying which
// `ferry pull` fetches it when it is not there); when empty, the default model (SmolLM2-135M-Instruct Q4_1)
// from one of models_dirs().
std::string resolve_model(const std::string& path, const Env& env);
// Where models are looked for by file name: $FERRY_MODELS_DIR (env.models_dir), the models/ folder next to the
// binary's build tree, ./models.
std::vector<std::filesystem::path> models_dirs(const Env& env);

}  // namespace ferry::cli
