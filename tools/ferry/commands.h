// The ferry command-line tool: one file per subcommand. Each registers its options on a CLI11 app and
// returns the function that runs it.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace ferry::cli {

using Runner = std::function<int()>;

Runner add_run(CLI::App& app);
Runner add_chat(CLI::App& app);
Runner add_inspect(CLI::App& app);
Runner add_gen(CLI::App& app);
Runner add_quantize(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_score(CLI::App& app);
Runner add_serve(CLI::App& app);

// The model path to use: `path` when given, else the default model (SmolLM2-135M-Instruct Q4_1) from
// $FERRY_MODELS_DIR, the models/ folder next to the binary's build tree, or ./models.
std::string resolve_model(const std::string& path);

}  // namespace ferry::cli
