// hub/pull.h against a Hub stand-in on 127.0.0.1 (fake_hub.h): the model info route, a redirect to a "CDN" path,
// a connection dropped in the middle of a file (resumed with a Range request), a 401 for a gated repo, a bad
// checksum (the download deleted), hostile and corrupt file lists; the result is the cache huggingface_hub writes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "fake_hub.h"
#include "hub/digest.h"
#include "hub/hub_cache.h"
#include "hub/pull.h"

namespace ferry::hub {
namespace {

namespace fs = std::filesystem;
using test::FakeHub;
using test::FakeRequest;

constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(rng() & 0xff);
  return s;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Blob {
  std::string path, content;
  bool lfs = true;
};

nlohmann::json info_json(const std::vector<Blob>& files) {
  nlohmann::json siblings = nlohmann::json::array();
  for (const Blob& b : files) {
    nlohmann::json s = {{"rfilename", b.path}, {"size", b.content.size()},
                        {"blobId", bytes_digest(b.content, DigestKind::kGitBlobSha1)}};
    if (b.lfs) s["lfs"] = {{"sha256", bytes_digest(b.content, DigestKind::kSha256)}, {"size", b.content.size()}, {"pointerSize", 134}};
    siblings.push_back(s);
  }
  return {{"id", "org/x"}, {"sha", kCommit}, {"siblings", siblings}};
}

// Serves a file's bytes honoring "Range: bytes=N-"; the first whole-file request of each path is cut in half.
class Files {
 public:
  FakeHub::Reply serve(const FakeRequest& r, const std::string& content) {
    const auto range = r.headers.find("range");
    if (range == r.headers.end()) {
      const bool first = cut_.insert(r.target).second;
      FakeHub::Reply reply{FakeHub::response(200, content, {"Content-Type: application/octet-stream"})};
      if (first && content.size() > 1000) reply.drop_after = long(reply.bytes.size() - content.size() / 2);
      return reply;
    }
    const size_t from = std::stoul(range->second.substr(6));
    if (from >= content.size()) return {FakeHub::response(416, "")};
    return {FakeHub::response(206, content.substr(from),
                              {"Content-Range: bytes " + std::to_string(from) + "-" + std::to_string(content.size() - 1) +
                               "/" + std::to_string(content.size())})};
  }

 private:
  std::set<std::string> cut_;
};

class PullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("ferry_pull_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "cache");
  }
  void TearDown() override { fs::remove_all(root_); }
  PullOptions options(const std::string& name, const FakeHub& hub) {
    PullOptions o;
    o.ref = *parse_model_ref(name);
    o.cache = root_ / "cache";
    o.endpoint = hub.url();
    o.read_timeout_s = 5;
    o.progress = progress_options(ProgressMode::kQuiet);
    return o;
  }
  std::string pull_error(const PullOptions& o) {
    try {
      pull_model(o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path root_;
};

TEST_F(PullTest, RedirectDroppedConnectionResumeAndTheCacheLayout) {
  const std::vector<Blob> files = {{"tiny-Q8_0.gguf", random_bytes(300000, 1)},
                                   {"tiny-Q4_K_M.gguf", random_bytes(2000, 2)},
                                   {"README.md", "hello", false}};
  Files served;
  FakeHub hub([&](const FakeRequest& r) -> FakeHub::Reply {
    if (r.target == "/api/models/org/tiny/revision/main?blobs=true") return {FakeHub::response(200, info_json(files).dump())};
    if (r.target == std::string("/org/tiny/resolve/") + kCommit + "/tiny-Q8_0.gguf")
      return {FakeHub::response(302, "", {"Location: /cdn/q8"})};
    if (r.target == "/cdn/q8") return served.serve(r, files[0].content);
    return {FakeHub::response(404, "{}")};
  });
  const PullResult r = pull_model(options("org/tiny:q8_0", hub));
  EXPECT_EQ(r.files_downloaded, 1);
  EXPECT_EQ(r.bytes_downloaded, 300000u);
  const fs::path repo = root_ / "cache" / "models--org--tiny";
  const std::string sha = bytes_digest(files[0].content, DigestKind::kSha256);
  EXPECT_EQ(read(repo / "blobs" / sha), files[0].content);
  EXPECT_FALSE(fs::exists(repo / "blobs" / (sha + ".incomplete")));
  const fs::path link = repo / "snapshots" / kCommit / "tiny-Q8_0.gguf";
  ASSERT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(fs::read_symlink(link).string(), "../../blobs/" + sha);  // relative, as huggingface_hub writes it
  EXPECT_EQ(read(repo / "refs" / "main"), kCommit);
  EXPECT_FALSE(fs::exists(repo / "snapshots" / kCommit / "tiny-Q4_K_M.gguf"));  // only the tagged file
  EXPECT_EQ(r.model_path, link);
  EXPECT_EQ(resolve_cached_model(root_ / "cache", *parse_model_ref("org/tiny:Q8_0")), link);

  // The dropped connection was resumed from where it broke off, not restarted.
  bool resumed = false;
  for (const FakeRequest& q : hub.requests())
    if (q.target == "/cdn/q8" && q.headers.count("range") && q.headers.at("range") != "bytes=0-") resumed = true;
  EXPECT_TRUE(resumed);

  // A second pull finds the blob and downloads nothing.
  const PullResult again = pull_model(options("org/tiny:Q8_0", hub));
  EXPECT_EQ(again.files_downloaded, 0);
  EXPECT_EQ(again.files_present, 1);
}

TEST_F(PullTest, FolderModelsCheckGitBlobIdsAndLfsShas) {
  const std::vector<Blob> files = {{"config.json", "{\"a\": 1}", false},
                                   {"model.safetensors", random_bytes(5000, 3)},
                                   {"pytorch_model.bin", random_bytes(100, 4)}};
  Files served;
  FakeHub hub([&](const FakeRequest& r) -> FakeHub::Reply {
    if (r.target.rfind("/api/models/org/folder/revision/main", 0) == 0) return {FakeHub::response(200, info_json(files).dump())};
    for (const Blob& b : files)
      if (r.target == std::string("/org/folder/resolve/") + kCommit + "/" + b.path) return served.serve(r, b.content);
    return {FakeHub::response(404, "")};
  });
  const PullResult r = pull_model(options("org/folder", hub));
  EXPECT_EQ(r.files_downloaded, 2);  // not the .bin
  const fs::path snap = root_ / "cache" / "models--org--folder" / "snapshots" / kCommit;
  EXPECT_EQ(read(snap / "config.json"), files[0].content);
  EXPECT_EQ(read(snap / "model.safetensors"), files[1].content);
  EXPECT_FALSE(fs::exists(snap / "pytorch_model.bin"));
  EXPECT_EQ(r.model_path, snap);
}

TEST_F(PullTest, SplitGgufGetsEveryShard) {
  const std::vector<Blob> files = {{"Q4_K_M/m-Q4_K_M-00001-of-00003.gguf", random_bytes(3000, 11)},
                                   {"Q4_K_M/m-Q4_K_M-00002-of-00003.gguf", random_bytes(4000, 12)},
                                   {"Q4_K_M/m-Q4_K_M-00003-of-00003.gguf", random_bytes(500, 13)},
                                   {"m-Q8_0.gguf", random_bytes(100, 14)}};
  Files served;
  bool drop_shard_2 = false;  // a repo whose listing lacks shard 2
  FakeHub hub([&](const FakeRequest& r) -> FakeHub::Reply {
    if (r.target.rfind("/api/models/org/split/revision/main", 0) == 0) {
      std::vector<Blob> listed = files;
      if (drop_shard_2) listed.erase(listed.begin() + 1);
      return {FakeHub::response(200, info_json(listed).dump())};
    }
    for (const Blob& b : files)
      if (r.target == std::string("/org/split/resolve/") + kCommit + "/" + b.path) return served.serve(r, b.content);
    return {FakeHub::response(404, "")};
  });
  const PullResult r = pull_model(options("org/split:Q4_K_M", hub));
  EXPECT_EQ(r.files_downloaded, 3);  // every shard, not the Q8_0 file
  EXPECT_EQ(r.bytes_downloaded, 7500u);
  const fs::path snap = root_ / "cache" / "models--org--split" / "snapshots" / kCommit;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(read(snap / files[size_t(i)].path), files[size_t(i)].content) << i;
  EXPECT_FALSE(fs::exists(snap / "m-Q8_0.gguf"));
  EXPECT_EQ(r.model_path, snap / files[0].path);  // -m loads shard 1, which finds the others beside it
  EXPECT_EQ(resolve_cached_model(root_ / "cache", *parse_model_ref("org/split:Q4_K_M")), snap / files[0].path);

  drop_shard_2 = true;
  fs::remove_all(root_ / "cache");
  const std::string e = pull_error(options("org/split:Q4_K_M", hub));
  EXPECT_NE(e.find("Q4_K_M/m-Q4_K_M-00002-of-00003.gguf is not in the repo (a split GGUF needs every shard)"),
            std::string::npos)
      << e;
}

TEST_F(PullTest, GatedRepoNeedsTheToken) {
  const std::vector<Blob> files = {{"m-Q8_0.gguf", random_bytes(100, 5)}};
  FakeHub hub([&](const FakeRequest& r) -> FakeHub::Reply {
    const auto auth = r.headers.find("authorization");
    if (auth == r.headers.end() || auth->second != "Bearer hf_good")
      return {FakeHub::response(401, "{\"error\": \"Access to model org/gated is restricted.\"}")};
    if (r.target.rfind("/api/models/org/gated/", 0) == 0) return {FakeHub::response(200, info_json(files).dump())};
    if (r.target.find("/resolve/") != std::string::npos) return {FakeHub::response(200, files[0].content)};
    return {FakeHub::response(404, "")};
  });
  PullOptions o = options("org/gated", hub);
  const std::string anonymous = pull_error(o);
  EXPECT_NE(anonymous.find("401"), std::string::npos) << anonymous;
  EXPECT_NE(anonymous.find("HF_TOKEN"), std::string::npos) << anonymous;
  o.token = "hf_wrong";
  EXPECT_NE(pull_error(o).find("the token was refused"), std::string::npos);
  o.token = "hf_good";
  EXPECT_EQ(pull_model(o).files_downloaded, 1);
}

TEST_F(PullTest, WrongChecksumIsRefusedAndTheDownloadDeleted) {
  Blob b{"m-Q8_0.gguf", random_bytes(4000, 6)};
  nlohmann::json info = info_json({b});
  const std::string claimed = bytes_digest("something else", DigestKind::kSha256);
  info["siblings"][0]["lfs"]["sha256"] = claimed;
  FakeHub hub([&](const FakeRequest& r) -> FakeHub::Reply {
    if (r.target.rfind("/api/models/", 0) == 0) return {FakeHub::response(200, info.dump())};
    return {FakeHub::response(200, b.content)};
  });
  const std::string err = pull_error(options("org/bad", hub));
  EXPECT_NE(err.find("checksum"), std::string::npos) << err;
  const fs::path blobs = root_ / "cache" / "models--org--bad" / "blobs";
  EXPECT_FALSE(fs::exists(blobs / claimed));
  EXPECT_FALSE(fs::exists(blobs / (claimed + ".incomplete")));
  EXPECT_FALSE(fs::exists(root_ / "cache" / "models--org--bad" / "refs" / "main"));
  EXPECT_THROW(resolve_cached_model(root_ / "cache", *parse_model_ref("org/bad")), Error);
}

TEST_F(PullTest, HostileOrBrokenAnswersAreOneErrorAndWriteNothingOutside) {
  std::string body;
  FakeHub hub([&](const FakeRequest& r) -> FakeHub::Reply {
    if (r.target.rfind("/api/models/", 0) == 0) return {FakeHub::response(200, body)};
    return {FakeHub::response(200, std::string(64, 'x'))};
  });
  const auto expect_error = [&](const std::string& b, const std::string& needle) {
    body = b;
    const std::string err = pull_error(options("org/hostile", hub));
    EXPECT_NE(err.find(needle), std::string::npos) << "body " << b.substr(0, 200) << ": " << err;
  };
  nlohmann::json evil = info_json({{"../../../../evil-Q8_0.gguf", std::string(64, 'x')}});
  expect_error(evil.dump(), "refusing the file name");
  evil["siblings"][0]["rfilename"] = "/tmp/evil-Q8_0.gguf";
  expect_error(evil.dump(), "refusing the file name");
  expect_error("{not json", "not a JSON object");
  expect_error("[]", "not a JSON object");
  expect_error(R"({"sha": "0123456789abcdef0123456789abcdef01234567"})", "no file list");
  nlohmann::json huge = info_json({{"m-Q8_0.gguf", std::string(64, 'x')}});
  huge["siblings"][0]["lfs"]["size"] = uint64_t(1) << 60;
  expect_error(huge.dump(), "more than ferry accepts");
  nlohmann::json negative = info_json({{"m-Q8_0.gguf", std::string(64, 'x'), false}});
  negative["siblings"][0]["size"] = -5;
  expect_error(negative.dump(), "no valid 'size'");
  nlohmann::json short_list = info_json({{"m-Q8_0.gguf", std::string(10, 'x')}});  // the server sends 64 bytes
  expect_error(short_list.dump(), "more than the 10 bytes");
  for (const auto& e : fs::recursive_directory_iterator(root_))
    EXPECT_EQ(e.path().filename().string().find("evil"), std::string::npos) << e.path();
}

TEST_F(PullTest, NothingListeningIsAClearError) {
  PullOptions o;
  {
    FakeHub gone([](const FakeRequest&) { return FakeHub::Reply{FakeHub::response(200, "")}; });
    o = options("org/tiny", gone);
  }
  const std::string err = pull_error(o);
  EXPECT_NE(err.find("cannot reach the Hub"), std::string::npos) << err;
}

}  // namespace
}  // namespace ferry::hub
