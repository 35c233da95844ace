// The tool-calling part of a chat request: `tools` (function tools), `tool_choice` (none / auto / required /
// {"type": "function", "function": {"name": ...}}) and `parallel_tool_calls`, validated as OpenAI does.
// Model-independent (fuzzed with the rest of the request by tests/fuzz/openai_request_fuzz.cpp).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ferry::server {

enum class ToolChoice { None, Auto, Required, Function };

struct ToolFunction {
  std::string name;                   // [A-Za-z0-9_-]{1,64}
  nlohmann::ordered_json parameters;  // its JSON schema (an object), {"type": "object"} when absent
};

struct ToolRequest {
  nlohmann::ordered_json tools;          // the request's tools as sent (null: none), for the chat template
  std::vector<ToolFunction> functions;   // the same, one per tool
  ToolChoice choice = ToolChoice::None;  // absent: auto with tools, none without
  std::string forced_name;               // choice Function: the function that must be called
  bool parallel = true;                  // parallel_tool_calls: several calls in one answer

  bool active() const { return !functions.empty() && choice != ToolChoice::None; }
  bool forced() const { return choice == ToolChoice::Required || choice == ToolChoice::Function; }
};

inline constexpr size_t kMaxTools = 128;  // OpenAI's limit

// Reads tools, tool_choice and parallel_tool_calls from the request body; throws ApiError(400) naming the
// parameter at fault.
ToolRequest parse_tool_request(const nlohmann::ordered_json& body);

}  // namespace ferry::server
