// The command line end to end with models by name: `ferry pull` from a local Hub stand-in (tests/hub/fake_hub.h)
// into a cache folder of the test's own (HF_HUB_CACHE), `ferry run -m org/repo` from that cache giving the same
// text as the folder itself, `ferry models` listing it, and the errors for a name that is not there; a split GGUF
// written by `ferry gen --split-max-tensors`, pulled whole by its tag, run, inspected and listed once.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "fixtures/run_ferry.h"
#include "fixtures/test_paths.h"
#include "hub/digest.h"
#include "hub/fake_hub.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;
using test::FakeHub;
using test::FakeRequest;

constexpr const char* kCommit = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00";

std::string stdout_part(const std::string& out) { return out.substr(0, out.find("\nprompt:")); }

TEST(CliHub, PullThenRunByNameAndList) {
  const fs::path model = fs::path(test::source_dir()) / "tests/fixtures/models/tiny-llama";
  std::map<std::string, std::string> files;
  nlohmann::json siblings = nlohmann::json::array();
  for (const auto& e : fs::directory_iterator(model)) {
    const std::string name = e.path().filename().string(), content = test::read_file(e.path().string());
    files[name] = content;
    nlohmann::json s = {{"rfilename", name}, {"size", content.size()},
                        {"blobId", hub::bytes_digest(content, hub::DigestKind::kGitBlobSha1)}};
    if (name.ends_with(".safetensors"))
      s["lfs"] = {{"sha256", hub::bytes_digest(content, hub::DigestKind::kSha256)}, {"size", content.size()}};
    siblings.push_back(s);
  }
  const std::string info = nlohmann::json{{"sha", kCommit}, {"siblings", siblings}}.dump();
  FakeHub hub([&](const FakeRequest& r) -> FakeHub::Reply {
    if (r.target.rfind("/api/models/org/tiny-llama/revision/main", 0) == 0) return {FakeHub::response(200, info)};
    const std::string prefix = std::string("/org/tiny-llama/resolve/") + kCommit + "/";
    if (r.target.rfind(prefix, 0) == 0 && files.count(r.target.substr(prefix.size())))
      return {FakeHub::response(200, files[r.target.substr(prefix.size())])};
    return {FakeHub::response(404, "")};
  });
  const std::string cache = test::temp_path("cli_hub_cache");
  fs::remove_all(cache);
  ::setenv("HF_HUB_CACHE", cache.c_str(), 1);

  const test::FerryRun missing = test::run_ferry("run -m org/tiny-llama -p hi -n 4 --temp 0 -q");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("ferry pull org/tiny-llama"), std::string::npos) << missing.output;

  const test::FerryRun pull = test::run_ferry("pull org/tiny-llama --endpoint " + hub.url());
  ASSERT_EQ(pull.exit_code, 0) << pull.output;
  EXPECT_NE(pull.output.find("6 files downloaded"), std::string::npos) << pull.output;
  EXPECT_NE(pull.output.find("pull org/tiny-llama: done"), std::string::npos) << pull.output;  // the log's progress

  const test::FerryRun by_name = test::run_ferry("run -m org/tiny-llama -p hi -n 6 --temp 0");
  const test::FerryRun by_path = test::run_ferry("run -m " + model.string() + " -p hi -n 6 --temp 0 -q");
  ASSERT_EQ(by_name.exit_code, 0) << by_name.output;
  ASSERT_EQ(by_path.exit_code, 0) << by_path.output;
  EXPECT_NE(by_name.output.find("loading model: repacking: done"), std::string::npos) << by_name.output;
  EXPECT_EQ(by_path.output.find("loading model"), std::string::npos) << by_path.output;  // --quiet
  const std::string text = by_name.output.substr(by_name.output.find("hi"));
  EXPECT_EQ(stdout_part(text), stdout_part(by_path.output));

  const test::FerryRun models = test::run_ferry("models");
  EXPECT_EQ(models.exit_code, 0) << models.output;
  EXPECT_NE(models.output.find("org/tiny-llama"), std::string::npos) << models.output;
  EXPECT_NE(models.output.find("safetensors"), std::string::npos) << models.output;

  const test::FerryRun unreachable = test::run_ferry("pull org/other --endpoint http://127.0.0.1:1 -q");
  EXPECT_EQ(unreachable.exit_code, 1) << unreachable.output;
  EXPECT_NE(unreachable.output.find("cannot reach the Hub"), std::string::npos) << unreachable.output;
  ::unsetenv("HF_HUB_CACHE");
  fs::remove_all(cache);
}

TEST(CliHub, SplitGgufGenPullRunInspectList) {
  const std::string dir = test::temp_path("cli_hub_split");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const test::FerryRun one = test::run_ferry("gen --shape tiny --type q8_0 --seed 5 -q -o " + dir + "/one.gguf");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const test::FerryRun gen =
      test::run_ferry("gen --shape tiny --type q8_0 --seed 5 -q --split-max-tensors 8 -o " + dir + "/tiny-Q8_0.gguf");
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  EXPECT_NE(gen.output.find("wrote " + dir + "/tiny-Q8_0-00003-of-00003.gguf"), std::string::npos) << gen.output;

  std::map<std::string, std::string> files;  // repo path -> bytes
  nlohmann::json siblings = nlohmann::json::array();
  for (int k = 1; k <= 3; ++k) {
    const std::string name = fmt::format("tiny-Q8_0-{:05d}-of-00003.gguf", k);
    const std::string content = test::read_file(dir + "/" + name);
    files["Q8_0/" + name] = content;
    siblings.push_back({{"rfilename", "Q8_0/" + name}, {"size", content.size()},
                        {"blobId", hub::bytes_digest(content, hub::DigestKind::kGitBlobSha1)},
                        {"lfs", {{"sha256", hub::bytes_digest(content, hub::DigestKind::kSha256)}, {"size", content.size()}}}});
  }
  const std::string info = nlohmann::json{{"sha", kCommit}, {"siblings", siblings}}.dump();
  FakeHub hub([&](const FakeRequest& r) -> FakeHub::Reply {
    if (r.target.rfind("/api/models/org/tiny-split/revision/main", 0) == 0) return {FakeHub::response(200, info)};
    const std::string prefix = std::string("/org/tiny-split/resolve/") + kCommit + "/";
    if (r.target.rfind(prefix, 0) == 0 && files.count(r.target.substr(prefix.size())))
      return {FakeHub::response(200, files[r.target.substr(prefix.size())])};
    return {FakeHub::response(404, "")};
  });
  const std::string cache = dir + "/cache";
  ::setenv("HF_HUB_CACHE", cache.c_str(), 1);

  const test::FerryRun pull = test::run_ferry("pull org/tiny-split:Q8_0 -q --endpoint " + hub.url());
  ASSERT_EQ(pull.exit_code, 0) << pull.output;
  EXPECT_NE(pull.output.find("3 files downloaded"), std::string::npos) << pull.output;

  const test::FerryRun by_name = test::run_ferry("run -m org/tiny-split:Q8_0 -p hi -n 6 --temp 0 -q");
  const test::FerryRun by_file = test::run_ferry("run -m " + dir + "/one.gguf -p hi -n 6 --temp 0 -q");
  ASSERT_EQ(by_name.exit_code, 0) << by_name.output;
  ASSERT_EQ(by_file.exit_code, 0) << by_file.output;
  EXPECT_EQ(stdout_part(by_name.output), stdout_part(by_file.output));

  const test::FerryRun inspect = test::run_ferry("inspect org/tiny-split:Q8_0");
  ASSERT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("gguf.split"), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find("3 shards"), std::string::npos) << inspect.output;

  const test::FerryRun models = test::run_ferry("models");
  ASSERT_EQ(models.exit_code, 0) << models.output;
  const size_t row = models.output.find("org/tiny-split:Q8_0");
  ASSERT_NE(row, std::string::npos) << models.output;
  EXPECT_EQ(models.output.find("org/tiny-split", row + 1), std::string::npos) << models.output;  // listed once
  EXPECT_NE(models.output.find("gguf-split"), std::string::npos) << models.output;

  // A shard gone from the cache: one line naming it and the pull that fetches it.
  const std::string shard2 = cache + "/models--org--tiny-split/snapshots/" + kCommit + "/Q8_0/tiny-Q8_0-00002-of-00003.gguf";
  fs::remove(shard2);
  const test::FerryRun broken = test::run_ferry("run -m org/tiny-split:Q8_0 -p hi -n 2 -q");
  EXPECT_EQ(broken.exit_code, 1) << broken.output;
  EXPECT_NE(broken.output.find("tiny-Q8_0-00002-of-00003.gguf is missing from the cached snapshot"), std::string::npos)
      << broken.output;
  ::unsetenv("HF_HUB_CACHE");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ferry
