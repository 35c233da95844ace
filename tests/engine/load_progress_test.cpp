// Load progress (EngineOptions::on_load_progress): a `random:` model reports "generating" as its tensors are drawn
// (no "mapping": nothing is mapped), at one rank and at two (each tensor counted once, whichever rank draws it);
// a file reports "mapping" then "repacking". Every stage's reports only grow and end at its total, the bytes of
// the model's tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "ferry/engine.h"
#include "fixtures/test_paths.h"
#include "model/random_model.h"

namespace ferry {
namespace {

struct Report {
  std::string stage;
  uint64_t done, total;
};

std::vector<Report> load_reports(const std::string& model, int tp) {
  std::mutex mutex;
  std::vector<Report> reports;
  EngineOptions eo;
  eo.model_path = model;
  eo.context = 64;
  eo.n_threads = 1;
  eo.tp = tp;
  eo.on_load_progress = [&](const LoadProgress& p) {
    std::lock_guard lock(mutex);
    reports.push_back({std::string(p.stage), p.done, p.total});
  };
  Engine engine(eo);
  return reports;
}

// The stages with a total, in order; each one's reports grow and end at its total.
std::vector<std::string> checked_stages(const std::vector<Report>& reports) {
  std::vector<std::string> stages;
  uint64_t last = 0;
  for (const Report& r : reports) {
    if (r.total == 0) continue;  // a stage starting
    if (stages.empty() || stages.back() != r.stage) {
      stages.push_back(r.stage);
      last = 0;
    }
    EXPECT_GE(r.done, last) << r.stage;
    EXPECT_LE(r.done, r.total) << r.stage;
    last = r.done;
  }
  for (const std::string& s : stages) {
    const auto it = std::find_if(reports.rbegin(), reports.rend(), [&](const Report& r) { return r.stage == s; });
    EXPECT_EQ(it->done, it->total) << s;
  }
  return stages;
}

TEST(LoadProgress, RandomModelsReportGeneratingAtOneRankAndTwo) {
  for (const int tp : {1, 2}) {
    const std::vector<Report> reports = load_reports("random:tiny:q8_0", tp);
    EXPECT_EQ(checked_stages(reports), std::vector<std::string>{"generating"}) << "tp " << tp;
    size_t n = 0;
    for (const Report& r : reports) n += r.stage == "generating";
    EXPECT_GT(n, 10u) << "tp " << tp;  // a report per tensor, not one at the end
  }
}

TEST(LoadProgress, FilesReportMappingThenRepacking) {
  const std::string dir = test::temp_path("load_progress");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/tiny.gguf";
  write_random_model(path, random_model_config("tiny"), DType::Q8_0, 1);
  EXPECT_EQ(checked_stages(load_reports(path, 1)), (std::vector<std::string>{"mapping", "repacking"}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ferry
