// Fuzz target: arbitrary bytes as the Hub's model info body, and as model names. Every rejection must be a
// ferry::Error; an accepted file list holds only paths that stay inside the cache folder and sane sizes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/check.h"
#include "hub/model_ref.h"
#include "hub/repo_files.h"
#include "hub/repo_info.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::hub;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  try {
    const RepoInfo info = parse_repo_info(body, "org/fuzz");
    std::vector<std::string> paths;
    for (const RepoFile& f : info.files) {
      if (!is_safe_repo_path(f.path) || f.size > kMaxRepoFileBytes || f.etag().empty()) __builtin_trap();
      paths.push_back(f.path);
    }
    try {
      (void)select_model_files(paths, "", "org/fuzz");
      (void)select_model_files(paths, "Q4_K_M", "org/fuzz");
    } catch (const ferry::Error&) {
    }
  } catch (const ferry::Error&) {
  }
  try {
    if (const auto ref = parse_model_ref(body.substr(0, 300))) {
      if (ref->repo.find("..") != std::string::npos || ref->revision.find("..") != std::string::npos) __builtin_trap();
      (void)to_string(*ref);
    }
  } catch (const ferry::Error&) {
  }
  (void)quant_tag_of(body.substr(0, 300));
  return 0;
}
