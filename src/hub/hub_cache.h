// The Hugging Face cache as huggingface_hub lays it out (its file_download.py), read and written the same way so
// that ferry and `huggingface-cli download` share files:
//   <cache>/models--org--repo/refs/<revision>            the commit a branch or tag points at (one line)
//   <cache>/models--org--repo/blobs/<etag>               file contents, named by sha256 (LFS) or git blob id
//   <cache>/models--org--repo/blobs/<etag>.incomplete    a download in progress (never read as a model)
//   <cache>/models--org--repo/snapshots/<commit>/<path>  relative symlinks into blobs/
// Resolution is offline and reads the files where they are (through the symlinks).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/env.h"
#include "hub/model_ref.h"

namespace ferry::hub {

// HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else HOME/.cache/huggingface/hub.
std::filesystem::path hub_cache_dir(const HubEnv& env);

// "models--org--repo".
std::string repo_folder_name(const std::string& repo);

// The commit of `revision` in the cache: refs/<revision> when there (checked to be a 40-hex id), else the
// revision itself when it is a commit with a snapshot; "" when neither.
std::string cached_commit(const std::filesystem::path& cache, const ModelRef& ref);

// Every file of a snapshot (repo-relative, '/'-separated, sorted) whose target exists.
std::vector<std::string> snapshot_files(const std::filesystem::path& snapshot);

// The path to load for `ref` (a .gguf inside the snapshot, or the snapshot folder). Throws ferry::Error saying
// what is missing and the `ferry pull` that would fetch it.
std::filesystem::path resolve_cached_model(const std::filesystem::path& cache, const ModelRef& ref);

// One model found by `ferry models`.
struct CachedModel {
  std::string name;       // "org/repo:Q4_K_M", "org/repo", or a file name in the models folder
  std::string kind;       // "gguf", "gguf-split" (a split GGUF, one row for its shards) or "safetensors"
  std::string quant;      // the tag of a GGUF's file name ("" unknown)
  uint64_t bytes = 0;     // bytes of its files
  std::string path;       // what -m would load
};
// Every model in the cache's snapshots (each GGUF of a repo, each safetensors folder), newest snapshot per ref.
std::vector<CachedModel> list_cached_models(const std::filesystem::path& cache);
// Every .gguf file and Hugging Face folder (config.json + *.safetensors) directly in `dir`.
std::vector<CachedModel> list_folder_models(const std::filesystem::path& dir);

}  // namespace ferry::hub
