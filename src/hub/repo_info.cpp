#include "hub/repo_info.h"

#include <algorithm>
#include <cctype>
#include <set>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "hub/model_ref.h"
#include "hub/repo_files.h"

namespace ferry::hub {
namespace {

using nlohmann::json;

bool is_hex(std::string_view s, size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(c) || (c >= 'a' && c <= 'f'); });
}

uint64_t size_field(const json& j, const char* key, std::string_view what) {
  const auto it = j.find(key);
  FERRY_CHECK(it != j.end() && it->is_number_unsigned(), "the Hub's file list: {} has no valid '{}'", what, key);
  const uint64_t n = it->get<uint64_t>();
  FERRY_CHECK(n <= kMaxRepoFileBytes, "the Hub's file list: {} claims {} bytes, more than ferry accepts", what, n);
  return n;
}

}  // namespace

RepoInfo parse_repo_info(std::string_view body, std::string_view repo) {
  FERRY_CHECK(body.size() <= kMaxRepoInfoBytes, "{}: the Hub's model info is {} bytes, more than {}", repo, body.size(),
              kMaxRepoInfoBytes);
  const json j = json::parse(body.begin(), body.end(), nullptr, false);
  FERRY_CHECK(!j.is_discarded() && j.is_object(), "{}: the Hub's model info is not a JSON object", repo);
  RepoInfo info;
  const auto sha = j.find("sha");
  FERRY_CHECK(sha != j.end() && sha->is_string() && is_commit_hash(sha->get<std::string>()),
              "{}: the Hub's model info has no commit id ('sha')", repo);
  info.commit = sha->get<std::string>();
  const auto siblings = j.find("siblings");
  FERRY_CHECK(siblings != j.end() && siblings->is_array(), "{}: the Hub's model info has no file list ('siblings')", repo);
  FERRY_CHECK(siblings->size() <= kMaxRepoFiles, "{}: {} files in the list, more than ferry accepts", repo, siblings->size());
  std::set<std::string> seen;
  for (const json& s : *siblings) {
    FERRY_CHECK(s.is_object(), "{}: an entry of the file list is not an object", repo);
    const auto name = s.find("rfilename");
    FERRY_CHECK(name != s.end() && name->is_string(), "{}: a file list entry has no 'rfilename'", repo);
    RepoFile f;
    f.path = name->get<std::string>();
    FERRY_CHECK(is_safe_repo_path(f.path), "{}: refusing the file name '{}' (it would leave the cache folder)", repo,
                f.path.substr(0, 200));
    FERRY_CHECK(seen.insert(f.path).second, "{}: '{}' is listed twice", repo, f.path);
    if (const auto lfs = s.find("lfs"); lfs != s.end() && !lfs->is_null()) {
      FERRY_CHECK(lfs->is_object(), "{}: '{}' has a malformed 'lfs' entry", repo, f.path);
      const auto oid = lfs->find("sha256");
      FERRY_CHECK(oid != lfs->end() && oid->is_string() && is_hex(oid->get<std::string>(), 64),
                  "{}: '{}' has no valid LFS sha256", repo, f.path);
      f.sha256 = oid->get<std::string>();
      f.size = size_field(*lfs, "size", f.path);
    } else {
      f.size = size_field(s, "size", f.path);
    }
    if (const auto blob = s.find("blobId"); blob != s.end()) {
      FERRY_CHECK(blob->is_string() && is_hex(blob->get<std::string>(), 40), "{}: '{}' has a malformed 'blobId'", repo, f.path);
      f.git_oid = blob->get<std::string>();
    }
    FERRY_CHECK(!f.etag().empty(), "{}: '{}' has neither an LFS sha256 nor a blobId to check it by", repo, f.path);
    info.files.push_back(std::move(f));
  }
  return info;
}

}  // namespace ferry::hub
