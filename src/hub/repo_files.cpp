#include "hub/repo_files.h"

#include <algorithm>
#include <cctype>
#include <regex>
#include <set>

#include "core/check.h"
#include "formats/gguf_split_name.h"

namespace ferry::hub {
namespace {

std::string upper(std::string_view s) {
  std::string u(s);
  std::transform(u.begin(), u.end(), u.begin(), [](unsigned char c) { return std::toupper(c); });
  return u;
}

bool ends_with_ci(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && upper(s.substr(s.size() - suffix.size())) == upper(suffix);
}

std::string_view base_name(std::string_view p) {
  const size_t slash = p.rfind('/');
  return slash == std::string_view::npos ? p : p.substr(slash + 1);
}

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// `tag` occurs in `name` (both upper-cased) with no letter, digit or '_' right before or after it.
bool holds_tag(const std::string& name, const std::string& tag) {
  for (size_t at = name.find(tag); at != std::string::npos; at = name.find(tag, at + 1)) {
    const bool before = at == 0 || !is_word_char(name[at - 1]);
    const size_t end = at + tag.size();
    const bool after = end == name.size() || !is_word_char(name[end]);
    if (before && after) return true;
  }
  return false;
}

std::string tags_of(const std::vector<GgufChoice>& ggufs) {
  std::set<std::string> tags;
  for (const GgufChoice& g : ggufs) {
    const std::string t = quant_tag_of(base_name(g.first));
    tags.insert(t.empty() ? std::string(base_name(g.first)) : t);
  }
  std::string s;
  for (const std::string& t : tags) s += (s.empty() ? "" : ", ") + t;
  return s;
}

ModelFiles files_of(const GgufChoice& g) { return {g.files, g.first}; }

}  // namespace

std::vector<GgufChoice> gguf_choices(const std::vector<std::string>& paths) {
  std::vector<GgufChoice> out;
  std::set<std::pair<std::string, int>> sets;  // (prefix, count) of the split GGUFs seen
  for (const std::string& p : paths) {
    if (!ends_with_ci(p, ".gguf")) continue;
    const std::optional<GgufSplitName> split = parse_gguf_split_name(p);
    if (!split) {
      out.push_back({p, {p}, false});
      continue;
    }
    if (!sets.insert({split->prefix, split->count}).second) continue;
    GgufChoice g;
    g.split = true;
    for (int number = 1; number <= split->count; ++number)
      g.files.push_back(gguf_split_name(split->prefix, number, split->count));
    g.first = g.files.front();
    out.push_back(std::move(g));
  }
  std::sort(out.begin(), out.end(), [](const GgufChoice& a, const GgufChoice& b) { return a.first < b.first; });
  return out;
}

bool is_safe_repo_path(std::string_view path) {
  if (path.empty() || path.size() > 1024 || path.front() == '/') return false;
  int depth = 0;
  size_t start = 0;
  for (;;) {
    const size_t slash = path.find('/', start);
    const std::string_view seg = path.substr(start, slash == std::string_view::npos ? path.npos : slash - start);
    if (seg.empty() || seg == "." || seg == ".." || ++depth > 16) return false;
    for (char c : seg)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '\\') return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

std::string quant_tag_of(std::string_view file_name) {
  static const std::regex tag(R"((^|[^A-Z0-9_])((I?Q[1-8]_[0-9A-Z]+(_[SMLX]{1,2})?)|BF16|F16|F32|Q8_0)([^A-Z0-9_]|$))");
  const std::string name = upper(file_name);
  std::smatch m;
  return std::regex_search(name, m, tag) ? m[2].str() : std::string();
}

ModelFiles select_model_files(const std::vector<std::string>& paths, const std::string& quant, std::string_view repo) {
  std::vector<std::string> safetensors;
  for (const std::string& p : paths)
    if (ends_with_ci(p, ".safetensors") && p.find('/') == std::string::npos) safetensors.push_back(p);
  const std::vector<GgufChoice> ggufs = gguf_choices(paths);
  ModelFiles out;
  if (!quant.empty()) {
    std::vector<const GgufChoice*> match;
    for (const GgufChoice& g : ggufs)
      if (holds_tag(upper(base_name(g.first)), upper(quant))) match.push_back(&g);
    FERRY_CHECK(!match.empty(), "{}: no GGUF file tagged {} ({})", repo, quant,
                ggufs.empty() ? std::string("the repo has no GGUF files") : "it has: " + tags_of(ggufs));
    FERRY_CHECK(match.size() == 1, "{}: {} GGUF models are tagged {}: {}, {}", repo, match.size(), quant,
                match[0]->first, match[1]->first);
    return files_of(*match.front());
  }
  if (!safetensors.empty()) {
    for (const std::string& p : paths) {
      if (p.find('/') != std::string::npos) continue;
      for (const char* ext : {".safetensors", ".json", ".model", ".txt", ".jinja"})
        if (ends_with_ci(p, ext)) {
          out.files.push_back(p);
          break;
        }
    }
    std::sort(out.files.begin(), out.files.end());
    return out;
  }
  FERRY_CHECK(!ggufs.empty(), "{}: neither GGUF nor safetensors files (nothing ferry can load)", repo);
  if (ggufs.size() == 1) return files_of(ggufs.front());
  for (const GgufChoice& g : ggufs)
    if (holds_tag(upper(base_name(g.first)), "Q4_K_M")) return files_of(g);
  fail("{}: {} GGUF files; name one with :QUANT (it has: {})", repo, ggufs.size(), tags_of(ggufs));
}

}  // namespace ferry::hub
