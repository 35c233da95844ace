// parse_spec and spec_mode_name (include/ferry/engine.h): the `--spec` flag's and the request field's text.
#include "core/check.h"
#include "ferry/engine.h"

namespace ferry {

SpecOptions parse_spec(std::string_view text, int k, std::string_view draft_model) {
  FERRY_CHECK(k >= 1 && k <= kMaxSpecTokens, "speculation: k (--spec-k) must be in 1..{}, got {}", kMaxSpecTokens, k);
  SpecOptions s;
  s.k = k;
  if (text.empty() || text == "off") return s;
  if (text == "ngram") {
    s.mode = SpecMode::Ngram;
    return s;
  }
  if (text == "draft" || text.starts_with("draft:")) {
    s.mode = SpecMode::Draft;
    s.draft_model = text == "draft" ? std::string(draft_model) : std::string(text.substr(6));
    FERRY_CHECK(!s.draft_model.empty(), "speculation: 'draft' needs a model: draft:MODEL or --draft MODEL");
    return s;
  }
  fail("speculation: '{}' is not one of off, ngram, draft, draft:MODEL", text);
}

std::string_view spec_mode_name(SpecMode mode) {
  switch (mode) {
    case SpecMode::Off: return "off";
    case SpecMode::Ngram: return "ngram";
    case SpecMode::Draft: return "draft";
  }
  return "?";
}

}  // namespace ferry
