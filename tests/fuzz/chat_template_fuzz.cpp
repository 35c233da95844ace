// Fuzz target: parse arbitrary bytes as a chat template and render it against a fixed conversation. Every
// failure must be a ferry::Error; crashes, hangs and unbounded memory are bugs.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "tokenizer/jinja/template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json kContext = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Hi <b>there</b> \u00e9"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "call12345", "content": "{\"t\": 22}"},
      {"role": "user", "content": "Thanks"}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "documents": null, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"
  })");
  ferry::jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_list_items = 1 << 16;
  limits.max_steps = 200'000;
  limits.max_range = 10'000;
  try {
    const ferry::jinja::Template t(std::string(reinterpret_cast<const char*>(data), size));
    t.render(kContext, limits, [] { return std::tm{}; });
  } catch (const ferry::Error&) {
  }
  return 0;
}
