#include "hub/hub_cache.h"

#include <algorithm>
#include <fstream>
#include <set>

#include "core/check.h"
#include "hub/repo_files.h"

namespace ferry::hub {

namespace fs = std::filesystem;

fs::path hub_cache_dir(const HubEnv& env) {
  if (env.hf_hub_cache) return fs::path(*env.hf_hub_cache);
  if (env.hf_home) return fs::path(*env.hf_home) / "hub";
  if (env.xdg_cache_home) return fs::path(*env.xdg_cache_home) / "huggingface" / "hub";
  FERRY_CHECK(env.home.has_value(), "no Hugging Face cache: set HF_HUB_CACHE or HF_HOME (HOME is not set either)");
  return fs::path(*env.home) / ".cache" / "huggingface" / "hub";
}

std::string repo_folder_name(const std::string& repo) {
  std::string name = "models--";
  for (char c : repo) {
    if (c == '/') {
      name += "--";
    } else {
      name += c;
    }
  }
  return name;
}

std::string cached_commit(const fs::path& cache, const ModelRef& ref) {
  const fs::path repo = cache / repo_folder_name(ref.repo);
  std::error_code ec;
  std::ifstream in(repo / "refs" / ref.revision);
  if (in) {
    std::string commit;
    std::getline(in, commit, '\n');
    while (!commit.empty() && (commit.back() == '\r' || commit.back() == ' ')) commit.pop_back();
    FERRY_CHECK(is_commit_hash(commit), "{}: refs/{} does not hold a commit id", (repo / "refs").string(), ref.revision);
    return commit;
  }
  if (is_commit_hash(ref.revision) && fs::is_directory(repo / "snapshots" / ref.revision, ec)) return ref.revision;
  return {};
}

std::vector<std::string> snapshot_files(const fs::path& snapshot) {
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(snapshot, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code e2;
    if (!fs::is_regular_file(it->path(), e2)) continue;  // follows the symlink: a dangling one is skipped
    files.push_back(it->path().lexically_relative(snapshot).generic_string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

fs::path resolve_cached_model(const fs::path& cache, const ModelRef& ref) {
  const std::string name = to_string(ref);
  const std::string commit = cached_commit(cache, ref);
  FERRY_CHECK(!commit.empty(), "{} is not in the Hugging Face cache ({}); fetch it with `ferry pull {}`", name,
              cache.string(), name);
  const fs::path snapshot = cache / repo_folder_name(ref.repo) / "snapshots" / commit;
  const std::vector<std::string> have = snapshot_files(snapshot);
  const ModelFiles want = select_model_files(have, ref.quant, name);
  const std::set<std::string> present(have.begin(), have.end());
  for (const std::string& f : want.files)
    FERRY_CHECK(present.count(f), "{}: {} is missing from the cached snapshot; fetch it with `ferry pull {}`", name, f, name);
  return want.gguf.empty() ? snapshot : snapshot / want.gguf;
}

namespace {

uint64_t file_bytes(const fs::path& p) {
  std::error_code ec;
  const uintmax_t n = fs::file_size(p, ec);  // follows symlinks into blobs/
  return ec ? 0 : uint64_t(n);
}

// One row for a GGUF in `dir`: a plain file, or a split GGUF once with the bytes of all its shards ("gguf-split";
// the name says how many shards are missing when some are).
CachedModel gguf_row(const fs::path& dir, const GgufChoice& g, std::string name, const std::string& tag) {
  uint64_t bytes = 0;
  size_t present = 0;
  for (const std::string& f : g.files) {
    std::error_code ec;
    if (!fs::is_regular_file(dir / f, ec)) continue;
    bytes += file_bytes(dir / f);
    ++present;
  }
  if (present < g.files.size()) name += fmt::format(" ({} of {} shards)", present, g.files.size());
  return {std::move(name), g.split ? "gguf-split" : "gguf", tag, bytes, (dir / g.first).string()};
}

}  // namespace

std::vector<CachedModel> list_cached_models(const fs::path& cache) {
  std::vector<CachedModel> out;
  std::error_code ec;
  for (const auto& repo_dir : fs::directory_iterator(cache, ec)) {
    const std::string folder = repo_dir.path().filename().string();
    if (folder.rfind("models--", 0) != 0) continue;
    const std::string rest = folder.substr(8);
    const size_t sep = rest.find("--");
    if (sep == std::string::npos) continue;
    const std::string repo = rest.substr(0, sep) + "/" + rest.substr(sep + 2);
    // One snapshot per ref (main first); a snapshot no ref names is listed by its commit.
    std::set<std::string> commits;
    std::vector<std::pair<std::string, std::string>> snapshots;  // (revision shown, commit)
    std::error_code e2;
    std::vector<std::string> revisions;
    for (const auto& r : fs::recursive_directory_iterator(repo_dir.path() / "refs", e2))
      if (r.is_regular_file()) revisions.push_back(r.path().lexically_relative(repo_dir.path() / "refs").generic_string());
    std::sort(revisions.begin(), revisions.end(), [](const std::string& a, const std::string& b) {
      return (a == "main") != (b == "main") ? a == "main" : a < b;  // main names its snapshot when others share it
    });
    for (const std::string& rev : revisions) {
      if (!is_valid_revision(rev)) continue;
      try {
        const std::string commit = cached_commit(cache, {repo, rev, ""});
        if (!commit.empty() && commits.insert(commit).second) snapshots.emplace_back(rev, commit);
      } catch (const Error&) {
      }
    }
    for (const auto& s : fs::directory_iterator(repo_dir.path() / "snapshots", e2)) {
      const std::string commit = s.path().filename().string();
      if (is_commit_hash(commit) && commits.insert(commit).second) snapshots.emplace_back(commit, commit);
    }
    for (const auto& [rev, commit] : snapshots) {
      const fs::path snap = repo_dir.path() / "snapshots" / commit;
      const std::vector<std::string> files = snapshot_files(snap);
      const std::string base = repo + (rev == "main" ? "" : "@" + rev);
      bool has_safetensors = false;
      uint64_t folder_bytes = 0;
      for (const std::string& f : files) {
        if (f.size() > 5 && f.ends_with(".gguf")) continue;  // listed below, a split GGUF once
        if (f.ends_with(".safetensors")) has_safetensors = true;
        folder_bytes += file_bytes(snap / f);
      }
      for (const GgufChoice& g : gguf_choices(files)) {
        const std::string tag = quant_tag_of(fs::path(g.first).filename().string());
        std::string name = tag.empty() ? base + " (" + g.first + ")" : base + ":" + tag;
        out.push_back(gguf_row(snap, g, std::move(name), tag));
      }
      if (has_safetensors) out.push_back({base, "safetensors", "", folder_bytes, snap.string()});
    }
  }
  std::sort(out.begin(), out.end(), [](const CachedModel& a, const CachedModel& b) { return a.name < b.name; });
  return out;
}

std::vector<CachedModel> list_folder_models(const fs::path& dir) {
  std::vector<CachedModel> out;
  std::error_code ec;
  std::vector<std::string> ggufs;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code e2;
    if (e.is_regular_file(e2) && name.size() > 5 && name.ends_with(".gguf")) {
      ggufs.push_back(name);
    } else if (e.is_directory(e2) && fs::is_regular_file(e.path() / "config.json", e2)) {
      uint64_t bytes = 0;
      bool has_safetensors = false;
      for (const auto& f : fs::directory_iterator(e.path(), e2)) {
        if (!f.is_regular_file()) continue;
        has_safetensors = has_safetensors || f.path().extension() == ".safetensors";
        bytes += file_bytes(f.path());
      }
      if (has_safetensors) out.push_back({name, "safetensors", "", bytes, e.path().string()});
    }
  }
  for (const GgufChoice& g : gguf_choices(ggufs)) out.push_back(gguf_row(dir, g, g.first, quant_tag_of(g.first)));
  std::sort(out.begin(), out.end(), [](const CachedModel& a, const CachedModel& b) { return a.name < b.name; });
  return out;
}

}  // namespace ferry::hub
