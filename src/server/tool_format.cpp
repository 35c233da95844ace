#include "server/tool_format.h"

namespace ferry::server {

using nlohmann::ordered_json;

namespace {

bool has(std::string_view src, std::string_view what) { return src.find(what) != std::string_view::npos; }

bool is_command_r(ToolCallFormat format) { return format == ToolCallFormat::CommandR || format == ToolCallFormat::CommandR7b; }

// One function's call in a markup that names it outside the JSON: the literal texts around its arguments.
OutputFormat::TaggedSchema named_call(ToolCallFormat format, const ToolFunction& f) {
  const std::string args = f.parameters.dump();
  switch (format) {
    case ToolCallFormat::DeepSeekV3:
      return {"<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + f.name + "\n```json\n", args, "\n```<｜tool▁call▁end｜>"};
    case ToolCallFormat::DeepSeekV31: return {"<｜tool▁call▁begin｜>" + f.name + "<｜tool▁sep｜>", args, "<｜tool▁call▁end｜>"};
    case ToolCallFormat::FunctionaryV31: return {"<function=" + f.name + ">", args, "</function>"};
    default: return {f.name + "\n", args, ""};  // FunctionaryV32: the prompt ends with ">>>"
  }
}

}  // namespace

ToolTemplateTraits detect_tool_template(std::string_view src) {
  ToolTemplateTraits t;
  t.renders_tools = has(src, "tools");
  // The most distinctive markers first: Functionary v3.1's template also writes <|python_tag|>, DeepSeek's
  // (llama.cpp's R1 one) and Command R7B's also mention "tool_name" / "Action:".
  if (has(src, "tool▁call▁begin")) t.format = has(src, "```json") ? ToolCallFormat::DeepSeekV3 : ToolCallFormat::DeepSeekV31;
  else if (has(src, ">>>all")) t.format = ToolCallFormat::FunctionaryV32;
  else if (has(src, "<function=")) t.format = ToolCallFormat::FunctionaryV31;
  else if (has(src, "[TOOL_CALLS]")) t.format = ToolCallFormat::Mistral;
  else if (has(src, "<tool_call>")) t.format = ToolCallFormat::Hermes;
  else if (has(src, "<|START_ACTION|>")) t.format = ToolCallFormat::CommandR7b;
  else if (has(src, "tool_name") && has(src, "Action:")) t.format = ToolCallFormat::CommandR;
  else if (has(src, "<|python_tag|>") || has(src, "\"parameters\"")) t.format = ToolCallFormat::Llama3;
  return t;
}

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::Hermes: return "hermes";
    case ToolCallFormat::Llama3: return "llama3_json";
    case ToolCallFormat::Mistral: return "mistral";
    case ToolCallFormat::CommandR: return "command_r";
    case ToolCallFormat::CommandR7b: return "command_r7b";
    case ToolCallFormat::DeepSeekV3: return "deepseek_v3";
    case ToolCallFormat::DeepSeekV31: return "deepseek_v31";
    case ToolCallFormat::FunctionaryV31: return "functionary_v3.1";
    case ToolCallFormat::FunctionaryV32: return "functionary_v3.2";
  }
  return "hermes";
}

bool name_in_json(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::Hermes:
    case ToolCallFormat::Llama3:
    case ToolCallFormat::Mistral:
    case ToolCallFormat::CommandR:
    case ToolCallFormat::CommandR7b: return true;
    default: return false;
  }
}

const char* name_key(ToolCallFormat format) { return is_command_r(format) ? "tool_name" : "name"; }

const char* arguments_key(ToolCallFormat format) {
  return format == ToolCallFormat::Llama3 || is_command_r(format) ? "parameters" : "arguments";
}

OutputFormat forced_tool_call_format(ToolCallFormat format, const ToolRequest& tools) {
  const bool many = tools.choice == ToolChoice::Required && tools.parallel;
  OutputFormat out;
  out.kind = OutputFormatKind::JsonSchema;
  if (!name_in_json(format)) {  // one alternative per function: its name in the markup, its schema after it
    for (const ToolFunction& f : tools.functions)
      if (tools.choice != ToolChoice::Function || f.name == tools.forced_name) out.alternatives.push_back(named_call(format, f));
    out.max_repeats = many ? 0 : 1;
    if (format == ToolCallFormat::DeepSeekV3 || format == ToolCallFormat::DeepSeekV31) {
      out.open = "<｜tool▁calls▁begin｜>";
      out.close = "<｜tool▁calls▁end｜>";
      out.separator = format == ToolCallFormat::DeepSeekV3 ? "\n" : "";
    } else if (format == ToolCallFormat::FunctionaryV32) {
      out.separator = ">>>";
    }
    return out;
  }
  // One call: {"<name key>": <const>, "<arguments key>": <parameters>}, a branch per allowed function.
  ordered_json branches = ordered_json::array();
  for (const ToolFunction& f : tools.functions) {
    if (tools.choice == ToolChoice::Function && f.name != tools.forced_name) continue;
    ordered_json props = ordered_json::object();
    ordered_json required = ordered_json::array();
    if (format == ToolCallFormat::CommandR7b) {  // its template numbers the calls first: "tool_call_id": "0"
      props["tool_call_id"] = {{"type", "string"}, {"pattern", "^[0-9]{1,4}$"}};
      required.push_back("tool_call_id");
    }
    props[name_key(format)] = {{"const", f.name}};
    props[arguments_key(format)] = f.parameters;
    required.push_back(name_key(format));
    required.push_back(arguments_key(format));
    branches.push_back({{"type", "object"},
                        {"properties", props},
                        {"required", required},
                        {"additionalProperties", false}});
  }
  const ordered_json call = branches.size() == 1 ? branches[0] : ordered_json{{"anyOf", branches}};
  ordered_json list = {{"type", "array"}, {"items", call}, {"minItems", 1}};
  if (!many) list["maxItems"] = 1;
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
    case ToolCallFormat::CommandR:
      out.text = list.dump();
      out.prefix = "Action:\n```json\n";
      out.suffix = "```";  // as the template writes it: "]```"
      break;
    default:  // Mistral, Command R7B: the list after a control token
      out.text = list.dump();
      break;
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
