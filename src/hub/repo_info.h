// The Hub's model info (GET /api/models/{repo}/revision/{revision}?blobs=true) as ferry uses it: the commit and
// every file with its size and checksum. Parsing trusts nothing: a malformed body, a hostile file name ("..",
// absolute, control characters), a negative or absurd size or a malformed checksum is a ferry::Error naming it
// (fuzzed by tests/fuzz/hub_info_fuzz.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::hub {

inline constexpr uint64_t kMaxRepoFileBytes = uint64_t(1) << 42;  // 4 TiB: larger than any model file there is
inline constexpr size_t kMaxRepoInfoBytes = size_t(64) << 20;      // the info body ferry reads at most
inline constexpr size_t kMaxRepoFiles = 100000;

struct RepoFile {
  std::string path;     // repo-relative, checked by is_safe_repo_path
  uint64_t size = 0;    // bytes
  std::string sha256;   // LFS files: the content's sha256 (64 hex); "" for files kept in git
  std::string git_oid;  // the git blob id (40 hex); "" when the Hub did not send it
  // huggingface_hub's blob name: the sha256 for LFS files, the git blob id otherwise.
  const std::string& etag() const { return sha256.empty() ? git_oid : sha256; }
};

struct RepoInfo {
  std::string commit;  // 40 hex ("sha")
  std::vector<RepoFile> files;
};

RepoInfo parse_repo_info(std::string_view json_body, std::string_view repo);

}  // namespace ferry::hub
