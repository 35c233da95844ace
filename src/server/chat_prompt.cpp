#include "server/chat_prompt.h"

#include <string>
#include <string_view>

#include "core/check.h"

namespace ferry::server {
namespace {

// Whether `text` holds the text of a special token (it tokenizes differently when specials are parsed).
bool has_special_text(const ServingEngine& engine, const std::string& text) {
  return engine.tokenize(text, false, true) != engine.tokenize(text, false, false);
}

void append(std::vector<int32_t>& out, const std::vector<int32_t>& ids) { out.insert(out.end(), ids.begin(), ids.end()); }

}  // namespace

std::vector<int32_t> tokenize_chat(const ServingEngine& engine, const std::vector<ChatTurn>& turns,
                                   bool parse_special_in_content) {
  std::vector<bool> special(turns.size(), false);
  bool any = false;
  if (!parse_special_in_content) {
    for (size_t i = 0; i < turns.size(); ++i) any |= (special[i] = has_special_text(engine, turns[i].content));
  }
  if (!any) return engine.tokenize(engine.apply_chat_template(turns, true), true, true);  // specials everywhere
  // Render with each such content replaced by a marker, then tokenize the markup around the markers with
  // specials and each content in their place as plain text.
  std::vector<ChatTurn> marked = turns;
  std::vector<std::string> markers(turns.size());
  for (size_t i = 0; i < turns.size(); ++i) {
    if (!special[i]) continue;
    markers[i] = "\x1f" "ferry-content-" + std::to_string(i) + "\x1f";
    marked[i].content = markers[i];
  }
  const std::string text = engine.apply_chat_template(marked, true);
  std::vector<int32_t> ids;
  size_t pos = 0;
  bool first = true;
  for (size_t i = 0; i < turns.size(); ++i) {
    if (!special[i]) continue;
    const size_t at = text.find(markers[i], pos);
    FERRY_CHECK(at != std::string::npos && text.find(markers[i], at + 1) == std::string::npos,
                "a {} message holds special-token text and the chat template does not copy it verbatim; such text is "
                "refused (a server started with --parse-special-in-content parses it as tokens)", turns[i].role);
    append(ids, engine.tokenize(std::string_view(text).substr(pos, at - pos), first, true));
    append(ids, engine.tokenize(turns[i].content, false, false));
    first = false;
    pos = at + markers[i].size();
  }
  append(ids, engine.tokenize(std::string_view(text).substr(pos), first, true));
  return ids;
}

}  // namespace ferry::server
