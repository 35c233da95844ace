// ferry models: what `-m` can name without a download: the Hugging Face cache and the models folders.
#include <algorithm>
#include <cstdio>

#include "commands.h"
#include "core/check.h"
#include "core/progress.h"
#include "hub/hub_cache.h"

namespace ferry::cli {

Runner add_models(CLI::App& app) {
  return [](const Env& env) {
    std::vector<std::pair<std::string, std::vector<hub::CachedModel>>> groups;
    try {
      const std::filesystem::path cache = hub::hub_cache_dir(env.hub);
      groups.emplace_back(cache.string(), hub::list_cached_models(cache));
    } catch (const Error& e) {
      std::fprintf(stderr, "ferry models: %s\n", e.what());
    }
    std::error_code ec;
    std::vector<std::filesystem::path> seen;
    for (const std::filesystem::path& d : models_dirs(env)) {
      if (!std::filesystem::is_directory(d, ec)) continue;
      const std::filesystem::path canon = std::filesystem::weakly_canonical(d, ec);
      if (std::find(seen.begin(), seen.end(), canon) != seen.end()) continue;
      seen.push_back(canon);
      groups.emplace_back(d.string(), hub::list_folder_models(d));
    }
    size_t n = 0;
    for (const auto& [where, models] : groups) {
      std::printf("%s\n", where.c_str());
      if (models.empty()) std::printf("  (none)\n");
      for (const hub::CachedModel& m : models) {
        std::printf("  %-56s %-12s %-8s %10s\n", m.name.c_str(), m.kind.c_str(), m.quant.empty() ? "-" : m.quant.c_str(),
                    format_bytes(m.bytes).c_str());
        ++n;
      }
    }
    std::fprintf(stderr, "%zu models\n", n);
    return 0;
  };
}

}  // namespace ferry::cli
