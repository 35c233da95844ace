#include "hub/pull.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>

#include "core/check.h"
#include "hub/digest.h"
#include "hub/hub_cache.h"
#include "hub/hub_http.h"
#include "hub/repo_files.h"
#include "hub/repo_info.h"

namespace ferry::hub {
namespace {

namespace fs = std::filesystem;

std::string trim_endpoint(std::string e) {
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

// The error line for a Hub status that is not a success.
[[noreturn]] void fail_status(const HttpResponse& r, const std::string& repo, const std::string& what, bool token) {
  if (r.status == 0) fail("{}: cannot reach the Hub for {} ({})", repo, what, r.transport_error);
  if (r.status == 401)
    fail("{}: {} (HTTP 401): the repo is gated or private; {}", repo, what,
         token ? "the token was refused" : "set HF_TOKEN or pass --token");
  if (r.status == 403) fail("{}: {} (HTTP 403): the token has no access to this gated repo; request it on the Hub", repo, what);
  if (r.status == 404) fail("{}: {} (HTTP 404): no such repo, revision or file", repo, what);
  fail("{}: {}: HTTP {}", repo, what, r.status);
}

// Size of a file, 0 when absent.
uint64_t size_or_zero(const fs::path& p) {
  std::error_code ec;
  const uintmax_t n = fs::file_size(p, ec);
  return ec ? 0 : uint64_t(n);
}

// "bytes START-END/TOTAL" -> START (or -1).
int64_t content_range_start(const std::string& v) {
  const size_t sp = v.find(' ');
  if (sp == std::string::npos) return -1;
  int64_t start = -1;
  const auto [p, ec] = std::from_chars(v.data() + sp + 1, v.data() + v.size(), start);
  return ec == std::errc() && p < v.data() + v.size() && *p == '-' ? start : -1;
}

class FileWriter {
 public:
  FileWriter(const fs::path& p, bool append) : path_(p), f_(std::fopen(p.c_str(), append ? "ab" : "wb"), std::fclose) {
    FERRY_CHECK(f_ != nullptr, "cannot write '{}': {}", p.string(), std::strerror(errno));
  }
  bool write(const char* d, size_t n) { return std::fwrite(d, 1, n, f_.get()) == n; }
  void close() {
    FERRY_CHECK(std::fflush(f_.get()) == 0 && ::fsync(::fileno(f_.get())) == 0, "cannot write '{}': {}", path_.string(),
                std::strerror(errno));
    f_.reset();
  }

 private:
  fs::path path_;
  std::unique_ptr<FILE, int (*)(FILE*)> f_;
};

struct Downloader {
  const PullOptions& o;
  const HttpOptions& http;
  const std::string& endpoint;
  const std::string& commit;
  Progress& progress;

  // Fetches `f` into `incomplete` (resuming what is there) until it has f.size bytes; the count of new bytes.
  uint64_t fetch(const RepoFile& f, const fs::path& incomplete) {
    const std::string url = endpoint + "/" + o.ref.repo + "/resolve/" + commit + "/" + url_encode(f.path, true);
    uint64_t fetched = 0;
    std::string last_problem;
    for (int attempt = 1; attempt <= o.max_attempts; ++attempt) {
      uint64_t have = size_or_zero(incomplete);
      if (have > f.size) {  // longer than the file can be: start over
        fs::remove(incomplete);
        have = 0;
      }
      if (have == f.size) return fetched;
      std::map<std::string, std::string> headers;
      if (have > 0) headers["Range"] = "bytes=" + std::to_string(have) + "-";
      std::unique_ptr<FileWriter> out;
      bool too_long = false, write_failed = false;
      uint64_t pos = have;
      const HttpResponse r = http_get(
          url, headers, http,
          [&](int status, const std::map<std::string, std::string>& h) {
            if (status == 206) {
              const auto cr = h.find("content-range");
              if (cr == h.end() || content_range_start(cr->second) != int64_t(have)) return false;  // not our range
              out = std::make_unique<FileWriter>(incomplete, true);
            } else {  // 200: the whole file (the server ignored the range)
              pos = 0;
              out = std::make_unique<FileWriter>(incomplete, false);
            }
            return true;
          },
          [&](const char* d, size_t n) {
            if (pos + n > f.size) {
              too_long = true;
              return false;
            }
            if (!out->write(d, n)) {
              write_failed = true;
              return false;
            }
            pos += n;
            fetched += n;
            progress.add(n);
            return true;
          });
      if (out) out->close();
      FERRY_CHECK(!write_failed, "cannot write '{}': {}", incomplete.string(), std::strerror(errno));
      FERRY_CHECK(!too_long, "{}: the Hub sent more than the {} bytes its file list gives for {}", o.ref.repo, f.size, f.path);
      if (r.status == 416 && have == f.size) return fetched;
      if (r.status != 0 && r.status != 200 && r.status != 206) {
        if (r.status == 416) {  // the range does not fit what the server has: start again from 0
          fs::remove(incomplete);
          last_problem = "HTTP 416";
          continue;
        }
        fail_status(r, o.ref.repo, "downloading " + f.path, !o.token.empty());
      }
      if (r.status == 206 && !out) {
        last_problem = "a range response for other bytes than asked";
        fs::remove(incomplete);  // start over from byte 0
        continue;
      }
      if (pos == f.size && r.transport_error.empty()) return fetched;
      last_problem = r.transport_error.empty() ? "the body ended early" : r.transport_error;
    }
    fail("{}: {} is incomplete after {} attempts ({}); run `ferry pull` again to resume from {} of {} bytes", o.ref.repo,
         f.path, o.max_attempts, last_problem, size_or_zero(incomplete), f.size);
  }
};

// dst = a relative symlink to `target`, replacing what was there (through a temporary name and a rename).
void place_symlink(const fs::path& link, const fs::path& target) {
  fs::create_directories(link.parent_path());
  const fs::path tmp = link.string() + ".ferry-link";
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_symlink(target, tmp);
  fs::rename(tmp, link);
}

void write_ref(const fs::path& refs, const std::string& revision, const std::string& commit) {
  const fs::path ref = refs / revision;
  fs::create_directories(ref.parent_path());
  const fs::path tmp = ref.string() + ".ferry-tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << commit;
    FERRY_CHECK(out.good(), "cannot write '{}'", tmp.string());
  }
  fs::rename(tmp, ref);
}

}  // namespace

PullResult pull_model(const PullOptions& o) {
  const std::string endpoint = trim_endpoint(o.endpoint);
  const Url base = parse_url(endpoint);
  const std::string name = to_string(o.ref);
  HttpOptions http{.token = o.token, .token_origin = base.origin(), .read_timeout_s = o.read_timeout_s};

  const std::string info_url =
      endpoint + "/api/models/" + o.ref.repo + "/revision/" + url_encode(o.ref.revision, false) + "?blobs=true";
  const HttpResponse ir = http_get_text(info_url, http, kMaxRepoInfoBytes);
  if (ir.status != 200 || !ir.transport_error.empty()) fail_status(ir, o.ref.repo, "the model info", !o.token.empty());
  const RepoInfo info = parse_repo_info(ir.body, o.ref.repo);

  std::vector<std::string> paths;
  for (const RepoFile& f : info.files) paths.push_back(f.path);
  const ModelFiles want = select_model_files(paths, o.ref.quant, name);
  const std::set<std::string> wanted(want.files.begin(), want.files.end());
  const std::set<std::string> listed(paths.begin(), paths.end());
  for (const std::string& f : want.files)  // a split GGUF's shard the repo lacks
    FERRY_CHECK(listed.count(f), "{}: {} is not in the repo (a split GGUF needs every shard)", name, f);

  const fs::path repo_dir = o.cache / repo_folder_name(o.ref.repo);
  const fs::path blobs = repo_dir / "blobs", snapshot = repo_dir / "snapshots" / info.commit;
  fs::create_directories(blobs);
  fs::create_directories(snapshot);

  PullResult result;
  result.commit = info.commit;
  std::vector<const RepoFile*> to_fetch;
  uint64_t total = 0, resumed = 0;
  for (const RepoFile& f : info.files) {
    if (!wanted.count(f.path)) continue;
    if (size_or_zero(blobs / f.etag()) == f.size && fs::exists(blobs / f.etag())) {
      ++result.files_present;
    } else {
      to_fetch.push_back(&f);
      total += f.size;
      resumed += std::min(f.size, size_or_zero(blobs / (f.etag() + ".incomplete")));
    }
  }
  {
    Progress progress("pull " + name, total, o.progress);
    progress.set(resumed);
    Downloader dl{o, http, endpoint, info.commit, progress};
    for (const RepoFile* f : to_fetch) {
      const fs::path blob = blobs / f->etag(), incomplete = blob.string() + ".incomplete";
      result.bytes_downloaded += dl.fetch(*f, incomplete);
      const DigestKind kind = f->sha256.empty() ? DigestKind::kGitBlobSha1 : DigestKind::kSha256;
      const std::string got = file_digest(incomplete, kind);
      if (got != f->etag()) {
        std::error_code ec;
        fs::remove(incomplete, ec);
        fail("{}: {} failed its checksum ({} {} expected, {} received); the download was deleted", o.ref.repo, f->path,
             kind == DigestKind::kSha256 ? "sha256" : "git blob id", f->etag(), got);
      }
      fs::rename(incomplete, blob);
      ++result.files_downloaded;
    }
    progress.finish();
  }
  for (const RepoFile& f : info.files) {
    if (!wanted.count(f.path)) continue;
    // snapshots/<commit>/a/b -> ../../../blobs/<etag>: up from the file's folder to the repo folder.
    std::string target;
    for (size_t i = 0, depth = size_t(std::count(f.path.begin(), f.path.end(), '/')) + 2; i < depth; ++i) target += "../";
    place_symlink(snapshot / f.path, fs::path(target + "blobs/" + f.etag()));
  }
  if (o.ref.revision != info.commit) write_ref(repo_dir / "refs", o.ref.revision, info.commit);
  result.model_path = want.gguf.empty() ? snapshot : snapshot / want.gguf;
  return result;
}

}  // namespace ferry::hub
