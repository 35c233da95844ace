#include "server/tool_request.h"

#include <cctype>

#include "server/api_error.h"

namespace ferry::server {
namespace {

using nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, "'" + param + "': " + message, param);
}

const ordered_json* field(const ordered_json& o, const char* name) {
  const auto it = o.find(name);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

ToolFunction parse_tool(const ordered_json& tool, const std::string& param) {
  if (!tool.is_object()) bad(param, "must be an object");
  const ordered_json* type = field(tool, "type");
  if (type == nullptr || *type != "function") bad(param + ".type", "only \"function\" tools are supported");
  const ordered_json* fn = field(tool, "function");
  if (fn == nullptr || !fn->is_object()) bad(param + ".function", "is required and must be an object");
  const ordered_json* name = field(*fn, "name");
  if (name == nullptr || !name->is_string() || !valid_function_name(name->get<std::string>()))
    bad(param + ".function.name", "must be 1..64 characters of a-z, A-Z, 0-9, _ and -");
  if (const ordered_json* d = field(*fn, "description"); d != nullptr && !d->is_string())
    bad(param + ".function.description", "must be a string");
  if (const ordered_json* s = field(*fn, "strict"); s != nullptr && !s->is_boolean())
    bad(param + ".function.strict", "must be a boolean");
  ToolFunction f{name->get<std::string>(), ordered_json{{"type", "object"}}};
  if (const ordered_json* p = field(*fn, "parameters")) {
    if (!p->is_object()) bad(param + ".function.parameters", "must be a JSON schema object");
    f.parameters = *p;
  }
  return f;
}

}  // namespace

ToolRequest parse_tool_request(const ordered_json& body) {
  ToolRequest r;
  if (const ordered_json* tools = field(body, "tools")) {
    if (!tools->is_array()) bad("tools", "must be a list");
    if (tools->size() > kMaxTools) bad("tools", "at most " + std::to_string(kMaxTools) + " tools");
    for (size_t i = 0; i < tools->size(); ++i) {
      ToolFunction f = parse_tool((*tools)[i], "tools[" + std::to_string(i) + "]");
      for (const ToolFunction& g : r.functions)
        if (g.name == f.name) bad("tools", "two tools are named \"" + f.name + "\"");
      r.functions.push_back(std::move(f));
    }
    if (!r.functions.empty()) {
      // What the template renders: the fields OpenAI defines, not whatever else a client sent (ignored).
      r.tools = ordered_json::array();
      for (const ordered_json& t : *tools) {
        const ordered_json& fn = t["function"];
        ordered_json clean = {{"name", fn["name"]}};
        for (const char* key : {"description", "parameters", "strict"})
          if (const ordered_json* v = field(fn, key)) clean[key] = *v;
        r.tools.push_back({{"type", "function"}, {"function", std::move(clean)}});
      }
      r.choice = ToolChoice::Auto;
    }
  }
  if (const ordered_json* c = field(body, "tool_choice")) {
    if (c->is_string()) {
      const std::string s = c->get<std::string>();
      if (s == "none") r.choice = ToolChoice::None;
      else if (s == "auto") r.choice = r.functions.empty() ? ToolChoice::None : ToolChoice::Auto;
      else if (s == "required") r.choice = ToolChoice::Required;
      else bad("tool_choice", "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else if (c->is_object()) {
      const ordered_json* type = field(*c, "type");
      const ordered_json* fn = field(*c, "function");
      const ordered_json* name = fn != nullptr && fn->is_object() ? field(*fn, "name") : nullptr;
      if (type == nullptr || *type != "function" || name == nullptr || !name->is_string())
        bad("tool_choice", "an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
      r.choice = ToolChoice::Function;
      r.forced_name = name->get<std::string>();
      bool known = false;
      for (const ToolFunction& f : r.functions) known |= f.name == r.forced_name;
      if (!known) bad("tool_choice", "names the function \"" + r.forced_name + "\", which is not in tools");
    } else {
      bad("tool_choice", "must be a string or an object");
    }
    if (r.choice == ToolChoice::Required && r.functions.empty()) bad("tool_choice", "\"required\" needs a non-empty tools list");
  }
  if (const ordered_json* p = field(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) bad("parallel_tool_calls", "must be a boolean");
    r.parallel = p->get<bool>();
  }
  return r;
}

}  // namespace ferry::server
