// Which markup a model writes its tool calls in, picked from its chat template (as vLLM's tool parsers and
// llama.cpp's chat formats are), and the constrained output that forces a call in that markup:
//
//   Hermes   (Qwen2.5, Qwen3, Hermes 2 Pro / 3)   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//   Llama3   (Llama 3.1 / 3.2 / 3.3)              {"name": "f", "parameters": {...}}   (after <|python_tag|> or bare)
//   Mistral  (Mistral Nemo, Small, ...)           [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
//
// A template that never mentions tools gets them described in a system message in the Hermes markup
// (tool_system_prompt), llama.cpp's generic fallback, and its output is parsed as Hermes.
#pragma once

#include <string>
#include <string_view>

#include "ferry/serving.h"
#include "server/tool_request.h"

namespace ferry::server {

enum class ToolCallFormat { Hermes, Llama3, Mistral };

struct ToolTemplateTraits {
  ToolCallFormat format = ToolCallFormat::Hermes;
  bool renders_tools = false;  // the template reads `tools` (else the server describes them in a system message)
};

ToolTemplateTraits detect_tool_template(std::string_view template_source);
const char* tool_call_format_name(ToolCallFormat format);

// The key a call's arguments are written under ("parameters" for Llama 3, else "arguments").
const char* arguments_key(ToolCallFormat format);

// The constraint that makes the output one call (tool_choice naming a function, or required without
// parallel_tool_calls) or one or more calls (required) of the request's functions, each call's arguments
// matching that function's parameter schema. Llama 3's markup holds one call. Control-token markers
// ([TOOL_CALLS], <|python_tag|>) are left out: they produce no text, and the parser reads the bare JSON.
OutputFormat forced_tool_call_format(ToolCallFormat format, const ToolRequest& tools);

// The system-message text that describes the tools in the Hermes markup (for templates without tools).
std::string tool_system_prompt(const ToolRequest& tools);

// The messages for a template that does not render tools: assistant tool calls written into the content in
// the Hermes markup, tool results as user turns of <tool_response> blocks (as Qwen2.5's template writes
// them), consecutive ones in one turn, and with `tools` (null: none) tool_system_prompt in the system message.
nlohmann::ordered_json hermes_fallback_messages(const nlohmann::ordered_json& messages, const ToolRequest* tools);

}  // namespace ferry::server
