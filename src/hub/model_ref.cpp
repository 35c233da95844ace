#include "hub/model_ref.h"

#include <algorithm>
#include <cctype>

#include "core/check.h"

namespace ferry::hub {
namespace {

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'; }

bool is_quant_tag(std::string_view q) {
  return !q.empty() && q.size() <= 32 &&
         std::all_of(q.begin(), q.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

}  // namespace

bool is_valid_repo_part(std::string_view p) {
  if (p.empty() || p.size() > 96 || !std::all_of(p.begin(), p.end(), is_name_char)) return false;
  if (p.front() == '.' || p.front() == '-' || p.back() == '.' || p.back() == '-') return false;
  return p.find("..") == std::string_view::npos;
}

bool is_valid_revision(std::string_view rev) {
  if (rev.empty() || rev.size() > 255) return false;
  size_t start = 0;
  for (;;) {
    const size_t slash = rev.find('/', start);
    const std::string_view seg = rev.substr(start, slash == std::string_view::npos ? rev.npos : slash - start);
    if (seg.empty() || seg == "." || seg == ".." || !std::all_of(seg.begin(), seg.end(), is_name_char)) return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

bool is_commit_hash(std::string_view s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(c) || (c >= 'a' && c <= 'f'); });
}

std::optional<ModelRef> parse_model_ref(std::string_view spec) {
  // Shaped like a name: "a/b" with optional @rev and :QUANT, no leading '.', '/' or '~', no file extension.
  if (spec.empty() || spec.front() == '.' || spec.front() == '/' || spec.front() == '~') return std::nullopt;
  if (spec.rfind("random:", 0) == 0) return std::nullopt;
  std::string_view rest = spec;
  ModelRef ref;
  if (const size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    const std::string_view q = rest.substr(colon + 1);
    FERRY_CHECK(is_quant_tag(q), "'{}': the quantization tag '{}' must be letters, digits and '_' (e.g. Q4_K_M)", spec, q);
    ref.quant.assign(q);
    std::transform(ref.quant.begin(), ref.quant.end(), ref.quant.begin(), [](unsigned char c) { return std::toupper(c); });
    rest = rest.substr(0, colon);
  }
  if (const size_t at = rest.find('@'); at != std::string_view::npos) {
    const std::string_view r = rest.substr(at + 1);
    FERRY_CHECK(is_valid_revision(r), "'{}': '{}' is not a valid revision", spec, r);
    ref.revision.assign(r);
    rest = rest.substr(0, at);
  }
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos || rest.find('/', slash + 1) != std::string_view::npos) return std::nullopt;
  const std::string_view org = rest.substr(0, slash), name = rest.substr(slash + 1);
  if (name.ends_with(".gguf") || name.ends_with(".safetensors")) return std::nullopt;  // a file path
  FERRY_CHECK(is_valid_repo_part(org) && is_valid_repo_part(name),
              "'{}' is not a valid Hugging Face repo id (org/name: letters, digits, '.', '_', '-')", spec);
  ref.repo.assign(rest);
  return ref;
}

std::string to_string(const ModelRef& ref) {
  std::string s = ref.repo;
  if (ref.revision != "main") s += "@" + ref.revision;
  if (!ref.quant.empty()) s += ":" + ref.quant;
  return s;
}

}  // namespace ferry::hub
