#include <unistd.h>

#include <filesystem>

#include "commands.h"
#include "core/check.h"
#include "core/env.h"
#include "hub/hub_cache.h"
#include "hub/model_ref.h"

namespace ferry::cli {

namespace fs = std::filesystem;

std::string resolve_model(const std::string& path, const Env& env) {
  std::error_code ec;
  if (!path.empty()) {
    if (fs::exists(path, ec)) return path;  // a file or folder of that name wins over a repo name
    if (const std::optional<hub::ModelRef> ref = hub::parse_model_ref(path))
      return hub::resolve_cached_model(hub::hub_cache_dir(env.hub), *ref).string();
    return path;  // the loader names what is missing
  }
  constexpr const char* kDefault = "SmolLM2-135M-Instruct.Q4_1.gguf";
  for (const fs::path& d : models_dirs(env))
    if (fs::is_regular_file(d / kDefault, ec)) return (d / kDefault).string();
  fail("no model given (-m) and the default model {} is not in models/; fetch it with `make model`", kDefault);
}

std::vector<fs::path> models_dirs(const Env& env) {
  std::vector<fs::path> dirs;
  if (env.models_dir) dirs.emplace_back(*env.models_dir);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {  // build/ferry -> <repo>/models
    dirs.push_back(exe.parent_path() / "models");
    dirs.push_back(exe.parent_path().parent_path() / "models");
  }
  dirs.emplace_back("models");
  return dirs;
}

}  // namespace ferry::cli
