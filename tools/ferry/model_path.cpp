#include <unistd.h>

#include <filesystem>

#include "commands.h"
#include "core/check.h"
#include "core/env.h"

namespace ferry::cli {

namespace fs = std::filesystem;

std::string resolve_model(const std::string& path, const Env& env) {
  if (!path.empty()) return path;
  constexpr const char* kDefault = "SmolLM2-135M-Instruct.Q4_1.gguf";
  std::vector<fs::path> dirs;
  if (env.models_dir) dirs.emplace_back(*env.models_dir);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {  // build/ferry -> <repo>/models
    dirs.push_back(exe.parent_path() / "models");
    dirs.push_back(exe.parent_path().parent_path() / "models");
  }
  dirs.emplace_back("models");
  for (const fs::path& d : dirs)
    if (fs::is_regular_file(d / kDefault, ec)) return (d / kDefault).string();
  fail("no model given (-m) and the default model {} is not in models/; fetch it with `make model`", kDefault);
}

}  // namespace ferry::cli
