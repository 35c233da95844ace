// Which markup a model writes its tool calls in, picked from its chat template (as vLLM's tool parsers and
// llama.cpp's chat formats are), and the constrained output that forces a call in that markup:
//
//   Hermes   (Qwen2.5, Qwen3, Hermes 2 Pro / 3)   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//   Llama3   (Llama 3.1 / 3.2 / 3.3)              {"name": "f", "parameters": {...}}   (after <|python_tag|> or bare)
//   Mistral  (Mistral Nemo, Small, ...)           [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
//   CommandR (Command R / R+)                     Action:\n```json\n[{"tool_name": "f", "parameters": {...}}, ...]\n```
//   CommandR7b (Command R7B)                      <|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {...}}]<|END_ACTION|>
//   DeepSeekV3 (V3, R1 and its distills)          <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```<｜tool▁call▁end｜>
//                                                 (calls separated by "\n", then <｜tool▁calls▁end｜>)
//   DeepSeekV31 (V3.1)                            <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   FunctionaryV31 (Functionary v3.1)             <function=f>{...}</function>
//   FunctionaryV32 (Functionary v3.2)             f\n{...}>>>g\n{...}   (the prompt ends with ">>>"; ">>>all\n" is content)
//
// The first four write the function's name inside the call's JSON (json_tool_call_parser.h); the DeepSeek and
// Functionary families write it in the markup and only the arguments as JSON (named_tool_call_parser.h).
//
// A template that never mentions tools gets them described in a system message in the Hermes markup
// (tool_system_prompt), llama.cpp's generic fallback, and its output is parsed as Hermes.
#pragma once

#include <string>
#include <string_view>

#include "ferry/serving.h"
#include "server/tool_request.h"

namespace ferry::server {

enum class ToolCallFormat {
  Hermes,
  Llama3,
  Mistral,
  CommandR,
  CommandR7b,
  DeepSeekV3,
  DeepSeekV31,
  FunctionaryV31,
  FunctionaryV32,
};

// The JSON families: the name is a key of the call object.
bool name_in_json(ToolCallFormat format);

struct ToolTemplateTraits {
  ToolCallFormat format = ToolCallFormat::Hermes;
  bool renders_tools = false;  // the template reads `tools` (else the server describes them in a system message)
  bool text_arguments = false; // past calls' arguments go to the template as JSON text (tool_arguments_form.h)
};

ToolTemplateTraits detect_tool_template(std::string_view template_source);
const char* tool_call_format_name(ToolCallFormat format);

// The JSON families' keys: the function's name ("tool_name" for Command R, else "name") and its arguments
// ("parameters" for Llama 3 and Command R, else "arguments").
const char* name_key(ToolCallFormat format);
const char* arguments_key(ToolCallFormat format);

// The constraint that makes the output one call (tool_choice naming a function, or required without
// parallel_tool_calls) or one or more calls (required) of the request's functions, each call's arguments
// matching that function's parameter schema. Llama 3's markup holds one call. Control-token markers
// ([TOOL_CALLS], <|python_tag|>, <|START_ACTION|>) are left out: they produce no text, and the parser reads
// the bare JSON. The families that name the function in the markup get one alternative per function
// (OutputFormat::alternatives), so each name is tied to its own parameter schema.
OutputFormat forced_tool_call_format(ToolCallFormat format, const ToolRequest& tools);

// The system-message text that describes the tools in the Hermes markup (for templates without tools).
std::string tool_system_prompt(const ToolRequest& tools);

// The messages for a template that does not render tools: assistant tool calls written into the content in
// the Hermes markup, tool results as user turns of <tool_response> blocks (as Qwen2.5's template writes
// them), consecutive ones in one turn, and with `tools` (null: none) tool_system_prompt in the system message.
nlohmann::ordered_json hermes_fallback_messages(const nlohmann::ordered_json& messages, const ToolRequest* tools);

}  // namespace ferry::server
