#include "server/tool_format.h"

namespace ferry::server {

using nlohmann::ordered_json;

ToolTemplateTraits detect_tool_template(std::string_view src) {
  ToolTemplateTraits t;
  t.renders_tools = src.find("tools") != std::string_view::npos;
  if (src.find("[TOOL_CALLS]") != std::string_view::npos) t.format = ToolCallFormat::Mistral;
  else if (src.find("<tool_call>") != std::string_view::npos) t.format = ToolCallFormat::Hermes;
  else if (src.find("<|python_tag|>") != std::string_view::npos || src.find("\"parameters\"") != std::string_view::npos)
    t.format = ToolCallFormat::Llama3;
  return t;
}

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::Hermes: return "hermes";
    case ToolCallFormat::Llama3: return "llama3_json";
    case ToolCallFormat::Mistral: return "mistral";
  }
  return "hermes";
}

const char* arguments_key(ToolCallFormat format) { return format == ToolCallFormat::Llama3 ? "parameters" : "arguments"; }

OutputFormat forced_tool_call_format(ToolCallFormat format, const ToolRequest& tools) {
  // One call: {"name": <const>, "<arguments key>": <parameters>}, a branch per allowed function.
  ordered_json branches = ordered_json::array();
  for (const ToolFunction& f : tools.functions) {
    if (tools.choice == ToolChoice::Function && f.name != tools.forced_name) continue;
    ordered_json props = ordered_json::object();
    props["name"] = {{"const", f.name}};
    props[arguments_key(format)] = f.parameters;
    branches.push_back({{"type", "object"},
                        {"properties", props},
                        {"required", {"name", arguments_key(format)}},
                        {"additionalProperties", false}});
  }
  const ordered_json call = branches.size() == 1 ? branches[0] : ordered_json{{"anyOf", branches}};
  const bool many = tools.choice == ToolChoice::Required && tools.parallel;
  OutputFormat out;
  out.kind = OutputFormatKind::JsonSchema;
  switch (format) {
    case ToolCallFormat::Hermes:
      out.text = call.dump();
      out.prefix = "<tool_call>\n";
      out.suffix = "\n</tool_call>";
      out.separator = "\n";
      out.max_repeats = many ? 0 : 1;
      break;
    case ToolCallFormat::Llama3:
      out.text = call.dump();
      break;
    case ToolCallFormat::Mistral: {
      ordered_json list = {{"type", "array"}, {"items", call}, {"minItems", 1}};
      if (!many) list["maxItems"] = 1;
      out.text = list.dump();
      break;
    }
  }
  return out;
}

std::string tool_system_prompt(const ToolRequest& tools) {
  std::string s =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function "
      "signatures within <tools></tools> XML tags:\n<tools>";
  for (const ordered_json& t : tools.tools) s += "\n" + t.dump();
  s += "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
       "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
       "</tool_call>";
  return s;
}

ordered_json hermes_fallback_messages(const ordered_json& messages, const ToolRequest* tools) {
  ordered_json out = ordered_json::array();
  if (tools != nullptr) {
    const std::string prompt = tool_system_prompt(*tools);
    if (!messages.empty() && messages[0]["role"] == "system" && messages[0]["content"].is_string())
      out.push_back({{"role", "system"}, {"content", messages[0]["content"].get<std::string>() + "\n\n" + prompt}});
    else
      out.push_back({{"role", "system"}, {"content", prompt}});
  }
  for (size_t i = out.empty() || messages.empty() || messages[0]["role"] != "system" ? 0 : 1; i < messages.size(); ++i) {
    const ordered_json& m = messages[i];
    const std::string content = m["content"].is_string() ? m["content"].get<std::string>() : std::string();
    if (m["role"] == "tool") {
      const std::string block = "<tool_response>\n" + content + "\n</tool_response>";
      if (i > 0 && messages[i - 1]["role"] == "tool") out.back()["content"] = out.back()["content"].get<std::string>() + "\n" + block;
      else out.push_back({{"role", "user"}, {"content", block}});
    } else if (m.contains("tool_calls")) {
      std::string text = content;
      for (const ordered_json& c : m["tool_calls"]) {
        const ordered_json call = {{"name", c["function"]["name"]}, {"arguments", c["function"]["arguments"]}};
        text += (text.empty() ? "" : "\n") + std::string("<tool_call>\n") + call.dump() + "\n</tool_call>";
      }
      out.push_back({{"role", "assistant"}, {"content", text}});
    } else {
      out.push_back({{"role", m["role"]}, {"content", content}});
    }
  }
  return out;
}

}  // namespace ferry::server
