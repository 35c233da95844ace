// `ferry pull org/repo[@revision][:QUANT]`: the files the name selects (hub/repo_files.h), downloaded from the Hub
// into the Hugging Face cache exactly as huggingface_hub writes it (hub/hub_cache.h), so both tools share them.
//   1. GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=true: the commit, the files, sizes, checksums
//   2. per file missing from blobs/: GET {endpoint}/{repo}/resolve/{commit}/{path} (redirects followed) into
//      blobs/<etag>.incomplete, resumed with a Range request after a dropped connection or an earlier run
//   3. the whole file checked (sha256 for LFS files, the git blob id otherwise); a mismatch deletes the
//      .incomplete file (resuming it would only keep the bad bytes) and fails the pull naming the file
//   4. rename to blobs/<etag> (atomic: a partial file never has a blob's name), a relative symlink in
//      snapshots/<commit>/, and refs/<revision> written last (through a temporary file and a rename)
// Errors (401/403 gated or private repos, 404, bad JSON, hostile file names, a short body, a bad checksum) are a
// ferry::Error naming the repo and the file; nothing is written outside <cache>/models--org--repo/.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "core/progress.h"
#include "hub/model_ref.h"

namespace ferry::hub {

inline constexpr const char* kDefaultEndpoint = "https://huggingface.co";

struct PullOptions {
  ModelRef ref;
  std::filesystem::path cache;  // hub_cache_dir(env)
  std::string endpoint = kDefaultEndpoint;
  std::string token;            // HF_TOKEN or --token ("" : anonymous)
  int max_attempts = 5;         // per file: the first try and the resumed ones after a dropped connection
  double read_timeout_s = 60;
  ProgressOptions progress;     // one bar over every byte to download
};

struct PullResult {
  std::filesystem::path model_path;  // what -m loads (resolve_cached_model's answer)
  std::string commit;
  int files_downloaded = 0, files_present = 0;
  uint64_t bytes_downloaded = 0;
};

PullResult pull_model(const PullOptions& options);

}  // namespace ferry::hub
