#include "server/chat_prompt.h"

#include <string_view>

#include "core/check.h"

namespace ferry::server {
namespace {

using nlohmann::ordered_json;

// Whether `text` holds the text of a special token (it tokenizes differently when specials are parsed).
bool has_special_text(const ServingEngine& engine, const std::string& text) {
  return engine.tokenize(text, false, true) != engine.tokenize(text, false, false);
}

void append(std::vector<int32_t>& out, const std::vector<int32_t>& ids) { out.insert(out.end(), ids.begin(), ids.end()); }

std::string render(const ServingEngine& engine, const ChatContext& chat, const ordered_json& messages) {
  ordered_json ctx = chat.kwargs;
  ctx["messages"] = messages;
  ctx["tools"] = chat.tools;
  ctx["add_generation_prompt"] = true;
  return engine.render_chat_template(ctx.dump());
}

}  // namespace

ChatPrompt tokenize_chat(const ServingEngine& engine, const ChatContext& chat, bool parse_special_in_content) {
  const ordered_json& msgs = chat.messages;
  std::vector<bool> special(msgs.size(), false);
  bool any = false;
  if (!parse_special_in_content) {
    FERRY_CHECK(chat.tools.is_null() || !has_special_text(engine, chat.tools.dump()),
                "a tool definition holds special-token text; such text is refused (a server started with "
                "--parse-special-in-content parses it as tokens)");
    for (size_t i = 0; i < msgs.size(); ++i) {
      if (msgs[i].contains("tool_calls"))
        FERRY_CHECK(!has_special_text(engine, msgs[i]["tool_calls"].dump()),
                    "the tool_calls of message {} hold special-token text; such text is refused", i);
      if (msgs[i]["content"].is_string())
        any |= (special[i] = has_special_text(engine, msgs[i]["content"].get<std::string>()));
    }
  }
  if (!any) {  // specials everywhere
    std::string text = render(engine, chat, msgs);
    return {engine.tokenize(text, true, true), std::move(text)};
  }
  // Render with each such content replaced by a marker, then tokenize the markup around the markers with
  // specials and each content in their place as plain text.
  ordered_json marked = msgs;
  std::vector<std::string> markers(msgs.size());
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (!special[i]) continue;
    markers[i] = "\x1f" "ferry-content-" + std::to_string(i) + "\x1f";
    marked[i]["content"] = markers[i];
  }
  ChatPrompt out;
  out.text = render(engine, chat, marked);
  const std::string& text = out.text;
  size_t pos = 0;
  bool first = true;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (!special[i]) continue;
    const size_t at = text.find(markers[i], pos);
    FERRY_CHECK(at != std::string::npos && text.find(markers[i], at + 1) == std::string::npos,
                "a {} message holds special-token text and the chat template does not copy it verbatim; such text is "
                "refused (a server started with --parse-special-in-content parses it as tokens)",
                msgs[i]["role"].get<std::string>());
    append(out.tokens, engine.tokenize(std::string_view(text).substr(pos, at - pos), first, true));
    append(out.tokens, engine.tokenize(msgs[i]["content"].get<std::string>(), false, false));
    first = false;
    pos = at + markers[i].size();
  }
  append(out.tokens, engine.tokenize(std::string_view(text).substr(pos), first, true));
  return out;
}

}  // namespace ferry::server
