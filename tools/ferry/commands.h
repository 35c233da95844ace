// The ferry command-line tool: one file per subcommand. Each registers its options on a CLI11 app and
// returns the function that runs it, given the environment's settings (main reads them once: core/env.h).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

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

// The model path to use: `path` when given, else the default model (SmolLM2-135M-Instruct Q4_1) from
// $FERRY_MODELS_DIR (env.models_dir), the models/ folder next to the binary's build tree, or ./models.
std::string resolve_model(const std::string& path, const Env& env);

}  // namespace ferry::cli
