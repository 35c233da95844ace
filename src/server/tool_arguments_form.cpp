#include "server/tool_arguments_form.h"

#include <exception>

namespace ferry::server {

using nlohmann::ordered_json;

namespace {

bool renders(const std::function<std::string(const std::string&)>& render, const ordered_json& ctx) {
  try {
    (void)render(ctx.dump());
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

bool template_takes_text_arguments(const std::function<std::string(const std::string& context_json)>& render) {
  const ordered_json tool = {{"type", "function"},
                             {"function", {{"name", "probe"},
                                           {"description", "probe"},
                                           {"parameters", {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}}}}}};
  const ordered_json call = {{"id", "call_0"}, {"type", "function"}, {"function", {{"name", "probe"}, {"arguments", {{"a", 1}}}}}};
  ordered_json ctx = {{"messages", {{{"role", "user"}, {"content", "probe"}},
                                    {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}}}},
                      {"tools", {tool}},
                      {"add_generation_prompt", false}};
  if (renders(render, ctx)) return false;
  ctx["messages"] = with_text_arguments(ctx["messages"]);
  return renders(render, ctx);
}

ordered_json with_text_arguments(const ordered_json& messages) {
  ordered_json out = messages;
  for (ordered_json& m : out) {
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (ordered_json& c : m["tool_calls"]) {
      if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) continue;
      ordered_json& args = c["function"]["arguments"];
      if (!args.is_string()) args = args.dump();
    }
  }
  return out;
}

}  // namespace ferry::server
