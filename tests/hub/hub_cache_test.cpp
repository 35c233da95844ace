// hub/hub_cache.h, hub/model_ref.h, hub/repo_files.h on a cache tree made here the way huggingface_hub writes
// one (blobs, relative symlinks in snapshots, refs): names resolve offline to the files where they are.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "core/env.h"
#include "hub/hub_cache.h"
#include "hub/model_ref.h"
#include "hub/repo_files.h"

namespace ferry::hub {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMain = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
constexpr const char* kOld = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

void write(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << s;
}

class CacheTree : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_ = fs::temp_directory_path() / ("ferry_cache_" + std::to_string(::getpid()) + "_" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(cache_);
    // A GGUF repo with two quants on main, one on an older commit reached through a tag.
    add("org/gguf-repo", kMain, "m-Q4_K_M.gguf", "q4km");
    add("org/gguf-repo", kMain, "m-Q8_0.gguf", "q8");
    add("org/gguf-repo", kOld, "m-Q8_0.gguf", "old q8");
    write(cache_ / "models--org--gguf-repo" / "refs" / "main", kMain);
    write(cache_ / "models--org--gguf-repo" / "refs" / "v1", kOld);
    // A safetensors folder with a nested ref name (huggingface_hub writes refs/pr/1 as a nested file).
    add("org/st", kMain, "config.json", "{}");
    add("org/st", kMain, "model.safetensors", "st");
    write(cache_ / "models--org--st" / "refs" / "main", kMain);
    write(cache_ / "models--org--st" / "refs" / "refs" / "pr" / "1", kMain);
  }
  void TearDown() override { fs::remove_all(cache_); }
  // blobs/<name> with the content, and a relative symlink snapshots/<commit>/<file> -> ../../blobs/<name>.
  void add(const std::string& repo, const std::string& commit, const std::string& file, const std::string& content) {
    const fs::path r = cache_ / repo_folder_name(repo);
    const std::string blob = std::to_string(std::hash<std::string>{}(repo + commit + file));
    write(r / "blobs" / blob, content);
    fs::create_directories(r / "snapshots" / commit);
    fs::create_symlink("../../blobs/" + blob, r / "snapshots" / commit / file);
  }
  fs::path resolve(const std::string& name) { return resolve_cached_model(cache_, *parse_model_ref(name)); }
  std::string error_of(const std::string& name) {
    try {
      resolve(name);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path cache_;
};

TEST(ModelRef, ParsesNamesAndRefusesPathsAndBadParts) {
  auto r = parse_model_ref("bartowski/Llama-3.2-1B-Instruct-GGUF@v1.0:q4_k_m");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->repo, "bartowski/Llama-3.2-1B-Instruct-GGUF");
  EXPECT_EQ(r->revision, "v1.0");
  EXPECT_EQ(r->quant, "Q4_K_M");
  EXPECT_EQ(to_string(*r), "bartowski/Llama-3.2-1B-Instruct-GGUF@v1.0:Q4_K_M");
  r = parse_model_ref("org/name");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->revision, "main");
  EXPECT_EQ(parse_model_ref("org/name@refs/pr/1")->revision, "refs/pr/1");
  for (const char* path : {"models/x.gguf", "./a/b", "/abs/x", "a/b/c", "file.gguf", "random:tiny", "~/m/x", "plain"})
    EXPECT_FALSE(parse_model_ref(path).has_value()) << path;
  for (const char* bad : {"../x", "org/..", "org/.hidden", "org/a..b", "org/name@../../etc", "org/name@a//b", "org/n:Q4 K",
                          "org/na me", "-org/x"}) {
    bool rejected = false;
    try {
      rejected = !parse_model_ref(bad).has_value();
    } catch (const Error&) {
      rejected = true;
    }
    EXPECT_TRUE(rejected) << bad;
  }
}

TEST(RepoFiles, SelectsByTagFolderOrDefault) {
  const std::vector<std::string> ggufs = {"a-Q4_K.gguf", "a-Q4_K_M.gguf", "a-Q8_0.gguf", "README.md"};
  EXPECT_EQ(select_model_files(ggufs, "Q4_K", "r").gguf, "a-Q4_K.gguf");  // a word, not a prefix of Q4_K_M
  EXPECT_EQ(select_model_files(ggufs, "Q8_0", "r").files, std::vector<std::string>{"a-Q8_0.gguf"});
  EXPECT_EQ(select_model_files(ggufs, "", "r").gguf, "a-Q4_K_M.gguf");  // llama.cpp's default
  EXPECT_THROW(select_model_files(ggufs, "Q2_K", "r"), Error);
  EXPECT_THROW(select_model_files({"a-Q8_0.gguf", "b-Q8_0.gguf"}, "", "r"), Error);
  const ModelFiles f = select_model_files({"config.json", "model.safetensors", "tokenizer.json", "x.bin", "onnx/m.json"}, "", "r");
  EXPECT_EQ(f.gguf, "");
  EXPECT_EQ(f.files, (std::vector<std::string>{"config.json", "model.safetensors", "tokenizer.json"}));
  EXPECT_EQ(quant_tag_of("Llama-3.2-1B-Instruct-Q4_K_M.gguf"), "Q4_K_M");
  EXPECT_EQ(quant_tag_of("qwen2-0_5b-instruct-q8_0.gguf"), "Q8_0");
  EXPECT_EQ(quant_tag_of("model-f16.gguf"), "F16");
  EXPECT_EQ(quant_tag_of("model.gguf"), "");
  for (const char* bad : {"../x", "a/../b", "/x", "a//b", "a\\b", "", "a/./b", "x\n"}) EXPECT_FALSE(is_safe_repo_path(bad)) << bad;
  EXPECT_TRUE(is_safe_repo_path("sub/dir/model.gguf"));
}

TEST(RepoFiles, SplitGgufIsOneChoiceOfEveryShard) {
  const std::vector<std::string> paths = {"Q4_K_M/m-Q4_K_M-00002-of-00003.gguf", "Q4_K_M/m-Q4_K_M-00001-of-00003.gguf",
                                          "Q4_K_M/m-Q4_K_M-00003-of-00003.gguf", "m-Q8_0.gguf", "README.md"};
  const std::vector<std::string> shards = {"Q4_K_M/m-Q4_K_M-00001-of-00003.gguf", "Q4_K_M/m-Q4_K_M-00002-of-00003.gguf",
                                           "Q4_K_M/m-Q4_K_M-00003-of-00003.gguf"};
  ModelFiles f = select_model_files(paths, "Q4_K_M", "r");
  EXPECT_EQ(f.files, shards);
  EXPECT_EQ(f.gguf, shards[0]);
  EXPECT_EQ(select_model_files(paths, "", "r").files, shards);  // the Q4_K_M default counts the set once
  EXPECT_EQ(select_model_files(paths, "Q8_0", "r").files, std::vector<std::string>{"m-Q8_0.gguf"});
  // The only GGUF model of a repo, even in three files.
  EXPECT_EQ(select_model_files(shards, "", "r").gguf, shards[0]);
  // Every shard the names imply, listed or not (so a missing one can be named).
  f = select_model_files({"x-Q2_K-00002-of-00002.gguf"}, "Q2_K", "r");
  EXPECT_EQ(f.files, (std::vector<std::string>{"x-Q2_K-00001-of-00002.gguf", "x-Q2_K-00002-of-00002.gguf"}));
  // Two models with one tag: still an error, naming both.
  try {
    select_model_files({"a-Q8_0-00001-of-00002.gguf", "a-Q8_0-00002-of-00002.gguf", "b-Q8_0.gguf"}, "Q8_0", "r");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a-Q8_0-00001-of-00002.gguf, b-Q8_0.gguf"), std::string::npos) << e.what();
  }
}

TEST(HubCacheDir, FollowsHuggingfaceHubsOrder) {
  HubEnv e;
  e.home = "/h";
  EXPECT_EQ(hub_cache_dir(e), fs::path("/h/.cache/huggingface/hub"));
  e.xdg_cache_home = "/x";
  EXPECT_EQ(hub_cache_dir(e), fs::path("/x/huggingface/hub"));
  e.hf_home = "/hf";
  EXPECT_EQ(hub_cache_dir(e), fs::path("/hf/hub"));
  e.hf_hub_cache = "/c";
  EXPECT_EQ(hub_cache_dir(e), fs::path("/c"));
  EXPECT_EQ(repo_folder_name("org/name"), "models--org--name");
}

TEST_F(CacheTree, ResolvesRevisionsTagsAndFoldersThroughSymlinks) {
  const fs::path q4 = resolve("org/gguf-repo");
  EXPECT_EQ(q4, cache_ / "models--org--gguf-repo" / "snapshots" / kMain / "m-Q4_K_M.gguf");
  std::ifstream in(q4);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "q4km");  // read through the symlink, where the blob is
  EXPECT_EQ(resolve("org/gguf-repo:Q8_0").parent_path().filename(), kMain);
  EXPECT_EQ(resolve("org/gguf-repo@v1:Q8_0").parent_path().filename(), kOld);
  EXPECT_EQ(resolve(std::string("org/gguf-repo@") + kOld + ":Q8_0").parent_path().filename(), kOld);  // a commit, no ref
  EXPECT_EQ(resolve("org/st"), cache_ / "models--org--st" / "snapshots" / kMain);
  EXPECT_EQ(resolve("org/st@refs/pr/1"), cache_ / "models--org--st" / "snapshots" / kMain);
}

TEST_F(CacheTree, MissingThingsSayWhatToPull) {
  EXPECT_NE(error_of("org/absent").find("ferry pull org/absent"), std::string::npos);
  EXPECT_NE(error_of("org/gguf-repo@v2").find("ferry pull org/gguf-repo@v2"), std::string::npos);
  EXPECT_NE(error_of("org/gguf-repo:Q2_K").find("Q4_K_M, Q8_0"), std::string::npos) << error_of("org/gguf-repo:Q2_K");
  EXPECT_NE(error_of("org/gguf-repo@v1:Q4_K_M").find("no GGUF file tagged"), std::string::npos);
  // A blob removed (or still .incomplete): the dangling link is not a file.
  for (const auto& e : fs::directory_iterator(cache_ / "models--org--st" / "blobs")) fs::remove(e.path());
  EXPECT_NE(error_of("org/st").find("neither GGUF nor safetensors"), std::string::npos) << error_of("org/st");
  // A ref that holds something other than a commit id.
  write(cache_ / "models--org--gguf-repo" / "refs" / "main", "../../etc");
  EXPECT_NE(error_of("org/gguf-repo").find("does not hold a commit id"), std::string::npos);
}

TEST_F(CacheTree, SplitGgufResolvesToShardOneAndListsOnce) {
  add("org/split", kMain, "big-Q4_K_M-00001-of-00002.gguf", "abc");
  add("org/split", kMain, "big-Q4_K_M-00002-of-00002.gguf", "defgh");
  write(cache_ / "models--org--split" / "refs" / "main", kMain);
  EXPECT_EQ(resolve("org/split:Q4_K_M"),
            cache_ / "models--org--split" / "snapshots" / kMain / "big-Q4_K_M-00001-of-00002.gguf");
  bool listed = false;
  for (const CachedModel& m : list_cached_models(cache_)) {
    if (m.name.rfind("org/split", 0) != 0) continue;
    EXPECT_FALSE(listed) << "listed twice: " << m.name;
    listed = true;
    EXPECT_EQ(m.name, "org/split:Q4_K_M");
    EXPECT_EQ(m.kind, "gguf-split");
    EXPECT_EQ(m.bytes, 8u);  // both shards
  }
  EXPECT_TRUE(listed);
  // A shard missing from the snapshot: named, with the pull that fetches it; the listing says so.
  fs::remove(cache_ / "models--org--split" / "snapshots" / kMain / "big-Q4_K_M-00002-of-00002.gguf");
  const std::string e = error_of("org/split:Q4_K_M");
  EXPECT_NE(e.find("big-Q4_K_M-00002-of-00002.gguf is missing from the cached snapshot; fetch it with `ferry pull "
                   "org/split:Q4_K_M`"),
            std::string::npos)
      << e;
  for (const CachedModel& m : list_cached_models(cache_))
    if (m.name.rfind("org/split", 0) == 0) EXPECT_EQ(m.name, "org/split:Q4_K_M (1 of 2 shards)");
}

TEST(FolderModels, SplitGgufListedOnce) {
  const fs::path dir = fs::temp_directory_path() / ("ferry_folder_models_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  write(dir / "m-00001-of-00002.gguf", "12");
  write(dir / "m-00002-of-00002.gguf", "345");
  write(dir / "plain-Q8_0.gguf", "6");
  std::vector<std::string> rows;
  for (const CachedModel& m : list_folder_models(dir))
    rows.push_back(m.name + " " + m.kind + " " + std::to_string(m.bytes));
  EXPECT_EQ(rows, (std::vector<std::string>{"m-00001-of-00002.gguf gguf-split 5", "plain-Q8_0.gguf gguf 1"}));
  fs::remove_all(dir);
}

TEST_F(CacheTree, ListsEveryQuantAndFolder) {
  const std::vector<CachedModel> models = list_cached_models(cache_);
  std::vector<std::string> names;
  for (const CachedModel& m : models) names.push_back(m.name + " " + m.kind + " " + std::to_string(m.bytes));
  EXPECT_EQ(names, (std::vector<std::string>{"org/gguf-repo:Q4_K_M gguf 4", "org/gguf-repo:Q8_0 gguf 2",
                                             "org/gguf-repo@v1:Q8_0 gguf 6", "org/st safetensors 4"}));
}

}  // namespace
}  // namespace ferry::hub
